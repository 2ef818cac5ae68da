// Owner references, as a controller sets them on what it owns (controller-runtime's
// SetControllerReference), so the garbage collector deletes the owned objects with their owner
// and a handler can tell its own objects from others'. `kube.applyOwned` is `setController` then
// `kube.apply`; `kube.applyOwnedIfChanged` skips the write when `isUpToDate` finds the cached
// object already as wanted.
//
// Scope is read from the objects themselves: one with a non-empty `metadata.namespace` is
// namespaced, one without is cluster-scoped (so set the namespace of a namespaced object before
// calling `setController`). Objects are KubeObjects or plain objects; a KubeObject the host
// delivered is read without decoding it.
import { Fatal } from './errors.js';
import { wrap } from './objects.js';

const what = (o) => `${o.kind || 'object'} ${o.key}`;

/** The reference a controller puts on what it owns: `owner`'s `apiVersion`, `kind`, `name` and
 * `uid`, with `controller` and `blockOwnerDeletion` true. An owner without a uid (not created
 * yet, or built rather than read back) throws `Fatal`: read it from the cache or the API server
 * first. */
export function controllerRef(owner) {
  const o = wrap(owner);
  for (const [field, value] of [['apiVersion', o.apiVersion], ['kind', o.kind], ['name', o.name]]) {
    if (!value) throw new Fatal(`cannot make ${what(o)} an owner: it has no ${field}`);
  }
  if (!o.uid) {
    throw new Fatal(`cannot make ${what(o)} an owner: it has no uid (not created yet, or not read back); `
      + 'read the owner from the cache or the API server first');
  }
  return { apiVersion: o.apiVersion, kind: o.kind, name: o.name, uid: o.uid, controller: true, blockOwnerDeletion: true };
}

/** Whether `obj` has a controller reference (`controller: true`) to `owner`'s uid: "is this
 * mine". False when `owner` has no uid. */
export function isControlledBy(obj, owner) {
  const uid = wrap(owner).uid;
  const refs = (obj.metadata && obj.metadata.ownerReferences) || [];
  return !!uid && refs.some((r) => r.controller === true && r.uid === uid);
}

/** `obj`'s controller reference (the `ownerReferences` entry with `controller: true`: its
 * `apiVersion`, `kind`, `name`, `uid`), or undefined: who says it is theirs. */
export function controllerOf(obj) {
  const refs = (obj.metadata && obj.metadata.ownerReferences) || [];
  return refs.find((r) => r.controller === true);
}

/** Makes `owner` the controller of `obj` (in place), as controller-runtime's
 * SetControllerReference: throws `Fatal` when `owner` is namespaced and `obj` is cluster-scoped
 * or in another namespace (cross-namespace owner references are not allowed), or when `obj` is
 * already controlled by another object; a reference with `owner`'s uid is replaced, other
 * (non-controller) references are kept, and the new one is appended. */
export function setController(obj, owner) {
  const ref = controllerRef(owner);
  const o = wrap(owner);
  const target = wrap(obj);
  if (o.namespace) {
    let why;
    if (!target.namespace) why = 'a cluster-scoped object cannot have a namespaced owner';
    else if (target.namespace !== o.namespace) why = 'cross-namespace owner references are not allowed';
    if (why) throw new Fatal(`cannot set ${what(o)} as the controller of ${what(target)}: ${why}`);
  }
  const refs = (obj.metadata && obj.metadata.ownerReferences) || [];
  const other = refs.find((r) => r.controller === true && r.uid !== ref.uid);
  if (other) {
    throw new Fatal(`cannot set ${what(o)} as the controller of ${what(target)}: `
      + `it is already controlled by ${other.kind}/${other.name}`);
  }
  const next = refs.map((r) => (r.uid === ref.uid ? ref : r));
  if (!next.includes(ref)) next.push(ref);
  if (!obj.metadata) obj.metadata = {};
  obj.metadata.ownerReferences = next;
}

/** Whether `have` (what the cache holds; undefined: absent) already is as `want` (what the
 * handler would apply) says, so the write can be skipped: every field `want` sets has the same
 * value in `have`; fields only `have` has (status, defaults, others' labels) do not count. Lists
 * match element by element, except `metadata.ownerReferences`, where each wanted reference must
 * be among `have`'s (others may own it too). A field the server normalises (a quantity `1000m`
 * stored as `1`) or a projected cache reads as not up to date: one more apply, never a missed
 * one. */
export function isUpToDate(have, want) {
  return have !== undefined && have !== null && covers(have, want, false);
}

const isEmpty = (v) => v === undefined || v === null || (Array.isArray(v) ? v.length === 0 : typeof v === 'object' && Object.keys(v).length === 0);

function covers(have, want, references) {
  if (Array.isArray(want)) {
    if (!Array.isArray(have)) return false;
    if (references) {
      return want.every((w) => have.some((h) => h && w && h.uid === w.uid && covers(h, w, false)));
    }
    return have.length === want.length && want.every((w, i) => covers(have[i], w, false));
  }
  if (want !== null && typeof want === 'object') {
    if (have === null || typeof have !== 'object' || Array.isArray(have)) return false;
    // An absent field is as good as an empty one, as the server leaves empty ones out.
    return Object.entries(want).every(([k, w]) => (k in have ? covers(have[k], w, k === 'ownerReferences') : isEmpty(w)));
  }
  return want === undefined || have === want;
}
