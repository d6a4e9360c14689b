"""The host side of a launched child: finding Node (clear errors naming what was looked for),
what the sandbox keeps for it, and a launch config the launcher refuses."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator

import pytest

from kernelgate.gateway.launch import (
    MIN_NODE,
    NODE_KERNEL_DIR,
    LaunchCommand,
    NodeUnavailable,
    probe_node,
    spawn_launched_child,
)
from kernelgate.kernels.python import seccomp
from kernelgate.kernels.python.launcher import Launch
from kernelgate.kernels.python.sandbox import UNSUITED_RLIMITS, Launched
from tests.node.launched import NODE, NODE_MISSING
from tests.procs import live_children, pid_alive


@pytest.fixture
def fake_bin(tmp_path) -> Iterator[str]:
    yield str(tmp_path)


def _fake_node(directory: str, version: str) -> str:
    path = os.path.join(directory, "node")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\necho \'{{"version": "{version}", "exec": "{path}", "maps": []}}\'\n')
    os.chmod(path, stat.S_IRWXU)
    return path


def test_a_missing_node_is_a_clear_error_naming_what_was_looked_for(fake_bin):
    with pytest.raises(NodeUnavailable) as caught:
        probe_node("node", path_env=fake_bin)
    message = str(caught.value)
    assert "'node'" in message and fake_bin in message and ">= 18" in message, message
    with pytest.raises(NodeUnavailable, match="/nowhere/node"):
        probe_node("/nowhere/node")


def test_a_node_too_old_is_a_clear_error(fake_bin):
    old = _fake_node(fake_bin, "16.20.2")
    with pytest.raises(NodeUnavailable) as caught:
        probe_node(old)
    message = str(caught.value)
    assert "16.20.2" in message and ".".join(map(str, MIN_NODE)) in message and old in message


def test_something_that_is_not_node_is_a_clear_error(fake_bin):
    path = os.path.join(fake_bin, "node")
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho hello\n")
    os.chmod(path, stat.S_IRWXU)
    with pytest.raises(NodeUnavailable, match=r"did not run as Node\.js"):
        probe_node(path)


@pytest.mark.skipif(NODE is None, reason=f"needs Node.js >= 18: {NODE_MISSING}")
def test_the_probe_finds_the_binary_its_libraries_and_the_kernel():
    assert NODE is not None
    assert NODE.version >= MIN_NODE and os.path.isabs(NODE.executable)
    assert any("libc.so" in lib for lib in NODE.libraries), NODE.libraries
    assert NODE.executable not in NODE.libraries
    command = NODE.command(["kernel.js"], max_old_space_mib=128)
    assert command.argv[0] == NODE.executable and command.argv[-1] == "kernel.js"
    assert "--max-old-space-size=128" in command.argv
    assert NODE_KERNEL_DIR in command.paths and NODE.executable in command.paths


def test_node_gets_the_filter_python_gets_and_no_rlimit_as():
    for level in seccomp.LEVELS:
        assert seccomp.build(level, "x86_64", "node") == seccomp.build(level, "x86_64")
    assert UNSUITED_RLIMITS["node"] == ("RLIMIT_AS",)
    with pytest.raises(ValueError, match="unknown runtime 'ruby'"):
        Launched("ruby", [])
    with pytest.raises(ValueError, match="no seccomp filter for runtime 'ruby'"):
        seccomp.build("process", "x86_64", "ruby")


_GOOD = {
    "cwd": "/tmp/run",
    "sandbox": {"level": "process", "rlimits": {}},
    "runtime": "node",
    "executable": "/usr/bin/node",
    "argv": ["/usr/bin/node", "k.js"],
    "runtime_paths": ["/usr/bin/node"],
}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"sandbox": {"level": "none"}}, "sandbox.level must be one of"),
        ({"cwd": "relative"}, "cwd must be an absolute path"),
        ({"executable": "node"}, "executable must be an absolute path"),
        ({"argv": []}, "argv must be a non-empty list"),
        ({"runtime_paths": ["lib"]}, "runtime_paths entry must be an absolute path"),
        ({"runtime": "ruby"}, "unknown runtime 'ruby'"),
    ],
)
def test_a_bad_launch_config_is_refused_naming_the_field(change, words):
    Launch(_GOOD)  # the good one passes
    with pytest.raises(ValueError, match=words):
        Launch({**_GOOD, **change})


def test_a_config_too_big_for_the_pipe_is_refused_before_anything_starts(tmp_path):
    command = LaunchCommand("node", "/usr/bin/node", ("/usr/bin/node",), ("/x" * 40000,))
    with pytest.raises(ValueError, match=r"launch config is \d+ bytes, over"):
        spawn_launched_child("/usr/bin/python3", {}, str(tmp_path), {"level": "process"}, command)


def test_a_failing_before_start_leaves_no_launcher_behind(tmp_path):
    command = LaunchCommand("node", "/usr/bin/node", ("/usr/bin/node",), ())
    seen: list[int] = []

    def refuse(child: object) -> None:
        seen.append(child.pid)  # type: ignore[attr-defined]
        raise RuntimeError("no cgroup for you")

    with pytest.raises(RuntimeError, match="no cgroup for you"):
        spawn_launched_child(
            sys.executable, {}, str(tmp_path), {"level": "process"}, command, before_start=refuse
        )
    assert seen and live_children(os.getpid()) == [] and not pid_alive(seen[0])


def test_a_warm_launcher_that_cannot_enter_its_sandbox_exits_quietly(tmp_path):
    # Started ahead of its run: no program to answer, so it exits 71 for its pool to drop,
    # with the reason on stderr, and never execs.
    marker = tmp_path / "ran"
    command = LaunchCommand("node", "/bin/sh", ("/bin/sh", "-c", f"touch {marker}"), ("/bin/sh",))
    child = spawn_launched_child(
        sys.executable,
        {"PATH": "/usr/bin:/bin"},
        str(tmp_path / "missing-run-dir"),
        {"level": "process", "rlimits": {}},
        command,
        warm=True,
    )
    try:
        assert child.wait_gone(20)
        _, status = os.waitpid(child.pid, 0)
        child.reaped = True
        os.set_blocking(child.stderr_fd, True)
        stderr = os.read(child.stderr_fd, 65536).decode()
    finally:
        child.close()
    assert os.waitstatus_to_exitcode(status) == 71, stderr
    assert "could not enter its sandbox" in stderr and "missing-run-dir" in stderr, stderr
    assert not marker.exists()
