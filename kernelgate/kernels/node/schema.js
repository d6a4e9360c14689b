'use strict';
// A binding's JSON Schema, checked in the child before the call leaves: the subset tool
// schemas use, as kernelgate/model/schema.py checks it (the host checks again).
//
// Supported: type (one or a list), enum, const, properties, required,
// additionalProperties (bool or schema), items (one schema), prefixItems,
// minItems/maxItems, minLength/maxLength, minimum/maximum,
// exclusiveMinimum/exclusiveMaximum, anyOf/oneOf (taken as anyOf), allOf, and local $ref
// (#/$defs/..., #/definitions/...). Other keywords are ignored: the binding has the last
// word. Values are plain JSON here (already checked by ./json.js, and parsed back from
// the very text that will be sent).

const S = require('./safe');

const MAX_DEPTH = 64;
const KEYWORDS = ['const', 'enum', 'anyOf', 'oneOf', 'allOf', 'minimum', 'maximum', 'exclusiveMinimum',
  'exclusiveMaximum', 'minLength', 'maxLength', 'minItems', 'maxItems'];
const COMBINATORS = ['anyOf', 'oneOf'];
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function isObject(v) {
  return typeof v === 'object' && v !== null && !S.ArrayIsArray(v);
}

function isType(value, name) {
  switch (name) {
    case 'string': return typeof value === 'string';
    case 'integer': return typeof value === 'number' && S.NumberIsInteger(value);
    case 'number': return typeof value === 'number';
    case 'boolean': return typeof value === 'boolean';
    case 'null': return value === null;
    case 'array': return S.ArrayIsArray(value);
    case 'object': return isObject(value);
    default: return true; // an unknown type name: not ours to refuse
  }
}

function typeName(value) {
  if (value === null) return 'null';
  if (S.ArrayIsArray(value)) return 'array';
  return typeof value;
}

function shown(value) {
  let text = S.JSONStringify(value);
  if (typeof text !== 'string') text = '<unprintable>';
  if (text.length > 40) text = `${S.StringSlice(text, 0, 37)}...`;
  return `${typeName(value)} ${text}`;
}

function where(path) {
  return path ? `argument ${path}` : 'the arguments';
}

function join(path, key) {
  if (typeof key === 'number') return `${path}[${key}]`;
  if (!path) return key;
  return S.RegExpTest(IDENTIFIER, key) ? `${path}.${key}` : `${path}[${S.JSONStringify(key)}]`;
}

function same(a, b) {
  // JSON equality: true is not 1; objects and arrays by their contents.
  if (typeof a !== typeof b) return false;
  if (a === null || b === null || typeof a !== 'object') return a === b;
  if (S.ArrayIsArray(a) !== S.ArrayIsArray(b)) return false;
  const ka = S.ObjectKeys(a);
  const kb = S.ObjectKeys(b);
  if (ka.length !== kb.length) return false;
  for (let i = 0; i < ka.length; i++) {
    if (!S.hasOwn(b, ka[i]) || !same(a[ka[i]], b[ka[i]])) return false;
  }
  return true;
}

function bound(schema, key) {
  const x = schema[key];
  return typeof x === 'number' ? x : null;
}

class Checker {
  constructor(root) {
    this.root = root;
  }

  resolve(ref) {
    if (typeof ref !== 'string' || !S.StringStartsWith(ref, '#/')) return null;
    let node = this.root;
    const parts = S.StringSplit(S.StringSlice(ref, 2), '/');
    for (let i = 0; i < parts.length; i++) {
      const part = S.ArrayJoin(S.StringSplit(S.ArrayJoin(S.StringSplit(parts[i], '~1'), '/'), '~0'), '~');
      if (!isObject(node) || !S.hasOwn(node, part)) return null;
      node = node[part];
    }
    return node;
  }

  check(value, schema, path, depth) {
    if (!isObject(schema) || S.ObjectKeys(schema).length === 0 || depth > MAX_DEPTH) return null;
    if (S.hasOwn(schema, '$ref')) {
      const target = this.resolve(schema.$ref);
      if (target !== null) {
        const error = this.check(value, target, path, depth + 1);
        if (error) return error;
      }
    }
    const types = S.hasOwn(schema, 'type') ? schema.type : undefined;
    if (types !== undefined && types !== null) {
      let fits;
      let wanted;
      if (typeof types === 'string') {
        fits = isType(value, types);
        wanted = types;
      } else {
        fits = !S.ArrayIsArray(types) || types.length === 0;
        for (let i = 0; !fits && i < types.length; i++) fits = typeof types[i] === 'string' && isType(value, types[i]);
        wanted = S.ArrayIsArray(types) ? S.ArrayJoin(types, ' or ') : `${types}`;
      }
      if (!fits) return `${where(path)}: expected ${wanted}, got ${shown(value)}`;
    }
    for (let i = 0; i < KEYWORDS.length; i++) {
      if (S.hasOwn(schema, KEYWORDS[i])) {
        const error = this.keywords(value, schema, path, depth);
        if (error) return error;
        break;
      }
    }
    if (isObject(value)) return this.object(value, schema, path, depth);
    if (S.ArrayIsArray(value)) return this.array(value, schema, path, depth);
    return null;
  }

