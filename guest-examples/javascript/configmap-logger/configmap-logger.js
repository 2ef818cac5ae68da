// configmap-logger: the kubewasm reference handler in JavaScript, on the SDK's 0.1.0 entry
// (sdk/javascript/v0.1.0.js; world kubewasm:handler@0.1.0, same source for componentize-js and
// componentize-qjs).
//
// Logs one line per notification and answers according to the label `kubewasm.io/fail` of the
// object (for onUpdate: the new object): retry -> err(retry), fatal -> err(fatal),
// trap -> the instance traps, anything else -> ok.
//
// The label `kubewasm.io/bench` (tests/benches/languages.rs) skips all of that: `noop` returns at
// once, `parse` decodes the object(s) and returns; neither logs. The SDK decodes an object only
// when the handler reads a field of it, and `label()` reads the host's metadata, so `noop`
// parses nothing.
import { handler, subscription, log, Retry, Fatal, Trap } from '../../../sdk/javascript/v0.1.0.js';

const FAIL_LABEL = 'kubewasm.io/fail';
const BENCH_LABEL = 'kubewasm.io/bench';

// Sink for parse results, so an engine cannot drop a parse whose value is never read.
let parsedValues = 0;

// True when the call is a benchmark call and has been handled.
function bench(newObj, oldObj) {
  const mode = newObj.label(BENCH_LABEL);
  if (mode === 'parse') {
    for (const obj of [oldObj, newObj]) if (obj !== undefined) parsedValues += obj.data ? 1 : 0; // decodes
  }
  return mode === 'noop' || mode === 'parse';
}

function outcome(obj) {
  switch (obj.label(FAIL_LABEL)) {
    case 'retry':
      throw new Retry(`${FAIL_LABEL}=retry`);
    case 'fatal':
      throw new Fatal(`${FAIL_LABEL}=fatal`);
    case 'trap':
      throw new Trap(`${FAIL_LABEL}=trap`);
    default:
  }
}

export const { describe, onAdd, onUpdate, onDelete } = handler({
  name: 'configmap-logger',
  subscriptions: [subscription('v1', 'ConfigMap')],
  onAdd(obj, initial) {
    if (bench(obj)) return;
    log.info(`add ${obj.key} rv=${obj.resourceVersion} init=${initial}`);
    outcome(obj);
  },
  onUpdate(oldObj, newObj, isSync) {
    if (bench(newObj, oldObj)) return;
    log.info(`update ${newObj.key} rv=${oldObj.resourceVersion}->${newObj.resourceVersion} sync=${isSync}`);
    outcome(newObj);
  },
  onDelete(obj, unknown) {
    if (bench(obj)) return;
    log.info(`delete ${obj.key} rv=${obj.resourceVersion} final-state-unknown=${unknown}`);
    outcome(obj);
  },
});
