// The handler layer both worlds share: one object declaring what it watches and asks for, with
// `on*` functions taking KubeObjects, turned into the exports the world wants, where every
// throw becomes a handler-error (a guest built on the SDK never traps by accident). The
// world-bound entries (handler.js for 0.2.0, v0.1.0.js for 0.1.0) pass in their `log` import.
import { outcome, Retry, Fatal, ApiError, Trap } from './errors.js';
import { KubeObject } from './objects.js';

function guarded(log, name, fn) {
  return (...args) => {
    try {
      fn(...args);
    } catch (e) {
      if (e instanceof Trap) throw e;
      if (!(e instanceof Retry || e instanceof Fatal || e instanceof ApiError)) {
        log('error', `${name}: ${outcome(e).val}`);
      }
      throw outcome(e);
    }
  };
}

/** The on-add/on-update/on-delete exports for `h`, objects decoded on first use, failures
 * reported with `log` (the world's `log` import). */
export function notifications(h, log) {
  const call = (f, ...args) => (f ? f.apply(h, args) : undefined);
  return {
    onAdd: guarded(log, 'on-add', (obj, initial) => call(h.onAdd, KubeObject.of(obj), initial)),
    onUpdate: guarded(log, 'on-update', (old, obj, isSync) => call(h.onUpdate, KubeObject.of(old), KubeObject.of(obj), isSync)),
    onDelete: guarded(log, 'on-delete', (obj, unknown) => call(h.onDelete, KubeObject.of(obj), unknown)),
    onSynced: guarded(log, 'on-synced', () => call(h.onSynced)),
  };
}
