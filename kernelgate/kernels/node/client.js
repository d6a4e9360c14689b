'use strict';
// fd 3 of one run: whole frames out (synchronous writes, in order), the host's messages
// in, binding calls and their answers (kernelgate/kernels/python/client.py for Node).
//
// Frames are written with fs.writeSync, whole, before the function that sends them
// returns: output, calls and displays leave in the order the program made them, and
// the last reply is on the wire before the process exits. The socket is non-blocking
// (libuv reads it), so a full socket buffer is waited out in short sleeps
// (Atomics.wait), as the Python child waits in select().

const net = require('net');
const S = require('./safe');
const { Connection } = require('./connection');

const CONTROL_FD = 3;
const sleepCell = new Int32Array(new SharedArrayBuffer(4));
const AtomicsWait = Atomics.wait;

class CallClient {
  constructor({ fd = CONTROL_FD, maxHostFrameBytes } = {}) {
    this.fd = fd;
    this.conn = new Connection({ session: `child-${S.pid}`, maxFrameBytes: maxHostFrameBytes });
    this.fallback = fallbackFrame();
    this.pending = { __proto__: null }; // call id -> {resolve, reject, tool, site}
    this.namespaces = {};
    this.streams = []; // flushed before a call leaves, so a call's output comes before it
    this.calls = 0;
    this.maxCalls = 10000;
    this.socket = null;
    this.onRequest = null;
  }

  // -- writing -------------------------------------------------------------------------

  write(buf) {
    let off = 0;
    let wait = 1;
    while (off < buf.length) {
      let n;
      try {
        n = S.writeSync(this.fd, buf, off, buf.length - off);
      } catch (exc) {
        if (exc && exc.code === 'EAGAIN') {
          AtomicsWait(sleepCell, 0, 0, wait); // the host reads slowly: wait, then retry
          wait = S.MathMin(wait * 2, 20);
          continue;
        }
        throw exc;
      }
      off += n;
      wait = 1;
    }
  }

  send(name, content, metadata) {
    this.write(this.conn.send(name, content, metadata));
  }

  /** The run cannot go on: say why on fd 2 and end with the InternalError reply. */
  giveUp(why) {
    try {
      S.writeSync(2, `kernelgate child: ${why}\n`);
    } catch {
      // no stderr: the reply below still says the run failed
    }
    try {
      this.write(this.fallback);
    } catch {
      // the host is gone
    }
    S.reallyExit(70);
  }

  // -- reading -------------------------------------------------------------------------

  /** Start reading fd 3; `onRequest(request)` once the execute_request is here. */
  start(onRequest) {
    this.onRequest = onRequest;
    const socket = new net.Socket({ fd: this.fd, readable: true, writable: false, allowHalfOpen: true });
    this.socket = socket;
    socket.on('data', (data) => this.onData(data));
    socket.on('end', () => S.reallyExit(1)); // the host is gone: nobody is left to report to
    socket.on('error', () => S.reallyExit(1));
  }

  onData(data) {
    const conn = this.conn;
    try {
      conn.receiveData(data);
      for (;;) {
        const event = conn.nextEvent();
        if (event === null) break;
        this.take(event);
      }
    } catch (exc) {
      this.giveUp(`reading the host's messages failed: ${exc && exc.name}: ${exc && exc.message}`);
    }
  }

  take(event) {
    if (event.type === 'reply') {
      const entry = this.pending[event.id];
      if (entry === undefined) return;
      delete this.pending[event.id];
      if (this.conn.outstandingCount === 0 && this.socket !== null) this.socket.unref();
      entry.settle(event);
    } else if (event.type === 'comm_open') {
      this.namespaces = event.namespaces;
    } else if (event.type === 'execute_request') {
      const onRequest = this.onRequest;
      this.onRequest = null;
      onRequest(event);
    }
    // debug_request: only in a debugged run, which this kernel refuses as it starts.
  }

  // -- binding calls -------------------------------------------------------------------

  /**
   * Send a call (args/kwargs already checked and encoded: Raw texts) and register
   * `settle(reply)` for its answer. Throws the LimitExceeded ToolError past max_calls.
   */
  call(namespace, name, argsText, kwargsText, settle) {
    for (let i = 0; i < this.streams.length; i++) this.streams[i].flush();
    const id = this.conn.nextCallId;
    const frame = this.conn.send('comm_msg call', {
      comm_id: this.conn.commId,
      data: { method: 'call', id, namespace, name, args: argsText, kwargs: kwargsText },
    });
    this.calls += 1;
    // Registered before the frame leaves; the socket keeps the process alive meanwhile.
    this.pending[id] = { settle };
    if (this.socket !== null) this.socket.ref();
    this.write(frame);
  }
}

/** The execute_reply written when reporting itself failed (encoded in advance, by a
 * fresh connection before any request: the only message the child may send there). */
function fallbackFrame() {
  const conn = new Connection({ session: `child-${S.pid}` });
  return conn.send('execute_reply', {
    status: 'error',
    execution_count: 1,
    ename: 'InternalError',
    evalue: "kernelgate could not report this program's result (its reporting failed)",
    traceback: [],
  }, { kernelgate: { status: 'exception' } });
}

module.exports = { CallClient, CONTROL_FD, fallbackFrame };
