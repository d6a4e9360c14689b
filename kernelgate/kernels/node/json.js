'use strict';
// The JSON boundary (kernelgate/wire/values.py's check_json, for JavaScript values).
//
// Every value that crosses fd 3 (binding arguments, the run's value, display data) must
// be lossless JSON: plain objects (prototype Object.prototype or null), arrays, strings,
// finite numbers, booleans and null. What JSON.stringify would drop or change silently is
// refused, naming where it is: undefined, functions, symbols, BigInt, NaN and the
// infinities, -0, strings with lone surrogates, cycles, holes in arrays, and objects that
// are not plain (Map, Set, Date, class instances, typed arrays, proxies...), e.g.
// `value.a[2]: Set is not JSON`.
//
// Checking and encoding are one walk: the text sent is exactly what was checked (a getter
// runs once), metered in UTF-8 bytes and stopped as soon as a budget is passed. Nothing
// here uses JSON.stringify on an object or any method the program may have replaced
// (./safe.js), so a program that redefines Object.prototype.toJSON cannot change what
// is sent.

const S = require('./safe');

const MAX_DEPTH = 500;
const MAX_KEY_SHOWN = 80;
const MAX_PATH_SHOWN = 4096;

class NotJSONError extends S.TypeError {
  constructor(message, path, typeName) {
    super(message);
    this.path = path;
    this.typeName = typeName;
  }
}
NotJSONError.prototype.name = 'NotJSONError';

class ValueTooLargeError extends S.RangeError {
  constructor(message, limit) {
    super(message);
    this.limit = limit;
  }
}
ValueTooLargeError.prototype.name = 'ValueTooLargeError';

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** `value.a[2]["x-y"]`: where a value sits, bounded (a long key or path is cut). */
function describePath(root, steps) {
  const parts = [root];
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i];
    if (typeof step === 'number') {
      S.append(parts, `[${step}]`);
    } else if (step.length > MAX_KEY_SHOWN) {
      const head = S.StringSlice(S.JSONStringify(S.StringSlice(step, 0, MAX_KEY_SHOWN - 10)), 0, -1);
      S.append(parts, `[${head}...(${step.length} chars)]`);
    } else if (S.RegExpTest(IDENTIFIER, step)) {
      S.append(parts, `.${step}`);
    } else {
      S.append(parts, `[${S.JSONStringify(wellFormed(step))}]`);
    }
  }
  let path = S.ArrayJoin(parts, '');
  if (path.length > MAX_PATH_SHOWN) {
    const half = MAX_PATH_SHOWN / 2;
    path = `${S.StringSlice(path, 0, half)}...${S.StringSlice(path, -half)}`;
  }
  return path;
}

/** Index of the first lone surrogate in `s`, or -1. */
function loneSurrogate(s) {
  if (S.StringIsWellFormed !== null && S.StringIsWellFormed(s)) return -1;
  for (let i = 0; i < s.length; i++) {
    const c = S.StringCharCodeAt(s, i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = i + 1 < s.length ? S.StringCharCodeAt(s, i + 1) : 0;
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
      return i;
    }
    if (c >= 0xdc00 && c <= 0xdfff) return i;
  }
  return -1;
}

const HEX = '0123456789abcdef';

function hex4(c) {
  return HEX[(c >> 12) & 15] + HEX[(c >> 8) & 15] + HEX[(c >> 4) & 15] + HEX[c & 15];
}

/** `s` with each lone surrogate written as its escape (`\ud800`), as the Python child
 * writes them: the text stays valid UTF-8 and says what the program printed. */
function wellFormed(s) {
  let at = loneSurrogate(s);
  if (at < 0) return s;
  const parts = [];
  let start = 0;
  while (at >= 0) {
    S.append(parts, S.StringSlice(s, start, at));
    S.append(parts, `\\u${hex4(S.StringCharCodeAt(s, at))}`);
    start = at + 1;
    const rest = loneSurrogate(S.StringSlice(s, start));
    at = rest < 0 ? -1 : start + rest;
  }
  S.append(parts, S.StringSlice(s, start));
  return S.ArrayJoin(parts, '');
}

/** The name of a non-plain object's kind: its class, or a description. */
function kindOf(value) {
  if (S.isProxy(value)) return 'Proxy';
  let proto;
  try {
    proto = S.ObjectGetPrototypeOf(value);
  } catch {
    return 'object';
  }
  for (let depth = 0; proto !== null && depth < 100; depth++) {
    const desc = S.ObjectGetOwnPropertyDescriptor(proto, 'constructor');
    if (desc !== undefined && typeof desc.value === 'function') {
      const nameDesc = S.ObjectGetOwnPropertyDescriptor(desc.value, 'name');
      if (nameDesc !== undefined && typeof nameDesc.value === 'string' && nameDesc.value !== '') {
        const name = nameDesc.value;
        return name.length > 200 ? `${S.StringSlice(name, 0, 180)}...(${name.length} chars)` : name;
      }
    }
    proto = S.ObjectGetPrototypeOf(proto);
  }
  return 'object with a custom prototype';
}

const HINTS = {
  __proto__: null,
  Promise: ' (a promise: did you forget `await`?)',
  Map: ' (convert it first: Object.fromEntries(map))',
  Set: ' (convert it first: [...set])',
  Date: ' (convert it first: date.toISOString())',
};

/**
 * Check that `value` is lossless JSON and encode it: `{text, size}` with `size` its UTF-8
 * bytes. Throws NotJSONError naming the first offending value and its path, or
 * ValueTooLargeError as soon as the size passes `maxBytes` (when given).
 */
