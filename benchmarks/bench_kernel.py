"""Per-cell latency: the kernelgate kernel against ipykernel, side by side, via jupyter_client.

Both kernels are started with a KernelManager from kernelspecs installed into a temporary
directory (nothing is installed for good), warmed up, then each case is executed ``--reps``
times on each kernel, alternating between them so both see the same machine noise. A
cell's latency is from sending ``execute_request`` to having both its ``execute_reply``
and its ``idle`` status -- what a frontend waits for.

    python benchmarks/bench_kernel.py [--reps 50] [--warmup 5] [--json]

ipykernel's warm ``execute`` runs in a live interpreter; every kernelgate cell is a fresh,
isolated child (from the gateway's warm pool: enter the sandbox, run, report, exit), so the
difference is the price of a fresh process per cell. Figures: docs/kernel.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

CASES = [
    ("1+1", "1+1"),
    ("hello world", "print('hello, world')"),
    ("binding call", "await tools.search('messages')"),
]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def install_specs(prefix: str) -> tuple[str, str]:
    from ipykernel.kernelspec import install as install_ipykernel

    from kernelgate.jupyter.spec import install_kernel_spec

    install_kernel_spec("bench-kernelgate", bindings="kernelgate.demo:BINDINGS", prefix=prefix)
    install_ipykernel(prefix=prefix, kernel_name="bench-ipykernel", display_name="ipykernel")
    return "bench-kernelgate", "bench-ipykernel"


def run_cell(kc: BlockingKernelClient, code: str, timeout: float = 60.0) -> tuple[float, str]:
    """Execute ``code``; return (seconds until its reply and its idle status, reply status)."""
    t0 = time.perf_counter()
    msg_id = kc.execute(code)
    while True:  # iopub: wait for this cell's idle status
        msg = kc.get_iopub_msg(timeout=timeout)
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
        ):
            break
    while True:  # shell: its execute_reply (sent before the idle status)
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            return time.perf_counter() - t0, str(reply["content"]["status"])


def start(name: str) -> tuple[KernelManager, BlockingKernelClient]:
    km = KernelManager(kernel_name=name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50, help="executions per case and kernel")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured executions first")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="kernelgate-bench-") as tmp:
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [os.path.join(tmp, "share", "jupyter"), *filter(None, [os.environ.get("JUPYTER_PATH")])]
        )
        kg_name, ipy_name = install_specs(tmp)
        kernels = {"kernelgate": start(kg_name), "ipykernel": start(ipy_name)}
        try:
            samples: dict[tuple[str, str], list[float]] = {}
            for label, code in CASES:
                for kernel, (_, kc) in kernels.items():
                    if label == "binding call" and kernel == "ipykernel":
                        continue
                    for _ in range(args.warmup):
                        run_cell(kc, code)
                for _ in range(args.reps):
                    for kernel, (_, kc) in kernels.items():
                        if label == "binding call" and kernel == "ipykernel":
                            continue
                        seconds, status = run_cell(kc, code)
                        if status != "ok":
                            raise RuntimeError(f"{kernel}: {code!r} ended {status}")
                        samples.setdefault((label, kernel), []).append(seconds)
        finally:
            for km, kc in kernels.values():
                kc.stop_channels()
                km.shutdown_kernel()

    rows = [
        {
            "case": label,
            "kernel": kernel,
            "n": len(times),
            "median_ms": statistics.median(times) * 1000,
            "min_ms": min(times) * 1000,
            "max_ms": max(times) * 1000,
        }
        for (label, kernel), times in samples.items()
    ]
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return 0
    print(f"machine: {machine()}")
    print(f"warm execute, {args.reps} repetitions per row (after {args.warmup} warm-up runs)\n")
    print(f"{'case':<14} {'kernel':<11} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for row in rows:
        print(
            f"{row['case']:<14} {row['kernel']:<11} {row['median_ms']:>10.1f} "
            f"{row['min_ms']:>8.1f} {row['max_ms']:>8.1f}"
        )
    by = {(r["case"], r["kernel"]): r["median_ms"] for r in rows}
    for label, _ in CASES:
        if (label, "ipykernel") in by:
            ratio = by[(label, "kernelgate")] / by[(label, "ipykernel")]
            extra = by[(label, "kernelgate")] - by[(label, "ipykernel")]
            way = "slower" if extra > 0 else "faster"
            print(
                f"\n{label}: kernelgate is {abs(extra):.1f} ms {way} per cell "
                f"({ratio:.2f}x ipykernel's time)",
                end="",
            )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
