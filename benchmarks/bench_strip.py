"""TypeScript type strippers compared, in one run: speed, memory and fidelity.

    python benchmarks/bench_strip.py                         # kernelgate + vendored amaro
    python benchmarks/bench_strip.py --node-modules DIR ...  # + the candidates in DIR(s)

The candidates other than the vendored ones come from node_modules directories you make
(nothing is downloaded by this script), e.g.::

    d=$(mktemp -d); (cd $d && npm init -y && npm i sucrase esbuild ts-blank-space typescript@5)
    python benchmarks/bench_strip.py --node-modules $d/node_modules

Rows (medians): *cold* is a fresh ``node`` loading the tool and stripping one 20-line program,
wall time from Python (``node -e 0`` is the floor); for kernelgate it is a new
``ProgramTransformer``'s first ``transform`` (spawn, load, strip, parse, answer).
*steady* is one transform in a long-lived process after warm-up (for kernelgate: the round trip
from Python through the helper's pipes, for the others: timed inside node); *RSS* is the
long-lived process's resident memory after the steady rounds. Fidelity uses
tests/node/tscorpus.py: of the programs that must run, how many give their value (the
tool's output, with kernelgate's last-expression return, run by node as an async function
body), keep every line, keep every column; of the TypeScript that is not just types (enum,
namespace, parameter properties, ``<T>x``, decorators, ...), how many the tool refuses with an
error (good), transforms into a working program (good), or lets through to fail later or
silently (bad).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelgate.gateway.jsprogram import HELPER, ProgramTransformer  # noqa: E402
from tests.node.tscorpus import REFUSED, RUNS  # noqa: E402

VENDORED = HELPER.parent

BLOCK = """\
interface Hit{n} {{ title: string; score: number; tags?: string[] }}
type Query{n} = {{ q: string; limit?: number }};
async function search{n}(query: Query{n}): Promise<Hit{n}[]> {{
  const hits: Hit{n}[] = [];
  for (let i = 0; i < (query.limit ?? 3); i++) {{
    hits.push({{ title: `${{query.q}} #${{i}}`, score: i / 10, tags: ["a"] }});
  }}
  return hits;
}}
const found{n} = await search{n}({{ q: "kernel", limit: 4 }} satisfies Query{n});
const best{n} = found{n}
  .filter((h: Hit{n}) => h.score > 0.1)
  .map((h) => h.title as string);
