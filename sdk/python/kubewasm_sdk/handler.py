"""The handler a guest writes: a class declaring what it watches and asks for, with `on_*`
methods taking `Object`s; `world()` turns it into the exports componentize-py expects, where
every exception becomes a handler-error (a guest built on the SDK never traps by accident).
`world()` of a `Controller` (controller.py) makes the controller world's exports instead.

The same handler layer serves every world, so the 0.1.0 reference components use it too:
under `kubewasm:handler@0.1.0` (no permissions, origins, Events, projections or `on-synced`)
`describe()` reports only the name and subscriptions, and asking for more is an error at build
time rather than a component that silently asks for less. Under 0.3.0 the handler world also
exports `validate-settings` (`Handler.validate_settings`, ok unless overridden); under 0.2.0
the same class builds unchanged (the export is not asked for)."""

import importlib.util

from componentize_py_types import Err
import wit_world

try:  # 0.2.0: beside wasi:http's `types`, the bindings name the package's own interface in full
    from wit_world.imports import kubewasm_handler_types as _types
except ImportError:  # 0.1.0
    from wit_world.imports import types as _types

from . import log
from .errors import ApiError, Fatal, Retry
from .objects import Object


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# 0.3.0 (either world) is the one with the `settings` import.
WORLD_VERSION = "0.3.0" if _has("wit_world.imports.settings") else "0.2.0" if hasattr(_types, "Permission") else "0.1.0"
"""The version of `kubewasm:handler` the component is built against."""

WORLD = ("controller" if hasattr(wit_world.WitWorld, "reconcile") else
         "handler" if hasattr(wit_world.WitWorld, "on_add") else None)
"""The world the component is built against (`handler` or `controller`; None when the bindings
do not say, as the unit tests' stubs do not)."""


def _only_in_0_2_0(what: str) -> None:
    if WORLD_VERSION == "0.1.0":
        raise ValueError(f"{what} needs kubewasm:handler@0.2.0; this component is built against {WORLD_VERSION}")


def subscription(api_version: str, kind: str, namespace: str = None, labels: str = None,
                 field_selector: str = None, resync_ms: int = 0, metadata_only: bool = False,
                 fields: list = ()) -> _types.Subscription:
    """What to be told about: a kind, optionally one namespace, a label and a field selector, a
    resync period, and a projection (`metadata_only`, or JSON pointers in `fields`; 0.2.0)."""
    if WORLD_VERSION == "0.1.0":
        if metadata_only or fields:
            _only_in_0_2_0("a projection (metadata_only, fields)")
        return _types.Subscription(api_version=api_version, kind=kind, namespace=namespace,
                                   label_selector=labels, field_selector=field_selector, resync_period_ms=resync_ms)
    return _types.Subscription(api_version=api_version, kind=kind, namespace=namespace,
                               label_selector=labels, field_selector=field_selector,
                               resync_period_ms=resync_ms, metadata_only=metadata_only, fields=list(fields))


def permission(api_version: str, kind: str, verbs: list, namespace: str = None) -> "_types.Permission":
    """Access to ask the operator for (`get`, `create`, `apply`, `patch`, `update`, `delete`; 0.2.0)."""
    _only_in_0_2_0("a permission")
    return _types.Permission(api_version=api_version, kind=kind, namespace=namespace, verbs=list(verbs))


