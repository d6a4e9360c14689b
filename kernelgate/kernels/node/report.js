'use strict';
// The child's last word: the program's value or error, then execute_reply, then exit
// (kernelgate/kernels/python/report.py for Node).
//
// Everything used here was bound before the program ran (./safe.js). If reporting still
// fails, the pre-encoded InternalError execute_reply is written instead: a run never ends
// without a reply the host can read, and never with a wrong one.

const S = require('./safe');
const { encodeValue, NotJSONError, ValueTooLargeError, Raw } = require('./json');
const { plainText } = require('./display');
const { formatError, capText } = require('./program');

const MAX_MESSAGE = 8 * 1024;

class Reporter {
  constructor(client, writables, maxValueBytes) {
    this.client = client;
    this.writables = writables; // the program's stdout and stderr, flushed at the end
    this.maxValueBytes = maxValueBytes;
    this.done = false;
  }

  /** Once only: the first outcome wins (a later uncaught error or exit changes nothing). */
  claim() {
    if (this.done) return false;
    this.done = true;
    return true;
  }

  /** The program returned `value`: report it if it is JSON within max_value_bytes. */
  finishValue(value) {
    if (!this.claim()) return;
    this.guard(() => {
      this.flushOutput(); // what the program printed comes before its value
      if (value === undefined || value === null) {
        this.end({ status: 'ok', run_status: 'ok', ename: '', evalue: '', traceback: [] });
        return;
      }
      let encoded;
      try {
        encoded = encodeValue(value, 'value', this.maxValueBytes);
      } catch (exc) {
        if (exc instanceof NotJSONError) {
          this.failNow('invalid_output', 'InvalidOutput',
            `the program's value is not JSON: ${exc.message}. Return only plain objects, arrays, ` +
            'strings, finite numbers, booleans or null; convert other types first ' +
            '(e.g. [...aSet], date.toISOString())');
          return;
        }
        if (exc instanceof ValueTooLargeError) {
          this.failNow('output_limit', 'OutputLimit',
            `the program's value is over max_value_bytes=${this.maxValueBytes} bytes as JSON; ` +
            'return less (a summary, or the first items), or raise Limits.max_value_bytes');
          return;
        }
        this.finishExceptionNow(exc); // a getter of the value threw
        return;
      }
      this.client.send('execute_result', {
        execution_count: 1,
        data: { 'application/json': new Raw(encoded.text), 'text/plain': plainText(value) },
        metadata: {},
      });
      this.end({ status: 'ok', run_status: 'ok', ename: '', evalue: '', traceback: [] });
    });
  }

  /** The program (or its compilation) threw `err`. */
  finishException(err, code = '', compiling = false) {
    if (!this.claim()) return;
    this.guard(() => this.finishExceptionNow(err, code, compiling));
  }

  finishExceptionNow(err, code = '', compiling = false) {
    const { ename, evalue, traceback } = formatError(err, code, compiling);
    this.flushOutput();
    this.client.send('error', { ename, evalue, traceback });
    this.end({ status: 'error', run_status: 'exception', ename, evalue, traceback });
  }

  /** End with `runStatus` and a message of the child's own. */
  fail(runStatus, ename, message) {
    if (!this.claim()) return;
    this.guard(() => this.failNow(runStatus, ename, message));
  }

  failNow(runStatus, ename, message) {
    message = capText(message, MAX_MESSAGE);
    this.flushOutput();
    this.client.send('error', { ename, evalue: message, traceback: [`${ename}: ${message}`] });
    this.end({ status: 'error', run_status: runStatus, ename, evalue: message, traceback: [] });
  }

  flushOutput() {
    for (let i = 0; i < this.writables.length; i++) this.writables[i].finish();
  }

  /** Flush everything, send the reply with this process's usage, exit. Every object is
   * a literal: a property the program defined on Object.prototype cannot change it. */
  end(reply) {
    this.flushOutput();
    const usage = measuredUsage();
    const content = reply.status === 'ok'
      ? { status: 'ok', execution_count: 1, user_expressions: {}, payload: [] }
      : {
        status: 'error',
        execution_count: 1,
        ename: reply.ename,
        evalue: reply.evalue,
        traceback: reply.traceback,
      };
    const kernelgate = usage === null
      ? { status: reply.run_status }
      : { status: reply.run_status, usage };
    this.client.send('execute_reply', content, { kernelgate });
    S.reallyExit(0);
  }

  /** Run `report`; if it fails, the pre-encoded InternalError reply. */
  guard(report) {
    try {
      report();
    } catch (exc) {
      this.client.giveUp(`reporting failed: ${exc && exc.name}: ${exc && exc.message}`);
    }
  }
}

/** CPU seconds and peak memory of this process (the host has the reply before it reaps us). */
function measuredUsage() {
  try {
    const u = S.resourceUsage();
    return {
      cpu_user_s: S.MathRound(u.userCPUTime) / 1e6,
      cpu_system_s: S.MathRound(u.systemCPUTime) / 1e6,
      peak_memory_bytes: u.maxRSS * 1024, // Linux: KiB
    };
  } catch {
    return null;
  }
}

module.exports = { Reporter };
