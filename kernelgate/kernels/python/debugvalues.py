"""What the debugger shows of a stopped program's values: bounded reprs, the children of
containers and objects, the program's own globals, pages of DAP variables that fit a frame.

Imported only in a debugged run. Everything here runs the program's own code (``__repr__``,
``__eq__`` of dict keys, properties): it never raises, a repr that fails says so, and a repr
that hangs is cut off by :class:`Deadline`. Builtins are this module's own snapshot, taken at
import (before the program runs): a program that rebinds ``builtins.repr`` or ``len`` does
not change what the debugger shows.

>>> bounded_repr("x" * 2000)[-35:]
"[1040 more characters of 2000 cut]'"
>>> bounded_repr(list(range(1000)), 40)
'[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...] (1000 items)'
"""

# long: every way of showing a value runs the program's code under one deadline (repr,
# children, types, pages); kept together so that no path escapes it.

from __future__ import annotations

import _thread
import builtins
import itertools
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

from kernelgate.model.text import cap_text, escape_text
from kernelgate.wire.values import dumps

from .namespace import Namespace

# A snapshot of the builtins for every function defined below (a function takes its
# builtins from its module's ``__builtins__`` when it is made): see the module's doc.
__builtins__ = dict(builtins.__dict__)  # type: ignore[assignment]

__all__ = [
    "ENDS_RUN",
    "MAX_VALUE_CHARS",
    "MAX_VARIABLES",
    "Deadline",
    "DeadlineExpired",
    "References",
    "bounded_repr",
    "children",
    "exc_text",
    "program_exc_text",
    "program_globals",
    "type_label",
    "variable",
    "fit_page",
]

#: A value's repr is cut to this many characters (with a marker saying how many were cut).
MAX_VALUE_CHARS = 1000
#: At most this many variables per ``variables`` reply (ask again with ``start``).
MAX_VARIABLES = 300
#: A variable's name (a dict key's repr, an attribute) is cut to this many characters.
MAX_NAME_CHARS = 200
_MAX_DEPTH = 3  # nested containers shown inside a repr before "..."
_MAX_INT_BITS = 10_000  # str() of a bigger int is slow (quadratic) and long: shown by size
_CONTAINERS = (list, tuple, dict, set, frozenset)
_NO_CHILDREN = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    types.CodeType,
    types.FrameType,
)
_monotonic = time.monotonic
_setitimer = signal.setitimer
_signal = signal.signal
_ITIMER_REAL, _SIGALRM = signal.ITIMER_REAL, signal.SIGALRM
_sigmask = signal.pthread_sigmask
# The C functions under signal.getsignal and signal.signal: those wrappers convert with
# isinstance, which the program may have rebound; the reader thread runs while the
# program's builtins are in force, and so does run()'s cleanup.
_csignal: Any = sys.modules["_signal"]
_getsignal = _csignal.getsignal
_set_handler = _csignal.signal
_pthread_kill = signal.pthread_kill
_interrupt_main = _thread.interrupt_main
_Signals = signal.Signals
_list, _map = list, map
#: An alarm may run its handler a little before time.monotonic() says the call is due.
_SLACK = 0.05
_SIG_UNBLOCK, _SIG_SETMASK = signal.SIG_UNBLOCK, signal.SIG_SETMASK
_object_getattribute = object.__getattribute__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
#: What ends the run wherever it is raised (a SIGINT, the program's own exit): the debugger's
#: catch-alls let it through.
ENDS_RUN = (KeyboardInterrupt, SystemExit)


class DeadlineExpired(BaseException):
    """Raised into the program's code (a repr, an evaluated expression) that ran past its
    request's time. A BaseException, so ``except Exception`` in a repr does not swallow it."""


#: How late the program's code run by a request may be before the reader thread sends the
#: main thread real signals (:meth:`Deadline.rescue`), and how often it sends them again.
RESCUE_GRACE = 0.5
RESCUE_EVERY = 0.5


