"""The official jupyter_kernel_test suite against the installed kernelgate kernel."""

from __future__ import annotations

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
        {"code": "'abc'", "mime": "application/json", "result": "abc"},
        {"code": "hits = await tools.search('messages')\nlen(hits)", "result": "2"},
    ]
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
