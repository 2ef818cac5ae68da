// {{name}}: a kubewasm handler (world kubewasm:handler@0.2.0) for {{api-version}} {{kind}}.
//
// Logs every call with the object's key and records a Normal Event `Observed` about each object it
// sees added (the one act it needs a grant for: `events = true` in {{name}}.toml).
import { log } from 'kubewasm:handler/log@0.2.0';
import { emit } from 'kubewasm:handler/events@0.2.0';

// `namespace/name`, or `name` for cluster-scoped objects.
const key = (meta) => (meta.namespace == null ? meta.name : `${meta.namespace}/${meta.name}`);

export function describe() {
  return {
    name: '{{name}}',
    subscriptions: [{
      apiVersion: '{{api-version}}', kind: '{{kind}}', namespace: undefined, labelSelector: undefined,
      fieldSelector: undefined, resyncPeriodMs: 0, metadataOnly: false, fields: [],
    }],
    permissions: [],
    httpOrigins: [],
    // Asks for the `events` grant; without it the plugin is not loaded.
    events: true,
  };
}

// Returning is `ok`; `throw { tag: 'retry', val: 'why' }` asks for a redelivery with backoff,
// `{ tag: 'fatal', … }` gives up. Any other exception traps the instance.
export function onAdd(obj, isInInitialList) {
  const k = key(obj.meta);
  log('info', `add ${k} init=${isInInitialList}`);
  emit(obj.meta, 'normal', 'Observed', 'Observe', `{{name}} saw ${k}`);
}

export function onUpdate(_old, obj, isSync) {
  log('info', `update ${key(obj.meta)} sync=${isSync}`);
}

export function onDelete(obj, finalStateUnknown) {
  log('info', `delete ${key(obj.meta)} final-state-unknown=${finalStateUnknown}`);
}

export function onSynced() {
  log('info', 'synced');
}
