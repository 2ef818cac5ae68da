"""Controllers: the world `controller` of kubewasm:handler@0.3.0. A controller declares the kind
it reconciles (`primary`), the kinds it creates and owns (`owns`) and related kinds it watches
(`watches`, each with the mapping that names the primaries an event concerns); the host turns
every event of any of them into keys of the primary kind, queues them (a key waits at most
once, is never reconciled twice at once) and calls `reconcile(key, primary)` with the primary
as the cache holds it now (None: it is gone).

    class Sites(Controller):
        name = "sites"
        primary = subscription("example.com/v1", "Site")
        owns = [subscription("apps/v1", "Deployment")]
        watches = [watch("v1", "Secret", field("/spec/secretRef/name"))]

        def reconcile(self, key, site):
            ...
            return done()            # or requeue_after(30): seconds

    WitWorld = world(Sites())

Failures are a handler's: `Retry`, `Fatal`, `ApiError` by its code, anything else a logged
`retry`; the host backs a failed key off and reconciles it again."""

import inspect
from datetime import timedelta
from typing import NamedTuple, Optional

import wit_world

from . import log
from .handler import WORLD, _failed, _validate_settings, subscription
from .objects import Object

try:
    from wit_world.imports import controller_types as _ct
except ImportError:  # the handler world, or a world before 0.3.0
    _ct = None


class ObjectKey(NamedTuple):
    """The key of one primary object, as `reconcile` receives it: `namespace` (None for a
    cluster-scoped kind) and `name`; `str(key)` is `namespace/name` (or `name`)."""

    namespace: Optional[str]
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def of(cls, value) -> "ObjectKey":
        """The key `value` names: an `ObjectKey`, a `(namespace, name)` pair, a string
        `namespace/name` (or `name`, cluster-scoped), or an object (a dict with `metadata`)."""
        if isinstance(value, ObjectKey):
            return value
        if isinstance(value, str):
            namespace, slash, name = value.partition("/")
            return cls(namespace or None, name) if slash else cls(None, value)
        if isinstance(value, dict):
            o = value if isinstance(value, Object) else Object(value)
            return cls(o.namespace, o.name)
        if isinstance(value, (tuple, list)) and len(value) == 2:
            return cls(value[0] or None, value[1])
        raise TypeError(f"not an object key: {value!r} (an ObjectKey, (namespace, name), 'namespace/name' or an object)")


class Mapping:
    """How an event of a watched kind names the primaries to reconcile: `same_name()`,
    `label(name)`, `field(pointer)`, `guest()`."""

    __slots__ = ("case", "value")

    def __init__(self, case: str, value: str = None):
        self.case, self.value = case, value

    def __eq__(self, other):
        return isinstance(other, Mapping) and (self.case, self.value) == (other.case, other.value)

    __hash__ = None

    def __repr__(self) -> str:
        name = self.case.replace("-", "_")
        return f"{name}({self.value!r})" if self.value is not None else f"{name}()"


def same_name() -> Mapping:
    """The primary with the watched object's own name (in its namespace): a Secret or ConfigMap
    named after its primary."""
    return Mapping("same-name")


def label(name: str) -> Mapping:
    """The primary named by the value of the watched object's label `name`; an object without
    the label names none."""
    if not name:
        raise ValueError("label(): the mapping needs a label name")
    return Mapping("label", name)


def field(pointer: str) -> Mapping:
    """The primary named by the string at the JSON pointer `pointer` (RFC 6901, e.g.
    `/spec/parentRef/name`) of the watched object; an absent or non-string value names none."""
    if not pointer.startswith("/"):
        raise ValueError(f"field({pointer!r}): a JSON pointer starts with '/', e.g. '/spec/secretRef/name'")
    return Mapping("field", pointer)


def guest() -> Mapping:
    """The controller's `keys_for(obj)` names them: one guest call per event of the kind, so
    only where the other mappings cannot say it."""
    return Mapping("guest")


