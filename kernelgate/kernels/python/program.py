"""Turn a program's source into an async function, and its exceptions into tracebacks.

The program is the body of an async function, so top-level ``await`` and ``return`` work,
yet its top-level names stay module globals (every name it binds at top level is declared
``global`` in that function), so ``global`` in its own functions behaves as in a module.
Line numbers and the filename are the program's own; tracebacks keep only its frames.
"""

from __future__ import annotations

import ast
import linecache
import traceback
import types
from typing import Any, TypeVar

from kernelgate.model.text import MAX_NAME, cap_text, escape_text, safe_str
from kernelgate.model.text import type_name as _type_name

__all__ = [
    "FILENAME",
    "LAST_EXPRESSION",
    "Wrapper",
    "MAX_NAME",
    "cap_text",
    "compile_program",
    "forget_source",
    "format_exception",
    "safe_str",
]

FILENAME = "<program>"
_MARK = "__kernelgate_last__"
_MAIN = "__kernelgate_main__"
_CO_ASYNC_GENERATOR = 0x200

#: What a program's function returns for its final expression statement:
#: ``(LAST_EXPRESSION, value)``; an explicit ``return`` gives the value itself.
LAST_EXPRESSION = object()

_N = TypeVar("_N", bound=ast.AST)


class _Bound(ast.NodeVisitor):
    """Names the top level of a program binds (not those of nested scopes)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._seen: set[str] = set()

    def add(self, name: str | None) -> None:
        if name and name not in self._seen and name != _MARK:
            self._seen.add(name)
            self.names.append(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.add(node.id)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.add(node.name)
        for d in node.decorator_list:
            self.visit(d)
        self.visit(node.args)  # defaults are evaluated in this scope

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_arguments(self, node: ast.arguments) -> None:
        for d in [*node.defaults, *node.kw_defaults]:
            if d is not None:
                self.visit(d)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.add(node.name)
        for d in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(d)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)

    def _comprehension(self, node: Any) -> None:
        # Only a walrus inside a comprehension binds in the enclosing scope.
        for sub in ast.walk(node):
            if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                self.add(sub.target.id)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(alias.asname or alias.name.partition(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self.add(alias.asname or alias.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self.add(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: Any) -> None:
        self.add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: Any) -> None:
        self.add(node.name)

    def visit_MatchMapping(self, node: Any) -> None:
        self.add(node.rest)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self.add(name)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        raise SyntaxError("nonlocal declaration not allowed at module level")


#: Statements that bind no name at the top level but through an assignment expression.
_BINDS_NOTHING = (ast.Expr, ast.Return, ast.Pass, ast.Raise, ast.Assert)
#: Statements whose one binding part is their target(s) but for assignment expressions.
_TARGETS = {ast.Assign: "targets", ast.AugAssign: "target", ast.AnnAssign: "target"}


def bound_names(body: list[ast.stmt], source: str) -> list[str]:
    """The names the top level of ``body`` (parsed from ``source``) binds, in order.

    Without ``:=`` in the source (a single token: nothing else spells it) an expression
    binds no name in the enclosing scope, so the expressions of the commonest statements
    (an expression, ``return``, an assignment's value) need no visit: a program's compile
    is on its run's path, with the caches of a child that has waited cold."""
    bound = _Bound()
    visit = bound.visit
    if ":=" in source:
        for stmt in body:
            visit(stmt)
        return bound.names
    for stmt in body:
        if isinstance(stmt, _BINDS_NOTHING):
            continue
        field = _TARGETS.get(type(stmt))
        if field is None:
            visit(stmt)
        elif field == "targets":
            for target in stmt.targets:  # type: ignore[attr-defined]
                visit(target)
        else:
            visit(getattr(stmt, field))
    return bound.names


class Wrapper:
    """The nodes :func:`compile_program` wraps a program in:
    ``def __kernelgate_factory__(mark): async def main(): ...; return main``. Made ahead
    where that is off the run's path (a warm child, while it waits for its program); used
    by one compilation only (it becomes that program's tree)."""

    __slots__ = ("factory", "main", "made")

    def __init__(self) -> None:
        fn_kwargs: dict[str, Any] = {}
        if "type_params" in ast.AsyncFunctionDef._fields:
            fn_kwargs["type_params"] = []
        self.main = ast.AsyncFunctionDef(
            name=_MAIN,
            args=_no_args(),
            body=[],
            decorator_list=[],
            returns=None,
            **fn_kwargs,
        )
        mark = ast.arg(arg=_MARK)
        name = ast.Name(id=_MAIN, ctx=ast.Load())
        returned = ast.Return(value=name)
        self.factory = ast.FunctionDef(
            name="__kernelgate_factory__",
            args=ast.arguments(
                posonlyargs=[],
                args=[mark],
                vararg=None,
                kwonlyargs=[],
                kw_defaults=[],
                kwarg=None,
                defaults=[],
            ),
            body=[self.main, returned],
            decorator_list=[],
            returns=None,
            **fn_kwargs,
        )
        #: The nodes made here, placed at the program's first line when it is known.
        self.made: list[ast.AST] = [self.main, self.factory, mark, returned, name]


def compile_program(
    source: str, filename: str = FILENAME, wrapper: Wrapper | None = None
) -> types.FunctionType:
    """Compile ``source`` into an ``async def`` taking no arguments.

    Raises ``SyntaxError`` (with the program's own line numbers) when it does not compile.
    The returned function must be called with the globals it is to run with; see
    :func:`bind_globals`. ``wrapper``: the wrapping nodes, made ahead (else made now).

    >>> import asyncio
    >>> fn = compile_program("x = 20\\nawait asyncio.sleep(0)\\nx + 1")
    >>> outcome = asyncio.run(bind_globals(fn, {"asyncio": asyncio})())
    >>> outcome[0] is LAST_EXPRESSION, outcome[1]
    (True, 21)
    """
    tree = ast.parse(source, filename, "exec")
    body = tree.body
    # __future__ imports must open the compiled module: hoist them out of the function.
    # A leading docstring may precede them, as in a module; it stays in the body.
    start = 1 if body and _is_docstring(body[0]) else 0
    futures = []
    while (
        len(body) > start
        and isinstance(body[start], ast.ImportFrom)
        and body[start].module == "__future__"  # type: ignore[attr-defined]
    ):
        futures.append(body.pop(start))
    module = _as_factory(body, futures, bound_names(body, source), wrapper or Wrapper())
    try:
        code = compile(module, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        if exc.msg == "'return' with value in async generator":
            # A top-level yield made the wrapper a generator: say what Python says of it.
            raise _yield_outside_function(source, body, filename) from None
        raise
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    make = namespace["__kernelgate_factory__"]
    fn = make(LAST_EXPRESSION)
    if fn.__code__.co_flags & _CO_ASYNC_GENERATOR:
        raise _yield_outside_function(source, body, filename)
    fn.__code__ = fn.__code__.replace(co_name="<module>", **_qualname("<module>"))
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    return fn  # type: ignore[no-any-return]


def _yield_outside_function(source: str, body: list[ast.stmt], filename: str) -> SyntaxError:
    """Python's own error for a ``yield`` in the program's top-level scope, at its line."""
    todo: list[ast.AST] = list(reversed(body))
    where: ast.AST | None = None
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            where = node
            break
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue  # a scope of its own
        todo.extend(reversed(list(ast.iter_child_nodes(node))))
    line = getattr(where, "lineno", 1)
    lines = source.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else None
    return SyntaxError(
        "'yield' outside function", (filename, line, getattr(where, "col_offset", 0) + 1, text)
    )


def _as_factory(
    body: list[ast.stmt], futures: list[ast.stmt], names: list[str], wrapper: Wrapper
) -> ast.Module:
    """The module ``futures`` + ``def __kernelgate_factory__(mark): async def main(): body``
    (``wrapper``'s nodes).

    ``names``: what the top level binds, declared ``global`` in ``main``. A final expression
    statement becomes ``return (mark, value)``.
    """
    first = body[0] if body else None
    if body and isinstance(body[-1], ast.Expr):
        last = body[-1]
        mark = _placed(ast.Name(id=_MARK, ctx=ast.Load()), last)
        pair = _placed(ast.Tuple(elts=[mark, last.value], ctx=ast.Load()), last)
        body[-1] = _placed(ast.Return(value=pair), last)
    stmts: list[ast.stmt] = []
    if names:
        stmts.append(ast.Global(names=names))
    stmts.extend(body or [ast.Pass()])
    wrapper.main.body = stmts
    # Only the nodes made here get a location: ast.fix_missing_locations would walk the
    # whole program, which costs more than compiling it.
    anchor = first if first is not None else (futures[0] if futures else None)
    made = list(wrapper.made)
    if names:
        made.append(stmts[0])
    if not body:
        made.append(stmts[-1])
    for node in made:
        _placed(node, anchor)
    factory = wrapper.factory
    return ast.Module(body=[*futures, factory], type_ignores=[])


def forget_source(filename: str = FILENAME) -> None:
    """Drop the source :func:`compile_program` registered for tracebacks under ``filename``."""
    linecache.cache.pop(filename, None)


def _placed(node: _N, anchor: ast.AST | None) -> _N:
    """``node`` at the location of ``anchor`` (line 1 when there is none)."""
    if anchor is None:
        node.lineno, node.col_offset = 1, 0  # type: ignore[attr-defined]
        node.end_lineno, node.end_col_offset = 1, 0  # type: ignore[attr-defined]
        return node
    return ast.copy_location(node, anchor)


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _qualname(name: str) -> dict[str, str]:
    return {"co_qualname": name} if hasattr(types.CodeType, "co_qualname") else {}


def _no_args() -> ast.arguments:
    return ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
    )


def bind_globals(fn: types.FunctionType, globals_: dict[str, Any]) -> types.FunctionType:
    """Rebuild ``fn`` to run with ``globals_`` as its module namespace."""
    return types.FunctionType(fn.__code__, globals_, fn.__name__, None, fn.__closure__)


def _keep_program_frames(tb: types.TracebackType | None, filename: str) -> Any:
    kept = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(kept):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new


def format_exception(
    exc: BaseException,
    filename: str = FILENAME,
    max_chars: int = 32 * 1024,
    max_links: int = 100,
) -> tuple[str, str, list[str]]:
    """``(ename, evalue, traceback lines)`` of an exception, showing the program's frames only.

    Frames of kernelgate (and of libraries) are dropped from every exception in the chain,
    across ``__cause__``, ``__context__`` and exception-group members; the chain is cut
    after ``max_links`` exceptions and the text after ``max_chars`` characters, each with one
    marker. If rendering itself fails the result says so instead of raising.
    """
    ename = _type_name(exc)
    evalue = safe_str(exc, max_chars)
    try:
        seen: set[int] = set()
        todo: list[BaseException] = [exc]
        while todo:
            e = todo.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if len(seen) >= max_links:
                e.__cause__ = None
                e.__context__ = None
                e.__suppress_context__ = True
            e.__traceback__ = _keep_program_frames(e.__traceback__, filename)
            for linked in (e.__cause__, e.__context__):
                if isinstance(linked, BaseException):
                    todo.append(linked)
            members = getattr(e, "exceptions", None)
            if isinstance(members, tuple):
                todo.extend(m for m in members if isinstance(m, BaseException))
        text = "".join(traceback.format_exception(exc))
        if len(text) > max_chars:
            half = max_chars // 2
            cut = len(text) - 2 * half
            text = text[:half] + f"\n... [{cut} characters of traceback cut] ...\n" + text[-half:]
        lines = escape_text(text).rstrip("\n").split("\n")
    except BaseException:
        lines = [f"{ename}: <diagnostic rendering failed>"]
    return ename, evalue, lines
