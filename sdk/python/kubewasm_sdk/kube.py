"""The Kubernetes API (through the host, within the plugin's grants) and the informer caches,
on `Object`s: a failed call raises `ApiError`, which the SDK maps to `retry`/`fatal` by code if
the handler lets it escape."""

import json

from componentize_py_types import Err
from wit_world.imports import cache as _cache
from wit_world.imports import kube as _kube

from .errors import ApiError, Fatal, Retry
from .objects import Object
from .owner import is_controlled_by, is_up_to_date, set_controller

_PATCH = {"merge": _kube.PatchType.MERGE, "json": _kube.PatchType.JSON, "strategic": _kube.PatchType.STRATEGIC}


def _call(what: str, fn, *args):
    """Runs one host call, turning its `api-error` into `ApiError`."""
    try:
        return fn(*args)
    except Err as e:
        err = e.value
        raise ApiError(what, err.code, err.reason, err.message) from None


def _where(obj) -> str:
    return f"{obj['kind']} {Object(obj).key}"


def get(api_version: str, kind: str, name: str, namespace: str = None):
    """The object as the API server has it now (not the cache), or None when it does not exist."""
    found = _call(f"get {kind} {name}", _kube.get, api_version, kind, namespace, name)
    return None if found is None else Object.of(found)


def apply(obj: dict, force: bool = True, dry_run: bool = False) -> Object:
    """Server-side apply of `obj` (its whole desired state; fields an earlier apply set and this
    one leaves out are removed). `force` (the default for a controller) takes fields other
    managers own. The result's `created` says whether the apply created the object."""
    opts = _kube.WriteOptions(dry_run=dry_run, force=force)
    outcome = getattr(_kube, "apply_outcome", None)
    if outcome is None:  # a world without apply-outcome: created is unknown
        return Object.of(_call(f"apply {_where(obj)}", _kube.apply, json.dumps(obj), opts))
    got = _call(f"apply {_where(obj)}", outcome, json.dumps(obj), opts)
    result = Object.of(got.object)
    result.created = got.code == 201
    return result


def apply_owned(owner: dict, obj: dict, force: bool = True, dry_run: bool = False) -> Object:
    """Makes `owner` the controller of `obj` (`owner.set_controller`, whose refusals raise
    `Fatal` and reach no server), then `apply`s it."""
    set_controller(obj, owner)
    return apply(obj, force=force, dry_run=dry_run)


_FROM_CACHE = object()


def apply_owned_if_changed(owner: dict, obj: dict, have=_FROM_CACHE, force: bool = True, dry_run: bool = False):
    """`apply_owned`, unless `have` (the object as the cache holds it, or None) is already as
    wanted (`owner.is_up_to_date`, owner reference included): None when nothing was written. The
    check saves a write per event for a controller that re-applies on every resync or change.
    Without `have`, the cache is read for `obj`'s kind, namespace and name (a kind the handler
    watches or the controller owns)."""
    set_controller(obj, owner)
    if have is _FROM_CACHE:
        o = Object(obj)
        have = cached(o.api_version, o.kind, o.name, o.namespace)
    if is_up_to_date(have, obj):
        return None
    return apply(obj, force=force, dry_run=dry_run)


def create(obj: dict, dry_run: bool = False) -> Object:
    """Creates `obj`; `ApiError` 409 when it exists."""
    opts = _kube.WriteOptions(dry_run=dry_run, force=False)
    return Object.of(_call(f"create {_where(obj)}", _kube.create, json.dumps(obj), opts))


def replace(obj: dict, subresource: str = None, dry_run: bool = False) -> Object:
    """Replaces `obj` (or its `subresource`), if its `resourceVersion` is still current (else 409)."""
    opts = _kube.WriteOptions(dry_run=dry_run, force=False)
    return Object.of(_call(f"replace {_where(obj)}", _kube.replace, json.dumps(obj), subresource, opts))


def patch(target: dict, body, type: str = "merge", subresource: str = None, dry_run: bool = False) -> Object:
    """Patches the object `target` names (an `Object` or `Object.ref`): `body` is a dict for a
    `merge` or `strategic` patch, a list of operations for a `json` patch."""
    t = Object(target)
    opts = _kube.WriteOptions(dry_run=dry_run, force=False)
    args = (t.api_version, t.kind, t.namespace, t.name, _PATCH[type], json.dumps(body), subresource, opts)
    return Object.of(_call(f"patch {_where(t)}", _kube.patch, *args))


def merge_patch(target: dict, body: dict) -> Object:
    """An RFC 7386 merge patch: keys set to None are removed."""
    return patch(target, body, "merge")


def patch_status(target: dict, status: dict) -> Object:
    """Merges `status` into the status subresource of the object `target` names."""
    return patch(target, {"status": status}, "merge", subresource="status")


def delete(target: dict, uid: str = None) -> bool:
    """Deletes the object `target` names, only if it still has `target`'s uid (or `uid`): a
    new object of the same name is never deleted in its stead. False when there was nothing to
    delete (gone already, or the name holds another object now)."""
    t = Object(target)
    try:
        _call(f"delete {_where(t)}", _kube.delete, t.api_version, t.kind, t.namespace, t.name, uid or t.uid)
    except ApiError as e:
        if e.code == 404 or (e.code == 409 and (uid or t.uid)):
            return False
        raise
    return True


# The host's words for the one cache refusal that heals by itself (an informer starting or
# stopping); every other refusal (a kind the handler does not subscribe to, a bad selector, a
# list over the per-call bound) gives the same answer on every redelivery.
_CACHE_TRANSIENT = "is not available"
# The host's words for a read of a kind the plugin does not subscribe to (its message goes on
# with the manifest line that grants the watch).
_NOT_SUBSCRIBED = "does not subscribe to"


def _cache_error(call: str, api_version: str, kind: str, message: str) -> Exception:
    """`Retry` for a cache that is not available yet, `Fatal` for everything else. An
    unsubscribed kind also gets the handler line that subscribes to it, since the host can only
    speak of `describe()` in general."""
    if _CACHE_TRANSIENT in message:
        return Retry(f"{call} {kind}: {message}")
    if _NOT_SUBSCRIBED in message:
        message += (f'; in Python, add subscription("{api_version}", "{kind}") to the handler\'s watches '
                    "(a controller's owns)")
    return Fatal(f"{call} {kind}: {message}")


def cached(api_version: str, kind: str, name: str, namespace: str = None):
    """The object as the informer cache holds it (a subscribed kind), or None."""
    try:
        found = _cache.get(api_version, kind, namespace, name)
    except Err as e:
        raise _cache_error("cache.get", api_version, kind, e.value) from None
    return None if found is None else Object.of(found)


def cached_list(api_version: str, kind: str, namespace: str = None, selector: str = None) -> list:
    """Every cached object of a subscribed kind, optionally in one namespace and matching a
    label selector (the host refuses answers over 2,000 objects / 8 MiB: `Fatal`, narrow the
    namespace or selector)."""
    try:
        found = _cache.list(api_version, kind, namespace, selector)
    except Err as e:
        raise _cache_error("cache.list", api_version, kind, e.value) from None
    return [Object.of(o) for o in found]


def cached_owned(owner, api_version: str, kind: str, selector: str = None) -> list:
    """Every cached object of `kind` (a kind the controller owns) that `owner` controls, in
    `owner`'s namespace (anywhere for a cluster-scoped owner): what a reconcile compares with
    what it wants, to delete what is no longer wanted."""
    o = owner if isinstance(owner, Object) else Object(owner)
    return [obj for obj in cached_list(api_version, kind, o.namespace, selector) if is_controlled_by(obj, o)]
