// {{name}}: a kubewasm handler (world kubewasm:handler@0.2.0) for {{api-version}} {{kind}}.
//
// Logs every call with the object's key and records a Normal Event `Observed` about each object it
// sees added (the one act it needs a grant for: `events = true` in {{name}}.toml). Built on the
// kubewasm SDK in sdk/ (objects, kube, events, fetch, log).
import { handler, subscription, events, log } from './sdk/index.js';

// Returning is `ok`; `throw new Retry('why')` asks for a redelivery with backoff, `new
// Fatal('why')` gives up; anything else thrown is a `retry` with its message (never a trap).
export const { describe, onAdd, onUpdate, onDelete, onSynced } = handler({
  name: '{{name}}',
  subscriptions: [subscription('{{api-version}}', '{{kind}}')],
  // Asks for the `events` grant; without it the plugin is not loaded.
  events: true,
  onAdd(obj, initial) {
    log.info(`add ${obj.key} init=${initial}`);
    events.normal(obj, 'Observed', 'Observe', `{{name}} saw ${obj.key}`);
  },
  onUpdate(_old, obj, isSync) {
    log.info(`update ${obj.key} sync=${isSync}`);
  },
  onDelete(obj, unknown) {
    log.info(`delete ${obj.key} final-state-unknown=${unknown}`);
  },
  onSynced() {
    log.info('synced');
  },
});
