"""The outcome of a run, decided from plain data: no process is started here.

Every status, the precedence between verdicts that compete, the truncation markers, the
note and the usage figures, as :func:`kernelgate.gateway.outcome.build_result` builds them.
"""

from __future__ import annotations

import doctest
import importlib
import signal
from typing import Any

import pytest

from kernelgate.gateway.cgroups import MemoryUse
from kernelgate.gateway.outcome import (
    ERROR_TEXT_LIMIT,
    MAX_TEXT_PLAIN,
    Ending,
    Verdicts,
    build_result,
    cap_lines,
    cut_text_plain,
    interpreter_failed,
    interrupted,
    protocol,
    reply_verdict,
    sandbox_unavailable,
    value_not_json,
    value_too_large,
    wall_timeout,
)
from kernelgate.gateway.output import OutputCollector, RunOutput, truncation_marker
from kernelgate.model.limits import Limits
from kernelgate.model.result import STATUSES, CallRecord
from kernelgate.wire.events import DisplayData, ErrorOutput, ExecuteReply, ExecuteResult
from kernelgate.wire.values import NotJSONError, check_json

LIMITS = Limits(wall_seconds=7, cpu_seconds=3, memory_bytes=1 << 28)
OK_REPLY = ExecuteReply("ok", "ok", usage={"cpu_user_s": 0.25, "cpu_system_s": 0.05})
RESULT = {"output_type": "execute_result", "execution_count": 1, "data": {"text/plain": "3"}}


def not_json() -> NotJSONError:
    try:
        check_json({"a": [1, 2, {3}]})
    except NotJSONError as exc:
        return exc
    raise AssertionError("a set is JSON?")


def ending(**kwargs: Any) -> Ending:
    kwargs.setdefault("decided", None)
    kwargs.setdefault("reply", None)
    kwargs.setdefault("limits", LIMITS)
    return Ending(**kwargs)


def error_output(result: Any) -> dict[str, Any]:
    return {
        "output_type": "error",
        "ename": result.error.ename,
        "evalue": result.error.evalue,
        "traceback": [],
    }


# -- every status ----------------------------------------------------------------------------


def test_ok_takes_the_value_and_keeps_the_result_output() -> None:
    out = dict(RESULT, data={"text/plain": "3", "application/json": 3})
    r = build_result(
        ending(reply=OK_REPLY, value=3, result_output=out, outputs=(out,), stdout="hi\n")
    )
    assert (r.status, r.ok, r.value, r.error, r.note) == ("ok", True, 3, None, "")
    assert r.outputs == [out] and r.stdout == "hi\n"
    assert (r.exit_code, r.signal) == (0, None)


def test_exception_comes_from_the_reply_with_its_traceback_capped() -> None:
    lines = ["x" * 1000] * 100
    reply = ExecuteReply("error", "exception", ename="ValueError", evalue="bad", traceback=lines)
    r = build_result(ending(reply=reply, value=5))
    assert r.status == "exception" and r.value is None
    assert (r.error.ename, r.error.evalue) == ("ValueError", "bad")
    assert r.error.traceback == cap_lines(lines)
    kept = ERROR_TEXT_LIMIT // 1001  # each line with its newline
    assert r.error.traceback[-1] == f"... [{100 - kept} more traceback lines cut]"
    assert r.outputs == []  # the child sent its own error output


def test_a_wall_timeout_says_the_budget_and_what_to_do() -> None:
    r = build_result(ending(decided=wall_timeout(LIMITS), returncode=-signal.SIGTERM))
    assert (r.status, r.error.ename) == ("timeout", "Timeout")
    assert "wall_seconds=7" in r.error.evalue and "raise Limits.wall_seconds" in r.message
    assert r.signal == signal.SIGTERM and r.exit_code is None
    assert r.outputs == [error_output(r)]


