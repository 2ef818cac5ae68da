// Controllers: the world `controller` of kubewasm:handler@0.3.0. A controller declares the kind it
// reconciles (`primary`), the kinds it creates and owns (`owns`) and related kinds it watches
// (`watches`, each with the mapping that names the primaries an event concerns); the host turns
// every event of any of them into keys of the primary kind, queues them (a key waits at most
// once, is never reconciled twice at once) and calls `reconcile(key, primary)` with the primary
// as the cache holds it now (undefined: it is gone).
//
//   export const { validateSettings, describe, reconcile, keysFor, onSynced } = controller({
//     name: 'sites',
//     primary: subscription('example.com/v1', 'Site'),
//     owns: [subscription('apps/v1', 'Deployment')],
//     watches: [watch('v1', 'Secret', field('/spec/secretRef/name'))],
//     reconcile(key, site) { ...; return done(); },   // or requeueAfter(30): seconds
//   });
//
// Failures are a handler's: Retry, Fatal, ApiError by its code, anything else a logged `retry`;
// the host backs a failed key off and reconciles it again.
import { log } from 'kubewasm:handler/log@0.2.0';
import { Trap } from './errors.js';
import { failed, validation } from './handler-core.js';
import { subscription } from './handler.js';
import { cachedGet } from './kube.js';
import { KubeObject, wrap } from './objects.js';

// JSON.stringify cannot say a BigInt (a subscription's resyncPeriodMs, an outcome's delay).
const big = (_k, v) => (typeof v === 'bigint' ? Number(v) : v);

/** The key of one primary object, as `reconcile` receives it: `namespace` (undefined for a
 * cluster-scoped kind) and `name`; `String(key)` is `namespace/name` (or `name`). */
export class ObjectKey {
  constructor(namespace, name) {
    this.namespace = namespace || undefined;
    this.name = name;
  }

  toString() { return this.namespace ? `${this.namespace}/${this.name}` : this.name; }

  /** The key `value` names: an ObjectKey, a `[namespace, name]` pair, a string
   * `namespace/name` (or `name`, cluster-scoped), or an object (with `metadata`). */
  static of(value) {
    if (value instanceof ObjectKey) return value;
    if (typeof value === 'string') {
      const slash = value.indexOf('/');
      return slash < 0 ? new ObjectKey(undefined, value) : new ObjectKey(value.slice(0, slash), value.slice(slash + 1));
    }
    if (Array.isArray(value) && value.length === 2) return new ObjectKey(value[0], value[1]);
    if (value !== null && typeof value === 'object' && (value instanceof KubeObject || value.metadata)) {
      const o = wrap(value);
      return new ObjectKey(o.namespace, o.name);
    }
    throw new TypeError(`not an object key: ${JSON.stringify(value, big)} (an ObjectKey, [namespace, name], 'namespace/name' or an object)`);
  }
}

/** The primary with the watched object's own name (in its namespace): a Secret or ConfigMap named
 * after its primary. */
export const sameName = () => ({ tag: 'same-name' });

/** The primary named by the value of the watched object's label `name`; an object without the
 * label names none. */
export function label(name) {
  if (!name) throw new TypeError('label(): the mapping needs a label name');
  return { tag: 'label', val: name };
}

/** The primary named by the string at the JSON pointer `pointer` (RFC 6901, e.g.
 * `/spec/parentRef/name`) of the watched object; an absent or non-string value names none. */
export function field(pointer) {
  if (typeof pointer !== 'string' || !pointer.startsWith('/')) {
    throw new TypeError(`field(${JSON.stringify(pointer)}): a JSON pointer starts with '/', e.g. '/spec/secretRef/name'`);
  }
  return { tag: 'field', val: pointer };
}

/** The controller's `keysFor(obj)` names them: one guest call per event of the kind, so only
 * where the other mappings cannot say it. */
export const guest = () => ({ tag: 'guest' });

const MAPPINGS = new Set(['same-name', 'label', 'field', 'guest']);
const isMapping = (m) => m !== null && typeof m === 'object' && MAPPINGS.has(m.tag);

/** A kind the controller watches but does not own, with the `mapping` from its events to primary
 * keys; the options are `subscription()`'s. */
export function watch(apiVersion, kind, mapping, options = {}) {
  if (!isMapping(mapping)) {
    throw new TypeError(`watch('${apiVersion}', '${kind}', ...): mapping must be sameName(), label(name), field(pointer) or guest()`);
  }
  return { subscription: subscription(apiVersion, kind, options), mapping };
}

const DONE = Object.freeze({ tag: 'done' });

/** `reconcile`'s answer when the primary is as wanted (returning nothing says the same). */
export const done = () => DONE;

