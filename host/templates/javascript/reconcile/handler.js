// {{name}}: a kubewasm controller (world kubewasm:handler@0.3.0 `controller`) of {{api-version}} {{kind}}.
//
// The host turns every event of a {{kind}} into its key and calls `reconcile(key, primary)` once
// per key however many events led there, never twice at once; the SDK reads the {{kind}} from
// the cache first (undefined when it is gone). This one logs what it finds and records a Normal
// Event `Reconciled` about each {{kind}} it sees (the one act it needs a grant for:
// `events = true` in {{name}}.toml). Built on the kubewasm SDK in sdk/.
import { controller, subscription, done, events, log } from './sdk/index.js';
import * as settings from './sdk/settings.js';

export const { validateSettings, describe, reconcile, keysFor, onSynced } = controller({
  name: '{{name}}',
  primary: subscription('{{api-version}}', '{{kind}}'),
  // Kinds this controller creates with an owner reference (`kube.applyOwned(primary, obj)`):
  // their events reconcile the owner. Each kind must also be granted in {{name}}.toml.
  owns: [],
  events: true,
  validateSettings() {
    // A `[settings]` value of the wrong type refuses the load, naming the key.
    settings.get('note', 'string');
  },
  // Returning (or `done()`) is "as wanted"; `requeueAfter(seconds)` comes back later; throwing
  // `new Retry('why')` backs off per key; `new Fatal('why')` waits for the next event.
  reconcile(key, primary) {
    if (primary === undefined) {
      log.info(`reconcile ${key}: gone`);
      return done();
    }
    log.info(`reconcile ${key}: present`);
    const note = settings.get('note', 'string', `{{name}} reconciled ${key}`);
    events.normal(primary, 'Reconciled', 'Reconcile', note);
    return done();
  },
  onSynced() {
    log.info('synced');
  },
});
