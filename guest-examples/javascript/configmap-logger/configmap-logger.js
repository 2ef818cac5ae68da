// configmap-logger: the kubewasm reference handler in JavaScript.
//
// Logs one line per notification and answers according to the label `kubewasm.io/fail` of the
// object (for onUpdate: the new object): retry -> err(retry), fatal -> err(fatal),
// trap -> the instance traps, anything else -> ok.
//
// The label `kubewasm.io/bench` (tests/benches/languages.rs) skips all of that: `noop` returns at
// once, `parse` runs JSON.parse on the object(s) and returns; neither logs.
//
// Mapping of the WIT world (same source for componentize-js and componentize-qjs):
//   export describe / on-add / on-update / on-delete  ->  export function describe / onAdd / onUpdate / onDelete
//   result<_, handler-error>: return normally for ok; `throw { tag: 'retry' | 'fatal', val: message }` for err
//   import log                                        ->  import { log } from 'kubewasm:handler/log@0.1.0'
//   enum level                                        ->  'trace' | 'debug' | 'info' | 'warn' | 'error'
//   option<string>                                    ->  string | undefined
import { log } from 'kubewasm:handler/log@0.1.0';

const FAIL_LABEL = 'kubewasm.io/fail';
const BENCH_LABEL = 'kubewasm.io/bench';

// Sink for parse results, so an engine cannot drop a parse whose value is never read.
let parsedValues = 0;

// A thrown plain object { tag, val } is the err variant. Anything else that escapes an export
// (an Error, a TypeError from a bug) traps the instance: the host discards it and counts a trap.
class HandlerError {
  static retry(msg) { return { tag: 'retry', val: msg }; }
  static fatal(msg) { return { tag: 'fatal', val: msg }; }
}

// The safe pattern: let handler errors through, turn every other exception into `fatal` (a bug
// does not heal on redelivery) so one bad object cannot crash-loop the plugin.
function guarded(name, fn) {
  return (...args) => {
    try {
      return fn(...args);
    } catch (e) {
      if (isHandlerError(e) || e instanceof DeliberateTrap) throw e;
      const msg = `${name}: ${e && e.name ? e.name : 'exception'}: ${e && e.message ? e.message : String(e)}`;
      log('error', msg);
      throw HandlerError.fatal(msg);
    }
  };
}

function isHandlerError(e) {
  return e !== null && typeof e === 'object' && (e.tag === 'retry' || e.tag === 'fatal') && typeof e.val === 'string';
}

// Escapes the safety net on purpose: `kubewasm.io/fail=trap` asks for a trapping instance.
class DeliberateTrap extends Error {}

const key = (meta) => (meta.namespace === undefined || meta.namespace === null ? meta.name : `${meta.namespace}/${meta.name}`);

function label(meta, name) {
  for (const [k, v] of meta.labels) {
    if (k === name) return v;
  }
  return undefined;
}

// True when the call is a benchmark call and has been handled.
function bench(newObj, oldObj) {
  switch (label(newObj.meta, BENCH_LABEL)) {
    case 'noop':
      return true;
    case 'parse':
      if (oldObj !== undefined) parsedValues += JSON.parse(oldObj.json) ? 1 : 0;
      parsedValues += JSON.parse(newObj.json) ? 1 : 0;
      return true;
    default:
      return false;
  }
}

function outcome(obj) {
  switch (label(obj.meta, FAIL_LABEL)) {
    case 'retry':
      throw HandlerError.retry(`${FAIL_LABEL}=retry`);
    case 'fatal':
      throw HandlerError.fatal(`${FAIL_LABEL}=fatal`);
    case 'trap':
      throw new DeliberateTrap(`${FAIL_LABEL}=trap`);
    default:
  }
}

export function describe() {
  return {
    name: 'configmap-logger',
    subscriptions: [
      {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        namespace: undefined,
        labelSelector: undefined,
        fieldSelector: undefined,
        resyncPeriodMs: 0, // a Number: componentize-qjs rejects BigInt for u64, componentize-js accepts both
      },
    ],
  };
}

export const onAdd = guarded('on-add', (obj, isInInitialList) => {
  if (bench(obj)) return;
  log('info', `add ${key(obj.meta)} rv=${obj.meta.resourceVersion} init=${isInInitialList}`);
  outcome(obj);
});

export const onUpdate = guarded('on-update', (oldObj, newObj, isSync) => {
  if (bench(newObj, oldObj)) return;
  log('info', `update ${key(newObj.meta)} rv=${oldObj.meta.resourceVersion}->${newObj.meta.resourceVersion} sync=${isSync}`);
  outcome(newObj);
});

export const onDelete = guarded('on-delete', (obj, finalStateUnknown) => {
  if (bench(obj)) return;
  log('info', `delete ${key(obj.meta)} rv=${obj.meta.resourceVersion} final-state-unknown=${finalStateUnknown}`);
  outcome(obj);
});