class Watch:
    """A watched kind: its `subscription` and its `mapping` (what `watch()` makes)."""

    __slots__ = ("subscription", "mapping")

    def __init__(self, subscription, mapping: Mapping):
        self.subscription, self.mapping = subscription, mapping

    def __repr__(self) -> str:
        return f"watch({self.subscription.api_version!r}, {self.subscription.kind!r}, {self.mapping!r})"


def watch(api_version: str, kind: str, mapping: Mapping, namespace: str = None, labels: str = None,
          field_selector: str = None, resync_ms: int = 0, metadata_only: bool = False, fields: list = ()) -> Watch:
    """A kind the controller watches but does not own, with the `mapping` from its events to
    primary keys; the other arguments are `subscription()`'s."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"watch({api_version!r}, {kind!r}, ...): mapping must be same_name(), label(name), "
                        f"field(pointer) or guest(), not {mapping!r}")
    return Watch(subscription(api_version, kind, namespace=namespace, labels=labels, field_selector=field_selector,
                              resync_ms=resync_ms, metadata_only=metadata_only, fields=fields), mapping)


class Done:
    """What `done()` returns: the primary is as wanted, nothing until its next event."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "done()"


DONE = Done()


class RequeueAfter:
    """What `requeue_after()` returns: reconcile the key again after `seconds` (`ms` as the
    host takes it), unless an event brings it back sooner."""

    __slots__ = ("seconds", "ms")

    def __init__(self, seconds: float):
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"requeue_after({seconds!r}): seconds must be a number (or a timedelta)")
        if not seconds > 0 or seconds == float("inf"):
            raise ValueError(f"requeue_after({seconds!r}): seconds must be positive and finite")
        self.seconds = seconds
        self.ms = max(1, round(seconds * 1000))

    def __eq__(self, other):
        return isinstance(other, RequeueAfter) and self.ms == other.ms

    __hash__ = None

    def __repr__(self) -> str:
        return f"requeue_after({self.seconds!r})"


def done() -> Done:
    """`reconcile`'s answer when the primary is as wanted (returning None says the same)."""
    return DONE


def requeue_after(seconds) -> RequeueAfter:
    """`reconcile`'s answer to come back after `seconds` (a number, fractions allowed, or a
    `timedelta`; the host waits at least one second), unless an event brings the key back
    sooner: for state nothing watched reports (an external system, a clock)."""
    return RequeueAfter(seconds)


class Controller:
    """Subclass it: set `name`, `primary` (a `subscription`), `owns` (subscriptions), `watches`
    (`watch(...)`), `permissions`, `http_origins`, `events` (what `describe()` reports, and the
    manifest must grant), and override `reconcile`. Every kind in `primary`, `owns` and
    `watches` is readable through `kube.cached`/`cached_list`."""

    name = "controller"
    primary = None
    owns: list = []
    watches: list = []
    permissions: list = []
    http_origins: list = []
    events = False

    def validate_settings(self) -> None:
        """Before `describe`: raise to refuse the operator's settings (the plugin is not
        loaded); a `SettingError` from `settings.get`/`require` says which key and why."""

    def reconcile(self, key: ObjectKey, primary: Optional[Object]):
        """Brings the primary `key` names to what it should be. `primary` is the object as the
        cache holds it, or None when it is gone (deleted: what it owns goes with it, by its owner
        references; clean up anything else here). Return `done()` (or None) or
        `requeue_after(seconds)`; raise to fail as a handler does."""
        raise NotImplementedError

    def keys_for(self, obj: Object) -> list:
        """Only for watches with the `guest()` mapping: the primaries an event of `obj` concerns,
        as `ObjectKey`s, `(namespace, name)` pairs, `"namespace/name"` strings or objects. An
        exception logs an error and names none (the export has no error to return)."""
        return []

    def on_synced(self) -> None:
        """After every initial pass: every primary has been reconciled once since load, so
        external state no primary accounts for is an orphan to clean up."""


_DYNAMIC = object()


