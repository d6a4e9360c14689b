'use strict';
// kernelgate's Node kernel: read one execute_request from fd 3, run it, report, exit.
//
// Started by the host as `node [--max-old-space-size=MiB] kernel.js` with fd 0
// /dev/null, fd 1 and 2 pipes the host captures, and fd 3 an AF_UNIX stream socket to
// the host (docs/protocol.md: this kernel is the CHILD role, as the Python kernel is).
// The rooms:
//
// - ./safe.js: the builtins kernelgate uses, taken before the program runs;
// - ./framing.js, ./state.js, ./connection.js: the wire (frames, the tables, messages);
// - ./client.js: fd 3 (whole frames out, the host's messages in, binding calls);
// - ./json.js: the JSON boundary; ./bindings.js: namespaces, ToolError, the calling
//   convention; ./streams.js: console and process.stdout/stderr; ./display.js;
// - ./program.js: the program as an async function, tracebacks; ./runner.js: one run;
//   ./report.js: the value or error, execute_reply, exit.
//
// Argument (tests only): --max-host-frame-bytes=N lowers the ceiling on the host's frames
// (1 GiB by default: the host is trusted).

const S = require('./safe'); // first: before anything else can change a builtin

// SIGUSR1 makes Node open its inspector on 127.0.0.1:9229, which runs any code the side
// that connects sends: whoever could signal this child would get a debugger in it (another
// run sharing its uid at process level, on a kernel without landlock's signal scope). A
// listener of our own takes the signal instead (Node 20 has no --disable-sigusr1); signal
// listeners are unref'd, so it keeps nothing alive.
process.on('SIGUSR1', () => {});
const { CallClient } = require('./client');
const { Child } = require('./runner');

function hostCeiling(argv) {
  for (let i = 2; i < argv.length; i++) {
    const m = /^--max-host-frame-bytes=(\d+)$/.exec(argv[i]);
    if (m) return +m[1];
  }
  return undefined;
}

/** What every run does first, done once while the child waits for its program (a warm
 * child waits a while): the first call of each path is most of a short run's time. */
function rehearse() {
  const { encodeValue } = require('./json');
  const { plainText, displayBundle } = require('./display');
  const { formatError, compileProgram } = require('./program');
  const { OutputLedger, OutputStream, ProgramWritable, makeConsole } = require('./streams');
  const sink = new ProgramWritable(new OutputStream('stdout', () => {}, new OutputLedger(1 << 20)), 1);
  const console = makeConsole(sink, sink);
  console.log('%s %d', 'x', 1, { a: [1, 'b'] });
  plainText({ a: [1, 'b', null] });
  displayBundle({ a: 1 }, 1 << 20);
  encodeValue({ a: [1, 'b', null, true, 1.5] });
  formatError(new TypeError('x'));
  compileProgram('return 1');
}

function main() {
  const client = new CallClient({ maxHostFrameBytes: hostCeiling(process.argv) });
  process.argv = [process.argv[0], '<program>'];
  const child = new Child(client);
  rehearse();
  client.start((request) => {
    try {
      child.run(request);
    } catch (exc) {
      client.giveUp(`the run could not start: ${exc && exc.name}: ${exc && exc.message}`);
    }
  });
}

try {
  main();
} catch (exc) {
  try {
    S.writeSync(2, `kernelgate child: ${exc && exc.stack}\n`);
  } catch {
    // nothing more can be said
  }
  S.reallyExit(70);
}
