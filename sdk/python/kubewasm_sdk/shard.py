"""Which objects are this replica's (kubewasm:handler@0.3.0, both worlds), for a plugin whose
manifest sets `shard = "uid"` or `"namespace"` on a host running several active replicas.

    shard.by()                 # "none", "uid" or "namespace"
    shard.ranges()             # [HashRange(start, end)], end None for 2**64
    shard.owns(value)          # is an object with this uid (or namespace) this replica's?
    shard.owns_object(obj)     # the same, picking obj's uid or namespace per by()

The host already delivers only this replica's objects; this is for state outside the cluster. A
plugin that sweeps orphans in an external system deletes only what `owns` says is its own, or
two replicas would each delete the other's. Not sharded, `by()` is "none", `ranges()` the whole
space and `owns` always True, so the same code runs on one replica or many. The answers follow
the replica's current hold and may change between two calls. Under kubewasm:handler@0.2.0 or
0.1.0 (no shard import) every call raises `Fatal`: answering "everything is mine" there could
make a sharded plugin delete another replica's state."""

from collections import namedtuple

from .errors import Fatal

try:
    from wit_world.imports import shard as _host
except ImportError:  # a world before 0.3.0
    _host = None


class HashRange(namedtuple("HashRange", "start end")):
    """A held range `[start, end)` of the 64-bit hash space; `end` None for 2**64 (the top)."""

    __slots__ = ()

    def __contains__(self, hash: int) -> bool:
        return hash >= self.start and (self.end is None or hash < self.end)


def _need_host():
    if _host is None:
        raise Fatal("shard needs kubewasm:handler@0.3.0: build the component against wit/0.3.0")
    return _host


def by() -> str:
    """What the plugin shards by: "none", "uid" or "namespace" (the manifest's `shard`)."""
    return _need_host().by().name.lower()


def ranges() -> list:
    """The ranges this replica holds now, in order: `[HashRange(0, None)]` when not sharded,
    empty while it holds none (or is fenced because it could not renew its Lease)."""
    return [HashRange(r.start, r.end) for r in _need_host().ranges()]


def owns(value: str) -> bool:
    """Whether an object whose shard key (its uid, or its namespace, per `by()`) is `value` is
    this replica's now; always True when not sharded. For external state that records an
    object's uid or namespace."""
    return bool(_need_host().owns(value))


def key(by: str, obj):
    """The shard key of `obj` under `by`: its uid, its namespace ("" when cluster-scoped, as the
    host hashes it), or None when not sharded. `obj` is an `Object`, or a dict of an object's
    JSON or of its `metadata`."""
    if by == "none":
        return None
    if by not in ("uid", "namespace"):
        raise ValueError(f"shard: by must be 'none', 'uid' or 'namespace', not {by!r}")
    if hasattr(obj, "uid"):  # an Object: its metadata without a decode
        value = obj.uid if by == "uid" else obj.namespace
    else:
        meta = obj.get("metadata", obj)
        value = meta.get(by)
    return value or ""


def owns_object(obj) -> bool:
    """Whether `obj` (an `Object`, or a dict of its JSON or `metadata`) is this replica's now:
    its uid or its namespace, whichever the plugin shards by, asked of `owns`. Not sharded, the
    host is asked nothing more."""
    value = key(by(), obj)
    return True if value is None else owns(value)
