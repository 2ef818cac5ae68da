// Kubernetes objects as plain JSON objects with getters for the metadata handlers read on every
// call (getters live on the prototype, so JSON.stringify sends only the object's own fields).
//
// An object the host delivers is decoded lazily: its JSON is parsed the first time the handler
// reads a field of it. What the host already extracted (`name`, `namespace`, `uid`, `kind`,
// `apiVersion`, `resourceVersion`, `key`, `label()`) is read without parsing, so a handler that
// filters on those pays no JSON.parse for the objects it skips.

// The WIT object of a KubeObject not decoded yet (a symbol: JSON.stringify and Object.keys
// never see it, and no JSON field can clash with it).
const WIT = Symbol('kubewasm.undecoded');

// Prototype members that take care of an undecoded object themselves.
const SELF_SERVED = new Set(['name', 'namespace', 'uid', 'resourceVersion', 'key', 'label', 'decoded', 'constructor']);

function decode(target) {
  const wit = target[WIT];
  if (wit !== undefined) {
    delete target[WIT];
    Object.assign(target, JSON.parse(wit.json));
  }
  return target;
}

// Every trap but `get` of the cheap members decodes first, so an undecoded object behaves as
// the decoded one everywhere: field reads and writes, `in`, Object.keys, spread, JSON.stringify.
// Getters run on the target itself (receiver `target`): once decoded it holds every field, and
// they then cost no further trap.
const LAZY = {
  get(target, prop) {
    const wit = target[WIT];
    if (prop === WIT) return wit; // what the self-served members read, so first
    if (wit !== undefined && !SELF_SERVED.has(prop)) {
      if (prop === 'kind') return wit.meta.kind;
      if (prop === 'apiVersion') return wit.meta.apiVersion;
      decode(target);
    }
    return Reflect.get(target, prop, target);
  },
  set: (target, prop, value) => Reflect.set(decode(target), prop, value, target),
  has: (target, prop) => (prop === WIT ? Reflect.has(target, prop) : Reflect.has(decode(target), prop)),
  deleteProperty: (target, prop) => Reflect.deleteProperty(decode(target), prop),
  ownKeys: (target) => Reflect.ownKeys(decode(target)),
  getOwnPropertyDescriptor: (target, prop) => Reflect.getOwnPropertyDescriptor(decode(target), prop),
  defineProperty: (target, prop, desc) => Reflect.defineProperty(decode(target), prop, desc),
};

function labelIn(labels, name) {
  for (const [k, v] of labels) if (k === name) return v;
  return undefined;
}

/** One Kubernetes object: its JSON fields, plus `name`, `namespace`, `labels`… from `metadata`.
 * `created` is set on what `kube.apply` returns (undefined elsewhere, never serialised). */
export class KubeObject {
  constructor(fields) {
    Object.assign(this, fields);
  }

  /** The SDK's object for a WIT `object`, decoded on first use (its JSON parsed once). */
  static of(witObject) {
    // A plain assignment (defineProperty costs ~10x more): the symbol is enumerable, but every
    // enumeration goes through a trap that decodes first, which deletes it.
    const target = Object.create(KubeObject.prototype); // no constructor: nothing to assign yet
    target[WIT] = witObject;
    return new Proxy(target, LAZY);
  }

  /** An object naming only where it is: a target for `kube.get`, `delete`, patches. */
  static ref(apiVersion, kind, name, namespace) {
    const metadata = namespace === undefined ? { name } : { name, namespace };
    return new KubeObject({ apiVersion, kind, metadata });
  }

  /** Whether the JSON has been parsed (for tests and cost-conscious handlers). */
  get decoded() { return this[WIT] === undefined; }

  get meta() {
    if (!this.metadata) this.metadata = {};
    return this.metadata;
  }

  get name() {
    const w = this[WIT];
    return w !== undefined ? w.meta.name : this.meta.name || '';
  }

  /** The namespace, or undefined for a cluster-scoped object. */
  get namespace() {
    const w = this[WIT];
    return (w !== undefined ? w.meta.namespace : this.meta.namespace) || undefined;
  }

  get uid() {
    const w = this[WIT];
    return w !== undefined ? w.meta.uid || undefined : this.meta.uid;
  }

  get resourceVersion() {
    const w = this[WIT];
    return w !== undefined ? w.meta.resourceVersion || undefined : this.meta.resourceVersion;
  }

  /** One label's value (undefined when absent), read without decoding the object. */
  label(name) {
    const w = this[WIT];
    return w !== undefined ? labelIn(w.meta.labels, name) : (this.meta.labels || {})[name];
  }

  /** `metadata.labels`, writable (created empty when missing). */
  get labels() {
    if (!this.meta.labels) this.meta.labels = {};
    return this.meta.labels;
  }

  /** `metadata.annotations`, writable (created empty when missing). */
  get annotations() {
    if (!this.meta.annotations) this.meta.annotations = {};
    return this.meta.annotations;
  }

  /** `namespace/name`, or `name` for a cluster-scoped object: the informer's key. */
  get key() {
    const ns = this.namespace;
    return ns ? `${ns}/${this.name}` : this.name;
  }
}

/** The informer key of any object with `metadata`. */
export function key(obj) {
  if (obj instanceof KubeObject) return obj.key;
  const m = (obj && obj.metadata) || {};
  return m.namespace ? `${m.namespace}/${m.name || ''}` : m.name || '';
}

/** `obj` as a KubeObject (a copy of its top-level fields when it is a plain object). */
export function wrap(obj) {
  return obj instanceof KubeObject ? obj : new KubeObject(obj);
}