class Watched:
    """One event of a kind in the handler's `watches`, as `on_watched` receives it: `change` is
    `"add"`, `"update"` or `"delete"`, `obj` the object as it is now (the new one of an update,
    the last state of a deleted one), `old` the previous one of an update (else None), and the
    flag of the change as `initial`, `is_sync` or `unknown` (False for the other changes).
    `kind`, `api_version` and `is_kind()` read the metadata without decoding the object."""

    __slots__ = ("change", "obj", "old", "_flag")

    def __init__(self, change: str, obj: Object, old: Object = None, flag: bool = False):
        self.change, self.obj, self.old, self._flag = change, obj, old, flag

    @property
    def kind(self) -> str:
        return self.obj.kind

    @property
    def api_version(self) -> str:
        return self.obj.api_version

    def is_kind(self, api_version: str, kind: str) -> bool:
        """Whether the object is of `kind` in `api_version`."""
        return self.obj.kind == kind and self.obj.api_version == api_version

    @property
    def initial(self) -> bool:
        """An add during the informer's initial replay."""
        return self.change == "add" and self._flag

    @property
    def is_sync(self) -> bool:
        """An update that is a resync replay (nothing changed on the server)."""
        return self.change == "update" and self._flag

    @property
    def unknown(self) -> bool:
        """A delete inferred from a relist (`obj` is the last state the cache knew)."""
        return self.change == "delete" and self._flag

    def __repr__(self) -> str:
        return f"Watched({self.change} {self.kind} {self.obj.key})"


class Handler:
    """Subclass it: set `name`, `subscriptions`, `watches`, `permissions`, `http_origins`,
    `events` (what `describe()` reports, and the manifest must grant) and override the `on_*`
    you need. Events of the kinds in `watches` (and not in `subscriptions`) reach `on_watched`
    as a `Watched`; every other event reaches `on_add`, `on_update`, `on_delete`."""

    name = "handler"
    subscriptions: list = []
    watches: list = []
    permissions: list = []
    http_origins: list = []
    events = False

    def validate_settings(self) -> None:
        """Before `describe` (0.3.0): raise to refuse the operator's settings, and the plugin is
        not loaded; a `SettingError` from `settings.get`/`require` says which key and why."""

    def on_add(self, obj: Object, initial: bool) -> None:
        """An object appeared (`initial`: during the informer's initial replay)."""

    def on_update(self, old: Object, new: Object, is_sync: bool) -> None:
        """An object changed (`is_sync`: a resync replay, nothing changed on the server)."""

    def on_delete(self, obj: Object, unknown: bool) -> None:
        """An object is gone (`unknown`: inferred from a relist, `obj` is its last known state)."""

    def on_synced(self) -> None:
        """After every initial replay: the handler has seen every object (0.2.0 only)."""

    def on_watched(self, event: Watched) -> None:
        """An event of a kind in `watches`: tell the kind by `event.kind` or `event.is_kind()`."""


def outcome(e: BaseException):
    """The handler-error an exception escaping an `on_*` becomes: `Retry`/`Fatal` as named,
    `ApiError` by its code, anything else (a bug, an odd object) `retry` with its message."""
    if isinstance(e, Fatal):
        return _types.HandlerError_Fatal(str(e))
    if isinstance(e, Retry):
        return _types.HandlerError_Retry(str(e))
    if isinstance(e, ApiError):
        cls = _types.HandlerError_Retry if e.retryable else _types.HandlerError_Fatal
        return cls(str(e))
    return _types.HandlerError_Retry(f"{type(e).__name__}: {e}")


def _failed(export: str, e: Exception):
    """What an export raises for `e`, which escaped the handler: `Err` as it is, anything else
    as the handler-error `outcome` gives (logged when it is not one the SDK defines)."""
    if isinstance(e, Err):
        return e
    if not isinstance(e, (Retry, Fatal, ApiError)):
        log.error(f"{export}: {type(e).__name__}: {e}")
    return Err(outcome(e))


def _refusal(export: str, e: Exception) -> str:
    """The `validate-settings` error string for `e`: the message of the SDK's exceptions
    (`SettingError`, `Fatal`, `Retry`, `ApiError`), anything else as `outcome` words it, logged."""
    if isinstance(e, Err):
        return e.value if isinstance(e.value, str) else str(e.value)
    if not isinstance(e, (Retry, Fatal, ApiError)):
        log.error(f"{export}: {type(e).__name__}: {e}")
    return outcome(e).value


