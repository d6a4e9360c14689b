"""run_to_notebook: a valid v4 notebook with the program, outputs in order, and calls."""

from __future__ import annotations

import json

import nbformat
import pytest

from kernelgate import RunResult
from kernelgate.demo import DEMO_PROGRAM
from kernelgate.notebooks import CALL_MIME, KERNELSPEC, run_to_notebook
from kernelgate.notebooks.render import call_line, value_shown

from .conftest import demo_gateway


def roles(cell) -> list[str]:
    out = []
    for o in cell["outputs"]:
        role = o.get("metadata", {}).get("kernelgate", {}).get("role")
        out.append(role or o["output_type"])
    return out


def test_demo_notebook_validates_and_has_one_code_cell(demo_run: RunResult) -> None:
    nb = run_to_notebook(demo_run)
    nbformat.validate(nb)
    assert nb.nbformat == 4 and nb.nbformat_minor >= 5
    assert [c.cell_type for c in nb.cells] == ["code"]
    assert nb.cells[0].source == DEMO_PROGRAM
    assert nb.metadata.kernelspec == KERNELSPEC
    assert KERNELSPEC == {
        "name": "kernelgate",
        "display_name": "kernelgate (Python)",
        "language": "python",
    }


def test_notebook_metadata_describes_the_run(demo_run: RunResult) -> None:
    kg = run_to_notebook(demo_run).metadata.kernelgate
    import kernelgate

    assert kg["kind"] == "run"
    assert kg["version"] == kernelgate.__version__
    assert kg["interpreter"] == demo_run.interpreter
    assert kg["status"] == "ok"
    assert kg["started_at"] == demo_run.started_at
    assert kg["duration_s"] == demo_run.duration_s
    assert kg["limits"] == demo_run.limits
    assert {(b["namespace"], b["name"]) for b in kg["bindings"]} == {
        ("tools", "search"),
        ("tools", "fetch"),
        ("tools", "compute"),
    }
    search = next(b for b in kg["bindings"] if b["name"] == "search")
    assert search["signature"] == demo_run.bindings["tools"]["search"]
    assert kg["calls"] == 5


def test_outputs_in_order_with_calls_where_they_completed(demo_run: RunResult) -> None:
    cell = run_to_notebook(demo_run).cells[0]
    kinds = roles(cell)
    # search completes before anything is printed; the value comes after every call
    assert kinds[0] == "call" and kinds[-2:] == ["execute_result", "timeline"]
    assert kinds.count("call") == 5
    # each call sits after exactly output_index of the program's own outputs
    seen = 0
    for output in cell.outputs:
        role = output.get("metadata", {}).get("kernelgate", {}).get("role")
        if role == "call":
            record = next(c for c in demo_run.calls if c.id == output.data[CALL_MIME]["id"])
            assert seen == record.output_index
        elif role is None:
            seen += 1
    own = [o for o in cell.outputs if o.get("metadata", {}).get("kernelgate") is None]
    # The value is shown as its repr: its JSON is in the cell's run metadata instead.
    shown = [json.loads(json.dumps(value_shown(o, demo_run.value))) for o in demo_run.outputs]
    assert own == shown
    assert "application/json" not in own[-1]["data"]
    assert cell.metadata["kernelgate"]["value"] == demo_run.value


def test_call_output_has_json_plain_and_html(demo_run: RunResult) -> None:
    cell = run_to_notebook(demo_run).cells[0]
    calls = [o for o in cell.outputs if CALL_MIME in o.get("data", {})]
    assert len(calls) == len(demo_run.calls)
    first = calls[0]
    data = first.data[CALL_MIME]
    rec = demo_run.calls[0]
    assert data["namespace"] == "tools" and data["name"] == "search"
    assert data["args"] == ["messages"] and data["kwargs"] == {"limit": 3}
    assert data["ok"] is True and data["value"] == rec.value
    assert data["start_s"] == rec.start_s and data["duration_s"] == rec.duration_s
    text = first.data["text/plain"]
    assert text.startswith("tools.search('messages', limit=3) -> [2 items]  ")
    assert text.endswith(" ms") and "\n" not in text
    html = first.data["text/html"]
    assert "<details" in html and "tools.search(&#x27;messages&#x27;, limit=3)" in html
    assert "&quot;jupyter-protocol&quot;" in html  # the value, as indented JSON