class Deadline:
    """The time of one request served while the program is stopped.

    The program's code runs inside :meth:`run` only, each call with at most ``per_call``
    seconds of the request's time: when that is up (SIGALRM, on the main thread, the only
    one that serves stopped requests) the code is interrupted with
    :class:`DeadlineExpired`; once the request's whole time is used, :attr:`expired` tells
    the caller to show the rest as not computed. The program's own SIGALRM handler, timer
    and signal mask are put back after the request.

    The program's code may fight the interruption: catch it and loop, disarm the timer, take
    SIGALRM, block in a call no signal wakes. So a late call is interrupted again at each of
    its next bytecodes (:meth:`interrupt`: an ``except`` that swallows it cannot loop on, the
    loop's back-jump raises), and the reader thread sends the main thread a real signal while
    a call is late (:meth:`rescue`: a sleep or a read with the timer disarmed wakes).
    """

    def __init__(self) -> None:
        self._end = float("inf")
        self._inside = False
        self._armed = False
        self._old_handler: Any = None
        self._old_timer = (0.0, 0.0)
        self._old_mask: set[int] | None = None
        self._t0 = 0.0
        # The program's code running now (read by the reader thread for its messages).
        self._call_start = 0.0
        self._call_end = float("inf")
        self._what: str | None = None
        self._value: Any = None
        self._next_rescue = 0.0
        self._handler = self._on_alarm  # one bound method: compared with the one in force
        self._tripping = False  # inside interrupt(), between its trip and its raise

    @property
    def expired(self) -> bool:
        """The request's time is used up."""
        return _monotonic() >= self._end

    def _on_alarm(self, signum: int, frame: Any) -> None:
        self.interrupt(signum, frame)

    def interrupt(self, signum: int, frame: Any) -> None:
        """In a handler of ``signum`` on the main thread (``frame``: where it interrupted):
        if the program's code run now is past its time, raise :class:`DeadlineExpired` into
        it, and have the handler run again at its next bytecode boundary, and so on until
        :meth:`run` is back: code that catches the interruption cannot go on."""
        if self._tripping:
            # Python 3.10 runs signal handlers at almost every bytecode boundary, so this
            # runs again between the trip below and its raise: keep the signal pending for
            # after the raise, and let that raise come (nesting here would recurse).
            try:
                _interrupt_main(_Signals(signum))
            except (ValueError, RuntimeError):
                pass
            return
        if not self._inside or _monotonic() < self._call_end - _SLACK:
            return
        if frame is not None and frame.f_code is _RUN_CODE:
            return  # the code returned (it gave up when interrupted): its value stands
        self._tripping = True
        try:
            # Trip the signal again inside one C call that then fails: on 3.11+ no bytecode
            # boundary (where the handler would run again at once, nested in this one) comes
            # between the trip and the raise below.
            trip_then_fail: tuple[Any, ...] = (signum, None)
            _list(_map(_interrupt_main, trip_then_fail))
        except TypeError:
            pass
        except (ValueError, RuntimeError):
            pass  # no Python handler for it any more: the reader's rescue goes on
        finally:
            self._tripping = False
        raise DeadlineExpired

    def start(self, seconds: float) -> None:
        self._t0 = _monotonic()
        self._end = self._t0 + seconds
        try:
            self._old_handler = _signal(_SIGALRM, self._handler)
        except (ValueError, OSError, TypeError):
            return  # not the main thread, or no signals here: no interruption
        self._armed = True
        self._old_timer = _setitimer(_ITIMER_REAL, 0)
        try:  # a program that blocked SIGALRM must not make its reprs uninterruptible
            self._old_mask = _sigmask(_SIG_UNBLOCK, (_SIGALRM,))
        except ENDS_RUN:
            raise  # an interrupt, or the program's own exit: never swallowed
        except BaseException:
            self._old_mask = None

    def stop(self) -> None:
        self._end = float("inf")
        if not self._armed:
            return
        self._inside = False
        self._armed = False
        try:
            _setitimer(_ITIMER_REAL, 0)
            if self._old_mask is not None:  # as it was, whatever the reprs did to it
                _sigmask(_SIG_SETMASK, self._old_mask)
            old = self._old_handler
            _signal(_SIGALRM, old if old is not None else signal.SIG_DFL)
            left, interval = self._old_timer
            if left > 0:  # the program's own timer goes on where it was
                _setitimer(_ITIMER_REAL, max(left - (_monotonic() - self._t0), 1e-3), interval)
        except ENDS_RUN:
            raise  # an interrupt, or the program's own exit: never swallowed
        except BaseException:
            pass

    def run(
        self, fn: Callable[..., Any], *args: Any, per_call: float = 1.0, what: str | None = None
    ) -> Any:
        """``fn(*args)`` as the program's code: interrupted after ``per_call`` seconds, or
        when the request's time is up. ``what``: what it runs, for a message saying where
        the program is stuck (default: the ``__repr__`` of ``args[0]``)."""
        left = self._end - _monotonic()
        if left <= 0:
            raise DeadlineExpired
        if not self._armed:
            return fn(*args)
        seconds = min(per_call, left)
        self._what = what
        self._value = args[0] if args and what is None else None
        self._call_start = now = _monotonic()
        self._call_end = now + seconds
        self._next_rescue = self._call_end + RESCUE_GRACE
        # Repeating: code that sleeps again after the interruption gets another.
        _setitimer(_ITIMER_REAL, seconds, 0.25)
        self._inside = True
        try:
            return fn(*args)
        finally:
            self._inside = False
            self._value = None
            _setitimer(_ITIMER_REAL, 0)
            if _getsignal(_SIGALRM) is not self._handler:
                try:  # the program's code took SIGALRM: the request's next call needs it
                    _set_handler(_SIGALRM, self._handler)
                except (ValueError, OSError, TypeError):
                    pass

    # -- the reader thread -----------------------------------------------------------------

    def rescue(self, main_ident: int, signals: tuple[tuple[int, Any], ...]) -> float:
        """From the reader thread: if the program's code run now is late by
        :data:`RESCUE_GRACE` (its timer disarmed, the interruption swallowed, a blocking
        call), send the main thread each of ``signals`` (signal, a handler of the
        debugger's that calls :meth:`interrupt`) whose handler is still that one: a
        blocking call wakes, and the handler interrupts it. The seconds until it should be
        asked again.

        Not SIGALRM: sent late, it could meet the program's own disposition, put back after
        the request (SIG_DFL ends the process). A signal ignored by default is harmless
        late."""
        if not self._inside:
            return float("inf")
        now = _monotonic()
        wait = self._next_rescue - now
        if wait > 0:
            return wait
        self._next_rescue = now + RESCUE_EVERY
        for signum, handler in signals:
            if _getsignal(signum) is handler:
                try:
                    _pthread_kill(main_ident, signum)
                except (OSError, ValueError):
                    pass
        return RESCUE_EVERY

    @property
    def call_end(self) -> float:
        """When the program's code running now is due (inf: none runs)."""
        return self._call_end if self._inside else float("inf")

    def describe(self) -> tuple[str, float]:
        """From the reader thread: what program code runs now and for how long
        (``("", 0.0)``: none)."""
        if not self._inside:
            return "", 0.0
        what, value = self._what, self._value
        elapsed = _monotonic() - self._call_start
        if what is None:
            what = f"`__repr__` of a {type_label(value)}"
        return what, elapsed


