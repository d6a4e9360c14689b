'use strict';
// The child's end of the fd-3 protocol, sans-I/O (kernelgate/wire/connection.py for the
// CHILD role): events out as frames (Buffers), host bytes in, host events out, both
// judged by the tables of ./state.js, with the call ids and the calls in flight.
//
// Host messages are read field by field, as kernelgate/wire/reader.py reads them, and a
// message out of order or malformed is a RemoteProtocolError naming what was wrong; after
// any violation the connection refuses everything.

const S = require('./safe');
const { FrameDecoder } = require('./framing');
const { encodeTrusted, Raw } = require('./json');
const {
  HOST, CHILD, ConnectionState, LocalProtocolError, RemoteProtocolError,
} = require('./state');

const PROTOCOL_VERSION = '5.3';
const BINDINGS_TARGET = 'kernelgate.bindings';
const DEBUG_MESSAGES = { __proto__: null, debug_request: true, debug_reply: true, debug_event: true };

function show(value) {
  let text;
  try {
    // Strings as Python's repr shows them, so that both children say the same.
    text = typeof value === 'string'
      ? `'${S.ArrayJoin(S.StringSplit(S.StringSlice(S.JSONStringify(value), 1, -1), "'"), "\\'")}'`
      : S.inspect(value, { depth: 1, breakLength: Infinity });
  } catch {
    text = '<unrepresentable>';
  }
  return text.length <= 80 ? text : `${S.StringSlice(text, 0, 77)}...`;
}

function isObject(v) {
  return typeof v === 'object' && v !== null && !S.ArrayIsArray(v);
}

/** Typed access to a received object; every failure names the message and the field. */
class Fields {
  constructor(where, d) {
    if (!isObject(d)) throw new RemoteProtocolError(`${where} must be a JSON object, got ${show(d)}`);
    this.where = where;
    this.d = d;
  }
  has(key) {
    return S.hasOwn(this.d, key);
  }
  get(key) {
    if (!S.hasOwn(this.d, key)) throw new RemoteProtocolError(`${this.where} has no field '${key}'`);
    return this.d[key];
  }
  bad(key, what, v) {
    return new RemoteProtocolError(`${this.where}['${key}'] must be ${what}, got ${show(v)}`);
  }
  text(key) {
    const v = this.get(key);
    if (typeof v !== 'string') throw this.bad(key, 'a string', v);
    return v;
  }
  integer(key) {
    const v = this.get(key);
    if (typeof v !== 'number' || !S.NumberIsInteger(v)) throw this.bad(key, 'an integer', v);
    return v;
  }
  boolean(key) {
    const v = this.get(key);
    if (typeof v !== 'boolean') throw this.bad(key, 'true or false', v);
    return v;
  }
  obj(key, dflt) {
    if (dflt !== undefined && !S.hasOwn(this.d, key)) return dflt;
    const v = this.get(key);
    if (!isObject(v)) throw this.bad(key, 'an object', v);
    return v;
  }
  sub(key) {
    return new Fields(`${this.where}['${key}']`, this.get(key));
  }
}

const FROM_HOST = { __proto__: null, comm_open: true, execute_request: true, comm_msg: true, debug_request: true };

class Connection {
  constructor({ session, maxFrameBytes } = {}) {
    this.session = session;
    this.ids = 0;
    this.state = new ConnectionState();
    this.decoder = new FrameDecoder(maxFrameBytes);
    this.error = null;
    this.requestHeader = {};
    this.commId = null;
    this.nextCallId = 0;
    this.outstanding = { __proto__: null };
    this.outstandingCount = 0;
    this.debugged = false;
    this.finished = false;
  }

  fail(error) {
    if (this.error === null) this.error = error;
    this.state.error();
    return error;
  }

  dead(doing) {
    if (this.error instanceof RemoteProtocolError && doing === 'receive') return this.error;
    return new LocalProtocolError(`cannot ${doing}: the connection is in ERROR since this violation: ${this.error.message}`);
  }

  header(msgType) {
    this.ids += 1;
    const ms = S.DateNow();
    const iso = S.DateToISOString(new S.Date(ms)); // 2026-11-30T03:48:00.269Z
    return {
      msg_id: `${this.session}-${this.ids}`,
      msg_type: msgType,
      session: this.session,
      username: 'kernelgate',
      date: `${S.StringSlice(iso, 0, -1)}000Z`,
      version: PROTOCOL_VERSION,
    };
  }

  /**
   * One frame (a Buffer ending in a newline) for the event `name` (its wire name) with
   * `content` (values already checked: Raw texts inside). Throws LocalProtocolError if the
   * child may not send it now.
   */
  send(name, content, metadata) {
    if (this.error !== null) throw this.dead(`send ${name}`);
    try {
      if (name === 'comm_msg call' && content.data.id !== this.nextCallId) {
        throw new LocalProtocolError(`call id must be ${this.nextCallId}, got ${content.data.id}`);
      }
      if (DEBUG_MESSAGES[name] && !this.debugged) {
        throw new LocalProtocolError(`cannot send ${name} in a run that is not debugged (its execute_request had no debug option)`);
      }
      this.state.process(CHILD, name);
    } catch (exc) {
      throw this.fail(exc);
    }
    const msgType = name === 'comm_msg call' ? 'comm_msg' : name;
    const text = encodeTrusted({
      header: this.header(msgType),
      parent_header: new Raw(this.requestText || '{}'),
      metadata: metadata || {},
      content,
    });
    if (name === 'comm_msg call') {
      this.outstanding[this.nextCallId] = true;
      this.outstandingCount += 1;
      this.nextCallId += 1;
    } else if (name === 'execute_reply') {
      this.finished = true;
    }
    return S.BufferFrom(`${text}\n`, 'utf8');
  }

