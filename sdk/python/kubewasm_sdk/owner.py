"""Owner references, as a controller sets them on what it owns (controller-runtime's
`SetControllerReference`), so the garbage collector deletes the owned objects with their owner
and a handler can tell its own objects from others'. `kube.apply_owned` is `set_controller`
then `kube.apply`; `kube.apply_owned_if_changed` skips the write when `is_up_to_date` finds the
cached object already as wanted.

Scope is read from the objects themselves: one with a non-empty `metadata.namespace` is
namespaced, one without is cluster-scoped (so set the namespace of a namespaced object before
calling `set_controller`). Objects are `Object`s or plain dicts; an `Object` the host delivered
is read without decoding it."""

from .errors import Fatal
from .objects import Object


def _view(obj) -> Object:
    return obj if isinstance(obj, Object) else Object(obj)


def _what(o: Object) -> str:
    return f"{o.kind or 'object'} {o.key}"


def controller_ref(owner) -> dict:
    """The reference a controller puts on what it owns: `owner`'s `apiVersion`, `kind`, `name`
    and `uid`, with `controller` and `blockOwnerDeletion` true. An owner without a uid (not
    created yet, or built rather than read back) raises `Fatal`: read it from the cache or the
    API server first."""
    o = _view(owner)
    for field, value in (("apiVersion", o.api_version), ("kind", o.kind), ("name", o.name)):
        if not value:
            raise Fatal(f"cannot make {_what(o)} an owner: it has no {field}")
    if not o.uid:
        raise Fatal(f"cannot make {_what(o)} an owner: it has no uid (not created yet, or not read back); "
                    "read the owner from the cache or the API server first")
    return {"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid,
            "controller": True, "blockOwnerDeletion": True}


def is_controlled_by(obj, owner) -> bool:
    """Whether `obj` has a controller reference (`controller: true`) to `owner`'s uid: "is this
    mine". False when `owner` has no uid."""
    uid = _view(owner).uid
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(r.get("controller") is True and r.get("uid") == uid for r in refs)


def controller_of(obj):
    """`obj`'s controller reference (the `ownerReferences` entry with `controller: true`, a dict
    with `apiVersion`, `kind`, `name`, `uid`), or None: who says it is theirs."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller") is True), None)


def set_controller(obj, owner) -> None:
    """Makes `owner` the controller of `obj` (in place), as controller-runtime's
    `SetControllerReference`: raises `Fatal` when `owner` is namespaced and `obj` is
    cluster-scoped or in another namespace (cross-namespace owner references are not allowed),
    or when `obj` is already controlled by another object; a reference with `owner`'s uid is
    replaced, other (non-controller) references are kept, and the new one is appended."""
    ref = controller_ref(owner)
    o, target = _view(owner), _view(obj)
    if o.namespace:
        why = None
        if not target.namespace:
            why = "a cluster-scoped object cannot have a namespaced owner"
        elif target.namespace != o.namespace:
            why = "cross-namespace owner references are not allowed"
        if why:
            raise Fatal(f"cannot set {_what(o)} as the controller of {_what(target)}: {why}")
    meta = obj.get("metadata")
    refs = (meta or {}).get("ownerReferences") or []
    for r in refs:
        if r.get("controller") is True and r.get("uid") != ref["uid"]:
            raise Fatal(f"cannot set {_what(o)} as the controller of {_what(target)}: "
                        f"it is already controlled by {r.get('kind')}/{r.get('name')}")
    refs = [ref if r.get("uid") == ref["uid"] else r for r in refs]
    if ref not in refs:
        refs.append(ref)
    if meta is None:
        meta = obj["metadata"] = {}
    meta["ownerReferences"] = refs


def is_up_to_date(have, want) -> bool:
    """Whether `have` (what the cache holds; None: absent) already is as `want` (what the
    handler would apply) says, so the write can be skipped: every field `want` sets has the same
    value in `have`; fields only `have` has (status, defaults, others' labels) do not count.
    Lists match element by element, except `metadata.ownerReferences`, where each wanted
    reference must be among `have`'s (others may own it too). A field the server normalises (a
    quantity `1000m` stored as `1`) or a projected cache reads as not up to date: one more
    apply, never a missed one."""
    return have is not None and _covers(have, want, False)


def _covers(have, want, references: bool) -> bool:
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        # An absent field is as good as an empty one, as the server leaves empty ones out.
        return all(_covers(have[k], w, k == "ownerReferences") if k in have else w in (None, [], {})
                   for k, w in want.items())
    if isinstance(want, list):
        if not isinstance(have, list):
            return False
        if references:
            return all(any(isinstance(h, dict) and h.get("uid") == w.get("uid") and _covers(h, w, False)
                           for h in have) for w in want)
        return len(have) == len(want) and all(_covers(h, w, False) for h, w in zip(have, want))
    # bool is an int to Python: True must not match 1.
    if isinstance(want, bool) or isinstance(have, bool):
        return type(want) is type(have) and want == have
    return want == have