@pytest.mark.parametrize(
    ("sig", "cpu", "cpu_timeout"),
    [
        (signal.SIGXCPU, 0.5, True),  # RLIMIT_CPU's soft limit
        (signal.SIGKILL, 3.0, True),  # its hard limit: killed once the budget was used
        (signal.SIGKILL, 1.0, False),  # killed from outside, well within the budget
    ],
)
def test_the_cpu_budget_is_a_timeout_naming_cpu(sig: int, cpu: float, cpu_timeout: bool) -> None:
    r = build_result(ending(returncode=-sig, rusage=(cpu, 0.0, 1024)))
    if cpu_timeout:
        assert r.status == "timeout" and "cpu_seconds=3" in r.error.evalue
        assert f"({cpu:.2f} s of CPU)" in r.error.evalue
    else:
        assert r.status == "worker_exit" and "killed from outside" in r.error.evalue


def test_a_reply_past_the_cpu_budget_is_judged_by_what_the_host_measured() -> None:
    # The program trapped SIGXCPU and replied: the host read 4 s of CPU in /proc.
    r = build_result(ending(reply=OK_REPLY, value=1, busiest_cpu_s=4.0))
    assert r.status == "timeout" and "more than its CPU budget of cpu_seconds=3" in r.message
    assert "(4.00 s of CPU)" in r.message and r.value is None
    # ... or the program's own figure, which may overstate its use but never hide it.
    greedy = ExecuteReply("ok", "ok", usage={"cpu_user_s": 3.0, "cpu_system_s": 0.5})
    assert build_result(ending(reply=greedy)).status == "timeout"
    assert build_result(ending(reply=OK_REPLY, busiest_cpu_s=2.9)).status == "ok"


def test_interrupted() -> None:
    r = build_result(ending(decided=interrupted("the gateway was closed")))
    assert (r.status, r.message) == ("interrupted", "Interrupted: the gateway was closed")


@pytest.mark.parametrize(
    ("sig", "hint"),
    [
        (signal.SIGSEGV, "a crash, usually in C code; it may have run out of memory"),
        (signal.SIGKILL, "killed from outside; it may have run out of memory"),
        (signal.SIGABRT, "an abort, usually in C code"),
        (signal.SIGBUS, "a bus error"),
        (signal.SIGSYS, "a system call the sandbox forbids"),
        (signal.SIGUSR1, ""),
    ],
)
def test_worker_exit_by_a_signal_says_which_and_why(sig: int, hint: str) -> None:
    r = build_result(ending(returncode=-sig))
    assert r.status == "worker_exit" and r.signal == sig and r.exit_code is None
    name = signal.Signals(sig).name
    assert f"killed by {name} ({int(sig)})" in r.error.evalue
    assert hint in r.error.evalue
    if "memory" in hint:
        assert f"memory_bytes={LIMITS.memory_bytes}" in r.error.evalue


def test_worker_exit_with_a_code_and_a_signal_number_python_does_not_name() -> None:
    r = build_result(ending(returncode=3))
    assert r.exit_code == 3 and "exited with code 3 before it reported" in r.message
    assert "killed by signal 99 (99)" in build_result(ending(returncode=-99)).message


def test_a_child_that_never_started() -> None:
    r = build_result(
        ending(decided=interpreter_failed("/no/python", OSError("ENOENT")), started=False)
    )
    assert r.status == "worker_exit" and "/no/python" in r.message and "ENOENT" in r.message
    assert r.isolation == "" and r.exit_code is None


def test_invalid_output_and_output_limit_drop_the_value_output() -> None:
    out = dict(RESULT)
    for verdict, status in (
        (value_not_json(not_json()), "invalid_output"),
        (value_too_large(LIMITS), "output_limit"),
    ):
        r = build_result(ending(decided=verdict, reply=None, result_output=out, outputs=(out,)))
        assert r.status == status
        assert r.outputs == [error_output(r)]  # the value's output is gone
    assert "max_value_bytes=32768" in value_too_large(LIMITS).message
    assert "value['a'][2]: set is not JSON" in value_not_json(not_json()).message


def test_protocol() -> None:
    r = build_result(ending(decided=protocol("frame too large"), returncode=-signal.SIGKILL))
    assert r.status == "protocol" and "frame too large" in r.message
    assert "Programs must not read or write fd 3" in r.message


def test_sandbox_unavailable_has_no_isolation() -> None:
    r = build_result(ending(decided=sandbox_unavailable("no user namespaces"), started=False))
    assert (r.status, r.isolation) == ("sandbox_unavailable", "")
    cold = ExecuteReply("error", "sandbox_unavailable", ename="SandboxUnavailable", evalue="x")
    r = build_result(ending(reply=cold, level="namespaces"))
    assert (r.status, r.isolation, r.error.evalue) == ("sandbox_unavailable", "", "x")
    assert build_result(ending(reply=OK_REPLY, level="namespaces")).isolation == "namespaces"


