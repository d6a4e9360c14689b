'use strict';
// The program's stdout and stderr as ordered `stream` messages on fd 3
// (kernelgate/kernels/python/streams.py for Node).
//
// console.log/info/debug/dir/table write to stdout, console.error/warn/trace/assert to
// stderr, and process.stdout.write / process.stderr.write go the same way, all in order
// with calls and displays. Writes are coalesced into lines (one console.log is one
// message); an unterminated tail goes out on flush(): before every binding call and
// display, and at the end. One ledger meters both streams: once the program has written
// more than max_output_bytes, the host keeps only the last part of what comes (head and
// tail, the middle counted exactly: it sees every byte), so the rest goes in bulk: a
// message per 64 KiB, or a line when none went out in the last 20 ms. Lone
// surrogates are sent as their escapes (`\ud800`); bytes that are not UTF-8 as U+FFFD.

const { EventEmitter } = require('events');
const { Console } = require('console');
const { StringDecoder } = require('string_decoder');
const S = require('./safe');
const { wellFormed } = require('./json');

const CHUNK = 64 * 1024; // largest stream message
const QUIET_MS = 20; // past the budget, a line waits for more unless none went out this long

class OutputLedger {
  constructor(budget) {
    this.remaining = budget;
    this.lastSent = 0; // when the last message past the budget went out (ms)
  }
}

class OutputStream {
  constructor(name, send, ledger) {
    this.name = name;
    this.sendText = send;
    this.ledger = ledger;
    this.parts = [];
    this.size = 0;
  }

  write(s) {
    const ledger = this.ledger;
    const n = s.length;
    if (n === 0) return;
    ledger.remaining -= n;
    S.append(this.parts, s);
    this.size += n;
    if (this.size >= CHUNK) {
      this.emit(this.take(true));
    } else if (S.StringIndexOf(s, '\n') >= 0) {
      if (ledger.remaining >= 0) {
        this.emit(this.take(true));
      } else {
        const now = S.DateNow();
        if (now - ledger.lastSent >= QUIET_MS) {
          ledger.lastSent = now;
          this.emit(this.take(true));
        }
      }
    }
  }

  take(wholeLinesOnly) {
    let text = S.ArrayJoin(this.parts, '');
    this.parts = [];
    this.size = 0;
    if (wholeLinesOnly && text.length < CHUNK) {
      const cut = S.StringLastIndexOf(text, '\n') + 1;
      if (cut < text.length) {
        S.append(this.parts, S.StringSlice(text, cut));
        this.size = text.length - cut;
        text = S.StringSlice(text, 0, cut);
      }
    }
    return text;
  }

  emit(text) {
    if (text.length === 0) return;
    text = wellFormed(text);
    for (let i = 0; i < text.length; i += CHUNK) {
      let end = S.MathMin(i + CHUNK, text.length);
      // Never split a surrogate pair across two messages.
      const c = S.StringCharCodeAt(text, end - 1);
      if (end < text.length && c >= 0xd800 && c <= 0xdbff) end -= 1;
      this.sendText(this.name, S.StringSlice(text, i, end));
      i = end - CHUNK;
    }
  }

  flush() {
    if (this.size > 0) this.emit(this.take(false));
  }
}

/**
 * What the program gets as process.stdout / process.stderr (and what its console writes
 * to): a writable that sends through an OutputStream. Strings and bytes (UTF-8, a
 * character split across writes joined) are accepted, as a Node stream does.
 */
class ProgramWritable extends EventEmitter {
  constructor(stream, fd) {
    super();
    this._kg = stream;
    this._kgDecoder = new StringDecoder('utf8');
    this.fd = fd;
    this.isTTY = false;
    this.writable = true;
    this.writableLength = 0;
    this.writableHighWaterMark = 16384;
  }

  write(chunk, encoding, callback) {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    let text;
    if (typeof chunk === 'string') {
      text = chunk;
    } else if (S.isUint8Array(chunk)) {
      text = this._kgDecoder.write(S.isBuffer(chunk) ? chunk : S.BufferFrom(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    } else {
      const error = new S.TypeError(`The "chunk" argument must be of type string or an instance of Buffer or Uint8Array. Received ${typeof chunk}`);
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    this._kg.write(text);
    if (typeof callback === 'function') S.nextTick(callback, null);
    return true;
  }

  end(chunk, encoding, callback) {
    if (typeof chunk === 'function') {
      callback = chunk;
      chunk = undefined;
    }
    if (chunk !== undefined && chunk !== null) this.write(chunk, encoding);
    this._kg.flush();
    if (typeof callback === 'function') S.nextTick(callback, null);
    return this; // stays usable, as the Python child's closed stdout does
  }

  cork() {}
  uncork() {}
  setDefaultEncoding() {
    return this;
  }
  hasColors() {
    return false;
  }
  getColorDepth() {
    return 1;
  }
  finish() {
    const tail = this._kgDecoder.end();
    if (tail) this._kg.write(tail);
    this._kg.flush();
  }
}

/** The program's console, writing to `out` and `err` (ProgramWritables). */
function makeConsole(out, err) {
  return new Console({ stdout: out, stderr: err, colorMode: false });
}

module.exports = { OutputLedger, OutputStream, ProgramWritable, makeConsole, CHUNK };
