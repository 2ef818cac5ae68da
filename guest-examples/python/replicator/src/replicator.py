"""replicator: copies annotated ConfigMaps into other namespaces (kubewasm:handler@0.2.0).

A ConfigMap annotated `kubewasm.io/replicate-to: ns1,ns2` (the *source*) gets a copy of the same
name in each of those namespaces, written with server-side apply. A copy carries the source's
`data` and `binaryData` and the label `kubewasm.io/replica-of: <namespace>.<name>`, nothing else
of the source (no annotations, so a copy is never itself a source).

One rule, applied level-triggered to whatever the notification is about:
  - a source: apply every wanted copy that differs from the cache, delete its copies in
    namespaces the annotation no longer names;
  - a copy: if its source still wants it, make it equal again (it was edited or deleted by
    hand), otherwise delete it;
  - a former source (annotation removed, or the source deleted): delete all its copies.
`on-synced` runs the copy rule over every copy, so copies whose source went away while no host
was running are removed once the cache is complete.

Logs one line per action and never object data. Secrets: see `REPLICATE_SECRETS` below and
README.md.
"""

import re

from kubewasm_sdk import ApiError, Fatal, Handler, Object, Retry, kube, log, permission, subscription, world

TARGETS_ANNOTATION = "kubewasm.io/replicate-to"
REPLICA_LABEL = "kubewasm.io/replica-of"

# Secrets are replicated by the same code path, but describe() asks for them only in a build that
# bundles the module `replicator_settings` with `REPLICATE_SECRETS = True` (build.sh makes that
# variant): a plugin must be granted everything describe() asks for, so the default build needs
# no Secret grant at all. See README.md.
try:
    from replicator_settings import REPLICATE_SECRETS
except ImportError:
    REPLICATE_SECRETS = False

# The kinds replicated, with the fields copied from source to copy besides `data`.
KINDS = {"ConfigMap": ("binaryData",)}
if REPLICATE_SECRETS:
    KINDS["Secret"] = ("type",)

# How often every object is replayed as on-update(is-sync=True): copies edited by hand are
# repaired within this period. The manifest may override it (`resync-period-ms`).
RESYNC_PERIOD_MS = 5 * 60 * 1000

# At most this many namespaces per source; more is almost certainly a mistake.
MAX_TARGETS = 50

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
# A label value: at most 63 characters, alphanumerics at both ends, `-_.` inside.
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")


def shown(value: str) -> str:
    """A value from an object, quoted and cut short, for a log line."""
    return repr(value[:64] + ("…" if len(value) > 64 else ""))


def origin(obj: Object) -> str:
    """The value a copy of `obj` carries in its label."""
    return f"{obj.namespace}.{obj.name}"


