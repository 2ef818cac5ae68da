// Which objects are this replica's (kubewasm:handler@0.3.0, both worlds), for a plugin whose
// manifest sets `shard = "uid"` or `"namespace"` on a host running several active replicas.
// Imported on its own (`import * as shard from './sdk/shard.js'`), not through index.js: it
// imports `kubewasm:handler/shard@0.3.0`, which a component built against 0.2.0 must not.
//
//   shard.by()               // 'none', 'uid' or 'namespace'
//   shard.ranges()           // [{ start, end }]: BigInts, end undefined for 2^64
//   shard.owns(value)        // is an object with this uid (or namespace) this replica's?
//   shard.ownsObject(obj)    // the same, picking obj's uid or namespace per by()
//
// The host already delivers only this replica's objects; this is for state outside the cluster.
// A plugin that sweeps orphans in an external system deletes only what `owns` says is its own,
// or two replicas would each delete the other's. Not sharded, `by()` is 'none', `ranges()` the
// whole space and `owns` always true, so the same code runs on one replica or many. The answers
// follow the replica's current hold and may change between two calls.
import * as host from 'kubewasm:handler/shard@0.3.0';
import { KubeObject } from './objects.js';

/** What the plugin shards by: 'none', 'uid' or 'namespace' (the manifest's `shard`). */
export function by() {
  return host.by();
}

/** The ranges `[start, end)` this replica holds now, in order, as BigInts (`end` undefined for
 * 2^64): `[{ start: 0n }]` when not sharded, empty while it holds none (or is fenced because it
 * could not renew its Lease). */
export function ranges() {
  return host.ranges().map(({ start, end }) => ({ start, end }));
}

/** Whether `hash` (a BigInt) lies in `range`. */
export function contains(range, hash) {
  return hash >= range.start && (range.end === undefined || hash < range.end);
}

/** Whether an object whose shard key (its uid, or its namespace, per `by()`) is `value` is this
 * replica's now; always true when not sharded. For external state that records an object's uid
 * or namespace. */
export function owns(value) {
  return host.owns(value);
}

/** The shard key of `obj` under `shardBy`: its uid, its namespace ('' when cluster-scoped, as the
 * host hashes it), or undefined when not sharded. `obj` is a `KubeObject`, or a plain object of
 * an object's JSON or of its `metadata`. */
export function key(shardBy, obj) {
  if (shardBy === 'none') return undefined;
  if (shardBy !== 'uid' && shardBy !== 'namespace') {
    throw new TypeError(`shard: by must be 'none', 'uid' or 'namespace', not ${String(shardBy)}`);
  }
  // A KubeObject answers from the metadata the host extracted, without a decode.
  if (obj instanceof KubeObject) return obj[shardBy] || '';
  const meta = obj.metadata !== undefined ? obj.metadata : obj;
  return meta[shardBy] || '';
}

/** Whether `obj` (a `KubeObject`, or a plain object of its JSON or `metadata`) is this replica's
 * now: its uid or its namespace, whichever the plugin shards by, asked of `owns`. Not sharded,
 * the host is asked nothing more. */
export function ownsObject(obj) {
  const value = key(by(), obj);
  return value === undefined ? true : owns(value);
}