/** `reconcile`'s answer to come back after `seconds` (fractions allowed; the host waits at least
 * one second), unless an event brings the key back sooner: for state nothing watched reports (an
 * external system, a clock). */
export function requeueAfter(seconds) {
  if (typeof seconds !== 'number') throw new TypeError(`requeueAfter(${String(seconds)}): seconds must be a number`);
  if (!(seconds > 0) || seconds === Infinity) throw new RangeError(`requeueAfter(${seconds}): seconds must be positive and finite`);
  return { tag: 'requeue-after', val: BigInt(Math.max(1, Math.round(seconds * 1000))) };
}

const isOutcome = (o) => o === DONE || (o !== null && typeof o === 'object'
  && ((o.tag === 'done' && o.val === undefined) || (o.tag === 'requeue-after' && typeof o.val === 'bigint')));

// A declaration behind a getter may read the settings, so it waits for describe; the others
// are checked while the component is built.
const DYNAMIC = Symbol('getter');
function declared(c, prop) {
  const d = Object.getOwnPropertyDescriptor(c, prop);
  return d && d.get ? DYNAMIC : c[prop];
}

function check(c) {
  const what = typeof c.name === 'string' ? `controller ${c.name}` : 'controller';
  if (typeof c.reconcile !== 'function') throw new TypeError(`${what}: reconcile(key, primary) is required`);
  const primary = declared(c, 'primary');
  if (primary !== DYNAMIC && !(primary && primary.kind)) {
    throw new TypeError(`${what}: primary: subscription(apiVersion, kind, ...) is required`);
  }
  const owns = declared(c, 'owns');
  for (const s of owns === DYNAMIC ? [] : owns || []) {
    if (!s || !s.kind || s.subscription) {
      throw new TypeError(`${what}: owns takes subscription(apiVersion, kind, ...), not ${JSON.stringify(s, big)}`);
    }
  }
  const watches = declared(c, 'watches');
  if (watches === DYNAMIC) return;
  for (const w of watches || []) {
    if (!w || !w.subscription || !isMapping(w.mapping)) {
      throw new TypeError(`${what}: watches takes watch(apiVersion, kind, mapping), not ${JSON.stringify(w, big)}`);
    }
  }
  if ((watches || []).some((w) => w.mapping.tag === 'guest') && typeof c.keysFor !== 'function') {
    throw new TypeError(`${what}: a watch with the guest() mapping needs keysFor(obj)`);
  }
}

const keyText = (obj) => (obj.meta.namespace ? `${obj.meta.namespace}/${obj.meta.name}` : obj.meta.name);

/** The controller world's exports for `c` (`name`, `primary`, `owns`, `watches`, `permissions`,
 * `httpOrigins`, `events`, `reconcile(key, primary)`, and any of `validateSettings()`,
 * `keysFor(obj)`, `onSynced()`):
 * `export const { validateSettings, describe, reconcile, keysFor, onSynced } = controller({...})`. */
export function controller(c) {
  check(c);
  const of = KubeObject.of;
  return {
    validateSettings: validation(c, log),
    describe: () => ({
      name: c.name || 'controller', primary: c.primary, owns: c.owns || [],
      watches: (c.watches || []).map((w) => ({ subscription: w.subscription, mapping: w.mapping })),
      permissions: c.permissions || [], httpOrigins: c.httpOrigins || [], events: !!c.events,
    }),
    reconcile(key) {
      try {
        const p = c.primary;
        const got = c.reconcile(new ObjectKey(key.namespace, key.name), cachedGet(p.apiVersion, p.kind, key.name, key.namespace));
        if (got === undefined || got === null) return DONE;
        if (!isOutcome(got)) throw new TypeError(`reconcile returned ${JSON.stringify(got, big)}: return done(), requeueAfter(seconds) or nothing`);
        return got;
      } catch (e) {
        throw failed(log, 'reconcile', e);
      }
    },
    keysFor(obj) {
      try {
        if (!c.keysFor) return [];
        return (c.keysFor(of(obj)) || []).map((k) => {
          const key = ObjectKey.of(k);
          return { namespace: key.namespace, name: key.name };
        });
      } catch (e) {
        if (e instanceof Trap) throw e;
        // The export has no error to return: log, name none.
        log('error', `keys-for ${obj.meta.kind} ${keyText(obj)}: ${e && e.name ? e.name : 'Error'}: ${e && e.message !== undefined ? e.message : String(e)}`);
        return [];
      }
    },
    onSynced() {
      try {
        if (c.onSynced) c.onSynced();
      } catch (e) {
        throw failed(log, 'on-synced', e);
      }
    },
  };
}