def test_a_sandbox_unavailable_reply_from_inside_the_sandbox_is_refused() -> None:
    claim = ExecuteReply("error", "sandbox_unavailable")
    assert reply_verdict(claim, warm=False, events_seen=0) is None  # a cold child's first word
    for warm, seen in ((True, 0), (False, 1)):
        verdict = reply_verdict(claim, warm=warm, events_seen=seen)
        assert verdict is not None and verdict.status == "protocol"
        assert ("(a warm child)" in verdict.message) == warm
    assert reply_verdict(OK_REPLY, warm=True, events_seen=5) is None


def test_every_status_is_reached() -> None:
    reached = {
        build_result(ending(reply=OK_REPLY)).status,
        build_result(ending(reply=ExecuteReply("error", "exception"))).status,
        build_result(ending(decided=wall_timeout(LIMITS))).status,
        build_result(ending(decided=interrupted("x"))).status,
        build_result(ending(returncode=1)).status,
        build_result(ending(decided=value_not_json(not_json()))).status,
        build_result(ending(decided=value_too_large(LIMITS))).status,
        build_result(ending(decided=protocol("x"))).status,
        build_result(ending(decided=sandbox_unavailable("x"))).status,
    }
    assert reached == set(STATUSES)


# -- precedence ------------------------------------------------------------------------------


def test_the_first_decisive_event_wins() -> None:
    v = Verdicts()
    assert v.decide(wall_timeout(LIMITS))
    assert not v.decide(interrupted("later"))
    assert not v.accept_reply(OK_REPLY)  # a reply after the host's verdict changes nothing
    assert v.decided is not None and v.decided.status == "timeout" and v.reply is None
    assert v.settled and not v.refused


def test_after_the_reply_no_host_verdict_counts() -> None:
    v = Verdicts()
    assert v.accept_reply(OK_REPLY)
    assert not v.decide(wall_timeout(LIMITS)) and not v.decide(protocol("late junk"))
    assert v.decided is None and not v.refused
    r = build_result(ending(decided=v.decided, reply=v.reply, returncode=-signal.SIGKILL))
    assert r.status == "ok" and (r.exit_code, r.signal) == (0, None)  # it ended as it said


def test_a_protocol_verdict_refuses_the_rest_of_the_traffic() -> None:
    v = Verdicts()
    assert v.decide(protocol("junk")) and v.refused and v.settled


def test_sigxcpu_outranks_a_wall_timeout_but_not_an_interrupt() -> None:
    cpu = build_result(ending(decided=wall_timeout(LIMITS), returncode=-signal.SIGXCPU))
    assert cpu.status == "timeout" and "cpu_seconds" in cpu.message
    assert "wall_seconds" not in cpu.message
    for first in (interrupted("stop"), protocol("junk")):
        r = build_result(ending(decided=first, returncode=-signal.SIGXCPU))
        assert r.status == first.status


def test_a_host_verdict_outranks_a_cpu_overrun_after_it() -> None:
    r = build_result(ending(decided=interrupted("stop"), busiest_cpu_s=10.0))
    assert r.status == "interrupted"


# -- truncation markers ----------------------------------------------------------------------


def test_cap_lines_keeps_what_fits_and_counts_the_rest() -> None:
    assert cap_lines(["ab", "cd"], limit=6) == ["ab", "cd"]
    assert cap_lines(["ab", "cd", "ef"], limit=6) == [
        "ab",
        "cd",
        "... [1 more traceback lines cut]",
    ]
    assert cap_lines([], limit=1) == []


def test_a_long_text_plain_is_cut_with_a_marker() -> None:
    assert cut_text_plain("x" * MAX_TEXT_PLAIN) == "x" * MAX_TEXT_PLAIN
    assert cut_text_plain("x" * (MAX_TEXT_PLAIN + 1)) == "x" * MAX_TEXT_PLAIN + "... [cut]"
    out = RunOutput(LIMITS)
    assert out.result(ExecuteResult({"text/plain": "y" * (MAX_TEXT_PLAIN + 5)})) is None
    assert out.outputs[0]["data"]["text/plain"].endswith("y... [cut]")


