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

// The arguments as the WIT orders them, from positions or from one options object. All three are
// required strings, so a call in the earlier order without an action (reason, note) throws
// instead of recording the note as the action.
function args(fn, reason, action, note) {
  if (reason !== null && typeof reason === 'object') ({ reason, action, note } = reason);
  for (const [name, value] of [['reason', reason], ['action', action], ['note', note]]) {
    if (typeof value !== 'string') throw new TypeError(`events.${fn}: ${name} must be a string (arguments: regarding, reason, action, note, or regarding, { reason, action, note })`);
  }
  return [reason, action, note];
}

/** Records a Normal Event about `regarding`: the `reason` (CamelCase, e.g. `QuotaCreated`), the
 * `action` taken (e.g. `Apply`), then the `note` for people, the WIT's order and the Rust and
 * Python SDKs'; or one object `{ reason, action, note }`. */
export const normal = (regarding, reason, action, note) => emit(metaOf(regarding), 'normal', ...args('normal', reason, action, note));

/** Records a Warning Event about `regarding`, as `normal` does. */
export const warning = (regarding, reason, action, note) => emit(metaOf(regarding), 'warning', ...args('warning', reason, action, note));
