// Kubernetes Events about objects. The host writes them (folding repeats, rate limiting), so
// recording one never fails; without the `events` grant nothing is recorded.
import { emit } from 'kubewasm:handler/events@0.2.0';
import { wrap } from './objects.js';

/** The WIT object-meta of an object (as the handler got it, or as a write returned it). */
export function metaOf(obj) {
  const o = wrap(obj);
  const m = o.metadata || {};
  return {
    apiVersion: o.apiVersion, kind: o.kind, namespace: o.namespace, name: o.name, uid: m.uid || '',
    resourceVersion: m.resourceVersion || '', generation: m.generation === undefined ? undefined : BigInt(m.generation),
    labels: Object.entries(m.labels || {}),
  };
}

/** Records a Normal Event about `regarding`; `reason` is CamelCase, `action` defaults to it. */
export const normal = (regarding, reason, note, action) => emit(metaOf(regarding), 'normal', reason, action || reason, note);

/** Records a Warning Event about `regarding`, as `normal` does. */
export const warning = (regarding, reason, note, action) => emit(metaOf(regarding), 'warning', reason, action || reason, note);
