// The Kubernetes API (through the host, within the plugin's grants) and the informer caches, on
// KubeObjects: a failed call throws ApiError, which the SDK maps to `retry`/`fatal` by code if
// the handler lets it escape.
import * as host from 'kubewasm:handler/kube@0.2.0';
import * as cache from 'kubewasm:handler/cache@0.2.0';
import { ApiError, Fatal, Retry } from './errors.js';
import { KubeObject, wrap } from './objects.js';
import { isControlledBy, isUpToDate, setController } from './owner.js';

function call(what, fn) {
  try {
    return fn();
  } catch (e) {
    // The bindings throw the api-error record (or an Error wrapping it as `payload`).
    const err = e && e.payload !== undefined ? e.payload : e;
    if (err && typeof err.code === 'number') throw new ApiError(what, err.code, err.reason, err.message);
    throw e;
  }
}

const where = (o) => `${o.kind} ${wrap(o).key}`;
const opts = (dryRun, force) => ({ dryRun: !!dryRun, force: !!force });

/** The object as the API server has it now (not the cache), or undefined when it does not exist. */
export function get(apiVersion, kind, name, namespace) {
  const found = call(`get ${kind} ${name}`, () => host.get(apiVersion, kind, namespace, name));
  return found ? KubeObject.of(found) : undefined;
}

/** Server-side apply of `obj` (its whole desired state; fields an earlier apply set and this one
 * leaves out are removed). `force` (default true, as a controller wants) takes fields other
 * managers own. The result's `created` says whether the apply created the object. */
export function apply(obj, { force = true, dryRun = false } = {}) {
  const body = JSON.stringify(obj);
  if (!host.applyOutcome) {
    // A world without apply-outcome: created is unknown.
    return KubeObject.of(call(`apply ${where(obj)}`, () => host.apply(body, opts(dryRun, force))));
  }
  const got = call(`apply ${where(obj)}`, () => host.applyOutcome(body, opts(dryRun, force)));
  const result = KubeObject.of(got.object);
  Object.defineProperty(result, 'created', { value: got.code === 201, enumerable: false });
  return result;
}

/** Makes `owner` the controller of `obj` (`owner.setController`, whose refusals throw `Fatal`
 * and reach no server), then `apply`s it. */
export function applyOwned(owner, obj, { force = true, dryRun = false } = {}) {
  setController(obj, owner);
  return apply(obj, { force, dryRun });
}

/** `applyOwned`, unless `have` (the object as the cache holds it, or undefined) is already as
 * wanted (`owner.isUpToDate`, owner reference included): undefined when nothing was written. The
 * check saves a write per event for a controller that re-applies on every resync or change.
 * Called without `have` (two arguments), it reads the cache for `obj`'s kind, namespace and
 * name (a kind the handler watches or the controller owns). */
export function applyOwnedIfChanged(owner, obj, have, { force = true, dryRun = false } = {}) {
  setController(obj, owner);
  if (arguments.length < 3) {
    const o = wrap(obj);
    have = cachedGet(o.apiVersion, o.kind, o.name, o.namespace);
  }
  if (isUpToDate(have, obj)) return undefined;
  return apply(obj, { force, dryRun });
}

/** Creates `obj`; ApiError 409 when it exists. */
export function create(obj, { dryRun = false } = {}) {
  return KubeObject.of(call(`create ${where(obj)}`, () => host.create(JSON.stringify(obj), opts(dryRun, false))));
}

/** Replaces `obj` (or its `subresource`) if its resourceVersion is still current (else 409). */
export function replace(obj, { subresource, dryRun = false } = {}) {
  return KubeObject.of(call(`replace ${where(obj)}`, () => host.replace(JSON.stringify(obj), subresource, opts(dryRun, false))));
}

/** Patches the object `target` names: `body` an object for `merge`/`strategic`, a list of
 * operations for `json`. */
export function patch(target, body, { type = 'merge', subresource, dryRun = false } = {}) {
  const t = wrap(target);
  return KubeObject.of(call(`patch ${where(t)}`, () => host.patch(t.apiVersion, t.kind, t.namespace, t.name, type,
    JSON.stringify(body), subresource, opts(dryRun, false))));
}

/** An RFC 7386 merge patch: keys set to null are removed. */
export const mergePatch = (target, body) => patch(target, body, { type: 'merge' });

/** Merges `status` into the status subresource of the object `target` names. */
export const patchStatus = (target, status) => patch(target, { status }, { type: 'merge', subresource: 'status' });

/** Deletes the object `target` names, only if it still has `target`'s uid (or `uid`): a new
 * object of the same name is never deleted in its stead. False when there was nothing to delete
 * (gone already, or the name holds another object now). */
export function del(target, uid) {
  const t = wrap(target);
  const pre = uid || t.uid;
  try {
    call(`delete ${where(t)}`, () => host.delete(t.apiVersion, t.kind, t.namespace, t.name, pre));
  } catch (e) {
    if (e instanceof ApiError && (e.code === 404 || (e.code === 409 && pre))) return false;
    throw e;
  }
  return true;
}

// The host's words for the one cache refusal that heals by itself (an informer starting or
// stopping); every other refusal (a kind the handler does not subscribe to, a bad selector, a
// list over the per-call bound) gives the same answer on every redelivery: Fatal.
const CACHE_TRANSIENT = 'is not available';
// The host's words for a read of a kind the plugin does not subscribe to (its message goes on
// with the manifest line that grants the watch).
const NOT_SUBSCRIBED = 'does not subscribe to';

// An unsubscribed kind also gets the handler line that subscribes to it, since the host can only
// speak of describe() in general.
function cached(call, apiVersion, kind, fn) {
  try {
    return fn();
  } catch (e) {
    let message = String(e && e.payload !== undefined ? e.payload : e);
    if (message.includes(CACHE_TRANSIENT)) throw new Retry(`${call} ${kind}: ${message}`);
    if (message.includes(NOT_SUBSCRIBED)) {
      message += `; in JavaScript, add subscription('${apiVersion}', '${kind}') to the handler's watches (a controller's owns)`;
    }
    throw new Fatal(`${call} ${kind}: ${message}`);
  }
}

/** The object as the informer cache holds it (a kind in `subscriptions` or `watches`), or
 * undefined. */
export function cachedGet(apiVersion, kind, name, namespace) {
  const found = cached('cache.get', apiVersion, kind, () => cache.get(apiVersion, kind, namespace, name));
  return found ? KubeObject.of(found) : undefined;
}

/** Every cached object of a subscribed kind, optionally in one namespace and matching a label
 * selector (the host refuses answers over 2,000 objects / 8 MiB: Fatal, narrow the namespace or
 * selector). */
export function cachedList(apiVersion, kind, { namespace, selector } = {}) {
  return cached('cache.list', apiVersion, kind, () => cache.list(apiVersion, kind, namespace, selector)).map(KubeObject.of);
}

/** Every cached object of `kind` (a kind the controller owns) that `owner` controls, in `owner`'s
 * namespace (anywhere for a cluster-scoped owner): what a reconcile compares with what it wants,
 * to delete what is no longer wanted. */
export function cachedOwned(owner, apiVersion, kind, { selector } = {}) {
  const o = wrap(owner);
  return cachedList(apiVersion, kind, { namespace: o.namespace, selector }).filter((obj) => isControlledBy(obj, o));
}
