'use strict';
// display(obj) in programs, and the MIME bundle of a value
// (kernelgate/kernels/python/display.py for Node).
//
// `text/plain` is util.inspect's view of the value. An object may offer richer forms
// the way Deno's Jupyter kernel lets it: a method `[Symbol.for("Jupyter.display")]()`
// returning a MIME bundle, e.g. `{"text/html": "<b>hi</b>"}`. A form that throws or is not
// a string (JSON MIME types: not JSON) is skipped; a bundle too big for one frame becomes
// one text line saying so.

const S = require('./safe');
const { encodeValue, NotJSONError, ValueTooLargeError, Raw, wellFormed } = require('./json');

const FRAME_OVERHEAD = 4096;
const DISPLAY = S.SymbolFor('Jupyter.display');
const PLAIN_LIMIT = 32 * 1024;

/** util.inspect of `value` cut to `limit` characters; never throws. */
function plainText(value, limit = PLAIN_LIMIT) {
  let text;
  try {
    text = S.inspect(value, { depth: 6, maxArrayLength: 200, maxStringLength: limit, breakLength: 100 });
    if (typeof text !== 'string') throw new S.TypeError('inspect returned a non-string');
  } catch (exc) {
    return `<${typeof value}: inspect failed: ${exc && exc.name}>`;
  }
  if (text.length > limit) text = `${S.StringSlice(text, 0, limit)}... [${text.length - limit} more characters cut]`;
  return wellFormed(text);
}

/** The MIME bundle of `value` as JSON texts: `{mime: text}` (checked), and its total size. */
function displayBundle(value, maxFrameBytes) {
  const texts = { __proto__: null };
  let method;
  try {
    method = value !== null && (typeof value === 'object' || typeof value === 'function') ? value[DISPLAY] : undefined;
  } catch {
    method = undefined;
  }
  if (typeof method === 'function') {
    let got;
    try {
      got = S.FunctionApply(method, value, []);
    } catch {
      got = undefined;
    }
    if (got !== null && typeof got === 'object') {
      let keys = [];
      try {
        keys = S.ObjectKeys(got);
      } catch {
        keys = [];
      }
      for (let i = 0; i < keys.length; i++) {
        const mime = keys[i];
        try {
          const v = got[mime];
          const isJSON = S.StringSlice(mime, -4) === 'json';
          if (!isJSON && typeof v !== 'string') continue;
          texts[mime] = encodeValue(v, `display data[${S.JSONStringify(mime)}]`).text;
        } catch {
          // one form that cannot be sent: the others still are
        }
      }
    }
  }
  if (texts['text/plain'] === undefined) texts['text/plain'] = S.JSONStringify(plainText(value));
  const mimes = S.ObjectKeys(texts);
  const parts = [];
  let size = 2;
  for (let i = 0; i < mimes.length; i++) {
    const part = `${S.JSONStringify(wellFormed(mimes[i]))}:${texts[mimes[i]]}`;
    size += S.BufferByteLength(part, 'utf8') + (i > 0 ? 1 : 0);
    S.append(parts, part);
  }
  if (size > maxFrameBytes - FRAME_OVERHEAD) {
    const note = `[kernelgate: display output over max_frame_bytes=${maxFrameBytes} not shown]`;
    return new Raw(`{"text/plain":${S.JSONStringify(note)}}`);
  }
  return new Raw(`{${S.ArrayJoin(parts, ',')}}`);
}

module.exports = { displayBundle, plainText, FRAME_OVERHEAD, NotJSONError, ValueTooLargeError };