def _declared(ctl, attr: str):
    """The declaration `attr` as written on the class or instance, or `_DYNAMIC` for a property
    (which may read the settings, so it is not evaluated before `describe`)."""
    value = inspect.getattr_static(ctl, attr, None)
    return _DYNAMIC if isinstance(value, property) else getattr(ctl, attr)


def _check(ctl) -> None:
    """Refuses, while the component is built, a controller `describe()` could not report."""
    what = type(ctl).__name__
    if type(ctl).reconcile is Controller.reconcile:
        raise ValueError(f"{what}: a Controller overrides reconcile(self, key, primary)")
    primary = _declared(ctl, "primary")
    if primary is not _DYNAMIC and not hasattr(primary, "kind"):
        raise ValueError(f"{what}: a Controller needs primary = subscription(api_version, kind, ...)")
    owns = _declared(ctl, "owns")
    if owns is not _DYNAMIC:
        for s in owns:
            if not hasattr(s, "kind"):
                raise ValueError(f"{what}.owns takes subscription(api_version, kind, ...), not {s!r}")
    watches = _declared(ctl, "watches")
    if watches is not _DYNAMIC:
        for w in watches:
            if not isinstance(w, Watch):
                raise ValueError(f"{what}.watches takes watch(api_version, kind, mapping), not {w!r}")
        if any(w.mapping.case == "guest" for w in watches) and type(ctl).keys_for is Controller.keys_for:
            raise ValueError(f"{what}: a watch with the guest() mapping needs keys_for(self, obj)")


def _wit_mapping(m: Mapping):
    if m.case == "same-name":
        return _ct.Mapping_SameName()
    if m.case == "label":
        return _ct.Mapping_Label(m.value)
    if m.case == "field":
        return _ct.Mapping_Field(m.value)
    return _ct.Mapping_Guest()


def controller_world(ctl: Controller) -> type:
    """The `WitWorld` class of the controller world, calling `ctl` (what `world(ctl)` returns)."""
    if _ct is None or WORLD == "handler":
        raise ValueError(f"{type(ctl).__name__} is a Controller: build it against the controller world "
                         "(componentize-py -d wit/0.3.0 -w controller)")
    _check(ctl)
    from .kube import cached  # the world imports kube and cache; only now is that certain

    of = Object.of

    class World(wit_world.WitWorld):
        def validate_settings(self) -> None:
            _validate_settings(ctl)

        def describe(self):
            primary = ctl.primary
            return _ct.ControllerInfo(
                name=ctl.name, primary=primary, owns=list(ctl.owns),
                watches=[_ct.Watch(w.subscription, _wit_mapping(w.mapping)) for w in ctl.watches],
                permissions=list(ctl.permissions), http_origins=list(ctl.http_origins), events=bool(ctl.events))

        def reconcile(self, key):
            try:
                p = ctl.primary
                got = ctl.reconcile(ObjectKey(key.namespace or None, key.name),
                                    cached(p.api_version, p.kind, key.name, key.namespace))
                if got is None or got is DONE:
                    return _ct.Outcome_Done()
                if isinstance(got, RequeueAfter):
                    return _ct.Outcome_RequeueAfter(got.ms)
                raise TypeError(f"reconcile returned {got!r}: return done(), requeue_after(seconds) or None")
            except Exception as e:  # noqa: BLE001 - every failure becomes a handler-error
                raise _failed("reconcile", e) from None

        def keys_for(self, obj) -> list:
            try:
                return [_ct.ObjectKey(k.namespace, k.name) for k in map(ObjectKey.of, ctl.keys_for(of(obj)) or ())]
            except Exception as e:  # noqa: BLE001 - no error to return: log, name none
                log.error(f"keys-for {obj.meta.kind} {_key_of(obj)}: {type(e).__name__}: {e}")
                return []

        def on_synced(self) -> None:
            try:
                ctl.on_synced()
            except Exception as e:  # noqa: BLE001
                raise _failed("on-synced", e) from None

    return World


def _key_of(obj) -> str:
    m = obj.meta
    return f"{m.namespace}/{m.name}" if m.namespace else m.name
