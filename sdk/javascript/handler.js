// The handler a guest writes: one object declaring what it watches and asks for, with `on*`
// functions taking KubeObjects; `handler()` turns it into the exports the world wants, where
// every throw becomes a handler-error (a guest built on the SDK never traps by accident).
import { log } from 'kubewasm:handler/log@0.2.0';
import { outcome, Retry, Fatal, ApiError } from './errors.js';
import { KubeObject } from './objects.js';

/** What to be told about: a kind, optionally one namespace, selectors, a resync period and a
 * projection (`metadataOnly`, or JSON pointers in `fields`). */
export function subscription(apiVersion, kind, { namespace, labels, fieldSelector, resyncMs = 0, metadataOnly = false, fields = [] } = {}) {
  return { apiVersion, kind, namespace, labelSelector: labels, fieldSelector, resyncPeriodMs: BigInt(resyncMs), metadataOnly, fields };
}

/** Access to ask the operator for (`get`, `create`, `apply`, `patch`, `update`, `delete`). */
export function permission(apiVersion, kind, verbs, namespace) {
  return { apiVersion, kind, namespace, verbs };
}

function guarded(name, fn) {
  return (...args) => {
    try {
      fn(...args);
    } catch (e) {
      if (!(e instanceof Retry || e instanceof Fatal || e instanceof ApiError)) {
        log('error', `${name}: ${outcome(e).val}`);
      }
      throw outcome(e);
    }
  };
}

/** The world's exports for `h` (`name`, `subscriptions`, `permissions`, `httpOrigins`, `events`,
 * and any of `onAdd(obj, initial)`, `onUpdate(old, obj, isSync)`, `onDelete(obj, unknown)`,
 * `onSynced()`): `export const { describe, onAdd, onUpdate, onDelete, onSynced } = handler({...})`. */
export function handler(h) {
  const call = (f, ...args) => (f ? f.apply(h, args) : undefined);
  return {
    describe: () => ({
      name: h.name, subscriptions: h.subscriptions || [], permissions: h.permissions || [],
      httpOrigins: h.httpOrigins || [], events: !!h.events,
    }),
    onAdd: guarded('on-add', (obj, initial) => call(h.onAdd, KubeObject.of(obj), initial)),
    onUpdate: guarded('on-update', (old, obj, isSync) => call(h.onUpdate, KubeObject.of(old), KubeObject.of(obj), isSync)),
    onDelete: guarded('on-delete', (obj, unknown) => call(h.onDelete, KubeObject.of(obj), unknown)),
    onSynced: guarded('on-synced', () => call(h.onSynced)),
  };
}