_RUN_CODE = Deadline.run.__code__
_NO_DEADLINE = Deadline()
_TOO_SLOW = "<not shown: its repr took too long>"
_OUT_OF_TIME = "<not shown: the request ran out of time (slow reprs)>"


def _cut(text: str, limit: int, total: int | None = None) -> str:
    """``text`` cut to about ``limit`` characters with a marker; lone surrogates escaped."""
    if len(text) <= limit and total is None:
        return escape_text(text)
    whole = len(text) if total is None else total
    keep = max(0, limit - 40)
    quote = text[-1] if total is not None and text[-1:] in ("'", '"') else ""
    return escape_text(f"{text[:keep]}... [{whole - keep} more characters of {whole} cut]{quote}")


def bounded_repr(
    value: Any, limit: int = MAX_VALUE_CHARS, deadline: Deadline = _NO_DEADLINE
) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises.

    Builtin containers, strings, bytes and big ints are shown from their first items or
    characters, so a huge value costs what is shown, not its size.
    """
    try:
        return _repr(value, limit, 0, deadline)
    except DeadlineExpired:
        return _TOO_SLOW
    except ENDS_RUN:
        raise  # an interrupt, or the program's own exit: never swallowed
    except BaseException as exc:
        return f"<repr() failed: {program_exc_text(exc, 500, deadline)}>"


def _repr(value: Any, limit: int, depth: int, deadline: Deadline) -> str:
    t = type(value)
    if t is str or t is bytes or t is bytearray:
        if len(value) > limit:
            return _cut(repr(value[:limit]), limit, len(value))
        return _cut(repr(value), limit)
    if t is int and value.bit_length() > _MAX_INT_BITS:
        return f"<int of {value.bit_length()} bits>"
    if t in _CONTAINERS:
        return _container_repr(value, limit, depth, deadline)
    text = deadline.run(repr, value)
    if type(text) is not str:
        return "<repr() returned a non-string>"
    return _cut(text, limit)


def _container_repr(value: Any, limit: int, depth: int, deadline: Deadline) -> str:
    t = type(value)
    if t is dict:
        opening, closing = "{", "}"
    elif t is list:
        opening, closing = "[", "]"
    elif t is tuple:
        opening, closing = "(", ",)" if len(value) == 1 else ")"
    else:
        opening, closing = f"{t.__name__}({{", "})"
        if not value:
            return f"{t.__name__}()"
    if depth >= _MAX_DEPTH:
        return f"{opening}...{closing}" if value else f"{opening}{closing}"
    parts: list[str] = []
    size = len(opening) + len(closing)
    items: Iterator[Any] = iter(value.items()) if t is dict else iter(value)
    shown = 0
    for item in items:
        if t is dict:
            part = (
                _repr(item[0], limit, depth + 1, deadline)
                + ": "
                + _repr(item[1], limit, depth + 1, deadline)
            )
        else:
            part = _repr(item, limit, depth + 1, deadline)
        if size + len(part) > limit and parts:
            break
        parts.append(part)
        shown += 1
        size += len(part) + 2
    text = opening + ", ".join(parts)
    if shown < len(value):
        return _cut(f"{text}, ...{closing} ({len(value)} items)", limit + 40)
    return _cut(text + closing, limit + 40)


def type_label(value: Any) -> str:
    """The name of ``value``'s class (qualified, cut); never raises."""
    try:
        # type's own descriptor, not a metaclass's (program code, may never return)
        name = _TYPE_QUALNAME(type(value))
        return cap_text(name, MAX_NAME_CHARS) if type(name) is str else "object"
    except ENDS_RUN:
        raise  # an interrupt, or the program's own exit: never swallowed
    except BaseException:
        return "object"


