"""The official jupyter_kernel_test suite against the TypeScript kernelspec
(``kernelgate kernel install --language typescript``), with TypeScript samples.

As for the Python kernel (test_kernel_suite.py), ``test_error`` and ``test_display_data``
are restated with the run record (one more ``display_data`` ending every cell) as the one
allowed addition.
"""

from __future__ import annotations

from typing import Any

import jupyter_kernel_test

from .conftest import NEEDS_NODE
from .helpers import TS_KERNEL_NAME

_HTML = """\
const bold = { [Symbol.for("Jupyter.display")]: () => ({ "text/html": "<b>bold</b>" }) };
display(bold);
"""
_JSON = """\
const data: { a: number[] } = { a: [1, 2] };
display({ [Symbol.for("Jupyter.display")]: () => ({ "application/json": data }) });
"""


@NEEDS_NODE
class KernelgateTypeScriptKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = TS_KERNEL_NAME
    language_name = "typescript"
    file_extension = ".ts"

    code_hello_world = "console.log('hello, world')"
    code_stderr = "console.error('oops')"
    code_generate_error = "throw new Error('boom')"

    code_execute_result = [  # noqa: RUF012 (the suite's own attribute)
        {"code": "1+2+3", "result": "6"},
        {"code": "const n: number = 7;\nn * 6", "result": "42"},
        {"code": "'abc'", "mime": "text/plain", "result": "'abc'"},
        {
            "code": "const hits = await tools.search('messages');\nhits.length",
            "result": "2",
        },
    ]

    code_display_data = [  # noqa: RUF012
        {"code": _HTML, "mime": "text/html"},
        {"code": _JSON, "mime": "application/json"},
        {"code": "display('plain')", "mime": "text/plain"},
    ]

    completion_samples = [  # noqa: RUF012
        {"text": "tools.se", "matches": {"search"}},
        {"text": "const x = tools.", "matches": {"search", "fetch", "compute"}},
        {"text": "too", "matches": {"tools"}},
        {"text": "Tool", "matches": {"ToolError"}},
        {"text": "console.lo", "matches": {"log"}},
        {"text": "Promise.al", "matches": {"all", "allSettled"}},
        {"text": "const total = 1;\ntot", "matches": {"total"}},
    ]
    complete_code_samples = [  # noqa: RUF012
        "1",
        "console.log('hello, world')",
        "function f(x: number) {\n  return x * 2;\n}",
        "const s = `a ${[1, 2].join(',')} b`;",
        "await tools.search('x')\nreturn 1",
    ]
    incomplete_code_samples = [  # noqa: RUF012
        "console.log('hello",
        "function f(x: number) {\n  return x * 2;",
        "const s = `abc",
        "const a = [1,\n",
        "/* a comment",
    ]
    invalid_code_samples = ["let x = )", "const s = 'a\nb'"]  # noqa: RUF012

    code_inspect_sample = "tools.search"

    # obj? answers with the pager (payload source "page"), without running anything.
    code_page_something = "tools.search?"
    supported_history_operations = ("tail", "range", "search")
    code_history_pattern = "1+2+3"

    @staticmethod
    def _is_run_record(msg: dict[str, Any]) -> bool:
        meta = msg["content"].get("metadata") or {}
        return msg["msg_type"] == "display_data" and meta.get("kernelgate", {}).get("role") == "run"

    def test_error(self) -> None:
        self.flush_channels()
        reply, output_msgs = self.execute_helper(self.code_generate_error)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "Error")
        self.assertEqual([m["msg_type"] for m in output_msgs], ["error", "display_data"])
        self.assertTrue(self._is_run_record(output_msgs[1]))
        self.assertEqual(output_msgs[1]["content"]["metadata"]["kernelgate"]["status"], "exception")

    def test_display_data(self) -> None:
        for sample in self.code_display_data:
            with self.subTest(code=sample["code"]):
                self.flush_channels()
                reply, output_msgs = self.execute_helper(sample["code"])
                self.assertEqual(reply["content"]["status"], "ok")
                shown = [m for m in output_msgs if m["msg_type"] == "display_data"]
                self.assertEqual(len(shown), 2)
                self.assertIn(sample["mime"], shown[0]["content"]["data"])
                self.assertTrue(self._is_run_record(shown[1]))

    def test_kernel_info_says_typescript_and_no_debugger(self) -> None:
        self.flush_channels()
        reply = self.kc.kernel_info(reply=True, timeout=30)
        content = reply["content"]
        self.assertEqual(content["language_info"]["name"], "typescript")
        self.assertEqual(content["language_info"]["file_extension"], ".ts")
        self.assertIs(content["debugger"], False)
        self.assertEqual(content["supported_features"], [])
        self.assertIn("TypeScript on Node", content["banner"])
        self.assertTrue(any("TypeScript" in link["text"] for link in content["help_links"]))