def _validate_settings(plugin) -> None:
    """The `validate-settings` export's body, shared by both worlds."""
    try:
        plugin.validate_settings()
    except Exception as e:  # noqa: BLE001 - every failure refuses the settings, none traps
        raise Err(_refusal("validate-settings", e)) from None


def _kinds(subscriptions) -> set:
    return {(s.api_version, s.kind) for s in subscriptions}


def world(handler: Handler) -> type:
    """The `WitWorld` class componentize-py exports, calling `handler`: in the app module,
    `WitWorld = world(MyHandler())`. Objects reach the handler undecoded (`Object.of`). A
    `Controller` gets the controller world's exports (built with `-w controller`)."""

    from .controller import Controller, controller_world
    if isinstance(handler, Controller):
        return controller_world(handler)
    if WORLD == "controller":
        raise ValueError(f"{type(handler).__name__} is a Handler, but the component is built against the "
                         "controller world: subclass Controller, or build with -w handler")

    of = Object.of
    # The kinds whose events reach `on_watched` (a kind both subscribed and watched stays the
    # handler's own, as it was before `watches`), worked out at the first describe or event, not
    # now: `subscriptions` and `watches` may be properties reading the settings, which the build
    # cannot.
    routes = []

    def watched() -> set:
        if not routes:
            routes.append(_kinds(handler.watches) - _kinds(handler.subscriptions))
        return routes[0]

    def is_watched(kinds: set, obj) -> bool:
        m = obj.meta
        return (m.api_version, m.kind) in kinds

    class World(wit_world.WitWorld):
        def validate_settings(self) -> None:
            _validate_settings(handler)

        def describe(self) -> _types.PluginInfo:
            watched()
            subscriptions = list(handler.subscriptions) + list(handler.watches)
            if WORLD_VERSION == "0.1.0":
                if handler.permissions or handler.http_origins or handler.events:
                    _only_in_0_2_0("asking for permissions, http_origins or events")
                return _types.PluginInfo(name=handler.name, subscriptions=subscriptions)
            return _types.PluginInfo(name=handler.name, subscriptions=subscriptions,
                                     permissions=list(handler.permissions),
                                     http_origins=list(handler.http_origins), events=bool(handler.events))

        # Each export catches inline (no wrapper call, no closure): these run once per
        # notification, and a no-op handler should cost little more than the call itself.
        # Only Exception is caught: a BaseException (SystemExit…) still traps, as asked.
        def on_add(self, obj, is_in_initial_list: bool) -> None:
            try:
                kinds = routes[0] if routes else watched()
                if kinds and is_watched(kinds, obj):
                    handler.on_watched(Watched("add", of(obj), None, is_in_initial_list))
                else:
                    handler.on_add(of(obj), is_in_initial_list)
            except Exception as e:  # noqa: BLE001 - every failure becomes a handler-error
                raise _failed("on-add", e) from None

        def on_update(self, old, new, is_sync: bool) -> None:
            try:
                kinds = routes[0] if routes else watched()
                if kinds and is_watched(kinds, new):
                    handler.on_watched(Watched("update", of(new), of(old), is_sync))
                else:
                    handler.on_update(of(old), of(new), is_sync)
            except Exception as e:  # noqa: BLE001
                raise _failed("on-update", e) from None

        def on_delete(self, obj, final_state_unknown: bool) -> None:
            try:
                kinds = routes[0] if routes else watched()
                if kinds and is_watched(kinds, obj):
                    handler.on_watched(Watched("delete", of(obj), None, final_state_unknown))
                else:
                    handler.on_delete(of(obj), final_state_unknown)
            except Exception as e:  # noqa: BLE001
                raise _failed("on-delete", e) from None

        def on_synced(self) -> None:
            try:
                handler.on_synced()
            except Exception as e:  # noqa: BLE001
                raise _failed("on-synced", e) from None

    return World