def exc_text(exc: BaseException, limit: int = 1000) -> str:
    """``"Type: message"`` of an exception, cut; never raises but for what ends the run."""
    try:
        text = str(exc)
        if type(text) is not str:
            text = ""
    except ENDS_RUN:
        raise  # an interrupt, or the program's own exit: never swallowed
    except BaseException:
        text = "<str() failed>"
    name = type_label(exc)
    return cap_text(f"{name}: {text}" if text else name, limit)


def program_exc_text(
    exc: BaseException, limit: int = 1000, deadline: Deadline = _NO_DEADLINE
) -> str:
    """:func:`exc_text` of an exception the program's code raised: its ``__str__`` is the
    program's code too, run under ``deadline`` (its name alone when that takes too long)."""
    try:
        return str(deadline.run(exc_text, exc, limit, what=f"`__str__` of a {type_label(exc)}"))
    except DeadlineExpired:
        why = "no time left to show it" if deadline.expired else "it took too long"
        return cap_text(f"{type_label(exc)}: <message not shown: {why}>", limit)


# -- children of a value ---------------------------------------------------------------------

#: A variable's children, a page at a time: ``(start, count) -> (items, total)``; each item is
#: ``(name, value, evaluateName or None)``; ``total`` is None when unknown.
Children = Callable[[int, int], tuple[list[tuple[str, Any, str | None]], int | None]]


