'use strict';
// Bytes -> frames on fd 3: one UTF-8 JSON object per line, with a size ceiling
// (kernelgate/wire/framing.py's FrameDecoder, for the child's side).
//
// The host is trusted, so the child's ceiling is large (1 GiB, as the Python child's):
// it only stops a broken host from growing the child without bound. A newline-free
// flood is refused as soon as the bytes held after the last newline pass the ceiling,
// and is never joined into one buffer.

const S = require('./safe');

const HOST_FRAME_CEILING = 1 << 30;

class FrameError extends Error {}
FrameError.prototype.name = 'RemoteProtocolError';

class FrameDecoder {
  constructor(maxFrameBytes = HOST_FRAME_CEILING) {
    this.max = maxFrameBytes;
    this.parts = []; // chunks of the unterminated tail
    this.held = 0; // bytes in parts
    this.frames = []; // complete frames, oldest first
    this.closed = false;
    this.failed = null;
  }

  fail(message) {
    this.failed = new FrameError(message);
    this.parts = [];
    this.frames = [];
    this.held = 0;
    throw this.failed;
  }

  /** Add bytes from the host; an empty buffer means end of stream. */
  receiveData(data) {
    if (this.failed !== null) throw this.failed;
    if (data.length === 0) {
      this.closed = true;
      return;
    }
    if (this.closed) this.fail('data received after end of stream');
    let start = 0;
    for (;;) {
      const nl = S.BufferIndexOf(data, 10, start);
      if (nl < 0) break;
      const piece = S.BufferSubarray(data, start, nl);
      const size = this.held + piece.length;
      if (size > this.max) {
        this.fail(`frame of ${size} bytes is over max_frame_bytes=${this.max}; ` +
          'frames must be one JSON object per line');
      }
      let frame = piece;
      if (this.held > 0) {
        S.append(this.parts, piece);
        frame = S.BufferConcat(this.parts, size);
        this.parts = [];
        this.held = 0;
      }
      S.append(this.frames, frame);
      start = nl + 1;
    }
    if (start < data.length) {
      const tail = S.BufferSubarray(data, start);
      this.held += tail.length;
      if (this.held > this.max) {
        this.fail(`frame over max_frame_bytes=${this.max} bytes (${this.held} bytes so far ` +
          'without a newline); frames must be one JSON object per line');
      }
      S.append(this.parts, tail);
    }
  }

  /** The next complete frame (a Buffer without its newline), or null. */
  nextFrame() {
    if (this.failed !== null) throw this.failed;
    if (this.frames.length > 0) return S.ArraySplice(this.frames, 0, 1)[0];
    if (this.closed && this.held > 0) {
      this.fail(`stream ended inside a frame (${this.held} bytes without a newline)`);
    }
    return null;
  }

  get atEof() {
    return this.closed && this.held === 0 && this.frames.length === 0;
  }
}

module.exports = { FrameDecoder, FrameError, HOST_FRAME_CEILING };
