"""Hostile Node programs: each tries one way out and prints what happened as JSON.

Every attempt is recorded as ``"ok:<what it got>"`` or ``"err:<code>"`` (the Node error
code, ``EACCES``, ``ENOENT``, ...). ``native(...)`` runs a few lines of the system's
``python3`` from the program (any binary under /usr/bin is the program's to exec), making
the raw system calls JavaScript has no binding for (ptrace, process_vm_readv, io_uring,
unshare, mount, pidfd_getfd, setuid): the launcher's filter, landlock domain and
namespaces hold across that exec too.
"""

from __future__ import annotations

__all__ = ["PRELUDE", "NATIVE_PYTHON"]

#: The system's interpreter, world-readable (the pyenv one lives under /root, 0700).
NATIVE_PYTHON = "/usr/bin/python3"

PRELUDE = r"""
'use strict';
const fs = require('fs');
const cp = require('child_process');
const net = require('net');
const ARGS = JSON.parse(process.argv[2] || '{}');
const out = {};
function show(v) { return (typeof v === 'string' ? v : String(JSON.stringify(v))).slice(0, 120); }
function attempt(name, fn) {
  try { out[name] = 'ok:' + show(fn()); } catch (e) { out[name] = 'err:' + (e.code || e.name); }
}
async function attemptAsync(name, fn) {
  try { out[name] = 'ok:' + show(await fn()); } catch (e) { out[name] = 'err:' + (e.code || e.name); }
}
function done() { process.stdout.write(JSON.stringify(out) + '\n'); process.exit(0); }
function connectTo(options) {
  return new Promise((resolve, reject) => {
    const s = net.connect(options);
    s.on('connect', () => { s.destroy(); resolve('connected'); });
    s.on('error', reject);
    setTimeout(() => { s.destroy(); reject(Object.assign(new Error('timeout'), {code: 'TIMEOUT'})); }, 3000);
  });
}
// Raw system calls through the system's python3: {name: errno name or 'ok'} per call.
function native(body) {
  const code = [
    'import ctypes, errno, json, os',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'libc.syscall.restype = ctypes.c_long',
    'def sc(nr, *a):',
    '    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])',
    '    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))',
    'res = {}',
    body,
    'print(json.dumps(res))',
  ].join('\n');
  const r = cp.spawnSync('/usr/bin/python3', ['-I', '-S', '-c', code], {encoding: 'utf8'});
  if (r.error) return {spawn: r.error.code};
  try { return JSON.parse(r.stdout.trim().split('\n').pop()); }
  catch (e) { return {python: 'failed: ' + r.status + ' ' + String(r.stderr).slice(-300)}; }
}
"""