const byTag{n} = new Map<string, Hit{n}[]>();
for (const hit of found{n}) {{
  for (const tag of hit.tags!) {{
    byTag{n}.set(tag, [...(byTag{n}.get(tag) ?? []), hit]);
  }}
}}
const summary{n}: Record<string, number> = {{ best: best{n}.length, tags: byTag{n}.size }};
"""


def program(lines: int) -> str:
    blocks, n = [], 0
    while sum(b.count("\n") for b in blocks) < lines - 1:
        blocks.append(BLOCK.format(n=n))
        n += 1
    text = "".join(blocks)
    return "\n".join(text.splitlines()[: lines - 1]) + "\nsummary0\n"


# The candidates, as node code that defines strip(src) -> code (throws to refuse).
CANDIDATES = {
    "amaro strip-only (vendored; kernelgate's stripper)": (
        None,
        "const t = require(V + '/amaro/internal.js');"
        "strip = (s) => t.transformSync(s, { mode: 'strip-only' }).code;",
    ),
    "sucrase": (
        "sucrase",
        "const t = need('sucrase');"
        "strip = (s) => t.transform(s,"
        " { transforms: ['typescript'], disableESTransforms: true }).code;",
    ),
    "ts-blank-space (typescript 5)": (
        "ts-blank-space",
        "const t = need('ts-blank-space').default;"
        "strip = (s) => { const bad = []; const o = t(s, (n) => bad.push(n.kind));"
        " if (bad.length) throw new Error('unsupported syntax'); return o; };",
    ),
    "esbuild transform (loader ts)": (
        "esbuild",
        "const t = need('esbuild');"
        "strip = (s) => t.transformSync(s, { loader: 'ts' }).code;",
    ),
    "typescript transpileModule": (
        "typescript",
        "const t = need('typescript');"
        "strip = (s) => { const r = t.transpileModule(s, { reportDiagnostics: true,"
        " compilerOptions: { target: 99, module: 99 } });"
        " if (r.diagnostics && r.diagnostics.length) throw new Error('diagnostics');"
        " return r.outputText; };",
    ),
}

PRELUDE = r"""
const V = process.env.KG_VENDORED;
const DIRS = JSON.parse(process.env.KG_DIRS || "[]");
const need = (name) => require(require.resolve(name, { paths: DIRS }));
let strip;
"""

STEADY = r"""
const acorn = require(V + "/acorn/acorn.js");
const input = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
const OPTS = {
  ecmaVersion: "latest", allowReturnOutsideFunction: true, allowAwaitOutsideFunction: true,
};
function withReturn(js) {
  const body = acorn.parse(js, OPTS).body;
  let i = body.length - 1;
  while (i >= 0 && body[i].type === "EmptyStatement") i--;
  if (i < 0 || body[i].type !== "ExpressionStatement") return js;
  return js.slice(0, body[i].start) + "return " + js.slice(body[i].start);
}
const split = (s) => s.split(/\r\n|[\n\r\u2028\u2029]/);
function timed(src, n) {
  for (let i = 0; i < 20; i++) strip(src);
  const times = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    strip(src);
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1];
}
const AF = (async function () {}).constructor;
(async () => {
  const out = { s20: timed(input.p20, input.n20), s500: timed(input.p500, input.n500) };
  out.rss = process.memoryUsage().rss / 1048576;
  let runs = 0, lines = 0, columns = 0;
  for (const [src, want] of input.runs) {
    let code;
    try { code = strip(src); } catch { continue; }
    const a = split(src), b = split(code.replace(/\n$/, src.endsWith("\n") ? "\n" : ""));
    if (a.length === b.length) {
      lines++;
      if (a.every((l, i) => l.length === b[i].length)) columns++;
    }
    try {
      if (JSON.stringify(await new AF(withReturn(code))()) === JSON.stringify(want)) runs++;
    } catch {}
  }
  let refused = 0, transformed = 0, through = 0;
  for (const src of input.refused) {
    let code;
    try { code = strip(src); } catch { refused++; continue; }
    try { await new AF(withReturn(code))(); transformed++; } catch { through++; }
  }
  Object.assign(out, { runs, lines, columns, refused, transformed, through });
  process.stdout.write(JSON.stringify(out));
})();
"""


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def cold_node(node: str, setup: str, env: dict[str, str], source: str, reps: int) -> float:
    script = PRELUDE + setup + "strip(require('node:fs').readFileSync(0, 'utf8'));"
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        subprocess.run([node, "-e", script], input=source, text=True, env=env, check=True,
                       capture_output=True, timeout=120)
        samples.append(time.perf_counter() - started)
    return median_ms(samples)


async def kernelgate_rows(
    node: str, p20: str, p500: str, reps: int, n20: int, n500: int
) -> dict[str, float]:
    cold = []
    for _ in range(reps):
        started = time.perf_counter()
        async with ProgramTransformer(node) as transformer:
            await transformer.transform(p20, "typescript")
            cold.append(time.perf_counter() - started)
    async with ProgramTransformer(node) as transformer:
        rows: dict[str, float] = {"cold": median_ms(cold)}
        for key, source, n in (("s20", p20, n20), ("s500", p500, n500)):
            for _ in range(20):
                await transformer.transform(source, "typescript")
            samples = []
            for _ in range(n):
                started = time.perf_counter()
                await transformer.transform(source, "typescript")
                samples.append(time.perf_counter() - started)
            rows[key] = median_ms(samples)
        with open(f"/proc/{transformer.pid}/status") as f:
            rss = next(line for line in f if line.startswith("VmRSS:"))
        rows["rss"] = int(rss.split()[1]) / 1024
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--node", default="node")
    parser.add_argument("--node-modules", action="append", default=[], metavar="DIR")
    parser.add_argument("--reps", type=int, default=7, help="cold starts per candidate")
    args = parser.parse_args()
    p20, p500 = program(20), program(500)
    env = {"PATH": os.environ.get("PATH", ""), "KG_VENDORED": str(VENDORED),
           "KG_DIRS": json.dumps([str(Path(d).resolve()) for d in args.node_modules])}
    version = subprocess.run([args.node, "--version"], capture_output=True, text=True).stdout
    load = os.getloadavg()[0]
    print(f"node {version.strip()}; load average {load:.2f}", file=sys.stderr)
    floor = cold_node(args.node, "strip = () => 0;", env, "", args.reps)

    fidelity_input = {
        "runs": [[src, want] for src, want in RUNS.values()],
        "refused": [src for src, _, _ in REFUSED.values()],
    }
    rows = []
    kg = asyncio.run(kernelgate_rows(args.node, p20, p500, args.reps, 200, 40))
    rows.append(("kernelgate ProgramTransformer (amaro + acorn, helper)", kg, None))
    for name, (package, setup) in CANDIDATES.items():
        if package is not None:
            probe = subprocess.run([args.node, "-e", PRELUDE + f"need({package!r})"], env=env,
                                   capture_output=True, text=True)
            if probe.returncode != 0:
                print(f"skipped {name}: {package} not found in --node-modules", file=sys.stderr)
                continue
        print(f"measuring {name}", file=sys.stderr)
        cold = cold_node(args.node, setup, env, p20, args.reps)
        data = {**fidelity_input, "p20": p20, "p500": p500, "n20": 200, "n500": 40}
        done = subprocess.run([args.node, "-e", PRELUDE + setup + STEADY], input=json.dumps(data),
                              env=env, text=True, capture_output=True, timeout=600, check=True)
        rows.append((name, {"cold": cold, **json.loads(done.stdout)}, None))

    total_runs, total_refused = len(RUNS), len(REFUSED)
    print(f"\n`node -e 0` floor: {floor:.0f} ms. Programs: 20 lines ({len(p20)} chars), "
          f"500 lines ({len(p500)} chars). Medians; cold over {args.reps} starts.\n")
    print("| stripper | cold, 20 lines | steady, 20 lines | steady, 500 lines | RSS | "
          f"runs (of {total_runs}) | lines kept | columns kept | not-just-types (of "
          f"{total_refused}): refused / transformed / let through |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, r, _ in rows:
        fidelity = ("(the tests: all)", "all", "all", "all refused, with line and column")
        if "runs" in r:
            fidelity = (str(r["runs"]), str(r["lines"]), str(r["columns"]),
                        f"{r['refused']} / {r['transformed']} / {r['through']}")
        print(f"| {name} | {r['cold']:.0f} ms | {r['s20']:.2f} ms | {r['s500']:.2f} ms | "
              f"{r['rss']:.0f} MiB | " + " | ".join(fidelity) + " |")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
