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

import functools
import json
import re

import wit_world
from componentize_py_types import Err
from wit_world.imports import cache, kube, log
from wit_world.imports import kubewasm_handler_types as types
from wit_world.imports.kubewasm_handler_types import HandlerError_Fatal, HandlerError_Retry

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

WRITE = kube.WriteOptions(dry_run=False, force=True)


def guarded(export):
    """Lets `Err` through and turns every other exception into a handler-error, so a bug or an
    odd object never traps the instance: a bug does not heal on redelivery (`fatal`)."""

    @functools.wraps(export)
    def wrapper(*args):
        try:
            return export(*args)
        except Err:
            raise
        except Exception as e:  # noqa: BLE001 - deliberately broad, see above
            log.log(log.Level.ERROR, f"{export.__name__}: {type(e).__name__}: {e}")
            raise Err(HandlerError_Fatal(f"{type(e).__name__}: {e}"))

    return wrapper


def shown(value: str) -> str:
    """A value from an object, quoted and cut short, for a log line."""
    return repr(value[:64] + ("…" if len(value) > 64 else ""))


def api_failed(what: str, e: Err) -> Err:
    """A failed kube call as a handler-error: client errors (bad request, forbidden, invalid) do
    not heal by themselves, everything else (conflicts, throttling, server errors) may."""
    err = e.value
    msg = f"{what}: {err.code} {err.reason}: {err.message}"
    log.log(log.Level.WARN, msg)
    if err.code in (400, 403, 422):
        return Err(HandlerError_Fatal(msg))
    return Err(HandlerError_Retry(msg))


class Source:
    """What the replicator needs of a source object."""

    def __init__(self, obj: types.Object):
        self.meta = obj.meta
        self.kind = obj.meta.kind
        self.namespace = obj.meta.namespace or ""
        self.name = obj.meta.name
        self.body = json.loads(obj.json)
        self.origin = f"{self.namespace}.{self.name}"

    def annotation(self):
        annotations = (self.body.get("metadata") or {}).get("annotations") or {}
        return annotations.get(TARGETS_ANNOTATION)

    def targets(self, report: bool = False) -> list:
        """The valid namespaces the annotation names, in order, without the source's own;
        `report` logs what is ignored (once per reconcile of the source, not per copy)."""
        value = self.annotation()
        if value is None:
            return []
        out = []
        for raw in value.split(","):
            ns = raw.strip()
            if not ns or ns == self.namespace or ns in out:
                continue
            if len(ns) > 63 or not DNS1123_LABEL.match(ns):
                if report:
                    log.log(log.Level.WARN, f"{self.key()}: ignored namespace {shown(ns)}: not a DNS-1123 label")
                continue
            if len(out) == MAX_TARGETS:
                if report:
                    log.log(log.Level.WARN, f"{self.key()}: more than {MAX_TARGETS} namespaces, the rest ignored")
                break
            out.append(ns)
        return out

    def key(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def copy_in(self, namespace: str) -> dict:
        """The copy's whole desired state; apply removes whatever an earlier apply set and this
        one leaves out (a key deleted from the source)."""
        copy = {
            "apiVersion": "v1",
            "kind": self.kind,
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {REPLICA_LABEL: self.origin},
            },
        }
        for field in ("data",) + KINDS[self.kind]:
            if self.body.get(field) is not None:
                copy[field] = self.body[field]
        return copy


def replica_of(meta: types.ObjectMeta):
    for k, v in meta.labels:
        if k == REPLICA_LABEL:
            return v
    return None


def copies_of(kind: str, origin: str) -> list:
    """Every cached copy of the source `origin` (`<namespace>.<name>`), in any namespace."""
    try:
        return cache.list("v1", kind, None, f"{REPLICA_LABEL}={origin}")
    except Err as e:
        raise Err(HandlerError_Retry(f"cache.list {kind}: {e.value}"))


def same_content(cached: types.Object, wanted: dict) -> bool:
    have = json.loads(cached.json)
    fields = ("data",) + KINDS[wanted["kind"]]
    return replica_of(cached.meta) == wanted["metadata"]["labels"][REPLICA_LABEL] and all(
        (have.get(f) or None) == (wanted.get(f) or None) for f in fields
    )


