"""The wire's state machine: every legal sequence of events goes through on both sides, and
every illegal one is refused on both sides, LocalProtocolError by the sender and
RemoteProtocolError by the receiver, each leaving its connection in ERROR.

Two endpoints are joined in memory (h11 style). The legal sequences are every conversation
up to a length, driven by what the tables allow; the illegal ones are every event each role
may not send at each point reached.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelgate.wire import (
    BINDINGS_OPEN,
    CHILD,
    DONE,
    ERROR,
    EXECUTING,
    HOST,
    IDLE,
    RESULT,
    TRANSITIONS,
    CallReply,
    CallRequest,
    ClearOutput,
    Connection,
    DebugEvent,
    DebugReply,
    DebugRequest,
    DisplayData,
    ErrorOutput,
    ExecuteReply,
    ExecuteRequest,
    ExecuteResult,
    LocalProtocolError,
    OpenBindings,
    RemoteProtocolError,
    Stream,
    UpdateDisplayData,
)
from kernelgate.wire.state import SENDS, STATE_MEANINGS, ConnectionState

from .pair import COMM_ID, drain, forged

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

HOST_EVENTS = (OpenBindings, ExecuteRequest, CallReply)
CHILD_EVENTS = (
    Stream,
    DisplayData,
    UpdateDisplayData,
    ClearOutput,
    CallRequest,
    ExecuteResult,
    ErrorOutput,
    ExecuteReply,
)


# -- the tables themselves -------------------------------------------------------------------


def test_the_tables_cover_every_state_and_only_the_roles_own_events():
    assert set(TRANSITIONS[HOST]) == {IDLE, BINDINGS_OPEN, EXECUTING, DONE, ERROR}
    assert set(TRANSITIONS[CHILD]) == {IDLE, EXECUTING, RESULT, DONE, ERROR}
    # The debugger's events are allowed by the tables but only in a debugged run (the
    # connection's check, tests/wire/test_debug.py): the walks here run undebugged.
    assert SENDS[HOST] == {*HOST_EVENTS, DebugRequest}
    assert SENDS[CHILD] == {*CHILD_EVENTS, DebugReply, DebugEvent}
    for role, table in TRANSITIONS.items():
        assert table[ERROR] == {} and table[DONE] == {}
        for state, row in table.items():
            assert (role, state) in STATE_MEANINGS
            for key, target in row.items():
                assert target in table
                if type(key) is tuple:  # a move the other role's event causes
                    etype, sender = key
                    assert sender != role and etype in SENDS[sender]
                else:
                    assert key in SENDS[role]


def test_what_the_brief_asked_for():
    """The faults found in issue 11, each refused now."""
    host = Connection(HOST, session="h")
    with pytest.raises(LocalProtocolError, match="may send only comm_open"):
        host.send(ExecuteRequest("before the bindings"))
    w = Pair().start()
    with pytest.raises(LocalProtocolError, match="state EXECUTING"):
        w.host.send(ExecuteRequest("twice"))
    w = Pair().start()
    w.child.receive_data(forged(ExecuteRequest("a second request")))
    with pytest.raises(
        RemoteProtocolError, match="the host sent execute_request in state EXECUTING"
    ):
        w.child.next_event()
    with pytest.raises(LocalProtocolError, match="stream name must be 'stdout' or 'stderr'"):
        Stream("bogus", "the child cannot make it, so it cannot send it")


def table_markdown(role: str) -> str:
    """The table of ``role`` as docs/protocol.md shows it."""
    table = TRANSITIONS[role]
    other = CHILD if role == HOST else HOST
    own = [*HOST_EVENTS, DebugRequest] if role == HOST else [*CHILD_EVENTS, DebugReply, DebugEvent]
    seen = [
        e
        for e in (CHILD_EVENTS if role == HOST else HOST_EVENTS)
        if any((e, other) in row for row in table.values())
    ]
    head = (
        ["state"]
        + [f"sends {e.wire_name}" for e in own]
        + [f"sees the {other}'s {e.wire_name}" for e in seen]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for state, row in table.items():
        cells = [f"`{state}`"]
        cells += [f"`{row[e]}`" if e in row else "—" for e in own]
        cells += [f"`{row[(e, other)]}`" if (e, other) in row else "—" for e in seen]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@pytest.mark.parametrize("role", [HOST, CHILD])
def test_docs_show_the_tables_as_they_are(role):
    assert table_markdown(role) in DOCS.read_text(), table_markdown(role)


# -- driving both endpoints ------------------------------------------------------------------


class Pair:
    """A host and a child, with the bytes each sent not yet delivered."""

    def __init__(self) -> None:
        self.host = Connection(HOST, session="host")
        self.child = Connection(CHILD, session="child")
        self.to_child: list[tuple[bytes, object]] = []
        self.to_host: list[tuple[bytes, object]] = []

    def send(self, role, event):
        conn, queue = (self.host, self.to_child) if role == HOST else (self.child, self.to_host)
        queue.append((conn.send(event), event))

    def deliver(self, role):
        """Deliver the oldest frame waiting for ``role``; it must arrive as it was sent."""
        conn, queue = (self.host, self.to_host) if role == HOST else (self.child, self.to_child)
        data, event = queue.pop(0)
        conn.receive_data(data)
        assert drain(conn) == [event]

    def exchange(self, role, event):
        self.send(role, event)
        self.deliver(CHILD if role == HOST else HOST)

    def start(self):
        self.exchange(HOST, OpenBindings(COMM_ID, {"tools": {"f": {"params": []}}}))
        self.exchange(HOST, ExecuteRequest("pass"))
        return self


def sample(etype, conn):
    """An event of ``etype`` that ``conn`` could send now but for its state."""
    if etype is OpenBindings:
        return OpenBindings(COMM_ID, {})
    if etype is ExecuteRequest:
        return ExecuteRequest("pass", {"max_calls": 3})
    if etype is CallReply:
        waiting = sorted(conn._outstanding)
        return CallReply(waiting[0] if waiting else 0, True, [1, "x"])
    if etype is CallRequest:
        return CallRequest(conn.next_call_id, "tools", "f", [1], {"k": None})
    if etype is Stream:
        return Stream("stdout", "out\n")
    if etype is DisplayData:
        return DisplayData({"text/plain": "x"}, display_id="d1")
    if etype is UpdateDisplayData:
        return UpdateDisplayData({"text/plain": "y"}, display_id="d1")
    if etype is ClearOutput:
        return ClearOutput(wait=True)
    if etype is ExecuteResult:
        return ExecuteResult({"application/json": 1, "text/plain": "1"})
    if etype is ErrorOutput:
        return ErrorOutput("E", "v", ["E: v"])
    return ExecuteReply("error", "exception", ename="E", evalue="v")


def legal(role, conn):
    """The event types ``role`` may send now, by its table (and the calls in flight)."""
    row = TRANSITIONS[role][conn.our_state]
    return [
        e
        for e in (HOST_EVENTS if role == HOST else CHILD_EVENTS)
        if e in row and not (e is CallReply and not conn.outstanding_calls)
    ]


def replay(path):
    """A pair driven through ``path`` (role, event type), each frame delivered at once."""
    w = Pair()
    for role, etype in path:
        conn = w.host if role == HOST else w.child
        w.exchange(role, sample(etype, conn))
    return w


def legal_paths(depth):
    """Every legal conversation of up to ``depth`` events (at most 2 calls made)."""
    frontier = [()]
    for _ in range(depth):
        grown = []
        for path in frontier:
            w = replay(path)
            for role, conn in ((HOST, w.host), (CHILD, w.child)):
                for etype in legal(role, conn):
                    if etype is CallRequest and conn.next_call_id >= 2:
                        continue
                    grown.append((*path, (role, etype)))
        yield from grown
        frontier = grown


PATHS = list(legal_paths(7))


def test_every_legal_sequence_goes_through_on_both_sides():
    for path in PATHS:
        w = replay(path)  # every event arrives as sent, or this raises
        # What each side knows of the other's state is what the other has; except that
        # the child cannot know when the host saw its reply (the host is DONE then).
        assert w.host.states[CHILD] == w.child.our_state
        assert w.child.states[HOST] == w.host.our_state or w.host.states == {
            HOST: DONE,
            CHILD: DONE,
        }
        assert w.host.next_call_id == w.child.next_call_id
    assert len(PATHS) > 1000


def points():
    """The shortest path to each distinct point the legal paths reach: the host's state, the
    child's, whether calls are in flight, and the child's view of the host."""
    seen = {}
    for path in [(), *PATHS]:
        w = replay(path)
        key = (w.host.our_state, w.child.our_state, w.host.outstanding_calls > 0)
        seen.setdefault((*key, w.child.states[HOST]), path)
    return seen


POINTS = points()


def test_the_points_reached():
    assert set(POINTS) == {
        (IDLE, IDLE, False, IDLE),
        (BINDINGS_OPEN, IDLE, False, BINDINGS_OPEN),
        (EXECUTING, EXECUTING, False, EXECUTING),
        (EXECUTING, EXECUTING, True, EXECUTING),
        (EXECUTING, RESULT, False, EXECUTING),
        (EXECUTING, RESULT, True, EXECUTING),
        (DONE, DONE, False, EXECUTING),  # the run ended
        (DONE, DONE, True, EXECUTING),  # ... with calls in flight, now abandoned
        (DONE, DONE, False, IDLE),  # the child gave up before anything came
        (DONE, DONE, False, BINDINGS_OPEN),  # ... or with the bindings only
    }


def illegal_cases():
    for key, path in POINTS.items():
        w = replay(path)
        for role, conn in ((HOST, w.host), (CHILD, w.child)):
            allowed = legal(role, conn)
            for etype in HOST_EVENTS if role == HOST else CHILD_EVENTS:
                if etype not in allowed:
                    yield pytest.param(path, role, etype, id=f"{key}-{role}-{etype.__name__}")


@pytest.mark.parametrize(("path", "role", "etype"), list(illegal_cases()))
def test_every_illegal_event_is_refused_on_both_sides(path, role, etype):
    w = replay(path)
    sender, receiver = (w.host, w.child) if role == HOST else (w.child, w.host)
    sender_state = sender.our_state
    event = sample(etype, sender)
    with pytest.raises(LocalProtocolError) as local:
        sender.send(event)
    assert sender.states == {HOST: ERROR, CHILD: ERROR}
    assert type(event).__name__ in str(local.value) or "is waiting" in str(local.value)
    with pytest.raises(LocalProtocolError, match="connection is in ERROR since"):
        sender.send(event)
    # The same event, written by a peer that breaks the protocol (a program on fd 3).
    receiver.receive_data(forged(event))
    view = receiver.states[role]
    if view != sender_state:
        # The host is DONE because it saw the child's reply, which the child cannot know:
        # the child judges by what the host may have sent before it saw it.
        assert (role, sender_state) == (HOST, DONE)
        waiting = etype is not CallReply or event.call_id in receiver._outstanding
        if etype in TRANSITIONS[role][view] and waiting:
            assert drain(receiver) == [event]
            return
    with pytest.raises(RemoteProtocolError) as remote:
        receiver.next_event()
    assert receiver.states == {HOST: ERROR, CHILD: ERROR}
    said = rf"^the {role} sent {re.escape(etype.wire_name)} in state {view} \("
    assert re.search(f"{said}|^reply to call 0, which is not waiting", str(remote.value))
    with pytest.raises(RemoteProtocolError) as again:
        receiver.next_event()
    assert again.value is remote.value


# -- the moves one side makes for the other --------------------------------------------------


def test_a_reply_that_crossed_the_childs_end_is_taken():
    """The host answers a call while the child, done, sends its reply: both frames are on
    the way at once. Neither side is wrong, and neither refuses the other."""
    w = Pair().start()
    w.exchange(CHILD, CallRequest(0, "tools", "f", [], {}))
    w.send(CHILD, ExecuteReply("ok"))
    w.send(HOST, CallReply(0, True, 1))  # before the host has seen the reply
    w.deliver(CHILD)
    w.deliver(HOST)
    assert w.child.states == {HOST: EXECUTING, CHILD: DONE}
    assert w.host.states == {HOST: DONE, CHILD: DONE}
    with pytest.raises(LocalProtocolError, match="state DONE"):
        w.host.send(CallReply(0, True, 1))


def test_the_child_may_give_up_before_its_request():
    """Its pre-encoded InternalError reply (it could not read the request, or reporting
    failed) is made by a fresh connection, and a host that sent the request takes it."""
    fallback = Connection(CHILD, session="fallback").send(
        ExecuteReply("error", "exception", ename="InternalError", evalue="reporting failed")
    )
    w = Pair().start()
    w.host.receive_data(fallback)
    assert drain(w.host)[0].ename == "InternalError"
    assert w.host.states == {HOST: DONE, CHILD: DONE}


def test_a_child_that_gave_up_ignores_the_request_on_its_way():
    child = Connection(CHILD, session="c")
    child.send(ExecuteReply("error", "exception", ename="InternalError", evalue="x"))
    host = Connection(HOST, session="h")
    for event in (OpenBindings(COMM_ID, {}), ExecuteRequest("late")):
        child.receive_data(host.send(event))
    assert [type(e) for e in drain(child)] == [OpenBindings, ExecuteRequest]
    assert child.states == {HOST: EXECUTING, CHILD: DONE}


def test_the_host_moves_the_child_at_once_only_when_nothing_can_cross():
    s = ConnectionState(HOST)
    s.process_event(HOST, OpenBindings)
    assert s.states == {HOST: BINDINGS_OPEN, CHILD: IDLE}
    s.process_event(HOST, ExecuteRequest)  # the child sends nothing before it sees this
    assert s.states == {HOST: EXECUTING, CHILD: EXECUTING}
    c = ConnectionState(CHILD)
    c.process_event(HOST, OpenBindings)
    c.process_event(HOST, ExecuteRequest)
    c.process_event(CHILD, ExecuteReply)  # the host may be replying to calls meanwhile
    assert c.states == {HOST: EXECUTING, CHILD: DONE}


# -- random legal conversations, with frames crossing ------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def random_event(draw, etype, conn):
    if etype is CallRequest:
        args = draw(st.lists(JSON, max_size=3))
        kwargs = draw(st.dictionaries(st.text(max_size=5), JSON, max_size=2))
        return CallRequest(conn.next_call_id, "tools", draw(st.text(max_size=8)), args, kwargs)
    if etype is CallReply:
        call_id = draw(st.sampled_from(sorted(conn._outstanding)))
        if draw(st.booleans()):
            return CallReply(call_id, True, draw(JSON))
        return CallReply(call_id, False, ename="ValueError", evalue=draw(st.text()))
    if etype is Stream:
        return Stream(draw(st.sampled_from(["stdout", "stderr"])), draw(st.text()))
    if etype is DisplayData:
        return DisplayData({"text/plain": draw(st.text()), "application/json": draw(JSON)})
    if etype is ExecuteResult:
        return ExecuteResult({"application/json": draw(JSON), "text/plain": "v"})
    if etype is ExecuteReply and draw(st.booleans()):
        return ExecuteReply("ok", usage={"cpu_user_s": draw(st.floats(0, 100))})
    return sample(etype, conn)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_random_legal_conversation_round_trips(data):
    """Each step: a side sends something its table allows it now, or a frame on its way is
    delivered. Frames cross (the host answers while the child goes on); at the end every
    frame has arrived as it was sent, in order, and nobody refused anything."""
    w = Pair()
    for _ in range(data.draw(st.integers(0, 40))):
        moves = []
        for role, conn in ((HOST, w.host), (CHILD, w.child)):
            for etype in legal(role, conn):
                if etype is CallRequest and conn.next_call_id >= 8:
                    continue
                if (
                    etype is ExecuteReply
                    and conn.our_state == IDLE
                    and data.draw(st.integers(0, 9))
                ):
                    continue  # giving up before the request: now and then, not half the time
                moves.append(("send", role, etype))
        moves += [("deliver", HOST, None)] * bool(w.to_host)
        moves += [("deliver", CHILD, None)] * bool(w.to_child)
        if not moves:
            break
        action, role, etype = data.draw(st.sampled_from(moves))
        if action == "deliver":
            w.deliver(role)
        else:
            conn = w.host if role == HOST else w.child
            w.send(role, random_event(data.draw, etype, conn))
    while w.to_host or w.to_child:
        w.deliver(HOST if w.to_host else CHILD)
    assert ERROR not in (*w.host.states.values(), *w.child.states.values())
    assert w.host.next_call_id == w.child.next_call_id
    if w.host.our_state != DONE:  # calls in flight agree, until the host stops answering
        assert w.host.outstanding_calls == w.child.outstanding_calls


def test_a_conversation_in_one_chunk():
    """What the child wrote in one go is taken frame by frame, each against the table."""
    w = Pair().start()
    frames = [
        w.child.send(e)
        for e in (
            Stream("stdout", "a"),
            CallRequest(0, "tools", "f", [], {}),
            ExecuteResult({"text/plain": "x"}),
            Stream("stderr", "b"),
            ExecuteReply("ok"),
        )
    ]
    w.host.receive_data(b"".join(frames))
    got = drain(w.host)
    assert [type(e) for e in got] == [Stream, CallRequest, ExecuteResult, Stream, ExecuteReply]
    assert json.loads(frames[-1])["content"]["status"] == "ok"
