'use strict';
// fd 3 of one run: whole frames out (synchronous writes, in order), the host's messages
// in, binding calls and their answers (kernelgate/kernels/python/client.py for Node).
//
// Frames are written with fs.writeSync, whole, before the function that sends them
// returns: output, calls and displays leave in the order the program made them, and
// the last reply is on the wire before the process exits. fd 3 is blocking as the host
// made it; should it be non-blocking, a full socket buffer is waited out in short
// sleeps (Atomics.wait), as the Python child waits in select().

const S = require('./safe');
const { Connection } = require('./connection');

const CONTROL_FD = 3;
const READ_CHUNK = 1 << 16;
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
    this.readNext();
  }

  // fd 3 is read by fs.read (libuv's thread pool, a blocking read), not by a net.Socket:
  // a socket's stream machinery calls prototype methods (Duplex.prototype.read.call,
  // handler.apply) that the program may replace, and one such replacement would cut the
  // host's replies off or spin the loop forever. fs.read's callback is called directly.
  readNext() {
    const buf = S.BufferAllocUnsafe(READ_CHUNK);
    S.fsRead(this.fd, buf, 0, READ_CHUNK, null, (err, n) => {
      if (err) {
        if (err.code === 'EAGAIN' || err.code === 'EINTR') { // a non-blocking fd 3: poll it
          S.setTimeout(() => this.readNext(), 2);
          return;
        }
        S.reallyExit(1);
      }
      if (n === 0) S.reallyExit(1); // the host is gone: nobody is left to report to
      this.onData(S.BufferSubarray(buf, 0, n));
      this.readNext();
    });
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
    // Registered before the frame leaves.
    this.pending[id] = { settle };
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