def ensure_copy(src: Source, namespace: str, is_sync: bool) -> None:
    wanted = src.copy_in(namespace)
    try:
        cached = cache.get("v1", src.kind, namespace, src.name)
    except Err as e:
        raise Err(HandlerError_Retry(f"cache.get {src.kind}: {e.value}"))
    if cached is not None:
        if replica_of(cached.meta) != src.origin:
            # Someone else's object of that name: never take it over.
            log.log(log.Level.WARN, f"skipped {namespace}/{src.name}: exists and is not a copy of {src.origin}")
            return
        if same_content(cached, wanted):
            return
    try:
        kube.apply(json.dumps(wanted), WRITE)
    except Err as e:
        # The namespace does not exist (yet), or the grants do not cover it: not worth a retry
        # loop, and no reason to leave the other namespaces without their copies. The next
        # change or resync of the source tries again.
        if e.value.code == 404:
            log.log(log.Level.WARN, f"skipped {namespace}/{src.name}: namespace {namespace} not found")
            return
        if e.value.code == 403:
            log.log(log.Level.WARN, f"skipped {namespace}/{src.name}: forbidden: {e.value.message}")
            return
        raise api_failed(f"apply {src.kind} {namespace}/{src.name}", e)
    how = "created" if cached is None else ("repaired" if is_sync else "updated")
    log.log(log.Level.INFO, f"applied {src.kind} {src.namespace}/{src.name} -> {namespace} ({how})")


def delete_copy(copy: types.Object, why: str) -> None:
    try:
        kube.delete("v1", copy.meta.kind, copy.meta.namespace, copy.meta.name, copy.meta.uid)
    except Err as e:
        # 404: already gone; 409: the uid precondition failed, the name now holds another object.
        if e.value.code in (404, 409):
            return
        raise api_failed(f"delete {copy.meta.kind} {copy.meta.namespace}/{copy.meta.name}", e)
    log.log(log.Level.INFO, f"deleted {copy.meta.kind} {copy.meta.namespace}/{copy.meta.name} ({why})")


def not_wanted(namespace: str, src: Source) -> str:
    return f"{namespace} not in {TARGETS_ANNOTATION} of {src.namespace}/{src.name}"


def reconcile_source(src: Source, is_sync: bool) -> None:
    if not LABEL_VALUE.match(src.origin) or len(src.origin) > 63:
        msg = f"{src.key()}: not replicated, {src.namespace}.{src.name} does not fit a label value (63 characters)"
        log.log(log.Level.WARN, msg)
        raise Err(HandlerError_Fatal(msg))
    targets = src.targets(report=True)
    # One copy the API server refuses (422, a quota, an admission webhook) must not keep the
    # other namespaces from theirs: every copy is attempted, each failure is logged where it
    # happens, and the source then reports them all at once.
    failures = []
    for ns in targets:
        try:
            ensure_copy(src, ns, is_sync)
        except Err as e:
            failures.append(e)
    for copy in copies_of(src.kind, src.origin):
        if copy.meta.namespace not in targets:
            try:
                delete_copy(copy, not_wanted(copy.meta.namespace, src))
            except Err as e:
                failures.append(e)
    if failures:
        raise combined(src, failures)


def combined(src: Source, failures: list) -> Err:
    """The failures of one source's copies as one handler-error: `retry` when any may heal by
    itself (the redelivery attempts every copy again, and unchanged ones cost no write), else
    `fatal` until the source changes or resyncs."""
    retry = [f for f in failures if isinstance(f.value, HandlerError_Retry)]
    first = (retry or failures)[0].value.value
    msg = f"{src.key()}: {len(failures)} cop{'y' if len(failures) == 1 else 'ies'} failed, the others were written; first: {first}"
    return Err(HandlerError_Retry(msg) if retry else HandlerError_Fatal(msg))


def remove_all_copies(meta: types.ObjectMeta, why: str) -> None:
    origin = f"{meta.namespace}.{meta.name}"
    if not LABEL_VALUE.match(origin) or len(origin) > 63:
        return  # it never had copies
    for copy in copies_of(meta.kind, origin):
        delete_copy(copy, why)


def source_of(origin: str, kind: str):
    """The cached source a copy's label names, or None. A label value that does not read as
    `<namespace>.<name>` names no source."""
    ns, _, name = origin.partition(".")
    if not name or not DNS1123_LABEL.match(ns):
        return None
    try:
        return cache.get("v1", kind, ns, name)
    except Err as e:
        raise Err(HandlerError_Retry(f"cache.get {kind}: {e.value}"))


