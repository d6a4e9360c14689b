'use strict';
// What a program sees of the host: namespaces of async bindings, and ToolError
// (kernelgate/kernels/python/namespace.py for JavaScript).
//
// `tools.search("q", {limit: 2})` maps its arguments to the binding's parameters (the
// calling convention below), checks them against the signature the host announced and
// the JSON rules before anything leaves the child, so a mistake throws at the program's
// own line; then it sends the call at once and returns a promise of the host's answer
// (calls made together, e.g. with Promise.all, are in flight together).
//
// The calling convention: positional arguments map to positional parameters; a single
// trailing plain object whose keys are all keyword-capable parameter names of the
// binding (POSITIONAL_OR_KEYWORD or KEYWORD_ONLY; with **kwargs, also the properties of
// its schema) maps to keyword arguments; anything else is positional. A binding that
// takes keyword arguments only (**kwargs, nothing positional) takes any trailing object
// as keyword arguments; an empty trailing object is keyword arguments (none) only for a
// binding that takes nothing positional.

const S = require('./safe');
const { encodeValue, NotJSONError, ValueTooLargeError, Raw } = require('./json');
const { checkValue } = require('./schema');

const KINDS = {
  __proto__: null,
  POSITIONAL_ONLY: true,
  POSITIONAL_OR_KEYWORD: true,
  VAR_POSITIONAL: true,
  KEYWORD_ONLY: true,
  VAR_KEYWORD: true,
};

const RESERVED = new Set(('break case catch class const continue debugger default delete do else ' +
  'enum export extends false finally for function if import in instanceof new null return super ' +
  'switch this throw true try typeof var void while with yield let static implements interface ' +
  'package private protected public await').split(' '));
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** How a program writes a binding: `tools.search`, or `tools["web-search"]`. */
function bindingLabel(namespace, name) {
  if (S.RegExpTest(IDENTIFIER, name) && !RESERVED.has(name)) return `${namespace}.${name}`;
  return `${namespace}[${S.JSONStringify(name)}]`;
}

/** A binding failed on the host (or was refused before it ran). `tool` is the binding
 * (`tools.search`), `ename` the host exception's class name. */
class ToolError extends Error {
  constructor(message = '', options = undefined) {
    const tool = options && typeof options.tool === 'string' ? options.tool : '';
    const ename = options && typeof options.ename === 'string' ? options.ename : 'Error';
    super(tool ? `${tool} failed: ${ename}: ${message}` : `${message}`);
    this.tool = tool;
    this.ename = ename;
    this.detail = `${message}`; // the host's message alone
  }
}
S.ObjectDefineProperty(ToolError.prototype, 'name', {
  value: 'ToolError', writable: true, configurable: true, enumerable: false,
});

/** A binding's parameters from its spec: [{name, kind, hasDefault}]. */
function parseParams(label, spec) {
  const raw = spec.params;
  if (!S.ArrayIsArray(raw)) {
    throw new S.TypeError(`${label}: a binding spec needs 'params': [[name, kind, has_default], ...]`);
  }
  const params = [];
  for (let i = 0; i < raw.length; i++) {
    const item = raw[i];
    if (!S.ArrayIsArray(item) || item.length !== 3 || typeof item[0] !== 'string' || KINDS[item[1]] !== true) {
      throw new S.TypeError(`${label}: a binding parameter must be [name, kind, has_default] with kind one of ` +
        `${S.ObjectKeys(KINDS).join(', ')}; got ${S.JSONStringify(item)}`);
    }
    S.append(params, { name: item[0], kind: item[1], hasDefault: !!item[2] });
  }
  return params;
}

/**
 * inspect.Signature.bind for the announced params (Python's own algorithm and messages):
 * `{arguments: [[paramName, value, kind]...]}`, or throws the message as a string.
 */
function bind(params, args, kwargs) {
  const bound = [];
  const kw = { __proto__: null };
  const kwNames = S.ObjectKeys(kwargs);
  for (let i = 0; i < kwNames.length; i++) kw[kwNames[i]] = kwargs[kwNames[i]];
  let p = 0;
  let a = 0;
  let rest = -1; // where keyword processing starts
  for (;;) {
    if (a >= args.length) {
      if (p >= params.length) break;
      const param = params[p];
      if (param.kind === 'VAR_POSITIONAL') {
        p += 1;
        break;
      }
      if (param.name in kw) {
        if (param.kind === 'POSITIONAL_ONLY') throw `'${param.name}' parameter is positional only, but was passed as a keyword`;
        rest = p;
        break;
      }
      if (param.kind === 'VAR_KEYWORD' || param.hasDefault) {
        rest = p;
        break;
      }
      throw `missing a required argument: '${param.name}'`;
    }
    if (p >= params.length) throw 'too many positional arguments';
    const param = params[p];
    if (param.kind === 'VAR_KEYWORD' || param.kind === 'KEYWORD_ONLY') throw 'too many positional arguments';
    if (param.kind === 'VAR_POSITIONAL') {
      S.append(bound, [param.name, S.ArraySlice(args, a), 'VAR_POSITIONAL']);
      a = args.length;
      p += 1;
      break;
    }
    if (param.name in kw && param.kind !== 'POSITIONAL_ONLY') throw `multiple values for argument '${param.name}'`;
    S.append(bound, [param.name, args[a], param.kind]);
    a += 1;
    p += 1;
  }
  let varKeyword = null;
  for (let i = rest >= 0 ? rest : p; i < params.length; i++) {
    const param = params[i];
    if (param.kind === 'VAR_KEYWORD') {
      varKeyword = param;
      continue;
    }
    if (param.kind === 'VAR_POSITIONAL') continue;
    if (!(param.name in kw)) {
      if (!param.hasDefault) throw `missing a required argument: '${param.name}'`;
      continue;
    }
    if (param.kind === 'POSITIONAL_ONLY') throw `'${param.name}' parameter is positional only, but was passed as a keyword`;
    S.append(bound, [param.name, kw[param.name], param.kind]);
    delete kw[param.name];
  }
  const left = S.ObjectKeys(kw);
  if (left.length > 0) {
    if (varKeyword === null) throw `got an unexpected keyword argument '${left[0]}'`;
    S.append(bound, [varKeyword.name, kw, 'VAR_KEYWORD']);
  }
  return bound;
}

