// The handler layer both worlds share: one object declaring what it watches and asks for, with
// `on*` functions taking KubeObjects, turned into the exports the world wants, where every
// throw becomes a handler-error (a guest built on the SDK never traps by accident). The
// world-bound entries (handler.js for 0.2.0, v0.1.0.js for 0.1.0) pass in their `log` import.
import { outcome, Retry, Fatal, ApiError, Trap } from './errors.js';
import { KubeObject } from './objects.js';

// What an export throws for `e`, which escaped the handler: a Trap as it is (the instance
// traps, as asked), anything else as the handler-error `outcome` gives, logged when it is not
// one the SDK defines.
function failed(log, name, e) {
  if (e instanceof Trap) return e;
  if (!(e instanceof Retry || e instanceof Fatal || e instanceof ApiError)) {
    log('error', `${name}: ${outcome(e).val}`);
  }
  return outcome(e);
}

/** The on-add/on-update/on-delete/on-synced exports for `h`, objects decoded on first use,
 * failures reported with `log` (the world's `log` import). Each export catches inline (no
 * wrapper, no rest arguments): they run once per notification, and a no-op handler should cost
 * little more than the call itself. */
export function notifications(h, log) {
  const of = KubeObject.of;
  return {
    onAdd(obj, initial) {
      try {
        if (h.onAdd) h.onAdd(of(obj), initial);
      } catch (e) {
        throw failed(log, 'on-add', e);
      }
    },
    onUpdate(old, obj, isSync) {
      try {
        if (h.onUpdate) h.onUpdate(of(old), of(obj), isSync);
      } catch (e) {
        throw failed(log, 'on-update', e);
      }
    },
    onDelete(obj, unknown) {
      try {
        if (h.onDelete) h.onDelete(of(obj), unknown);
      } catch (e) {
        throw failed(log, 'on-delete', e);
      }
    },
    onSynced() {
      try {
        if (h.onSynced) h.onSynced();
      } catch (e) {
        throw failed(log, 'on-synced', e);
      }
    },
  };
}
