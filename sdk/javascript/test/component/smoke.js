// The SDK inside a real component: what the unit tests' stubs cannot show (wasi:http requests
// and their errors, the export guard). Each ConfigMap's `data.mode` picks one act; `run.sh` builds
// this against kubewasm:handler@0.3.0 (hence `validateSettings` among the exports: ok, as no
// `validateSettings` is declared) and runs `smoke.yaml` through `kubewasm test`.
import { handler, subscription, http, log, HttpError } from '../../index.js';

export const { validateSettings, describe, onAdd, onUpdate, onDelete, onSynced } = handler({
  name: 'sdk-smoke',
  subscriptions: [subscription('v1', 'ConfigMap', { namespace: 'default' })],
  httpOrigins: ['http://127.0.0.1:9000'],
  onAdd(obj) {
    const { mode, url } = obj.data || {};
    if (mode === 'get') {
      const r = http.get(url, { timeout: 5 });
      log.info(`get ${r.status} ${r.json().x} ${r.headers['content-type']}`);
    } else if (mode === 'post') {
      const r = http.postJson(url, { a: 1, name: obj.name });
      log.info(`post ${r.status} ok=${r.ok}`);
    } else if (mode === 'denied') {
      try {
        http.fetch(url);
      } catch (e) {
        if (!(e instanceof HttpError)) throw e;
        log.info(`denied ${e.constructor.name} ${e.code}`);
      }
    } else if (mode === 'bug') {
      JSON.parse('{');
    }
  },
});
