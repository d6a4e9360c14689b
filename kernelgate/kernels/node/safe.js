'use strict';
// The builtins kernelgate's own code uses once the program runs, taken before it runs.
//
// The program shares this realm: it may replace JSON.stringify, Array.prototype.push,
// Promise.prototype.then, Buffer.from, process.exit... Everything the child needs to
// make a binding call and to report the run's end is bound here, when the kernel loads,
// so that a program that monkeypatches builtins still gets a correct report (or the
// pre-encoded InternalError reply), never a wrong one. Methods are "uncurried": bound to
// Function.prototype.call as it is now, so a later replacement of `call` changes nothing.

const { bind, call } = Function.prototype;
const uncurryThis = bind.bind(call);

const fs = require('fs');
const util = require('util');

const ObjectDefineProperty = Object.defineProperty;

/** `list.push(value)` that no setter a program puts on Array.prototype can intercept
 * (a push is a [[Set]] of a new index, which would call one; a definition does not). */
function append(list, value) {
  ObjectDefineProperty(list, list.length, { value, writable: true, enumerable: true, configurable: true });
}

module.exports = Object.freeze({
  uncurryThis,
  ObjectKeys: Object.keys,
  ObjectGetPrototypeOf: Object.getPrototypeOf,
  ObjectGetOwnPropertyDescriptor: Object.getOwnPropertyDescriptor,
  ObjectDefineProperty: Object.defineProperty,
  ObjectFreeze: Object.freeze,
  ObjectIs: Object.is,
  ObjectPrototype: Object.prototype,
  ArrayPrototype: Array.prototype,
  ArrayIsArray: Array.isArray,
  hasOwn: uncurryThis(Object.prototype.hasOwnProperty),
  append,
  ArrayJoin: uncurryThis(Array.prototype.join),
  ArraySlice: uncurryThis(Array.prototype.slice),
  ArraySplice: uncurryThis(Array.prototype.splice),
  StringCharCodeAt: uncurryThis(String.prototype.charCodeAt),
  StringSlice: uncurryThis(String.prototype.slice),
  StringIndexOf: uncurryThis(String.prototype.indexOf),
  StringLastIndexOf: uncurryThis(String.prototype.lastIndexOf),
  StringSplit: uncurryThis(String.prototype.split),
  StringStartsWith: uncurryThis(String.prototype.startsWith),
  StringTrimEnd: uncurryThis(String.prototype.trimEnd),
  StringPadStart: uncurryThis(String.prototype.padStart),
  StringIsWellFormed: typeof String.prototype.isWellFormed === 'function'
    ? uncurryThis(String.prototype.isWellFormed) : null,
  RegExpTest: uncurryThis(RegExp.prototype.test),
  FunctionApply: uncurryThis(Function.prototype.apply),
  ReflectApply: Reflect.apply,
  JSONStringify: JSON.stringify,
  JSONParse: JSON.parse,
  NumberIsFinite: Number.isFinite,
  NumberIsInteger: Number.isInteger,
  MathMin: Math.min,
  MathMax: Math.max,
  MathRound: Math.round,
  DateNow: Date.now,
  DateToISOString: uncurryThis(Date.prototype.toISOString),
  Date,
  Error,
  TypeError,
  RangeError,
  ErrorCaptureStackTrace: Error.captureStackTrace,
  Promise,
  PromiseThen: uncurryThis(Promise.prototype.then),
  PromiseReject: Promise.reject.bind(Promise),
  PromiseResolve: Promise.resolve.bind(Promise),
  Symbol,
  SymbolFor: Symbol.for,
  BufferFrom: Buffer.from.bind(Buffer),
  BufferAlloc: Buffer.alloc.bind(Buffer),
  BufferAllocUnsafe: Buffer.allocUnsafe.bind(Buffer),
  BufferConcat: Buffer.concat.bind(Buffer),
  BufferByteLength: Buffer.byteLength.bind(Buffer),
  BufferIndexOf: uncurryThis(Buffer.prototype.indexOf),
  BufferSubarray: uncurryThis(Buffer.prototype.subarray),
  BufferToString: uncurryThis(Buffer.prototype.toString),
  isBuffer: Buffer.isBuffer.bind(Buffer),
  isUint8Array: util.types.isUint8Array,
  isProxy: util.types.isProxy,
  isNativeError: util.types.isNativeError,
  inspect: util.inspect,
  format: util.format,
  writeSync: fs.writeSync,
  fsRead: fs.read,
  setTimeout,
  setInterval,
  clearInterval,
  activeResources: process.getActiveResourcesInfo.bind(process),
  // process.exit runs the program's 'exit' listeners; reallyExit ends the process at once.
  reallyExit: (typeof process.reallyExit === 'function' ? process.reallyExit : process.exit)
    .bind(process),
  resourceUsage: process.resourceUsage.bind(process),
  nextTick: process.nextTick.bind(process),
  processOn: process.on.bind(process),
  pid: process.pid,
});
