"""The fd-3 conversation as a state machine: one transition table per role (as in h11).

Each :class:`~kernelgate.wire.connection.Connection` keeps a :class:`ConnectionState`: the
state of the host and the state of the child, as that endpoint knows them. The table of a
role, :data:`TRANSITIONS` ``[role]``, says for each of its states which events it may send
and the state each one leads to. ``send`` consults our role's table and ``next_event`` the
peer's, so anything one side may not send, the other refuses, and the reverse:

>>> s = ConnectionState(HOST)
>>> s.process_event(HOST, OpenBindings)
>>> s.process_event(HOST, ExecuteRequest)
>>> s.states
{'host': 'EXECUTING', 'child': 'EXECUTING'}
>>> s.process_event(CHILD, ExecuteResult)
>>> s.process_event(CHILD, ExecuteResult)
Traceback (most recent call last):
...
kernelgate.wire.errors.RemoteProtocolError: the child sent execute_result in state RESULT ...

An entry keyed ``(EventType, OTHER_ROLE)`` is a move the other role's event causes: the
child starts EXECUTING when it sees the host's ``ExecuteRequest``; the host is DONE when it
sees the child's ``ExecuteReply``. Such a move happens at once on the side that receives
the event. On the side that sends it, it happens at once only if the moved role cannot
send anything in its present state that it could not send the same way after the move
(the child before its request may send only a give-up ``execute_reply``): otherwise the
peer may have sent something before it saw our event, and must still be understood. So
the child, having sent ``execute_reply``, still takes replies to its calls that crossed it
on the way; the host, having seen it, sends no more.

Call ids and the calls in flight are kept by the connection (they are numbers, not
states); a violation of either kind puts both roles in ERROR (``process_error``).
"""

from __future__ import annotations

from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .events import (
    CallReply,
    CallRequest,
    ClearOutput,
    DebugEvent,
    DebugReply,
    DebugRequest,
    DisplayData,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    OpenBindings,
    Stream,
    UpdateDisplayData,
)

__all__ = [
    "HOST",
    "CHILD",
    "IDLE",
    "BINDINGS_OPEN",
    "EXECUTING",
    "RESULT",
    "DONE",
    "ERROR",
    "TRANSITIONS",
    "STATE_MEANINGS",
    "SENDS",
    "MOVES_PEER",
    "ConnectionState",
]

HOST = "host"
CHILD = "child"

IDLE = "IDLE"
BINDINGS_OPEN = "BINDINGS_OPEN"
EXECUTING = "EXECUTING"
RESULT = "RESULT"
DONE = "DONE"
ERROR = "ERROR"

#: A key of a table row: an event type the role sends itself, or ``(event type, the other
#: role)`` for a move the other role's event causes.
Key = type | tuple[type, str]

TRANSITIONS: dict[str, dict[str, dict[Key, str]]] = {
    HOST: {
        IDLE: {OpenBindings: BINDINGS_OPEN, (ExecuteReply, CHILD): DONE},
        BINDINGS_OPEN: {ExecuteRequest: EXECUTING, (ExecuteReply, CHILD): DONE},
        # Replies only to calls in flight (the connection checks the id); debug requests
        # only in a debugged run (the connection knows from the execute_request).
        EXECUTING: {CallReply: EXECUTING, DebugRequest: EXECUTING, (ExecuteReply, CHILD): DONE},
        DONE: {},
        ERROR: {},
    },
    CHILD: {
        # Before its request the child may only give up (its pre-encoded InternalError
        # reply: it could not read the request, or its reporting failed).
        IDLE: {ExecuteReply: DONE, (ExecuteRequest, HOST): EXECUTING},
        EXECUTING: {
            Stream: EXECUTING,
            DisplayData: EXECUTING,
            UpdateDisplayData: EXECUTING,
            ClearOutput: EXECUTING,
            CallRequest: EXECUTING,
            DebugReply: EXECUTING,
            DebugEvent: EXECUTING,
            ExecuteResult: RESULT,
            ErrorOutput: RESULT,
            ExecuteReply: DONE,
        },
        # The outcome is sent; the program's other threads may still print, display and
        # call until the reply.
        RESULT: {
            Stream: RESULT,
            DisplayData: RESULT,
            UpdateDisplayData: RESULT,
            ClearOutput: RESULT,
            CallRequest: RESULT,
            DebugReply: RESULT,
            DebugEvent: RESULT,
            ExecuteReply: DONE,
        },
        DONE: {},
        ERROR: {},
    },
}

