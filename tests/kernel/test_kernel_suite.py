"""The official jupyter_kernel_test suite against the installed kernelgate kernel.

Two of its tests are restated, not skipped: every kernelgate cell ends with one more
``display_data``, the run record (:mod:`kernelgate.notebooks.cellrun`: the summary line
whose metadata makes a saved notebook a recording). The suite's ``test_error`` wants the
error as the only output and ``test_display_data`` the sample's MIME type in every
``display_data``; here each checks the same, with the run record as the one allowed
addition (and checks that it is there).
"""

from __future__ import annotations

from typing import Any

import jupyter_kernel_test

from .helpers import KERNEL_NAME

_HTML = """\
class Bold:
    def _repr_html_(self):
        return "<b>bold</b>"
display(Bold())
"""
_SVG = """\
class Dot:
    def _repr_svg_(self):
        return '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'
display(Dot())
"""
_PNG = """\
import base64
class Pixel:
    def _repr_png_(self):
        return base64.b64decode(
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
        )
display(Pixel())
"""
_JSON = """\
class Data:
    def _repr_json_(self):
        return {"a": [1, 2]}
display(Data())
"""


class KernelgateKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL_NAME
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys\nprint('oops', file=sys.stderr)"
    code_generate_error = "raise ValueError('boom')"

    code_execute_result = [  # noqa: RUF012 (the suite's own attribute)
        {"code": "1+2+3", "result": "6"},
        {"code": "[n * n for n in range(3)]", "result": "[0, 1, 4]"},
        # The repr, as ipykernel shows it (the JSON is in the run record's metadata).
        {"code": "'abc'", "mime": "text/plain", "result": "'abc'"},
        {"code": "hits = await tools.search('messages')\nlen(hits)", "result": "2"},
    ]
    code_clear_output = "clear_output()"

    code_display_data = [  # noqa: RUF012
        {"code": _HTML, "mime": "text/html"},
        {"code": _SVG, "mime": "text/html"},  # SVG arrives inert: an <img> in HTML
        {"code": _PNG, "mime": "image/png"},
        {"code": _JSON, "mime": "application/json"},
        {"code": "display('plain')", "mime": "text/plain"},
    ]

    completion_samples = [  # noqa: RUF012
        {"text": "tools.se", "matches": {"search"}},
        {"text": "x = tools.", "matches": {"search", "fetch", "compute"}},
        {"text": "too", "matches": {"tools"}},
        {"text": "zi", "matches": {"zip"}},
        {"text": "Tool", "matches": {"ToolError"}},
    ]
    complete_code_samples = [  # noqa: RUF012
        "1",
        "print('hello, world')",
        "def f(x):\n  return x*2\n\n\n",
        "await tools.search('x')\nreturn 1",
    ]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2", "for x in y:"]  # noqa: RUF012
    invalid_code_samples = ["import = 7q"]  # noqa: RUF012

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