def test_stream_output_keeps_head_and_tail_with_one_marker() -> None:
    seen: list[dict[str, Any]] = []
    out = RunOutput(Limits(max_output_bytes=10), seen.append)
    out.stream("stdout", "1234")
    out.raw("stderr", "abcdé".encode())  # the head (5 bytes) ends after "a"
    out.stream("stdout", "more")
    out.end_streams()
    cuts = out.collector.cuts()
    marker = truncation_marker(10, cuts)
    # "bcdé" (5 bytes: é is two) went to the tail, then "more" pushed it out whole (a cut
    # never splits a character): the marker stands in stderr, the one stream that lost text
    assert out.collector.text("stdout") == "1234more"
    assert out.collector.text("stderr") == "a" + marker
    assert list(cuts) == ["stderr"]
    assert (cuts["stderr"].bytes, cuts["stderr"].chars, cuts["stderr"].at) == (5, 4, 1)
    assert "[kernelgate: 5 bytes (0 lines) of stderr cut here" in marker
    assert [o["text"] for o in seen] == ["1234", "a", marker, "more"]
    assert [o["text"] for o in out.outputs] == ["1234", "a", marker, "more"]
    assert out.collector.truncated


def test_an_incomplete_character_at_the_end_of_a_pipe_is_replaced() -> None:
    out = RunOutput(LIMITS)
    out.raw("stdout", "é".encode()[:1])
    out.end_streams()
    out.end_streams()  # once only
    assert out.collector.text("stdout") == "\ufffd"


def test_rich_outputs_past_their_budget_leave_one_marker_and_the_value_still_shows() -> None:
    out = RunOutput(Limits(max_display_bytes=300))
    big = DisplayData({"text/plain": "z" * 400})
    out.display(DisplayData({"text/plain": "small"}))
    out.display(big)
    out.display(big)
    out.error(ErrorOutput("E", "v", []))
    assert out.result(ExecuteResult({"text/plain": "v" * 400, "application/json": 1})) is None
    kinds = [(o["output_type"], o["data"]["text/plain"][:20]) for o in out.outputs]
    assert kinds == [
        ("display_data", "small"),
        ("display_data", "[kernelgate: rich ou"),
        ("execute_result", "v" * 20),
    ]
    assert "max_display_bytes=300 bytes" in out.outputs[1]["data"]["text/plain"]
    assert out.value == 1


def test_an_error_output_is_capped() -> None:
    out = RunOutput(LIMITS)
    out.error(ErrorOutput("E" * 300, "v" * (ERROR_TEXT_LIMIT + 10), ["t" * 100] * 1000))
    (error,) = out.outputs
    assert len(error["ename"]) == 200 and len(error["evalue"]) == ERROR_TEXT_LIMIT
    assert error["traceback"][-1].endswith("more traceback lines cut]")


def test_a_value_over_its_budget_or_not_json_is_a_verdict_not_an_output() -> None:
    out = RunOutput(Limits(max_value_bytes=10))
    verdict = out.result(ExecuteResult({"text/plain": "x", "application/json": "x" * 20}))
    assert verdict is not None and verdict.status == "output_limit"
    verdict = out.result(ExecuteResult({"text/plain": "x", "application/json": {1: 2}}))
    assert verdict is not None and verdict.status == "invalid_output"
    assert out.outputs == [] and out.value is None


def test_a_second_result_replaces_the_first() -> None:
    out = RunOutput(LIMITS)
    out.result(ExecuteResult({"text/plain": "1", "application/json": 1}))
    out.stream("stdout", "between")
    out.result(ExecuteResult({"text/plain": "2", "application/json": 2}))
    assert [o["output_type"] for o in out.outputs] == ["stream", "execute_result"]
    assert out.value == 2 and out.result_output is out.outputs[-1]


