"""Kubernetes Events about objects. The host writes them (folding repeats, rate limiting), so
recording one never fails; without the `events` grant nothing is recorded."""

from wit_world.imports import events as _events
from wit_world.imports import kubewasm_handler_types as _types

from .objects import Object


def _meta(obj: dict) -> _types.ObjectMeta:
    o = Object(obj)
    return _types.ObjectMeta(
        api_version=o.api_version,
        kind=o.kind,
        namespace=o.namespace,
        name=o.name,
        uid=o.uid or "",
        resource_version=o.resource_version or "",
        generation=o.metadata.get("generation"),
        labels=list((o.metadata.get("labels") or {}).items()),
    )


def normal(regarding: dict, reason: str, action: str, note: str) -> None:
    """Records a Normal Event about `regarding` (an object with its uid, as the handler got it
    or as a write returned it): the `reason` (CamelCase, e.g. `QuotaCreated`), the `action`
    taken (e.g. `Apply`), then the `note` for people. The order is the WIT's and the Rust and
    JavaScript SDKs'; name them (`action=`, `note=`) to make a call read unambiguously."""
    _events.emit(_meta(regarding), _events.EventType.NORMAL, reason, action, note)


def warning(regarding: dict, reason: str, action: str, note: str) -> None:
    """Records a Warning Event about `regarding`, as `normal` does."""
    _events.emit(_meta(regarding), _events.EventType.WARNING, reason, action, note)
