// The SDK's controller world inside a real component: `run.sh` builds this against
// `--world-name controller` (wit/0.3.0). A ConfigMap labelled `kubewasm.io/smoke=primary` in
// `default` is a primary; its `data.mode` picks one act: none copies its data into an owned
// Secret `<name>-copy` (with the `greeting` setting), `requeue` asks to come back in 2 s, `bug`
// is a SyntaxError the SDK turns into a retry, `shard` logs what the `shard` import answers. A deleted primary logs `gone <key>`. The setting
// `copies` must be an integer (validateSettings refuses the load otherwise). The same controller
// as the Python SDK's tests/component/src/controller_smoke.py.
import { controller, subscription, permission, watch, sameName, done, requeueAfter, kube, log, KubeObject } from '../../index.js';
import * as settings from '../../settings.js';
import * as shard from '../../shard.js';

// base64 of a string's UTF-8 bytes (btoa takes Latin-1).
const b64 = (text) => btoa(unescape(encodeURIComponent(text)));

export const { validateSettings, describe, reconcile, keysFor, onSynced } = controller({
  name: 'sdk-controller-smoke',
  primary: subscription('v1', 'ConfigMap', { namespace: 'default', labels: 'kubewasm.io/smoke=primary' }),
  owns: [subscription('v1', 'Secret', { namespace: 'default' })],
  watches: [watch('v1', 'Service', sameName(), { namespace: 'default' })],
  permissions: [permission('v1', 'Secret', ['apply'], 'default')],
  validateSettings() {
    settings.get('copies', 'integer');
  },
  reconcile(key, cm) {
    if (cm === undefined) {
      log.info(`gone ${key}`);
      return done();
    }
    const data = cm.data || {};
    if (data.mode === 'requeue') {
      log.info(`requeue ${key}`);
      return requeueAfter(2);
    }
    if (data.mode === 'shard') {
      const ranges = shard.ranges().map((r) => `${r.start}-${r.end === undefined ? 'top' : r.end}`);
      log.info(`shard ${shard.by()} ranges=${ranges.join(',')} owns=${shard.ownsObject(cm)}`);
      return done();
    }
    if (data.mode === 'bug') JSON.parse('{');
    const secret = KubeObject.ref('v1', 'Secret', `${cm.name}-copy`, cm.namespace);
    const copied = { ...data, greeting: settings.get('greeting', 'string', 'hello') };
    secret.data = Object.fromEntries(Object.entries(copied).map(([k, v]) => [k, b64(v)]));
    const got = kube.applyOwnedIfChanged(cm, secret);
    log.info(`reconciled ${key}: ${got === undefined ? 'unchanged' : got.created ? 'created' : 'updated'}`);
    return done();
  },
});