def test_a_completed_call_seals_the_stream_output() -> None:
    out = RunOutput(LIMITS)
    out.stream("stdout", "a")
    call = CallRecord(id=0, namespace="tools", name="f", args=[], kwargs={})
    out.place_call(call)
    assert call.output_index == 1
    out.stream("stdout", "b")
    assert [o["text"] for o in out.outputs] == ["a", "b"]
    collector = OutputCollector(100)
    collector.add_text("stdout", "a")
    collector.add_text("stdout", "b")
    assert [o["text"] for o in collector.outputs] == ["ab"]


def test_calls_before_a_clear_come_before_what_is_left() -> None:
    out = RunOutput(LIMITS)
    out.stream("stdout", "a")
    before = CallRecord(id=0, namespace="tools", name="f", args=[], kwargs={})
    out.place_call(before)
    out.stream("stdout", "b")
    out.clear(wait=True)
    pending = CallRecord(id=1, namespace="tools", name="f", args=[], kwargs={})
    out.place_call(pending)  # after the request to clear, before the output that does it
    out.stream("stdout", "c")
    after = CallRecord(id=2, namespace="tools", name="f", args=[], kwargs={})
    out.place_call(after)
    assert [o["text"] for o in out.outputs] == ["c"]
    assert (before.output_index, pending.output_index, after.output_index) == (0, 0, 1)


# -- the note ----------------------------------------------------------------------------------


def test_a_final_expression_that_is_not_json_is_noted() -> None:
    out = dict(RESULT, data={"text/plain": "{1, 2}"})
    r = build_result(ending(reply=OK_REPLY, result_output=out, outputs=(out,)))
    assert r.status == "ok" and r.value is None and r.outputs == [out]
    assert r.note.startswith("the final expression's value is not JSON")
    assert r.message == f"ok; {r.note}"


def test_hook_errors_join_the_note_whatever_the_status() -> None:
    out = dict(RESULT, data={"text/plain": "{1}"})
    hooks = ("on_call: ValueError: boom", "on_call: KeyError: 'x'")
    r = build_result(ending(reply=OK_REPLY, result_output=out, hook_errors=hooks))
    assert r.note.split("; ")[-2:] == list(hooks)
    assert r.note.startswith("the final expression's value is not JSON")
    failed = build_result(
        ending(decided=wall_timeout(LIMITS), result_output=out, hook_errors=hooks)
    )
    assert failed.note == "; ".join(hooks)  # no value note for a run that failed
    assert build_result(ending(reply=OK_REPLY)).note == ""


# -- usage -------------------------------------------------------------------------------------


def test_usage_from_the_reaped_child_is_the_hosts() -> None:
    calls = (CallRecord(0, "tools", "add", [1], {}),)
    r = build_result(
        ending(
            reply=OK_REPLY,
            rusage=(1.0, 0.5, 2048),
            calls=calls,
            bytes_in=10,
            bytes_out=20,
            warm=True,
        )
    )
    assert r.usage == {
        "cpu_user_s": 1.0,
        "cpu_system_s": 0.5,
        "peak_memory_bytes": 2048 * 1024,
        "calls": 1,
        "bytes_in": 10,
        "bytes_out": 20,
        "warm": True,
        "measured_by": "host",
        "peak_memory_scope": "process",
        "child_reported": {"cpu_user_s": 0.25, "cpu_system_s": 0.05},
    }
    assert r.calls == list(calls)


def test_usage_read_at_the_reply_is_a_lower_bound_the_child_may_only_raise() -> None:
    host = {"cpu_user_s": 0.1, "cpu_system_s": 0.2, "peak_memory_bytes": 100}
    r = build_result(ending(reply=OK_REPLY, host_usage=host))
    assert r.usage["cpu_user_s"] == 0.25 and r.usage["cpu_system_s"] == 0.2
    assert r.usage["peak_memory_bytes"] == 100 and r.usage["measured_by"] == "host"


def test_the_memory_cgroups_peak_is_the_runs_and_outranks_a_process_rss() -> None:
    # A memfd or tmpfs file is in no process's RSS; the cgroup counts it.
    r = build_result(
        ending(reply=OK_REPLY, rusage=(0.1, 0.1, 20_000), memory=MemoryUse(90 << 20, 0))
    )
    assert r.status == "ok"
    assert r.usage["peak_memory_bytes"] == 90 << 20 and r.usage["peak_memory_scope"] == "run"
    assert r.usage["measured_by"] == "host"
    # A warm child's RSS counts pages it shares with the zygote: the larger figure is kept.
    r = build_result(
        ending(reply=OK_REPLY, rusage=(0.1, 0.1, 30_000), memory=MemoryUse(1 << 20, 0))
    )
    assert r.usage["peak_memory_bytes"] == 30_000 * 1024