function encodeValue(value, root = 'value', maxBytes = -1) {
  let out = '';
  const active = [];
  const keys = [];
  let size = 0;

  function where() {
    return describePath(root, keys);
  }
  function refuse(message, typeName) {
    const path = where();
    throw new NotJSONError(`${path}: ${message}`, path, typeName);
  }
  function add(text, bytes) {
    size += bytes;
    if (maxBytes >= 0 && size > maxBytes) {
      throw new ValueTooLargeError(
        `${root} is over ${maxBytes} bytes as JSON (limit reached at ${where()})`, maxBytes);
    }
    out += text;
  }
  function str(s) {
    if (maxBytes >= 0 && size + s.length + 2 > maxBytes) add('', s.length + 2); // over, without encoding it
    const at = loneSurrogate(s);
    if (at >= 0) {
      refuse(`string holds a lone surrogate '\\u${hex4(S.StringCharCodeAt(s, at))}' at index ${at}, ` +
        'which is not valid Unicode and has no UTF-8 form', 'string');
    }
    const text = S.JSONStringify(s);
    add(text, S.BufferByteLength(text, 'utf8'));
  }
  function walk(v, depth) {
    switch (typeof v) {
      case 'string':
        str(v);
        return;
      case 'number':
        if (!S.NumberIsFinite(v)) {
          refuse(`number ${v} is not JSON (NaN and infinities have no JSON form)`, 'number');
        }
        if (v === 0 && S.ObjectIs(v, -0)) {
          refuse('number -0 is not lossless JSON (it would arrive as 0)', 'number');
        }
        {
          const text = `${v}`;
          add(text, text.length);
        }
        return;
      case 'boolean':
        add(v ? 'true' : 'false', v ? 4 : 5);
        return;
      case 'undefined':
        refuse('undefined is not JSON (leave the key out, or use null)', 'undefined');
        return;
      case 'bigint':
        refuse(`bigint ${v}n is not JSON (convert it first: Number(x) or String(x))`, 'bigint');
        return;
      case 'symbol':
        refuse('symbol is not JSON', 'symbol');
        return;
      case 'function':
        refuse(v.name && typeof v.name === 'string'
          ? `function ${S.StringSlice(v.name, 0, 80)} is not JSON` : 'function is not JSON', 'function');
        return;
      default:
        break;
    }
    if (v === null) {
      add('null', 4);
      return;
    }
    // An object: plain objects and plain arrays only.
    for (let i = 0; i < active.length; i++) {
      if (active[i] === v) {
        refuse(`${S.ArrayIsArray(v) ? 'array' : 'object'} contains itself (a cycle) and is not JSON`,
          S.ArrayIsArray(v) ? 'array' : 'object');
      }
    }
    if (depth >= MAX_DEPTH) {
      refuse(`nested deeper than ${MAX_DEPTH} levels; values crossing the boundary may nest at most ` +
        `${MAX_DEPTH} deep (flatten the structure)`, 'object');
    }
    const proxy = S.isProxy(v);
    const proto = proxy ? undefined : S.ObjectGetPrototypeOf(v);
    if (proto === S.ArrayPrototype && S.ArrayIsArray(v)) {
      S.append(active, v);
      S.append(keys, 0);
      add('[', 1);
      const n = v.length;
      for (let i = 0; i < n; i++) {
        keys[keys.length - 1] = i;
        if (i > 0) add(',', 1);
        if (!S.hasOwn(v, i)) refuse('an empty array slot (a hole) is not JSON', 'hole');
        walk(v[i], depth + 1);
      }
      add(']', 1);
      keys.length -= 1;
      active.length -= 1;
      return;
    }
    if (proto === S.ObjectPrototype || proto === null) {
      S.append(active, v);
      S.append(keys, '');
      add('{', 1);
      const names = S.ObjectKeys(v);
      for (let i = 0; i < names.length; i++) {
        const key = names[i];
        keys[keys.length - 1] = key;
        if (i > 0) add(',', 1);
        str(key);
        add(':', 1);
        walk(v[key], depth + 1);
      }
      add('}', 1);
      keys.length -= 1;
      active.length -= 1;
      return;
    }
    const kind = kindOf(v);
    refuse(`${kind} is not JSON${HINTS[kind] || ''}`, kind);
  }

  walk(value, 0);
  return { text: out, size };
}

/** JSON text of kernelgate's own messages (objects it made; strings made well-formed). */
function encodeTrusted(v) {
  switch (typeof v) {
    case 'string':
      return S.JSONStringify(wellFormed(v));
    case 'number':
      return S.NumberIsFinite(v) ? `${v}` : 'null';
    case 'boolean':
      return v ? 'true' : 'false';
    default:
      break;
  }
  if (v === null || v === undefined) return 'null';
  if (v instanceof Raw) return v.text;
  if (S.ArrayIsArray(v)) {
    const parts = [];
    for (let i = 0; i < v.length; i++) S.append(parts, encodeTrusted(v[i]));
    return `[${S.ArrayJoin(parts, ',')}]`;
  }
  const names = S.ObjectKeys(v);
  const parts = [];
  for (let i = 0; i < names.length; i++) {
    S.append(parts, `${S.JSONStringify(wellFormed(names[i]))}:${encodeTrusted(v[names[i]])}`);
  }
  return `{${S.ArrayJoin(parts, ',')}}`;
}

/** JSON text checked already (by encodeValue): put into a message as it is. */
class Raw {
  constructor(text) {
    this.text = text;
  }
}

module.exports = {
  MAX_DEPTH, NotJSONError, ValueTooLargeError, Raw, describePath, encodeValue, encodeTrusted,
  loneSurrogate, wellFormed,
};