def fits_label(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.match(value) is not None


def targets(src: Object, report: bool = False) -> list:
    """The valid namespaces the annotation names, in order, without the source's own; `report`
    logs what is ignored (once per reconcile of the source, not per copy)."""
    value = src.annotations.get(TARGETS_ANNOTATION)
    out = []
    for ns in (n.strip() for n in (value or "").split(",")):
        if not ns or ns == src.namespace or ns in out:
            continue
        if len(ns) > 63 or not DNS1123_LABEL.match(ns):
            if report:
                log.warn(f"{src.kind} {src.key}: ignored namespace {shown(ns)}: not a DNS-1123 label")
        elif len(out) == MAX_TARGETS:
            if report:
                log.warn(f"{src.kind} {src.key}: more than {MAX_TARGETS} namespaces, the rest ignored")
            break
        else:
            out.append(ns)
    return out


def copy_in(src: Object, namespace: str) -> Object:
    """The copy's whole desired state; apply removes whatever an earlier apply set and this one
    leaves out (a key deleted from the source)."""
    copy = Object.ref("v1", src.kind, src.name, namespace)
    copy.labels[REPLICA_LABEL] = origin(src)
    for field in ("data",) + KINDS[src.kind]:
        if src.get(field) is not None:
            copy[field] = src[field]
    return copy


def same_content(have: Object, wanted: Object) -> bool:
    return have.labels.get(REPLICA_LABEL) == wanted.labels[REPLICA_LABEL] and all(
        (have.get(f) or None) == (wanted.get(f) or None) for f in ("data",) + KINDS[wanted.kind]
    )


def ensure_copy(src: Object, namespace: str, is_sync: bool) -> None:
    wanted = copy_in(src, namespace)
    cached = kube.cached("v1", src.kind, src.name, namespace)
    if cached is not None:
        if cached.labels.get(REPLICA_LABEL) != origin(src):
            # Someone else's object of that name: never take it over.
            log.warn(f"skipped {namespace}/{src.name}: exists and is not a copy of {origin(src)}")
            return
        if same_content(cached, wanted):
            return
    try:
        applied = kube.apply(wanted)
    except ApiError as e:
        # The namespace does not exist (yet), or the grants do not cover it: not worth a retry
        # loop, and no reason to leave the other namespaces without their copies. The next
        # change or resync of the source tries again.
        if e.code in (403, 404):
            why = f"namespace {namespace} not found" if e.code == 404 else f"forbidden: {e.message}"
            log.warn(f"skipped {namespace}/{src.name}: {why}")
            return
        log.warn(str(e))
        raise
    how = "created" if applied.created else ("repaired" if is_sync else "updated")
    log.info(f"applied {src.kind} {src.key} -> {namespace} ({how})")


def delete_copy(copy: Object, why: str) -> None:
    # False: already gone, or the name now holds another object (the uid precondition failed).
    try:
        if kube.delete(copy):
            log.info(f"deleted {copy.kind} {copy.key} ({why})")
    except ApiError as e:
        log.warn(str(e))
        raise


def not_wanted(namespace: str, src: Object) -> str:
    return f"{namespace} not in {TARGETS_ANNOTATION} of {src.key}"


def reconcile_source(src: Object, is_sync: bool) -> None:
    if not fits_label(origin(src)):
        msg = f"{src.kind} {src.key}: not replicated, {origin(src)} does not fit a label value (63 characters)"
        log.warn(msg)
        raise Fatal(msg)
    wanted = targets(src, report=True)
    # One copy the API server refuses (422, a quota, an admission webhook) must not keep the
    # other namespaces from theirs: every copy is attempted, each failure is logged where it
    # happens, and the source then reports them all at once.
    failures = []
    for ns in wanted:
        try:
            ensure_copy(src, ns, is_sync)
        except (ApiError, Retry, Fatal) as e:
            failures.append(e)
    for copy in kube.cached_list("v1", src.kind, selector=f"{REPLICA_LABEL}={origin(src)}"):
        if copy.namespace not in wanted:
            try:
                delete_copy(copy, not_wanted(copy.namespace, src))
            except ApiError as e:
                failures.append(e)
    if failures:
        # `retry` when any may heal by itself (the redelivery attempts every copy again, and
        # unchanged ones cost no write), else `fatal` until the source changes or resyncs.
        retry = [f for f in failures if heals(f)]
        n = len(failures)
        msg = f"{src.kind} {src.key}: {n} cop{'y' if n == 1 else 'ies'} failed, the others were written; first: {(retry or failures)[0]}"
        raise Retry(msg) if retry else Fatal(msg)


def heals(e: Exception) -> bool:
    return isinstance(e, Retry) or (isinstance(e, ApiError) and e.retryable)


def remove_all_copies(obj: Object, why: str) -> None:
    if not fits_label(origin(obj)):
        return  # it never had copies
    for copy in kube.cached_list("v1", obj.kind, selector=f"{REPLICA_LABEL}={origin(obj)}"):
        delete_copy(copy, why)


def reconcile_copy(copy: Object, exists: bool, is_sync: bool) -> None:
    """A copy changed (`exists`) or went: re-make it if its source still wants it, otherwise
    delete it. A label value that does not read as `<namespace>.<name>` names no source."""
    label = copy.labels[REPLICA_LABEL]
    ns, _, name = label.partition(".")
    src = kube.cached("v1", copy.kind, name, ns) if name and DNS1123_LABEL.match(ns) else None
    if src is not None and copy.namespace in targets(src) and origin(src) == label:
        ensure_copy(src, copy.namespace, is_sync)
    elif exists:
        delete_copy(copy, not_wanted(copy.namespace, src) if src is not None else f"source {label} gone")


def one_of_many(step, *args) -> None:
    """Runs one object's step of on-synced: a fatal error about that object (already logged)
    must not stop the others, a transient one retries on-synced."""
    try:
        step(*args)
    except (ApiError, Retry, Fatal) as e:
        if heals(e):
            raise


class Replicator(Handler):
    name = "replicator"
    subscriptions = [subscription("v1", kind, resync_ms=RESYNC_PERIOD_MS) for kind in KINDS]
    permissions = [permission("v1", kind, ["apply", "delete"]) for kind in KINDS]

    def __init__(self):
        # Sources seen during the initial list (or a replay), as (kind, namespace, name):
        # reconciled in on-synced, when the cache holds their copies too. Without that, every
        # copy not yet listed would be applied again at every start. Bounded by the number of
        # sources in the cluster.
        self.deferred = set()

    def changed(self, obj: Object, old, is_sync: bool, initial: bool = False) -> None:
        if obj.kind not in KINDS:
            return
        if REPLICA_LABEL in obj.labels:
            # During the initial list the cache may not hold the source yet: on-synced decides.
            if not initial:
                reconcile_copy(obj, True, is_sync)
        elif TARGETS_ANNOTATION in obj.annotations:
            if initial:
                self.deferred.add((obj.kind, obj.namespace, obj.name))
            else:
                reconcile_source(obj, is_sync)
        elif old is not None and TARGETS_ANNOTATION in old.annotations:
            remove_all_copies(obj, f"{TARGETS_ANNOTATION} removed from {obj.key}")

    def on_add(self, obj, initial):
        self.changed(obj, None, False, initial)

    def on_update(self, old, new, is_sync):
        self.changed(new, old, is_sync)

    def on_delete(self, obj, unknown):
        if obj.kind not in KINDS:
            return
        if REPLICA_LABEL in obj.labels:
            reconcile_copy(obj, False, False)
        else:
            # Whether or not the last state still had the annotation: copies outlive no source.
            remove_all_copies(obj, f"source {obj.key} deleted")

    def on_synced(self):
        sources = len(self.deferred)
        while self.deferred:
            kind, namespace, name = next(iter(self.deferred))
            found = kube.cached("v1", kind, name, namespace)
            if found is not None:
                one_of_many(reconcile_source, found, True)
            # Only once it is done: a retry of on-synced resumes with the rest.
            self.deferred.discard((kind, namespace, name))
        copies = 0
        for kind in KINDS:
            found = kube.cached_list("v1", kind, selector=REPLICA_LABEL)
            for copy in found:
                one_of_many(reconcile_copy, copy, True, True)
            copies += len(found)
        log.info(f"synced: {sources} sources, {copies} copies checked")


WitWorld = world(Replicator())
