"""TypeScript programs as an agent writes them, with the value each must give when stripped and
run as the body of an async function; and the TypeScript that stripping refuses, with where.

Shared by tests/node/test_jsprogram.py and benchmarks/bench_strip.py (the candidates' fidelity).
"""

from __future__ import annotations

from typing import Any

#: name -> (TypeScript program, the run's value)
RUNS: dict[str, tuple[str, Any]] = {
    "interface and type alias": (
        "interface P { x: number; y?: string }\ntype Q = P | null;\n"
        "const p: P = { x: 1 };\nconst q: Q = null;\np.x + 1",
        2,
    ),
    "generic function and call": (
        "function id<T>(x: T): T { return x; }\nid<number>(3)",
        3,
    ),
    "as and satisfies": (
        "const a = (5 as unknown) as number;\n"
        "const b = { k: 2 } satisfies Record<string, number>;\na + b.k",
        7,
    ),
    "non-null assertion": (
        'const m = new Map<string, number>([["a", 4]]);\nm.get("a")!',
        4,
    ),
    "optional parameter": (
        "function f(a: number, b?: number): number { return a + (b ?? 10); }\nf(1)",
        11,
    ),
    "type-only namespace": (
        "namespace T { export type X = number }\nconst t: T.X = 3;\nt",
        3,
    ),
    "declare": (
        'declare const g: number;\ndeclare module "m" { const z: number }\n'
        "declare enum E { A }\ndeclare namespace N { const y: number }\n8",
        8,
    ),
    "import type": (
        'import type { X } from "y";\nlet v: X = 1 as any;\nv',
        1,
    ),
    "arrow generic <T,>": (
        "const ident = <T,>(x: T): T => x;\nident(4)",
        4,
    ),
    "arrow generic <T> (JSX-looking)": (
        "const ident = <T>(x: T) => x;\nident(4)",
        4,
    ),
    "overloads": (
        "function h(a: string): string;\nfunction h(a: number): number;\n"
        "function h(a: any) { return a; }\nh(6)",
        6,
    ),
    "definite assignment": (
        "let d!: number;\nd = 2;\nd",
        2,
    ),
    "class modifiers, abstract, implements": (
        "interface Z { z(): number }\n"
        "abstract class A { protected abstract z(): number; readonly r: number = 1; "
        "private static s?: string; public declare q: number }\n"
        "class B extends A implements Z { override z() { return 2; } }\nnew B().z()",
        2,
    ),
    "this parameter": (
        "function th(this: { q: number }) { return this.q; }\nth.call({ q: 3 })",
        3,
    ),
    "return type on the next line": (
        "const fn = (a: number):\n  number => a * 2;\nfn(4)",
        8,
    ),
    "mapped and conditional types": (
        "type M<T> = { [K in keyof T]?: T[K] extends string ? K : never };\n"
        "const mm: M<{ a: string }> = {};\nObject.keys(mm).length",
        0,
    ),
    "type arguments on the next line": (
        "function g2<T>(x: T) { return x }\nconst r = g2\n<number>(5);\nr",
        5,
    ),
    "await and types": (
        "const w: number = await Promise.resolve(11);\nawait Promise.resolve<number>(w)",
        11,
    ),
    "accessors with types": (
        "class C { get v(): number { return 1 } set v(x: number) {} }\nnew C().v",
        1,
    ),
    "unique symbol and keyof typeof": (
        "declare const s: unique symbol;\ntype K = keyof typeof globalThis;\n1",
        1,
    ),
    "optional chaining with non-null": (
        "const o: { a?: { b: number } } = { a: { b: 1 } };\no.a!.b + (o.a?.b ?? 0)",
        2,
    ),
    "generic class": (
        "class Box<T> {\n  v: T;\n  constructor(v: T) { this.v = v }\n"
        "  map<U>(f: (x: T) => U): Box<U> { return new Box(f(this.v)) }\n}\n"
        "new Box(2).map((x) => x * 10).v",
        20,
    ),
    "type guard": (
        'function isStr(x: unknown): x is string { return typeof x === "string" }\n'
        '[isStr("a"), isStr(1)]',
        [True, False],
    ),
    "readonly tuple as const": (
        'const t: readonly [number, string] = [1, "a"] as const;\nt.length',
        2,
    ),
    "const type parameter": (
        "function k<const T extends readonly unknown[]>(x: T): T { return x }\nk([1, 2]).length",
        2,
    ),
    "object literal satisfies, last": (
        "({ a: 1 } satisfies { a: number })",
        {"a": 1},
    ),
    "tools-style program": (
        "type Hit = { title: string; score: number };\n"
        "async function search(q: string, opts?: { limit?: number }): Promise<Hit[]> {\n"
        "  return [{ title: q, score: opts?.limit ?? 1 }];\n}\n"
        "const hits: Hit[] = (await Promise.all([search('a'), search('b', { limit: 2 })])).flat();\n"
        "hits.map((h: Hit) => h.score)",
        [1, 2],
    ),
}

#: name -> (TypeScript program, (line, column) of the error, a piece of its message)
REFUSED: dict[str, tuple[str, tuple[int, int], str]] = {
    "enum": ("let a = 1;\nenum Color { Red, Green = 5 }\nColor.Green", (2, 1), "enum"),
    "const enum": ("const enum D { Up = 1 }\nD.Up", (1, 1), "enum"),
    "namespace with values": (
        "let a = 1;\n  namespace NS { export const v = 7; }\nNS.v",
        (2, 3),
        "namespace",
    ),
    "parameter property": (
        "class Pt {\n  constructor(public x: number) {}\n}\nnew Pt(3).x",
        (2, 22),
        "parameter property",
    ),
    "angle-bracket assertion": ("const u: any = 9;\n(<number>u) + 1", (2, 2), "as"),
    "decorator": ("function dec(t: any) { return t; }\n@dec class K {}\n1", (2, 1), "decorators"),
    "JSX": ("const e = <div>hi</div>;", (1, 19), ""),
    "syntax error": ("const y = 1;\nconst x: number = ;\n", (2, 19), "Expression expected"),
    "bad type annotation": ("let y: = 3;", (1, 8), "Unexpected token"),
    "import of a value": ('import { x } from "y";\nx', (1, 1), "cannot import"),
    "import type with a top-level return": (
        'import type { X } from "y";\nreturn 1 as X',
        (1, 1),
        "cannot import",
    ),
    "unclosed bracket": ("let a: number = 1;\n\nlet b = (", (3, 10), ""),
}