def test_a_peak_no_larger_than_the_hosts_at_spawn_is_not_the_cold_childs() -> None:
    # The kernel puts the host's peak RSS (here 400 MiB) in a cold child's ru_maxrss at
    # exec: a figure no larger is not the child's, whoever reports it; /proc's is used.
    host_peak = 400 << 20
    reply = ExecuteReply("ok", "ok", usage={"peak_memory_bytes": host_peak})
    host = {"cpu_user_s": 0.1, "cpu_system_s": 0.2, "peak_memory_bytes": 20 << 20}
    reaped = ending(
        reply=reply,
        rusage=(0.1, 0.1, host_peak >> 10),
        host_usage=host,
        inherited_peak_bytes=host_peak,
    )
    assert build_result(reaped).usage["peak_memory_bytes"] == 20 << 20
    unreaped = ending(reply=reply, host_usage=host, inherited_peak_bytes=host_peak)
    assert build_result(unreaped).usage["peak_memory_bytes"] == 20 << 20
    # Killed before any reply: the memory cgroup's peak is the run's.
    killed = ending(
        returncode=-9,
        rusage=(0.1, 0.1, host_peak >> 10),
        inherited_peak_bytes=host_peak,
        memory=MemoryUse(90 << 20, 0),
    )
    assert build_result(killed).usage["peak_memory_bytes"] == 90 << 20
    # Past the host's peak, the figure can only be the child's own: kept.
    larger = ending(
        reply=OK_REPLY, rusage=(0.1, 0.1, (host_peak >> 10) + 1), inherited_peak_bytes=host_peak
    )
    assert build_result(larger).usage["peak_memory_bytes"] == host_peak + 1024


@pytest.mark.parametrize("replied", [False, True], ids=["killed", "replied"])
def test_an_oom_kill_in_the_runs_cgroup_ends_it_naming_memory_bytes(replied: bool) -> None:
    # Killed (no reply), or the program replied after a child of its was killed: either way
    # the run held memory_bytes, and says so (v2 would have killed all of it: oom.group).
    memory = MemoryUse(LIMITS.memory_bytes, 2)
    r = build_result(
        ending(reply=OK_REPLY if replied else None, returncode=-9, memory=memory, value=3)
    )
    assert r.status == "worker_exit" and r.value is None
    assert r.error.evalue.startswith(
        f"the run held more than memory_bytes={LIMITS.memory_bytes} in total "
        f"({LIMITS.memory_bytes} bytes at its peak"
    )
    assert "memfd" in r.error.evalue and "2 processes" in r.error.evalue
    assert "raise Limits.memory_bytes" in r.error.evalue
    # A wall-clock timeout decided first stays the run's status.
    timed_out = build_result(ending(decided=wall_timeout(LIMITS), memory=memory))
    assert timed_out.status == "timeout"


def test_usage_the_host_could_not_read_is_the_childs_word_labelled() -> None:
    assert build_result(ending(reply=OK_REPLY)).usage["measured_by"] == "child"
    r = build_result(ending(decided=interrupted("x")))
    assert r.usage["measured_by"] == "none" and "child_reported" not in r.usage


# -- the modules' own examples ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["kernelgate.gateway.outcome", "kernelgate.gateway.output", "kernelgate.gateway.plan"]
)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_usage_read_at_the_reply_is_kept_where_the_reaped_childs_is_less() -> None:
    # A process the program forked and left running is in /proc at the reply, but in no
    # rusage once its namespace's init has gone without waiting for it.
    host = {"cpu_user_s": 0.3, "cpu_system_s": 0.01, "peak_memory_bytes": 100}
    r = build_result(ending(reply=OK_REPLY, rusage=(0.002, 0.005, 1), host_usage=host))
    assert (r.usage["cpu_user_s"], r.usage["cpu_system_s"]) == (0.3, 0.01)
    assert r.usage["peak_memory_bytes"] == 1024 and r.usage["measured_by"] == "host"