#: What each state means, for messages and docs.
STATE_MEANINGS: dict[tuple[str, str], str] = {
    (HOST, IDLE): "nothing sent yet",
    (HOST, BINDINGS_OPEN): "the bindings comm is open, no execute_request yet",
    (HOST, EXECUTING): "the program runs; the host answers its calls",
    (HOST, DONE): "the child's execute_reply arrived; calls still waiting are abandoned",
    (HOST, ERROR): "after a protocol violation",
    (CHILD, IDLE): "waiting for the execute_request",
    (CHILD, EXECUTING): "the program runs",
    (CHILD, RESULT): "the run's outcome was sent",
    (CHILD, DONE): "after its execute_reply",
    (CHILD, ERROR): "after a protocol violation",
}

_PEER = {HOST: CHILD, CHILD: HOST}
#: The events each role sends at all.
SENDS: dict[str, frozenset[type]] = {
    role: frozenset(k for row in table.values() for k in row if isinstance(k, type))
    for role, table in TRANSITIONS.items()
}


def _moves_early() -> frozenset[tuple[str, str, Key]]:
    """The (role, state, trigger) where the trigger's sender may move ``role`` on at once,
    without waiting to know that ``role`` saw it: everything ``role`` may send in ``state``
    it may also send, with the same result, in the state the trigger moves it to."""
    safe = set()
    for role, table in TRANSITIONS.items():
        for state, row in table.items():
            for key, target in row.items():
                if type(key) is not tuple:
                    continue
                after = table[target]
                if all(after.get(k) == v for k, v in row.items() if type(k) is not tuple):
                    safe.add((role, state, key))
    return frozenset(safe)


_EARLY = _moves_early()
#: Events that move the other role's state: (event type, the role that sends it).
_TRIGGERS = frozenset(
    k for table in TRANSITIONS.values() for row in table.values() for k in row if type(k) is tuple
)
#: Per role, the events it sends that move the other role's state too: any other event
#: only moves its sender, by one lookup in the sender's table (what the connection does
#: inline on the hot path, instead of calling ``commit``).
MOVES_PEER: dict[str, frozenset[type]] = {
    role: frozenset(etype for etype, sender in _TRIGGERS if sender == role) for role in _PEER
}


def _allowed_text(role: str, state: str) -> str:
    names = [
        str(getattr(k, "wire_name", k)) for k in TRANSITIONS[role][state] if type(k) is not tuple
    ]
    if not names:
        return "nothing"
    if len(names) == 1:
        return f"only {names[0]}"
    return "only " + ", ".join(names[:-1]) + " or " + names[-1]


class ConnectionState:
    """Both roles' states, as the endpoint playing ``our_role`` knows them.

    ``process_event(role, event type)`` is called for every event ``role`` sends: by the
    connection when we send one, and when we receive one. An event the role's table does
    not allow in its state raises :class:`LocalProtocolError` when the role is ours,
    :class:`RemoteProtocolError` when it is the peer's; the caller then calls
    :meth:`process_error`.
    """

    __slots__ = ("our_role", "states")

    def __init__(self, our_role: str) -> None:
        if our_role not in _PEER:
            raise ValueError(f"our_role must be {HOST!r} or {CHILD!r}, got {our_role!r}")
        self.our_role = our_role
        self.states: dict[str, str] = {HOST: IDLE, CHILD: IDLE}

    def check(self, role: str, event_type: type) -> str:
        """The state ``role`` goes to by sending an ``event_type``; raises if it may not."""
        state = self.states[role]
        new = TRANSITIONS[role][state].get(event_type)
        if new is None:
            raise self.refusal(role, event_type)
        return new

    def commit(self, role: str, event_type: type, new_state: str) -> None:
        """Record that ``role`` sent an ``event_type`` (checked) and now is in ``new_state``."""
        states = self.states
        states[role] = new_state
        key = (event_type, role)
        if key in _TRIGGERS:
            peer = _PEER[role]
            state = states[peer]
            target = TRANSITIONS[peer][state].get(key)
            if target is not None and (role != self.our_role or (peer, state, key) in _EARLY):
                states[peer] = target

    def process_event(self, role: str, event_type: type) -> None:
        """``check`` and ``commit`` in one step."""
        self.commit(role, event_type, self.check(role, event_type))

    def process_error(self) -> None:
        """A violation, ours or the peer's: neither role may send anything any more."""
        self.states[HOST] = self.states[CHILD] = ERROR

    def refusal(self, role: str, event_type: type) -> ProtocolError:
        """The error for ``role`` sending an ``event_type`` now: what it may send instead."""
        state = self.states[role]
        meaning = STATE_MEANINGS[role, state]
        allowed = _allowed_text(role, state)
        if role == self.our_role:
            if event_type not in SENDS[role]:
                return LocalProtocolError(f"the {role} does not send {event_type.__name__}")
            return LocalProtocolError(
                f"cannot send {event_type.__name__}: the {role} is in state {state} "
                f"({meaning}), where it may send {allowed}"
            )
        name = getattr(event_type, "wire_name", event_type.__name__)
        return RemoteProtocolError(
            f"the {role} sent {name} in state {state} ({meaning}), where it may send {allowed}"
        )