  keywords(value, schema, path, depth) {
    if (S.hasOwn(schema, 'const') && !same(value, schema.const)) {
      return `${where(path)}: must be ${S.JSONStringify(schema.const)}, got ${shown(value)}`;
    }
    const choices = schema.enum;
    if (S.ArrayIsArray(choices)) {
      let found = false;
      for (let i = 0; !found && i < choices.length; i++) found = same(value, choices[i]);
      if (!found) {
        const allowed = [];
        for (let i = 0; i < choices.length && i < 20; i++) S.append(allowed, S.JSONStringify(choices[i]));
        return `${where(path)}: ${shown(value)} is not one of ${S.ArrayJoin(allowed, ', ')}`;
      }
    }
    const error = this.bounds(value, schema, path);
    if (error) return error;
    for (let k = 0; k < COMBINATORS.length; k++) {
      const options = schema[COMBINATORS[k]];
      if (S.ArrayIsArray(options) && options.length > 0) {
        const errors = [];
        let fits = false;
        for (let i = 0; i < options.length && !fits; i++) {
          const e = this.check(value, options[i], path, depth + 1);
          if (e) S.append(errors, e);
          else fits = true;
        }
        if (!fits) {
          if (options.length === 1) return errors[0];
          const reasons = [];
          for (let i = 0; i < errors.length; i++) {
            const at = S.StringIndexOf(errors[i], ': ');
            S.append(reasons, at >= 0 ? S.StringSlice(errors[i], at + 2) : errors[i]);
          }
          return `${where(path)}: ${shown(value)} fits none of the allowed forms (${S.ArrayJoin(reasons, '; ')})`;
        }
      }
    }
    const allOf = schema.allOf;
    if (S.ArrayIsArray(allOf)) {
      for (let i = 0; i < allOf.length; i++) {
        const e = this.check(value, allOf[i], path, depth + 1);
        if (e) return e;
      }
    }
    return null;
  }

  bounds(value, schema, path) {
    const at = where(path);
    if (typeof value === 'number') {
      let low = bound(schema, 'minimum');
      let high = bound(schema, 'maximum');
      if (low !== null && value < low) return `${at}: must be at least ${low}, got ${value}`;
      if (high !== null && value > high) return `${at}: must be at most ${high}, got ${value}`;
      low = bound(schema, 'exclusiveMinimum');
      high = bound(schema, 'exclusiveMaximum');
      if (low !== null && value <= low) return `${at}: must be more than ${low}, got ${value}`;
      if (high !== null && value >= high) return `${at}: must be less than ${high}, got ${value}`;
    }
    if (typeof value === 'string') {
      // Characters as Python counts them (code points), not UTF-16 units.
      let n = 0;
      for (let i = 0; i < value.length; i++) {
        const c = S.StringCharCodeAt(value, i);
        const pair = c >= 0xd800 && c <= 0xdbff && i + 1 < value.length;
        const d = pair ? S.StringCharCodeAt(value, i + 1) : 0;
        if (pair && d >= 0xdc00 && d <= 0xdfff) i++;
        n++;
      }
      const low = bound(schema, 'minLength');
      const high = bound(schema, 'maxLength');
      if (low !== null && n < low) return `${at}: must be at least ${low} characters, got ${n}`;
      if (high !== null && n > high) return `${at}: must be at most ${high} characters, got ${n}`;
    }
    if (S.ArrayIsArray(value)) {
      const low = bound(schema, 'minItems');
      const high = bound(schema, 'maxItems');
      if (low !== null && value.length < low) return `${at}: must have at least ${low} items, got ${value.length}`;
      if (high !== null && value.length > high) return `${at}: must have at most ${high} items, got ${value.length}`;
    }
    return null;
  }

  object(value, schema, path, depth) {
    const props = isObject(schema.properties) ? schema.properties : {};
    const required = schema.required;
    if (S.ArrayIsArray(required)) {
      for (let i = 0; i < required.length; i++) {
        const name = required[i];
        if (typeof name === 'string' && !S.hasOwn(value, name)) {
          return `missing required ${path ? `argument ${join(path, name)}` : `argument ${name}`}`;
        }
      }
    }
    const extra = S.hasOwn(schema, 'additionalProperties') ? schema.additionalProperties : true;
    const keys = S.ObjectKeys(value);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      let error;
      if (S.hasOwn(props, key)) {
        error = this.check(value[key], props[key], join(path, key), depth + 1);
      } else if (extra === false) {
        const names = S.ObjectKeys(props).sort().slice(0, 30);
        const allowed = S.ArrayJoin(names, ', ') || 'none';
        return `unexpected ${path ? `key ${S.JSONStringify(key)} in argument ${path}` : `argument ${key}`} (allowed: ${allowed})`;
      } else {
        error = this.check(value[key], extra, join(path, key), depth + 1);
      }
      if (error) return error;
    }
    return null;
  }

  array(value, schema, path, depth) {
    const prefix = schema.prefixItems;
    let start = 0;
    if (S.ArrayIsArray(prefix)) {
      for (let i = 0; i < value.length && i < prefix.length; i++) {
        const error = this.check(value[i], prefix[i], join(path, i), depth + 1);
        if (error) return error;
      }
      start = prefix.length;
    }
    const items = schema.items;
    if (isObject(items) || items === false) {
      for (let i = start; i < value.length; i++) {
        if (items === false) return `${where(path)}: has ${value.length} items, at most ${start} allowed`;
        const error = this.check(value[i], items, join(path, i), depth + 1);
        if (error) return error;
      }
    }
    return null;
  }
}

/** Why the arguments object `value` does not fit `schema` (one line), or null. */
function checkValue(value, schema) {
  try {
    return new Checker(schema).check(value, schema, '', 0);
  } catch {
    return null; // the host checks again
  }
}

module.exports = { checkValue };