function isPlainObject(v) {
  if (typeof v !== 'object' || v === null || S.isProxy(v)) return false;
  const proto = S.ObjectGetPrototypeOf(v);
  return proto === S.ObjectPrototype || proto === null;
}

/**
 * The names a trailing object's keys may have to be keyword arguments: the
 * POSITIONAL_OR_KEYWORD and KEYWORD_ONLY parameters, and for a binding with **kwargs the
 * properties its schema names (an MCP tool's `max-results` is one of its parameters,
 * though no Python name can spell it). `any`: a binding that takes keyword arguments
 * only (**kwargs, nothing positional) takes any key.
 */
function keywordNames(params, schema) {
  const names = { __proto__: null };
  let varKeyword = false;
  let positional = false;
  for (let i = 0; i < params.length; i++) {
    const kind = params[i].kind;
    if (kind === 'POSITIONAL_OR_KEYWORD' || kind === 'KEYWORD_ONLY') names[params[i].name] = true;
    if (kind === 'VAR_KEYWORD') varKeyword = true;
    if (kind === 'POSITIONAL_ONLY' || kind === 'POSITIONAL_OR_KEYWORD' || kind === 'VAR_POSITIONAL') positional = true;
  }
  if (varKeyword && schema !== null && schema.properties !== null && typeof schema.properties === 'object') {
    const props = S.ObjectKeys(schema.properties);
    for (let i = 0; i < props.length; i++) names[props[i]] = true;
  }
  return { names, any: varKeyword && !positional, positional };
}

/** The calling convention: the program's arguments -> (positional, keyword). */
function splitArguments(keywords, given) {
  const n = given.length;
  if (n > 0 && isPlainObject(given[n - 1])) {
    const last = given[n - 1];
    const keys = S.ObjectKeys(last);
    let keyword = keywords.any || (keys.length === 0 && !keywords.positional);
    if (!keyword && keys.length > 0) {
      keyword = true;
      for (let k = 0; k < keys.length && keyword; k++) keyword = keywords.names[keys[k]] === true;
    }
    if (keyword) return [S.ArraySlice(given, 0, n - 1), last];
  }
  return [given, {}];
}

