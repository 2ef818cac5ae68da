// The handler layer for the handler worlds of kubewasm:handler@0.3.0 and 0.2.0 (handler-core.js
// does the work): the six exports, with `describe` reporting permissions, origins and Events
// too. 0.3.0 asks for `validateSettings` besides 0.2.0's five; a 0.2.0 component leaves it out
// of its export list.
import { log } from 'kubewasm:handler/log@0.2.0';
import { notifications, subscriptionsOf, validation } from './handler-core.js';

/** What to be told about: a kind, optionally one namespace, selectors, a resync period and a
 * projection (`metadataOnly`, or JSON pointers in `fields`). */
export function subscription(apiVersion, kind, { namespace, labels, fieldSelector, resyncMs = 0, metadataOnly = false, fields = [] } = {}) {
  return { apiVersion, kind, namespace, labelSelector: labels, fieldSelector, resyncPeriodMs: BigInt(resyncMs), metadataOnly, fields };
}

/** Access to ask the operator for (`get`, `create`, `apply`, `patch`, `update`, `delete`). */
export function permission(apiVersion, kind, verbs, namespace) {
  return { apiVersion, kind, namespace, verbs };
}

/** The world's exports for `h` (`name`, `subscriptions`, `watches`, `permissions`,
 * `httpOrigins`, `events`, and any of `validateSettings()`, `onAdd(obj, initial)`,
 * `onUpdate(old, obj, isSync)`, `onDelete(obj, unknown)`, `onSynced()`, `onWatched(event)`:
 * events of the kinds in `watches` reach `onWatched` as a `Watched`, every other event the `on*`
 * of its change). Under 0.3.0:
 * `export const { validateSettings, describe, onAdd, onUpdate, onDelete, onSynced } = handler({...})`;
 * under 0.2.0 the same without `validateSettings`. */
export function handler(h) {
  return {
    validateSettings: validation(h, log),
    describe: () => ({
      name: h.name, subscriptions: subscriptionsOf(h), permissions: h.permissions || [],
      httpOrigins: h.httpOrigins || [], events: !!h.events,
    }),
    ...notifications(h, log),
  };
}