def _sub(parent: str | None, child: str) -> str | None:
    return None if parent is None else f"{parent}{child}"


#: The builtin bases' own slots, used by ``children`` instead of a subclass's ``__len__``,
#: ``__getitem__``, ``__iter__`` (program code, which may never return).
_SEQUENCES: tuple[tuple[type, Callable[[Any], int], Callable[..., Any]], ...] = (
    (list, list.__len__, list.__getitem__),
    (tuple, tuple.__len__, tuple.__getitem__),
)
_SETS: tuple[tuple[type, Callable[[Any], int], Callable[..., Any]], ...] = (
    (set, set.__len__, set.__iter__),
    (frozenset, frozenset.__len__, frozenset.__iter__),
)
_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__
_GETSET = types.GetSetDescriptorType


def _instance_dict(value: Any, t: type) -> Any:
    """``value.__dict__`` by the C descriptor, never one the program put on its class."""
    for klass in _TYPE_MRO(t):
        found = _TYPE_DICT(klass).get("__dict__")
        if found is not None:
            return found.__get__(value, t) if type(found) is _GETSET else None
    return None


def _sequence_children(
    value: Any, evaluate_name: str | None, size: Callable[[Any], int], getitem: Callable[..., Any]
) -> Children | None:
    if not size(value):
        return None

    def page_sequence(start: int, count: int) -> Any:
        part = getitem(value, slice(start, start + count))
        return [
            (str(i), v, _sub(evaluate_name, f"[{i}]")) for i, v in enumerate(part, start)
        ], size(value)

    return page_sequence


def _set_children(
    value: Any, size: Callable[[Any], int], iterate: Callable[..., Any]
) -> Children | None:
    if not size(value):
        return None

    def page_set(start: int, count: int) -> Any:
        items = itertools.islice(iterate(value), start, start + count)
        return [(str(i), v, None) for i, v in enumerate(items, start)], size(value)

    return page_set


def children(value: Any, evaluate_name: str | None) -> Children | None:
    """How to list ``value``'s children (None: none to show). Runs no program code: uses
    ``issubclass(type(value), ...)``, never ``isinstance`` (it asks ``__class__``)."""
    try:
        t = type(value)
        if issubclass(t, Namespace):
            bindings = _object_getattribute(value, "_kg_bindings")
            names = sorted(bindings)

            def page_namespace(start: int, count: int) -> Any:
                return [
                    (
                        n,
                        bindings[n],
                        _sub(evaluate_name, f".{n}" if n.isidentifier() else f"[{n!r}]"),
                    )
                    for n in names[start : start + count]
                ], len(names)

            return page_namespace if names else None
        for base, size, getitem in _SEQUENCES:
            if issubclass(t, base):
                return _sequence_children(value, evaluate_name, size, getitem)
        if issubclass(t, dict):
            if not dict.__len__(value):
                return None

            def page_dict(start: int, count: int) -> Any:
                got = []
                for k, v in itertools.islice(iter(dict.items(value)), start, start + count):
                    key = bounded_repr(k, MAX_NAME_CHARS)
                    simple = type(k) in (str, int, float, bool) or k is None
                    got.append((key, v, _sub(evaluate_name, f"[{key}]") if simple else None))
                return got, dict.__len__(value)

            return page_dict
        for base, size, iterate in _SETS:
            if issubclass(t, base):
                return _set_children(value, size, iterate)
        if issubclass(t, _NO_CHILDREN):
            return None
        attrs = _instance_dict(value, t)
        if type(attrs) is not dict or not attrs:
            return None

        def page_attrs(start: int, count: int) -> Any:
            items = itertools.islice(iter(list(attrs.items())), start, start + count)
            return [
                (
                    cap_text(str(k), MAX_NAME_CHARS),
                    v,
                    _sub(evaluate_name, f".{k}") if type(k) is str and k.isidentifier() else None,
                )
                for k, v in items
            ], len(attrs)

        return page_attrs
    except ENDS_RUN:
        raise  # an interrupt, or the program's own exit: never swallowed
    except BaseException:
        return None