def reconcile_copy(copy: types.Object, exists: bool, is_sync: bool) -> None:
    """A copy changed (`exists`) or went: re-make it if its source still wants it, otherwise
    delete it."""
    origin = replica_of(copy.meta)
    found = source_of(origin, copy.meta.kind)
    if found is not None:
        src = Source(found)
        if copy.meta.namespace in src.targets() and src.origin == origin:
            ensure_copy(src, copy.meta.namespace, is_sync)
            return
        why = not_wanted(copy.meta.namespace, src)
    else:
        why = f"source {origin} gone"
    if exists:
        delete_copy(copy, why)


# Sources seen during the initial list (or a replay), as (kind, namespace, name): reconciled in
# on-synced, when the cache holds their copies too. Without that, every copy not yet listed would
# be applied again at every start. Bounded by the number of sources in the cluster.
deferred = set()


def on_object(obj: types.Object, old, is_sync: bool, is_in_initial_list: bool = False) -> None:
    if obj.meta.kind not in KINDS:
        return
    if replica_of(obj.meta) is not None:
        # During the initial list the cache may not hold the source yet: on-synced decides.
        if not is_in_initial_list:
            reconcile_copy(obj, True, is_sync)
        return
    src = Source(obj)
    if src.annotation() is not None:
        if is_in_initial_list:
            deferred.add((src.kind, src.namespace, src.name))
        else:
            reconcile_source(src, is_sync)
    elif old is not None and Source(old).annotation() is not None:
        remove_all_copies(obj.meta, f"{TARGETS_ANNOTATION} removed from {src.namespace}/{src.name}")


def one_of_many(step, *args) -> None:
    """Runs one object's step of on-synced: a fatal error about that object (already logged)
    must not stop the others, a transient one retries on-synced."""
    try:
        step(*args)
    except Err as e:
        if isinstance(e.value, HandlerError_Retry):
            raise


class WitWorld(wit_world.WitWorld):
    def describe(self) -> types.PluginInfo:
        subscriptions = [
            types.Subscription(
                api_version="v1",
                kind=kind,
                namespace=None,
                label_selector=None,
                field_selector=None,
                resync_period_ms=RESYNC_PERIOD_MS,
                metadata_only=False,
                fields=[],
            )
            for kind in KINDS
        ]
        permissions = [
            types.Permission(api_version="v1", kind=kind, namespace=None, verbs=["apply", "delete"])
            for kind in KINDS
        ]
        return types.PluginInfo(
            name="replicator",
            subscriptions=subscriptions,
            permissions=permissions,
            http_origins=[],
            events=False,
        )

    @guarded
    def on_add(self, obj: types.Object, is_in_initial_list: bool) -> None:
        on_object(obj, None, False, is_in_initial_list)

    @guarded
    def on_update(self, old: types.Object, new: types.Object, is_sync: bool) -> None:
        on_object(new, old, is_sync)

    @guarded
    def on_delete(self, obj: types.Object, final_state_unknown: bool) -> None:
        if obj.meta.kind not in KINDS:
            return
        if replica_of(obj.meta) is not None:
            reconcile_copy(obj, False, False)
        else:
            # Whether or not the last state still had the annotation: copies outlive no source.
            remove_all_copies(obj.meta, f"source {obj.meta.namespace}/{obj.meta.name} deleted")

    @guarded
    def on_synced(self) -> None:
        sources = len(deferred)
        while deferred:
            kind, namespace, name = next(iter(deferred))
            try:
                found = cache.get("v1", kind, namespace, name)
            except Err as e:
                raise Err(HandlerError_Retry(f"cache.get {kind}: {e.value}"))
            if found is not None:
                one_of_many(reconcile_source, Source(found), True)
            # Only once it is done: a retry of on-synced resumes with the rest.
            deferred.discard((kind, namespace, name))
        copies = 0
        for kind in KINDS:
            try:
                found = cache.list("v1", kind, None, REPLICA_LABEL)
            except Err as e:
                raise Err(HandlerError_Retry(f"cache.list {kind}: {e.value}"))
            for copy in found:
                one_of_many(reconcile_copy, copy, True, True)
            copies += len(found)
        log.log(log.Level.INFO, f"synced: {sources} sources, {copies} copies checked")
