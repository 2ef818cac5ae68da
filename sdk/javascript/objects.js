// Kubernetes objects as plain JSON objects with getters for the metadata handlers read on every
// call (getters live on the prototype, so JSON.stringify sends only the object's own fields).

/** One Kubernetes object: its JSON fields, plus `name`, `namespace`, `labels`… from `metadata`.
 * `created` is set on what `kube.apply` returns (undefined elsewhere, never serialised). */
export class KubeObject {
  constructor(fields) {
    Object.assign(this, fields);
  }

  /** The SDK's object for a WIT `object` (its JSON parsed once). */
  static of(witObject) {
    return new KubeObject(JSON.parse(witObject.json));
  }

  /** An object naming only where it is: a target for `kube.get`, `delete`, patches. */
  static ref(apiVersion, kind, name, namespace) {
    const metadata = namespace === undefined ? { name } : { name, namespace };
    return new KubeObject({ apiVersion, kind, metadata });
  }

  get meta() {
    if (!this.metadata) this.metadata = {};
    return this.metadata;
  }

  get name() { return this.meta.name || ''; }

  /** The namespace, or undefined for a cluster-scoped object. */
  get namespace() { return this.meta.namespace || undefined; }

  get uid() { return this.meta.uid; }

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
  get key() { return key(this); }
}

/** The informer key of any object with `metadata`. */
export function key(obj) {
  const m = (obj && obj.metadata) || {};
  return m.namespace ? `${m.namespace}/${m.name || ''}` : m.name || '';
}

/** `obj` as a KubeObject (a copy of its top-level fields when it is a plain object). */
export function wrap(obj) {
  return obj instanceof KubeObject ? obj : new KubeObject(obj);
}
