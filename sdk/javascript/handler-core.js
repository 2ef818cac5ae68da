// The handler layer every world shares: one object declaring what it watches and asks for, with
// `on*` functions taking KubeObjects, turned into the exports the world wants, where every
// throw becomes a handler-error (a guest built on the SDK never traps by accident). The
// world-bound entries (handler.js and controller.js for 0.2.0 and 0.3.0, v0.1.0.js for 0.1.0)
// pass in their `log` import.
import { outcome, Retry, Fatal, ApiError, Trap } from './errors.js';
import { KubeObject } from './objects.js';

// What an export throws for `e`, which escaped the handler: a Trap as it is (the instance
// traps, as asked), anything else as the handler-error `outcome` gives, logged when it is not
// one the SDK defines.
export function failed(log, name, e) {
  if (e instanceof Trap) return e;
  if (!(e instanceof Retry || e instanceof Fatal || e instanceof ApiError)) {
    log('error', `${name}: ${outcome(e).val}`);
  }
  return outcome(e);
}

/** One event of a kind in the handler's `watches`, as `onWatched` receives it: `change` is
 * `'add'`, `'update'` or `'delete'`, `obj` the object as it is now (the new one of an update, the
 * last state of a deleted one), `old` the previous one of an update (else undefined), and the
 * change's flag as `initial`, `isSync` or `unknown` (false for the other changes). `kind`,
 * `apiVersion` and `isKind()` read the metadata without decoding the object. */
export class Watched {
  constructor(change, obj, old, flag) {
    this.change = change;
    this.obj = obj;
    this.old = old;
    this.initial = change === 'add' && flag;
    this.isSync = change === 'update' && flag;
    this.unknown = change === 'delete' && flag;
  }

  get kind() { return this.obj.kind; }

  get apiVersion() { return this.obj.apiVersion; }

  /** Whether the object is of `kind` in `apiVersion`. */
  isKind(apiVersion, kind) { return this.obj.kind === kind && this.obj.apiVersion === apiVersion; }
}

/** The `validate-settings` export (0.3.0) for `p` (a handler's or a controller's declaration):
 * ok unless `p.validateSettings()` throws, when the thrown message is the refusal (a
 * `SettingError` names the key and the type); only a Trap escapes. */
export function validation(p, log) {
  return function validateSettings() {
    try {
      if (p.validateSettings) p.validateSettings();
    } catch (e) {
      const err = failed(log, 'validate-settings', e);
      throw err instanceof Trap ? err : err.val;
    }
  };
}

const kindKey = (apiVersion, kind) => `${apiVersion}\u0000${kind}`;

/** Every subscription `h` declares: its own (`subscriptions`), then its `watches`. */
export const subscriptionsOf = (h) => [...(h.subscriptions || []), ...(h.watches || [])];

/** The kinds whose events go to `onWatched`: those in `watches` and not in `subscriptions` (a
 * kind in both stays the handler's own, as it was before `watches`). */
function watchedKinds(h) {
  const own = new Set((h.subscriptions || []).map((s) => kindKey(s.apiVersion, s.kind)));
  return new Set((h.watches || []).map((s) => kindKey(s.apiVersion, s.kind)).filter((k) => !own.has(k)));
}

/** The on-add/on-update/on-delete/on-synced exports for `h`, objects decoded on first use,
 * events of watched kinds sent to `onWatched`, failures reported with `log` (the world's `log`
 * import). Each export catches inline (no wrapper, no rest arguments): they run once per
 * notification, and a no-op handler should cost little more than the call itself. */
export function notifications(h, log) {
  const of = KubeObject.of;
  // Worked out at the first event, not now: `subscriptions` and `watches` may be getters reading
  // the settings, which the build cannot.
  let watched;
  const routed = () => (watched === undefined ? (watched = watchedKinds(h)) : watched).size > 0;
  const isWatched = (obj) => watched.has(kindKey(obj.meta.apiVersion, obj.meta.kind));
  return {
    onAdd(obj, initial) {
      try {
        if (routed() && isWatched(obj)) {
          if (h.onWatched) h.onWatched(new Watched('add', of(obj), undefined, initial));
        } else if (h.onAdd) h.onAdd(of(obj), initial);
      } catch (e) {
        throw failed(log, 'on-add', e);
      }
    },
    onUpdate(old, obj, isSync) {
      try {
        if (routed() && isWatched(obj)) {
          if (h.onWatched) h.onWatched(new Watched('update', of(obj), of(old), isSync));
        } else if (h.onUpdate) h.onUpdate(of(old), of(obj), isSync);
      } catch (e) {
        throw failed(log, 'on-update', e);
      }
    },
    onDelete(obj, unknown) {
      try {
        if (routed() && isWatched(obj)) {
          if (h.onWatched) h.onWatched(new Watched('delete', of(obj), undefined, unknown));
        } else if (h.onDelete) h.onDelete(of(obj), unknown);
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