def listing(items: list[tuple[str, Any, str | None]]) -> Children:
    """The children of a scope: a fixed list."""

    def page(start: int, count: int) -> Any:
        return items[start : start + count], len(items)

    return page


def program_globals(
    g: dict[str, Any], injected: dict[str, Any]
) -> list[tuple[str, Any, str | None]]:
    """The program's own names in ``g``: not dunder names, not what kernelgate put there
    (``display``, ``help``, ...) unless the program rebound them. Namespaces such as
    ``tools`` show."""
    missing = injected  # a sentinel no global can be
    out = []
    for name, value in list(g.items()):
        if type(name) is not str or (name.startswith("__") and name.endswith("__")):
            continue
        if injected.get(name, missing) is value:
            continue
        out.append((name, value, name if name.isidentifier() else None))
    return out


# -- DAP variables ---------------------------------------------------------------------------


class References:
    """``variablesReference`` numbers of one stop: valid until the program resumes (never
    reused within a run, so a stale one is refused, not answered with another value)."""

    def __init__(self) -> None:
        self._next = 1
        self._kids: dict[int, Children] = {}

    def add(self, kids: Children | None) -> int:
        if kids is None:
            return 0
        ref = self._next
        self._next += 1
        self._kids[ref] = kids
        return ref

    def get(self, ref: Any) -> Children | None:
        return self._kids.get(ref) if type(ref) is int else None

    def clear(self) -> None:
        self._kids.clear()


def variable(
    name: str, value: Any, evaluate_name: str | None, refs: References, deadline: Deadline
) -> dict[str, Any]:
    """One DAP variable: name, bounded repr, type, and a reference to its children."""
    if deadline.expired:
        shown = _OUT_OF_TIME
        kids = None
    else:
        shown = bounded_repr(value, MAX_VALUE_CHARS, deadline)
        kids = None if shown == _TOO_SLOW else children(value, evaluate_name)
    out: dict[str, Any] = {
        "name": cap_text(name, MAX_NAME_CHARS),
        "value": shown,
        "type": type_label(value),
        "variablesReference": refs.add(kids),
    }
    if evaluate_name is not None and len(evaluate_name) <= 1000:
        out["evaluateName"] = escape_text(evaluate_name)
    return out


def fit_page(
    kids: Children,
    start: int,
    count: int,
    budget: int,
    refs: References,
    deadline: Deadline,
) -> list[dict[str, Any]]:
    """The variables ``kids`` holds from ``start`` (at most ``count``, at most
    :data:`MAX_VARIABLES`), fitting ``budget`` bytes as JSON. When fewer are given than
    asked for, a last entry named ``...`` says how many more there are and how to ask."""
    wanted = count if count > 0 else None
    take = min(count, MAX_VARIABLES) if count > 0 else MAX_VARIABLES
    try:
        items, total = deadline.run(
            kids, start, take, per_call=3.0, what="listing a value's items (a key's `__repr__`?)"
        )
    except DeadlineExpired:
        return [_note("the request ran out of time listing these (a slow __iter__?)")]
    out: list[dict[str, Any]] = []
    used = 200  # the note's room
    for name, value, evaluate_name in items:
        var = variable(name, value, evaluate_name, refs, deadline)
        size = len(dumps(var).encode("utf-8", "replace")) + 1
        if used + size > budget:
            break
        used += size
        out.append(var)
    given = start + len(out)
    short = total is not None and given < total and (wanted is None or len(out) < wanted)
    if short:
        assert total is not None
        out.append(
            _note(
                f"{total - given} more not shown (at most {MAX_VARIABLES} variables, and "
                f"what fits max_frame_bytes, per reply): ask with start={given}"
            )
        )
    return out


def _note(text: str) -> dict[str, Any]:
    return {"name": "...", "value": text, "type": "", "variablesReference": 0}