def test_failed_call_shows_its_error(demo_run: RunResult) -> None:
    failed = next(c for c in demo_run.calls if not c.ok)
    line = call_line(failed)
    assert line.startswith("tools.fetch('no-such-doc') -> raised KeyError: ")
    cell = run_to_notebook(demo_run).cells[0]
    out = next(o for o in cell.outputs if o.get("data", {}).get(CALL_MIME, {}).get("ok") is False)
    assert out.data[CALL_MIME]["error"]["ename"] == "KeyError"
    assert "value" not in out.data[CALL_MIME]
    assert "KeyError" in out.data["text/html"]


def test_error_run_renders_error_output_and_status() -> None:
    r = demo_gateway().run_sync("await tools.compute('mean', [1, 2])\n1 / 0")
    nb = run_to_notebook(r)
    nbformat.validate(nb)
    assert nb.metadata.kernelgate["status"] == "exception"
    assert nb.metadata.kernelgate["error"]["ename"] == "ZeroDivisionError"
    assert roles(nb.cells[0]) == ["call", "error", "timeline"]
    # re-executing the cell is expected to fail too: nbclient goes on past it
    assert nb.cells[0].metadata.tags == ["raises-exception"]
    assert "tags" not in run_to_notebook(demo_gateway().run_sync("1")).cells[0].metadata


def test_run_without_calls_has_no_timeline() -> None:
    r = demo_gateway().run_sync("print('hi')")
    cell = run_to_notebook(r).cells[0]
    assert roles(cell) == ["stream"]


def test_huge_value_is_short_in_display_but_whole_in_json() -> None:
    big = {"blob": "x" * 2_000_000, "rows": [{"n": i, "sq": i * i} for i in range(20_000)]}

    def dump() -> dict:
        return big

    from kernelgate import Gateway

    r = Gateway(bindings={"dump": dump}).run_sync("d = await tools.dump()\nlen(d['blob'])")
    assert r.ok, r.message
    out = run_to_notebook(r).cells[0].outputs[0]
    assert out.data[CALL_MIME]["value"] == big
    assert len(out.data["text/plain"]) < 120
    assert out.data["text/plain"].startswith("tools.dump() -> {2 keys: blob, rows}")
    assert len(out.data["text/html"]) < 12_000
    assert "shortened to 4,000 characters of 2.4 MB as JSON" in out.data["text/html"]


def test_odd_output_bundle_still_validates() -> None:
    # Outputs are kept as the run reported them; should one carry a non-text value for a
    # text MIME type, the notebook must still validate (the value is kept as text).
    r = demo_gateway().run_sync("display({'a': 1})")
    assert r.ok, r.message
    r.outputs[0]["data"]["text/html"] = 5
    r.outputs[0]["data"]["image/png"] = ["aGk=", "aGk="]
    r.outputs[0]["data"]["application/json"] = {"a": 1}
    nb = run_to_notebook(r)
    nbformat.validate(nb)
    data = nb.cells[0].outputs[0].data
    assert data["application/json"] == {"a": 1}
    assert data["text/html"] == "5"
    # Joined, "aGk=aGk=" is not valid base64: an image value that could break out of an
    # <img src="..."> in a template is dropped, and the reader is told.
    assert "image/png" not in data and "not valid base64" in data["text/plain"]


@pytest.mark.parametrize("name", ["with-dash", "plain"])
def test_binding_names_that_are_not_identifiers(name: str) -> None:
    from kernelgate import Gateway

    r = Gateway(bindings={name: lambda x: x * 2}).run_sync(f"await tools[{name!r}](21)")
    assert r.value == 42
    line = run_to_notebook(r).cells[0].outputs[0].data["text/plain"]
    label = f"tools[{name!r}](21)" if name == "with-dash" else f"tools.{name}(21)"
    assert line.startswith(f"{label} -> 42  ")