  /** Feed bytes read from fd 3; an empty buffer means the host closed it. */
  receiveData(data) {
    if (this.error !== null) throw this.dead('receive');
    try {
      this.decoder.receiveData(data);
    } catch (exc) {
      throw this.fail(exc instanceof RemoteProtocolError ? exc : new RemoteProtocolError(exc.message));
    }
  }

  /** The next host event ({type, ...}), or null until more data arrives. */
  nextEvent() {
    if (this.error !== null) throw this.dead('receive');
    try {
      const frame = this.decoder.nextFrame();
      if (frame === null) return null;
      return this.receive(frame);
    } catch (exc) {
      throw this.fail(exc instanceof RemoteProtocolError ? exc : new RemoteProtocolError(exc.message));
    }
  }

  receive(frame) {
    let raw;
    try {
      raw = S.JSONParse(S.BufferToString(frame, 'utf8'));
    } catch (exc) {
      throw new RemoteProtocolError(`frame is not valid UTF-8 JSON (${exc.message}); starts with ${show(S.BufferToString(S.BufferSubarray(frame, 0, 40), 'latin1'))}`);
    }
    const msg = new Fields('message', raw);
    const header = msg.sub('header');
    const msgType = header.text('msg_type');
    msg.obj('parent_header');
    const metadata = msg.obj('metadata');
    const content = msg.sub('content');
    content.where = `${msgType} content`;
    if (FROM_HOST[msgType] !== true) {
      throw new RemoteProtocolError(`unexpected message type ${show(msgType)} from the host; it may send comm_open, execute_request, comm_msg, debug_request`);
    }
    const name = msgType === 'comm_msg' ? 'comm_msg reply' : msgType;
    this.state.process(HOST, name); // out of order is said first
    if (name === 'comm_open') {
      const target = content.text('target_name');
      if (target !== BINDINGS_TARGET) throw new RemoteProtocolError(`comm_open for unknown target ${show(target)}`);
      const commId = content.text('comm_id');
      if (commId === '') throw new RemoteProtocolError('comm_open comm_id must be a non-empty string, got ""');
      const namespaces = content.sub('data').obj('namespaces');
      for (const ns of S.ObjectKeys(namespaces)) {
        const specs = namespaces[ns];
        if (!isObject(specs)) throw new RemoteProtocolError(`comm_open namespaces[${show(ns)}] must be an object (dict), got ${show(specs)}`);
        for (const bname of S.ObjectKeys(specs)) {
          if (!isObject(specs[bname])) throw new RemoteProtocolError(`comm_open namespaces[${show(ns)}][${show(bname)}] must be an object (dict), got ${show(specs[bname])}`);
        }
      }
      this.commId = commId;
      return { type: 'comm_open', commId, namespaces };
    }
    if (name === 'execute_request') {
      const code = content.text('code');
      const options = new Fields('execute_request metadata', metadata).obj('kernelgate', {});
      this.requestText = encodeTrusted(raw.header);
      this.debugged = S.hasOwn(options, 'debug');
      return { type: 'execute_request', code, options };
    }
    if (name === 'debug_request') {
      if (!this.debugged) throw new RemoteProtocolError('the host sent debug_request in a run that is not debugged (its execute_request had no debug option)');
      return { type: 'debug_request', seq: content.integer('seq'), command: content.text('command') };
    }
    // comm_msg reply
    const got = content.text('comm_id');
    if (got !== this.commId) throw new RemoteProtocolError(`comm_msg on unknown comm ${show(got)}; bindings use '${this.commId}'`);
    const d = content.sub('data');
    const method = d.text('method');
    if (method !== 'reply') throw new RemoteProtocolError(`the host may only send method 'reply', got ${show(method)}`);
    const id = d.integer('id');
    if (id < 0) throw new RemoteProtocolError(`call reply id must be an integer from 0 up, got ${id}`);
    let reply;
    if (d.boolean('ok')) {
      reply = { type: 'reply', id, ok: true, value: d.get('value') };
    } else {
      const ename = d.text('ename');
      if (ename === '') throw new RemoteProtocolError(`call reply ${id} ename must be the error's type name, got ''`);
      reply = { type: 'reply', id, ok: false, ename, evalue: d.text('evalue') };
    }
    if (!this.outstanding[id]) throw new RemoteProtocolError(`reply to call ${id}, which is not waiting`);
    delete this.outstanding[id];
    this.outstandingCount -= 1;
    return reply;
  }
}

module.exports = { Connection, BINDINGS_TARGET, show };
