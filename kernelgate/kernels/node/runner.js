'use strict';
// One run inside the child: take the request, set up what the program sees, run it,
// hand the outcome to the reporter (kernelgate/kernels/python/runner.py for Node).
//
// The program runs as the body of an async function (./program.js) with these globals:
// each namespace of bindings (`tools`), `ToolError`, `display`, `require`, and a console
// and process.stdout/stderr that send `stream` messages. Its end is whichever comes
// first: its promise settles; it throws where nothing catches it (a callback, a
// rejection no one handles: as `node` would end); it calls process.exit; or nothing is
// left that could ever settle its promise (no timer, I/O or binding call pending).
//
// The sandbox is not here: JavaScript cannot confine itself, so a launcher applies it
// before `node` starts (kernelgate/kernels/python/launcher.py).

const Module = require('module');
const path = require('path');
const S = require('./safe');
const { makeBinding, makeNamespace, ToolError } = require('./bindings');
const { displayBundle, plainText, FRAME_OVERHEAD } = require('./display');
const { compileProgram } = require('./program');
const { Reporter } = require('./report');
const { OutputLedger, OutputStream, ProgramWritable, makeConsole } = require('./streams');

const UNSETTLED_CHECK_MS = 100;

class Child {
  constructor(client) {
    this.client = client;
    this.maxValueBytes = 32 * 1024;
    this.maxFrameBytes = 8 * 1024 * 1024;
    this.reporter = null;
  }

  /** The request is here: run it (the reporter exits the process). */
  run(request) {
    const options = request.options;
    const client = this.client;
    client.maxCalls = intOption(options, 'max_calls', client.maxCalls);
    this.maxValueBytes = intOption(options, 'max_value_bytes', this.maxValueBytes);
    this.maxFrameBytes = intOption(options, 'max_frame_bytes', this.maxFrameBytes);
    const ledger = new OutputLedger(intOption(options, 'max_output_bytes', 64 * 1024));
    const send = (name, text) => client.send('stream', { name, text });
    const out = new ProgramWritable(new OutputStream('stdout', send, ledger), 1);
    const err = new ProgramWritable(new OutputStream('stderr', send, ledger), 2);
    client.streams = [out._kg, err._kg];
    const reporter = new Reporter(client, [out, err], this.maxValueBytes);
    this.reporter = reporter;

    if (S.hasOwn(options, 'debug')) {
      reporter.fail('exception', 'DebuggerUnavailable',
        'the debugger is not available for JavaScript programs (the Node kernel has none): ' +
        'run this program without debugging (no breakpoints)');
      return;
    }
    const cwd = typeof options.cwd === 'string' ? options.cwd : null;
    // Launched confined, the child is there already: the launcher entered the run directory
    // before it gave up the host's rights, and the run's own uid may not be able to walk to
    // it by name (a 0700 ancestor).
    if (cwd !== null && process.cwd() !== cwd) {
      try {
        process.chdir(cwd);
      } catch (exc) {
        reporter.fail('sandbox_unavailable', 'SandboxUnavailable',
          `the child could not enter its run directory ${S.JSONStringify(cwd)}: ${exc && exc.message}`);
        return;
      }
    }
    this.install(out, err);
    this.watch(reporter);
    let main;
    try {
      main = compileProgram(request.code);
    } catch (exc) {
      reporter.finishException(exc, request.code, true);
      return;
    }
    let promise;
    try {
      // A promise whatever main is (a program that closes the function it runs in and
      // opens another can make it a plain function).
      promise = S.PromiseResolve(main());
    } catch (exc) {
      reporter.finishException(exc);
      return;
    }
    S.PromiseThen(promise, (value) => reporter.finishValue(value), (exc) => reporter.finishException(exc));
  }

  /** The program's globals, and its console and standard streams. */
  install(out, err) {
    const client = this.client;
    const argBudget = this.maxFrameBytes - FRAME_OVERHEAD;
    const namespaces = client.namespaces;
    for (const ns of S.ObjectKeys(namespaces)) {
      const bindings = {};
      for (const name of S.ObjectKeys(namespaces[ns])) {
        bindings[name] = makeBinding(ns, name, namespaces[ns][name], client, argBudget);
      }
      defineGlobal(ns, makeNamespace(ns, bindings));
    }
    defineGlobal('ToolError', ToolError);
    defineGlobal('display', (...objs) => this.display(objs));
    defineGlobal('require', Module.createRequire(path.join(process.cwd(), '<program>')));
    defineGlobal('console', makeConsole(out, err));
    S.ObjectDefineProperty(process, 'stdout', { value: out, configurable: true, writable: true, enumerable: true });
    S.ObjectDefineProperty(process, 'stderr', { value: err, configurable: true, writable: true, enumerable: true });
    const reporter = this.reporter;
    process.exit = function exit(code) {
      // As `node` would end, but with a reply: 0 (or none) is a finished run.
      const n = code === undefined || code === null ? 0 : +code;
      if (n === 0) reporter.finishValue(undefined);
      else reporter.fail('exception', 'ProcessExit', `the program called process.exit(${plainText(code, 100)})`);
    };
    Error.stackTraceLimit = 50;
  }

  /** display(...objs): one display_data per object, after the output so far. */
  display(objs) {
    const client = this.client;
    for (let i = 0; i < client.streams.length; i++) client.streams[i].flush();
    for (let i = 0; i < objs.length; i++) {
      client.send('display_data', { data: displayBundle(objs[i], this.maxFrameBytes), metadata: {}, transient: {} });
    }
  }

  /** The ends a program can come to besides its promise settling. */
  watch(reporter) {
    const ends = {
      __proto__: null,
      uncaughtException: (exc) => reporter.finishException(exc),
      unhandledRejection: (exc) => reporter.finishException(exc),
    };
    // Node raises these through process.emit, whose listeners are called with
    // handler.apply: an emit of process's own reaches the reporter first, whatever the
    // program did to Function.prototype.apply. The listeners stay for a program that
    // replaces process.emit itself.
    const emit = process.emit;
    S.ObjectDefineProperty(process, 'emit', {
      value: function emit_(name) {
        const end = ends[name];
        if (end !== undefined) end(arguments[1]);
        return S.ReflectApply(emit, this, arguments);
      },
      writable: true,
      configurable: true,
    });
    S.processOn('uncaughtException', ends.uncaughtException);
    S.processOn('unhandledRejection', ends.unhandledRejection);
    // A program waiting for nothing that can happen: no call in flight, and nothing left
    // in the loop (timer, I/O, child process...) but the read of fd 3.
    const client = this.client;
    const check = S.setInterval(() => {
      if (client.conn.outstandingCount > 0) return;
      const active = S.activeResources();
      if (active.length !== 1 || active[0] !== 'FSReqCallback') return;
      reporter.fail('exception', 'UnsettledPromise',
        'the program is waiting for a promise that can never settle: nothing is left to run (no ' +
        'timer, I/O or binding call pending); resolve it, or do not await it');
    }, UNSETTLED_CHECK_MS);
    check.unref();
  }
}

function intOption(options, key, dflt) {
  const v = options[key];
  return typeof v === 'number' && S.NumberIsInteger(v) && v >= 0 ? v : dflt;
}

function defineGlobal(name, value) {
  S.ObjectDefineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
}

module.exports = { Child };
