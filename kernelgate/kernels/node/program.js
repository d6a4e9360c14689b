'use strict';
// The program's source as an async function, and its errors as program-only tracebacks
// (kernelgate/kernels/python/program.py for Node).
//
// The host sends plain JavaScript, the body of an async function whose last expression
// statement it has already turned into `return` (kernelgate/gateway/jsprogram.py). It is
// compiled as one script, `<program>`, with the function's head on the program's first
// line, so every line number is the program's own (columns on line 1 are corrected).
// Tracebacks keep only `<program>` frames: kernelgate's own are never shown.

const vm = require('vm');
const S = require('./safe');
const { wellFormed } = require('./json');

const FILENAME = '<program>';
const HEAD = '(async function () {';
const TAIL = '\n})';
const MAX_DIAGNOSTIC = 32 * 1024;

/** Compile `code` into an async function of no arguments (throws the SyntaxError). */
function compileProgram(code) {
  const script = new vm.Script(`${HEAD}${code}${TAIL}`, { filename: FILENAME });
  const fn = script.runInThisContext();
  if (typeof fn !== 'function') {
    throw new SyntaxError('the program closes the function it runs in (unbalanced braces)');
  }
  return fn;
}

/** `text` cut to `limit` characters with a marker, lone surrogates escaped. */
function capText(text, limit) {
  if (text.length > limit) {
    const keep = S.MathMax(0, limit - 40);
    text = `${S.StringSlice(text, 0, keep)}... [${text.length - keep} more characters cut]`;
  }
  return wellFormed(text);
}

function ownData(obj, key) {
  // A data property of the error or its prototypes, without running the program's getters.
  let o = obj;
  for (let depth = 0; o !== null && o !== undefined && depth < 50; depth++) {
    const desc = S.ObjectGetOwnPropertyDescriptor(o, key);
    if (desc !== undefined) return 'value' in desc ? desc.value : undefined;
    o = S.ObjectGetPrototypeOf(o);
  }
  return undefined;
}

/** The error's name: its `name`, or its class for a subclass of Error that kept "Error". */
function errorName(err) {
  let name = ownData(err, 'name');
  if (typeof name !== 'string' || name === '') name = 'Error';
  if (name === 'Error') {
    const ctor = ownData(err, 'constructor');
    const cname = typeof ctor === 'function' ? ownData(ctor, 'name') : undefined;
    if (typeof cname === 'string' && cname !== '' && cname !== 'Error') name = cname;
  }
  return capText(name, 200);
}

/** A `<program>` frame line, with the column of line 1 corrected; null for others. */
function programFrame(line) {
  const trimmed = S.StringTrimEnd(line);
  if (!S.StringStartsWith(trimmed, '    at ') || S.StringIndexOf(trimmed, `${FILENAME}:`) < 0) return null;
  // "    at f (<program>:1:25)" / "    at <program>:1:25" / "    at async <program>:3:1"
  const at = S.StringIndexOf(trimmed, `${FILENAME}:1:`);
  if (at >= 0) {
    const start = at + FILENAME.length + 3;
    let end = start;
    while (end < trimmed.length && S.StringCharCodeAt(trimmed, end) >= 48 && S.StringCharCodeAt(trimmed, end) <= 57) end++;
    const col = +S.StringSlice(trimmed, start, end);
    if (end > start && col > HEAD.length) {
      return `${S.StringSlice(trimmed, 0, start)}${col - HEAD.length}${S.StringSlice(trimmed, end)}`;
    }
  }
  return trimmed;
}

function frameLines(stack) {
  const frames = [];
  if (typeof stack !== 'string') return frames;
  const lines = S.StringSplit(stack, '\n');
  for (let i = 0; i < lines.length; i++) {
    const frame = programFrame(lines[i]);
    if (frame !== null) S.append(frames, frame);
  }
  return frames;
}

/** A SyntaxError from compiling: where, as Node prints it (the program's line, a caret). */
function syntaxLines(err, code, ename, evalue) {
  const stack = ownData(err, 'stack');
  let lineNo = 0;
  let caret = '';
  if (typeof stack === 'string' && S.StringStartsWith(stack, `${FILENAME}:`)) {
    const lines = S.StringSplit(stack, '\n');
    lineNo = +S.StringSlice(lines[0], FILENAME.length + 1) || 0;
    caret = lines.length > 2 ? lines[2] : '';
    if (lineNo === 1) caret = S.StringSlice(caret, S.MathMin(HEAD.length, caret.length));
  }
  if (lineNo < 1) return [`${ename}: ${evalue}`];
  const source = S.StringSplit(code, '\n');
  const text = lineNo <= source.length ? source[lineNo - 1] : '';
  return [`${FILENAME}:${lineNo}`, capText(text, 1000), capText(caret, 1000), '', `${ename}: ${evalue}`];
}

/**
 * `{ename, evalue, traceback}` of what the program threw: its name and message, and its
 * stack with the program's frames only (then its `cause`, a few links deep). Never throws.
 */
function formatError(err, code = '', compiling = false) {
  try {
    if (err === null || (typeof err !== 'object' && typeof err !== 'function')) {
      const shown = capText(S.inspect(err), 2000);
      return { ename: 'Error', evalue: `the program threw a value that is not an Error: ${shown}`, traceback: [`Uncaught ${shown}`] };
    }
    const ename = errorName(err);
    let message = ownData(err, 'message');
    message = typeof message === 'string' ? message : '';
    const evalue = capText(message, MAX_DIAGNOSTIC);
    if (compiling && ename === 'SyntaxError') {
      return { ename, evalue, traceback: syntaxLines(err, code, ename, evalue) };
    }
    const lines = [];
    let link = err;
    let total = 0;
    for (let depth = 0; depth < 10 && link !== null && typeof link === 'object'; depth++) {
      const name = depth === 0 ? ename : errorName(link);
      let msg = depth === 0 ? evalue : ownData(link, 'message');
      msg = typeof msg === 'string' ? capText(msg, 2000) : '';
      const head = msg ? `${name}: ${msg}` : name;
      const headLines = S.StringSplit(head, '\n');
      if (depth > 0) {
        S.append(lines, '');
        S.append(lines, 'Caused by:');
      }
      for (let i = 0; i < headLines.length; i++) S.append(lines, headLines[i]);
      const frames = frameLines(ownData(link, 'stack'));
      for (let i = 0; i < frames.length; i++) {
        total += frames[i].length;
        if (total > MAX_DIAGNOSTIC) {
          S.append(lines, '    ... [more frames cut]');
          break;
        }
        S.append(lines, frames[i]);
      }
      link = ownData(link, 'cause');
    }
    return { ename, evalue, traceback: lines };
  } catch {
    return { ename: 'Error', evalue: '<diagnostic rendering failed>', traceback: ['Error: <diagnostic rendering failed>'] };
  }
}

module.exports = { compileProgram, formatError, capText, FILENAME, HEAD };
