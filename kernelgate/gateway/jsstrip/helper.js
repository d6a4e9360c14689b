// kernelgate's host-side program transform helper (kernelgate/gateway/jsprogram.py runs it).
//
// Trusted side: it only parses and rewrites the agent's source text, it never evaluates it.
// Protocol: first the line {"ready":true} on stdout; then one JSON object per line on stdin, {"id": n, "language": "typescript"|"javascript",
// "source": "..."}; one JSON object per line on stdout, in request order:
//   {"id": n, "ok": true, "code": "...", "returned": bool}
//   {"id": n, "ok": false, "kind": "swc"|"acorn"|"nesting"|"internal", "message": "...",
//    "line": L, "column": C, "exiting"?: true}
// "swc" columns are swc's own (a display width, 0-based), "acorn" columns are UTF-16 code units
// (0-based); jsprogram.py turns both into 1-based code point columns of the source line.
// After an "internal" answer, or a "nesting" one from the wasm stripper, the helper exits (the wasm instance may be broken); the host
// starts a new one for the next program. It also exits when stdin closes (the host is gone).
"use strict";

// SIGUSR1 makes Node open its inspector on 127.0.0.1:9229, which runs any code the side that
// connects sends: this helper is unconfined and runs as the host's user, so whoever could
// signal it (a process-level run sharing that uid on a kernel without landlock's signal scope)
// would get the host's rights. A listener of our own takes the signal instead (Node 20 has no
// --disable-sigusr1).
process.on("SIGUSR1", () => {});

const readline = require("node:readline");
const { transformSync } = require("./amaro/internal.js");
const acorn = require("./acorn/acorn.js");

// swc refuses a top-level `return`, so the TypeScript source is stripped as the body of an async
// function (what the Node kernel makes of it). The opening is a line of its own: swc's lines are
// then one more than the source's, its columns unchanged, and since strip-only mode keeps every
// offset (types become blanks), the source's stripped text is the output between the two.
const OPEN = "async function __kernelgate_program__() {\n";
const CLOSE = "\n}";

const ACORN_OPTIONS = {
  ecmaVersion: "latest",
  sourceType: "script",
  allowReturnOutsideFunction: true,
  allowAwaitOutsideFunction: true,
};

class Refusal extends Error {
  constructor(kind, message, line, column) {
    super(message);
    this.kind = kind;
    this.line = line;
    this.column = column;
  }
}

// A `#!` first line is no JavaScript inside a function body; blanks keep the offsets.
function blankHashbang(source) {
  if (!source.startsWith("#!")) return source;
  const end = source.search(/[\n\r\u2028\u2029]/);
  const stop = end === -1 ? source.length : end;
  return " ".repeat(stop) + source.slice(stop);
}

function isStackOverflow(error) {
  return error instanceof RangeError && /call stack/i.test(String(error.message));
}

function swcRefusal(error, lineShift) {
  if (error && typeof error.code === "string" && typeof error.startLine === "number") {
    return new Refusal("swc", String(error.message), error.startLine - lineShift, error.startColumn);
  }
  if (isStackOverflow(error)) return new Refusal("nesting", String(error.message), 1, 0);
  if (error instanceof WebAssembly.RuntimeError) {
    // What a deep nesting does to swc's wasm stack; the instance may be broken after it.
    const refusal = new Refusal("nesting", String(error.message), 1, 0);
    refusal.fatal = true;
    return refusal;
  }
  return error;
}

function strip(text) {
  return transformSync(text, { mode: "strip-only", sourceMap: false }).code;
}

function stripTypes(source) {
  let output;
  try {
    output = strip(OPEN + source + CLOSE);
  } catch (error) {
    const refusal = swcRefusal(error, 1);
    if (!(refusal instanceof Refusal) || !/outside of module code/.test(refusal.message)) {
      throw refusal;
    }
    // `import type` / `export type` lines: swc takes them only at a module's top level. Strip
    // the program as one (a top-level `return` then fails: the first error is reported); acorn
    // checks the result as a function body, so a value import is still refused.
    let plain;
    try {
      plain = strip(source);
    } catch (second) {
      const again = swcRefusal(second, 0);
      throw again instanceof Refusal ? refusal : again;
    }
    if (plain.length !== source.length) {
      throw new Error("the type stripper did not keep the program's offsets");
    }
    return plain;
  }
  if (output.length !== OPEN.length + source.length + CLOSE.length ||
      !output.startsWith(OPEN) || !output.endsWith(CLOSE)) {
    // strip-only mode promises to keep offsets; if a release ever broke that, line numbers
    // would lie, so refuse rather than run a shifted program.
    throw new Error("the type stripper did not keep the program's offsets");
  }
  return output.slice(OPEN.length, output.length - CLOSE.length);
}

function parse(js) {
  try {
    return acorn.parse(js, ACORN_OPTIONS);
  } catch (error) {
    if (error instanceof SyntaxError && /stack space/.test(error.message)) {
      throw new Refusal("nesting", String(error.message), 1, 0);
    }
    if (error instanceof SyntaxError && error.loc) {
      const message = String(error.message).replace(/ \(\d+:\d+\)$/, "");
      throw new Refusal("acorn", message, error.loc.line, error.loc.column);
    }
    if (isStackOverflow(error)) {
      throw new Refusal("nesting", String(error.message), 1, 0);
    }
    throw error;
  }
}

// The last top-level statement, when it is an expression statement, becomes `return <it>`:
// "return " goes right before its first token, on the same line, so no line moves and no
// automatic semicolon can come between `return` and the expression. Trailing empty statements
// (`x;;`) are skipped.
function returnLastExpression(js, program) {
  const body = program.body;
  let index = body.length - 1;
  while (index >= 0 && body[index].type === "EmptyStatement") index -= 1;
  if (index < 0 || body[index].type !== "ExpressionStatement") return { code: js, returned: false };
  const start = body[index].start;
  return { code: js.slice(0, start) + "return " + js.slice(start), returned: true };
}

function transform(request) {
  let js = blankHashbang(request.source);
  if (request.language === "typescript") js = stripTypes(js);
  return returnLastExpression(js, parse(js));
}

// Ready: the stripper's wasm is compiled (one empty program through it) before the host is
// told, so a program's own time bound never includes the helper's start.
transformSync("", { mode: "strip-only", sourceMap: false });
process.stdout.write('{"ready":true}\n');

let broken = false;
const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (broken) return;
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    broken = true;
    process.stdout.write(JSON.stringify({ id: null, ok: false, kind: "internal",
      message: `unreadable request: ${error.message}`, line: 1, column: 0 }) + "\n");
    lines.close();
    return;
  }
  let answer;
  try {
    answer = { id: request.id, ok: true, ...transform(request) };
  } catch (error) {
    if (error instanceof Refusal) {
      answer = { id: request.id, ok: false, kind: error.kind, message: error.message,
        line: error.line, column: error.column };
      broken = error.fatal === true;
    } else {
      broken = true;
      answer = { id: request.id, ok: false, kind: "internal",
        message: `${error && error.name}: ${error && error.message}`, line: 1, column: 0 };
    }
  }
  if (broken) answer.exiting = true;
  process.stdout.write(JSON.stringify(answer) + "\n");
  // A broken helper stops reading: node exits once stdout has drained.
  if (broken) lines.close();
});
lines.on("close", () => {
  process.stdin.destroy();
});
