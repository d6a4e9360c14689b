"""What a program sees of the host: namespaces of async bindings, and ``ToolError``.

``tools.search("x", limit=3)`` checks its arguments against the host callable's signature
and the JSON rules *before* anything leaves the child, so a mistake raises at the program's
own line; then it returns a :class:`BindingCall`, a coroutine that sends the call when it
first runs (awaited, or scheduled with ``create_task``, ``gather``, ``wait_for``, a
``TaskGroup``, or ``asyncio.run`` in another thread) and gives the host's answer. A call
never awaited sends nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import warnings
from asyncio import Future
from asyncio.events import _get_running_loop
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from kernelgate.model.signatures import PARAMETER_KINDS, signature_from_spec
from kernelgate.wire.messages import binding_label
from kernelgate.wire.values import NotJSONError, ValueTooLargeError, check_json

__all__ = [
    "PARAMETER_KINDS",
    "ToolError",
    "Namespace",
    "Binding",
    "BindingCall",
    "signature_from_spec",
    "program_help",
]


class ToolError(Exception):
    """A binding failed on the host (or was refused before it ran).

    ``tool`` is the binding (``"tools.search"``), ``ename`` the host exception's class name.
    """

    def __init__(self, message: str, *, tool: str = "", ename: str = "Exception") -> None:
        super().__init__(message)
        self.tool = tool
        self.ename = ename

    def __str__(self) -> str:
        message = super().__str__()
        return f"{self.tool} failed: {self.ename}: {message}" if self.tool else message

    def __reduce__(self) -> Any:
        return (_rebuild_tool_error, (self.args[0] if self.args else "", self.tool, self.ename))


# Programs know it as the global ``ToolError``: tracebacks should say just that.
ToolError.__module__ = "builtins"


def _rebuild_tool_error(message: str, tool: str, ename: str) -> ToolError:
    return ToolError(message, tool=tool, ename=ename)


_BY_POSITION = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_EMPTY = inspect.Parameter.empty


class Binding:
    """One host function as the program calls it: ``await tools.name(...)``."""

    def __init__(
        self,
        namespace: str,
        name: str,
        spec: dict[str, Any],
        call: Callable[..., Any],
        max_arg_bytes: int,
    ) -> None:
        self._namespace = namespace
        self._name = name
        # Calls are checked by the params alone: parsing the shown text would cost every
        # run's start-up time for annotations the program rarely looks at.
        self._signature = signature_from_spec(spec, text=False)
        self._call = call
        self.__doc__ = spec.get("doc") or None
        self._label = binding_label(namespace, name)
        self._shown = spec.get("signature") or str(self._signature)
        self._max_arg_bytes = max_arg_bytes
        self._spec = spec
        self._schema = spec.get("schema")
        # The names of the parameters when every one may be passed by position and no
        # schema checks the call: then a call with positional arguments only binds
        # without ``Signature.bind`` (the arguments' names are these, in order). How many
        # must be passed: the parameters without a default.
        self._positional: tuple[str, ...] | None = None
        self._required = 0
        params = self._signature.parameters.values()
        if self._schema is None and all(p.kind in _BY_POSITION for p in params):
            self._positional = tuple(p.name for p in params)
            self._required = sum(1 for p in params if p.default is _EMPTY)
        if self._schema is not None:
            # Imported only by children that have a binding with a schema: every module
            # loaded here is start-up time of every cold run.
            from kernelgate.model.schema import check_bound

            self._check_bound = check_bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        names = self._positional
        bound = None
        if not kwargs and names is not None and self._required <= len(args) <= len(names):
            arguments: Any = zip(names, args, strict=False)  # what bind() gives, less its work
        else:
            bound = self._bind(args, kwargs)
            arguments = bound.arguments.items()
        budget = self._max_arg_bytes
        for pname, value in arguments:
            try:
                budget -= check_json(value, f"{self._label}() argument {pname}", budget)
            except NotJSONError as exc:
                raise TypeError(
                    f"{exc}; binding arguments must be JSON (dict with str keys, list, "
                    "str, int, float, bool, None)"
                ) from None
            except ValueTooLargeError:
                raise ValueError(
                    f"the arguments of {self._label}() are over {self._max_arg_bytes} bytes "
                    "as JSON (max_frame_bytes); pass less data per call"
                ) from None
        if self._schema is not None:
            assert bound is not None  # a binding with a schema has no fast path
            error = self._check_bound(self._schema, bound)
            if error:
                raise TypeError(
                    f"{self._label}() {error}; its signature is {self._name}{self._shown}"
                )
        return BindingCall(self, list(args), kwargs)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        try:
            return self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"{self._label}() {exc}; its signature is {self._name}{self._shown}"
            ) from None

    def _kg_help(self) -> str:
        from kernelgate.model.describe import render_help  # only when help() is asked

        return render_help(self._namespace, self._name, self._spec)

    def __repr__(self) -> str:
        return f"<binding {self._label}{self._shown}>"

    @property
    def __signature__(self) -> inspect.Signature:
        return self._signature


_getframe = sys._getframe
_warn_explicit = warnings.warn_explicit
_PROGRAM = "<program>"
#: One warning per program line, as Python warns once per location.
_warned: dict[Any, Any] = {}


def _program_line() -> int:
    """The line the program is at (0 if it is not running): where a call was dropped."""
    frame = _getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == _PROGRAM:
            return frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return 0


_AWAITED: Any = object()  # BindingCall._steps once ``await`` took the call's future
_DONE: Any = object()  # BindingCall._steps once a task's steps are over, or it is a future
#: A gathered call's methods, its answer future's own (C, no step of ours in between:
#: ``gather`` asks each of its futures ``cancelled`` and ``exception`` twice). Before
#: ``gather`` takes a call it has none of them (a program that uses one forgot ``await``).
_FUTURE_METHODS = (
    "done",
    "cancelled",
    "exception",
    "result",
    "get_loop",
    "cancel",
    "add_done_callback",
    "remove_done_callback",
)
#: ``asyncio.gather``'s code: the one caller a call is a future to (see BindingCall).
_GATHER = asyncio.gather.__code__
#: What asyncio reads of a future besides its public methods (``gather`` reads a cancelled
#: child's ``_make_cancelled_error``, ``_cancel_message``): read from a gathered call's
#: answer future.
_FUTURE_NAMES = frozenset(
    name for name in dir(Future) if name.startswith("_") and not name.startswith("__")
)


class BindingCall(Coroutine[Any, Any, Any]):
    """One call of a binding, as the program holds it: a coroutine.

    The call is sent when the coroutine first runs, in whatever event loop runs it, and
    its value is the host's answer (or :class:`ToolError`). It behaves as a native
    coroutine: awaited once, accepted by ``asyncio.create_task`` (``asyncio.iscoroutine``
    is true), closed unstarted without a trace; one dropped unstarted warns, naming the
    program's line, that the call was never made.
    """

    __slots__ = (
        "_binding",
        "_args",
        "_kwargs",
        "_steps",
        "_closed",
        "_answer",
        *_FUTURE_METHODS,
    )
    # Set once gathered (below): the answer future's own methods, called as they are.
    done: Callable[[], bool]
    cancelled: Callable[[], bool]
    exception: Callable[[], BaseException | None]
    result: Callable[[], Any]
    get_loop: Callable[[], Any]
    cancel: Callable[..., bool]
    add_done_callback: Callable[..., None]
    remove_done_callback: Callable[..., int]

    def __init__(self, binding: Binding, args: list[Any], kwargs: dict[str, Any]) -> None:
        self._binding = binding
        self._args = args
        self._kwargs = kwargs
        self._steps: Any = None  # the generator doing the call, once it runs
        self._closed = False
        self._answer: Future[Any] | None = None  # once gathered, as a future (below)

    def _start(self, scheduled: bool = False) -> Any:
        """Send the call; the future of its answer. ``scheduled``: started by ``gather``
        taking it as a future, not awaited (the call may wait for the loop's next turn to
        leave, with the others the program starts in this one)."""
        binding = self._binding
        if scheduled:
            future = binding._call(
                binding._namespace, binding._name, self._args, self._kwargs, True
            )
        else:
            future = binding._call(binding._namespace, binding._name, self._args, self._kwargs)
        self._args = self._kwargs = None  # type: ignore[assignment]  # sent: not needed
        return future

    # -- gathered: the call as the future of its answer -------------------------------------
    #
    # ``asyncio.gather`` wraps each coroutine in a Task, and a Task costs the program's loop
    # three callbacks per call (its first step, its wakeup, its done-callback) besides the
    # Task itself: most of a gathered call's CPU in the child. It takes a future as it is.
    # So, asked by ``gather`` in a running loop whether it is a future (``isfuture``: the
    # ``_asyncio_future_blocking`` attribute is not None), a call not yet run is sent and
    # says yes: from then on it is the future of its answer, its ``done``, ``result``,
    # callbacks... that future's own methods (a program that kept the call it gathered
    # sees them too). Anywhere else (``ensure_future``, ``wait_for``, ``asyncio.wait`` of
    # tasks, ``TaskGroup``...) it is a coroutine, wrapped in a Task as before.

    @property
    def _asyncio_future_blocking(self) -> bool | None:
        if self._answer is not None:
            return False
        if self._steps is None and not self._closed and _get_running_loop() is not None:
            try:
                # Asked by isfuture, asked by ensure_future (3.12: by gather itself) or
                # _ensure_future, asked by gather: the same depth in 3.10 to 3.13.
                gathered = _getframe(3).f_code is _GATHER
            except ValueError:
                gathered = False
            if gathered:
                self._gathered()
                return False
        return None  # a coroutine: awaited, a task's, finished, or not gather's

    def _gathered(self) -> None:
        """Send the call as ``gather``'s future: the answer's future stands for it."""
        self._steps = _DONE  # neither awaited nor a task's: its future is the call
        try:
            answer = self._start(scheduled=True)
        except Exception as exc:  # max_calls...: the call's error, as a task's would be
            answer = _get_running_loop().create_future()  # type: ignore[union-attr]
            answer.set_exception(exc)
        self._answer = answer
        self.done = answer.done
        self.cancelled = answer.cancelled
        self.exception = answer.exception
        self.result = answer.result
        self.get_loop = answer.get_loop
        self.cancel = answer.cancel
        self.add_done_callback = answer.add_done_callback
        self.remove_done_callback = answer.remove_done_callback

    def _run(self) -> Generator[Any, Any, Any]:
        return (yield from self._start())

    def _reused(self) -> RuntimeError:
        return RuntimeError(f"cannot reuse already awaited call of {self._label()}")

    def send(self, value: Any) -> Any:
        if value is None:
            return self.__next__()
        steps = self._steps
        if steps is None or steps is _AWAITED or steps is _DONE:
            if steps is None and not self._closed:
                raise TypeError("can't send non-None value to a just-started coroutine")
            raise self._reused()
        try:
            return steps.send(value)
        except BaseException:
            self._steps = _DONE
            raise

    def __next__(self) -> Any:
        # A task (create_task, gather...) drives the call through this (a step sends
        # None): the steps are the answer's future's own iterator (C), with no
        # generator of ours in between.
        steps = self._steps
        if steps is None:
            if self._closed:
                raise self._reused()
            self._steps = _DONE  # if sending fails, the call is over
            steps = self._steps = self._start().__await__()
        elif steps is _AWAITED or steps is _DONE:
            raise self._reused()
        try:
            return steps.send(None)
        except BaseException:  # StopIteration (the answer) included: the call is over
            self._steps = _DONE
            raise

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        steps = self._steps
        if steps is None or steps is _AWAITED or steps is _DONE:
            # Thrown into before it ran (a task cancelled before its first step), or
            # after: like a native coroutine, it raises at once and is finished.
            self._closed = True
            self._steps = _DONE
            steps = self._run()
            steps.close()
        else:
            self._steps = _DONE  # a future's iterator cannot go on once thrown into
        if val is None and tb is None:
            return steps.throw(typ)
        return steps.throw(typ, val, tb)

    def close(self) -> None:
        self._closed = True
        steps = self._steps
        if steps is not None and steps is not _AWAITED and steps is not _DONE:
            self._steps = _DONE
            steps.close()

    def __await__(self) -> Any:
        # The common case, ``await tools.x()``: send now and wait on the future itself,
        # with no Python-level step in between. A task (create_task...) drives the call
        # through send() and throw() instead.
        if self._steps is None and not self._closed:
            self._steps = _AWAITED
            return self._start().__await__()
        if self._answer is not None:  # gathered: a future, awaited again
            return self._answer.__await__()
        return self  # awaited again: send() says it cannot be reused

    def __iter__(self) -> Any:
        return self

    def _label(self) -> str:
        return self._binding._label

    def not_awaited(self) -> str:
        """What to tell a program that used this call as if it were its answer."""
        label = self._label()
        return (
            f"{label}(...) is a binding call that has not run: did you forget `await`? "
            f"Write `await {label}(...)` to make the call and get its answer"
        )

    # A program that forgot `await` uses the call as its answer: say so, instead of
    # "'BindingCall' object is not subscriptable". (Attributes asyncio looks up with a
    # default, such as cr_code, still read as missing: AttributeError.)
    def __getattr__(self, name: str) -> Any:
        if name in _FUTURE_NAMES and self._answer is not None:
            return getattr(self._answer, name)  # gather reads a cancelled one's message
        if name.startswith("__") or name.startswith("cr_") or name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"{self.not_awaited()} (it has no attribute {name!r})")

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(f"{self.not_awaited()} (it cannot be subscripted)")

    def __len__(self) -> int:
        raise TypeError(f"{self.not_awaited()} (it has no len())")

    def __contains__(self, item: Any) -> bool:
        raise TypeError(f"{self.not_awaited()} (it cannot be searched with `in`)")

    def __repr__(self) -> str:
        state = "not sent" if self._args is not None else "sent"  # args go once sent
        return f"<binding call {self._label()}() {state}>"

    def __del__(self) -> None:
        if self._steps is not None or self._closed:
            return
        try:  # never raise here: the program would see "Exception ignored in" noise
            # Dropped by the program (a call expression not awaited): its line is where
            # it is now.
            _warn_explicit(
                f"binding call {self._label()}() was never awaited, so it was not made "
                f"(write `await {self._label()}(...)`)",
                RuntimeWarning,
                _PROGRAM,
                _program_line(),
                registry=_warned,
            )
        except BaseException:
            pass


class Namespace:
    """The bindings of one namespace: ``tools.name`` or ``tools["name-with-dash"]``."""

    def __init__(self, name: str, bindings: dict[str, Binding]) -> None:
        object.__setattr__(self, "_kg_name", name)
        object.__setattr__(self, "_kg_bindings", bindings)

    def __getattr__(self, name: str) -> Binding:
        bindings = object.__getattribute__(self, "_kg_bindings")
        try:
            return bindings[name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(self._missing(name)) from None

    def __getitem__(self, name: str) -> Binding:
        bindings = object.__getattribute__(self, "_kg_bindings")
        try:
            return bindings[name]  # type: ignore[no-any-return]
        except (KeyError, TypeError):
            raise KeyError(self._missing(name)) from None

    def _missing(self, name: Any) -> str:
        ns = object.__getattribute__(self, "_kg_name")
        names = sorted(object.__getattribute__(self, "_kg_bindings"))
        shown = ", ".join(names[:50]) + (", ..." if len(names) > 50 else "")
        return f"{ns} has no binding {name!r}; it has: {shown or '(none)'}"

    def __setattr__(self, name: str, value: Any) -> None:
        ns = object.__getattribute__(self, "_kg_name")
        raise AttributeError(f"{ns} is read-only: bindings are provided by the host")

    def __contains__(self, name: object) -> bool:
        return name in object.__getattribute__(self, "_kg_bindings")

    def __iter__(self) -> Any:
        return iter(sorted(object.__getattribute__(self, "_kg_bindings")))

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_kg_bindings"))

    def __repr__(self) -> str:
        ns = object.__getattribute__(self, "_kg_name")
        return f"<namespace {ns}: {', '.join(self.__dir__())}>"

    def _kg_help(self) -> str:
        from kernelgate.model.describe import render_stub  # only when help() is asked

        ns = object.__getattribute__(self, "_kg_name")
        bindings = object.__getattribute__(self, "_kg_bindings")
        return render_stub({ns: {name: b._spec for name, b in bindings.items()}})


def program_help(original: Any) -> Callable[..., Any]:
    """The program's ``help``: for a namespace or a binding, the stub ``describe()`` shows
    (the same text the host gives a model); for anything else, Python's own ``help``."""

    def help(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], (Namespace, Binding)):
            print(args[0]._kg_help().rstrip("\n"))
            return None
        if original is None:
            print("help() is not available in this interpreter (it was started without site)")
            return None
        return original(*args, **kwargs)

    help.__doc__ = "help(tools) shows the bindings as a Python stub; help(obj) Python's help."
    return help