/** The program's function for one binding. `client` sends the calls. */
function makeBinding(namespace, name, spec, client, maxArgBytes) {
  const label = bindingLabel(namespace, name);
  const params = parseParams(label, spec);
  const shown = typeof spec.signature === 'string' ? spec.signature : '(...)';
  const signature = `${name}${shown}`;
  const schema = spec.schema !== null && typeof spec.schema === 'object' && !S.ArrayIsArray(spec.schema)
    ? spec.schema : null;
  const keywords = keywordNames(params, schema);

  function binding(...given) {
    const split = splitArguments(keywords, given);
    const args = split[0];
    const kwargs = split[1];
    let bound;
    try {
      bound = bind(params, args, kwargs);
    } catch (message) {
      throw new S.TypeError(`${label}() ${message}; its signature is ${signature}`);
    }
    // Each value checked where the program will look for it, within one budget.
    let budget = maxArgBytes;
    const argsParts = [];
    const kwargsParts = [];
    // The call as the object a schema describes ({parameter: value}, **kwargs merged in),
    // as JSON text: checked below as it will be sent.
    const schemaParts = [];
    try {
      for (let i = 0; i < bound.length; i++) {
        const pname = bound[i][0];
        const value = bound[i][1];
        const kind = bound[i][2];
        const root = `${label}() argument ${pname}`;
        if (kind === 'VAR_POSITIONAL') {
          const texts = [];
          for (let j = 0; j < value.length; j++) {
            const enc = encodeValue(value[j], `${root}[${j}]`, budget);
            budget -= enc.size;
            S.append(argsParts, enc.text);
            S.append(texts, enc.text);
          }
          if (texts.length > 0) S.append(schemaParts, `${S.JSONStringify(pname)}:[${S.ArrayJoin(texts, ',')}]`);
        } else if (kind === 'VAR_KEYWORD') {
          const names = S.ObjectKeys(value);
          for (let j = 0; j < names.length; j++) {
            const enc = encodeValue(value[names[j]], `${root}.${names[j]}`, budget);
            budget -= enc.size;
            S.append(kwargsParts, `${S.JSONStringify(names[j])}:${enc.text}`);
            S.append(schemaParts, `${S.JSONStringify(names[j])}:${enc.text}`);
          }
        } else {
          const enc = encodeValue(value, root, budget);
          budget -= enc.size;
          if (S.hasOwn(kwargs, pname)) S.append(kwargsParts, `${S.JSONStringify(pname)}:${enc.text}`);
          else S.append(argsParts, enc.text);
          S.append(schemaParts, `${S.JSONStringify(pname)}:${enc.text}`);
        }
      }
    } catch (exc) {
      if (exc instanceof NotJSONError) {
        throw new S.TypeError(`${exc.message}; binding arguments must be JSON (plain objects, arrays, ` +
          'strings, finite numbers, booleans, null)');
      }
      if (exc instanceof ValueTooLargeError) {
        throw new S.RangeError(`the arguments of ${label}() are over ${maxArgBytes} bytes as JSON ` +
          '(max_frame_bytes); pass less data per call');
      }
      throw exc;
    }
    if (schema !== null) {
      const error = checkValue(S.JSONParse(`{${S.ArrayJoin(schemaParts, ',')}}`), schema);
      if (error) throw new S.TypeError(`${label}() ${error}; its signature is ${signature}`);
    }
    // Where the program called from: a failed answer's stack shows this line.
    const site = {};
    S.ErrorCaptureStackTrace(site, binding);
    return new S.Promise((resolve, reject) => {
      if (client.calls >= client.maxCalls) {
        const error = new ToolError(
          `max_calls=${client.maxCalls} binding calls per run reached; make fewer calls ` +
          '(batch the work) or raise Limits.max_calls', { tool: label, ename: 'LimitExceeded' });
        reject(withSite(error, site));
        return;
      }
      client.call(namespace, name, new Raw(`[${S.ArrayJoin(argsParts, ',')}]`),
        new Raw(`{${S.ArrayJoin(kwargsParts, ',')}}`), (reply) => {
          if (reply.ok) resolve(reply.value);
          else reject(withSite(new ToolError(reply.evalue, { tool: label, ename: reply.ename }), site));
        });
    });
  }
  S.ObjectDefineProperty(binding, 'name', { value: name });
  binding.signature = signature;
  binding.doc = typeof spec.doc === 'string' ? spec.doc : '';
  binding.toString = () => `[binding ${label}${shown}]`;
  return binding;
}

/** `error` whose stack shows the program's line that made the call. */
function withSite(error, site) {
  let frames = '';
  try {
    const stack = site.stack;
    const at = typeof stack === 'string' ? S.StringIndexOf(stack, '\n    at ') : -1;
    frames = at >= 0 ? S.StringSlice(stack, at) : '';
  } catch {
    frames = '';
  }
  try {
    S.ObjectDefineProperty(error, 'stack', {
      value: `${error.name}: ${error.message}${frames}`, writable: true, configurable: true,
    });
  } catch {
    // a frozen error: it keeps its own stack
  }
  return error;
}

/** The namespace object: `tools.name` or `tools["name-with-dash"]`; read-only. */
function makeNamespace(ns, bindings) {
  const target = { __proto__: null };
  const names = S.ObjectKeys(bindings);
  for (let i = 0; i < names.length; i++) {
    S.ObjectDefineProperty(target, names[i], { value: bindings[names[i]], enumerable: true });
  }
  const sorted = names.slice().sort();
  const shown = sorted.slice(0, 50).join(', ') + (sorted.length > 50 ? ', ...' : '');
  function missing(name) {
    return `${ns} has no binding ${S.JSONStringify(`${name}`)}; it has: ${shown || '(none)'}`;
  }
  return new Proxy(S.ObjectFreeze(target), {
    get(t, key) {
      if (typeof key === 'symbol') {
        if (key === S.Symbol.toStringTag) return `namespace ${ns}`;
        return undefined;
      }
      if (S.hasOwn(t, key)) return t[key];
      if (key === 'then') return undefined; // `await tools` is not a call
      if (key === 'toJSON' || key === 'inspect' || key === 'constructor') return undefined;
      throw new S.TypeError(missing(key));
    },
    set(t, key) {
      throw new S.TypeError(`${ns} is read-only: bindings are provided by the host`);
    },
    defineProperty() {
      throw new S.TypeError(`${ns} is read-only: bindings are provided by the host`);
    },
    deleteProperty() {
      throw new S.TypeError(`${ns} is read-only: bindings are provided by the host`);
    },
  });
}

module.exports = { ToolError, bindingLabel, bind, splitArguments, keywordNames, makeBinding, makeNamespace, parseParams };
