// The SDK for components of the world kubewasm:handler@0.1.0 (wit/handler.wit), such as the
// reference configmap-logger: the same handler layer and objects as index.js, over the 0.1.0
// imports only (log; no kube, Events or wasi:http, which 0.1.0 lacks). Works with componentize-js
// and componentize-qjs. `import { handler, subscription, log } from './sdk/v0.1.0.js'`.
import { log as hostLog } from 'kubewasm:handler/log@0.1.0';
import { notifications, subscriptionsOf } from './handler-core.js';

export { Retry, Fatal, Trap, outcome } from './errors.js';
export { KubeObject, key } from './objects.js';
export { Watched } from './handler-core.js';
export const version = '0.3.0';

/** What to be told about: a kind, optionally one namespace, selectors and a resync period
 * (0.1.0 has no projections). */
export function subscription(apiVersion, kind, { namespace, labels, fieldSelector, resyncMs = 0 } = {}) {
  // A Number: componentize-qjs rejects a BigInt for u64, componentize-js takes either.
  return { apiVersion, kind, namespace, labelSelector: labels, fieldSelector, resyncPeriodMs: resyncMs };
}

/** The world's four exports for `h` (`name`, `subscriptions`, `watches`, and any of
 * `onAdd(obj, initial)`, `onUpdate(old, obj, isSync)`, `onDelete(obj, unknown)`,
 * `onWatched(event)`): asking for what 0.1.0 cannot say
 * (permissions, origins, Events) throws while the component is built, not at run time.
 * `export const { describe, onAdd, onUpdate, onDelete } = handler({...})`. */
export function handler(h) {
  if (h.permissions || h.httpOrigins || h.events || h.onSynced) {
    throw new Error('permissions, httpOrigins, events and onSynced need kubewasm:handler@0.2.0 (index.js)');
  }
  const { onAdd, onUpdate, onDelete } = notifications(h, hostLog);
  return { describe: () => ({ name: h.name, subscriptions: subscriptionsOf(h) }), onAdd, onUpdate, onDelete };
}

/** The host's log pipeline (tagged with the plugin's name, rate limited); never log object content. */
export const log = {
  trace: (message) => hostLog('trace', message),
  debug: (message) => hostLog('debug', message),
  info: (message) => hostLog('info', message),
  warn: (message) => hostLog('warn', message),
  error: (message) => hostLog('error', message),
};
