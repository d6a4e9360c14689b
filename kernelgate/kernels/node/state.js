'use strict';
// The fd-3 conversation as the child sees it: kernelgate/wire/state.py's two transition
// tables (one per role), by wire name. tests/node/test_conformance.py checks that these
// are kernelgate.wire.TRANSITIONS exactly.
//
// A row is a state; a cell, the state sending that event leads to. Keys "event@role"
// are moves another role's event causes. `send` consults the child's table, receiving
// the host's: what one side may not send, the other refuses.

const S = require('./safe');

const HOST = 'host';
const CHILD = 'child';

const TRANSITIONS = {
  host: {
    IDLE: { comm_open: 'BINDINGS_OPEN', 'execute_reply@child': 'DONE' },
    BINDINGS_OPEN: { execute_request: 'EXECUTING', 'execute_reply@child': 'DONE' },
    EXECUTING: {
      'comm_msg reply': 'EXECUTING',
      debug_request: 'EXECUTING',
      'execute_reply@child': 'DONE',
    },
    DONE: {},
    ERROR: {},
  },
  child: {
    IDLE: { execute_reply: 'DONE', 'execute_request@host': 'EXECUTING' },
    EXECUTING: {
      stream: 'EXECUTING',
      display_data: 'EXECUTING',
      update_display_data: 'EXECUTING',
      clear_output: 'EXECUTING',
      'comm_msg call': 'EXECUTING',
      debug_reply: 'EXECUTING',
      debug_event: 'EXECUTING',
      execute_result: 'RESULT',
      error: 'RESULT',
      execute_reply: 'DONE',
    },
    RESULT: {
      stream: 'RESULT',
      display_data: 'RESULT',
      update_display_data: 'RESULT',
      clear_output: 'RESULT',
      'comm_msg call': 'RESULT',
      debug_reply: 'RESULT',
      debug_event: 'RESULT',
      execute_reply: 'DONE',
    },
    DONE: {},
    ERROR: {},
  },
};

const MEANINGS = {
  'host IDLE': 'nothing sent yet',
  'host BINDINGS_OPEN': 'the bindings comm is open, no execute_request yet',
  'host EXECUTING': 'the program runs; the host answers its calls',
  'host DONE': "the child's execute_reply arrived; calls still waiting are abandoned",
  'host ERROR': 'after a protocol violation',
  'child IDLE': 'waiting for the execute_request',
  'child EXECUTING': 'the program runs',
  'child RESULT': "the run's outcome was sent",
  'child DONE': 'after its execute_reply',
  'child ERROR': 'after a protocol violation',
};

class ProtocolError extends Error {}
class LocalProtocolError extends ProtocolError {}
LocalProtocolError.prototype.name = 'LocalProtocolError';
class RemoteProtocolError extends ProtocolError {}
RemoteProtocolError.prototype.name = 'RemoteProtocolError';

function allowedText(role, state) {
  const names = Object.keys(TRANSITIONS[role][state]).filter((k) => !k.includes('@'));
  if (names.length === 0) return 'nothing';
  if (names.length === 1) return `only ${names[0]}`;
  return `only ${names.slice(0, -1).join(', ')} or ${names[names.length - 1]}`;
}

// Refusal texts are made ahead: a refusal may happen after the program replaced
// Array.prototype methods.
const ALLOWED = {};
for (const role of [HOST, CHILD]) {
  for (const state of Object.keys(TRANSITIONS[role])) ALLOWED[`${role} ${state}`] = allowedText(role, state);
}

/** Both roles' states, as the child knows them. */
class ConnectionState {
  constructor() {
    this.states = { __proto__: null, host: 'IDLE', child: 'IDLE' };
  }

  /** ``role`` sends ``name``: move it on, or throw (Local for the child, Remote for the host). */
  process(role, name) {
    const state = this.states[role];
    const row = TRANSITIONS[role][state];
    const next = S.hasOwn(row, name) ? row[name] : undefined;
    if (next === undefined) throw this.refusal(role, name);
    this.states[role] = next;
    // The host's execute_request moves the child at once (it receives it). The child's
    // execute_reply does not move the host here: a reply to a call may have crossed it.
    if (role === HOST && name === 'execute_request' && this.states.child === 'IDLE') {
      this.states.child = 'EXECUTING';
    }
  }

  error() {
    this.states.host = 'ERROR';
    this.states.child = 'ERROR';
  }

  refusal(role, name) {
    const state = this.states[role];
    const meaning = MEANINGS[`${role} ${state}`];
    const allowed = ALLOWED[`${role} ${state}`];
    if (role === CHILD) {
      return new LocalProtocolError(
        `cannot send ${name}: the child is in state ${state} (${meaning}), where it may send ${allowed}`);
    }
    return new RemoteProtocolError(
      `the host sent ${name} in state ${state} (${meaning}), where it may send ${allowed}`);
  }
}

module.exports = {
  HOST, CHILD, TRANSITIONS, MEANINGS, ConnectionState,
  ProtocolError, LocalProtocolError, RemoteProtocolError,
};
