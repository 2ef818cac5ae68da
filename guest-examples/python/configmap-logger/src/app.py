"""configmap-logger: the kubewasm reference handler in Python.

Logs one line per notification and answers according to the label `kubewasm.io/fail` of the
object (for on-update: the new object):
  retry -> Err(retry), fatal -> Err(fatal), trap -> the instance traps, anything else -> ok.

The label `kubewasm.io/bench` (tests/benches/languages.rs) skips all of that: `noop` returns at
once, `parse` runs json.loads on the object(s) and returns; neither logs.
"""

import functools
import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import log, types
from wit_world.imports.types import HandlerError_Fatal, HandlerError_Retry

FAIL_LABEL = "kubewasm.io/fail"
BENCH_LABEL = "kubewasm.io/bench"


class DeliberateTrap(BaseException):
    """Derives from BaseException so the `guarded` safety net (which catches Exception) lets it
    escape: an escaping non-Err exception traps the instance, which is what `trap` asks for."""


def guarded(export):
    """The safe pattern for every export that returns result<_, handler-error>.

    componentize-py turns `raise Err(handler_error)` into the WIT `err` value; ANY other exception
    escaping an export traps the instance (the host discards it and counts a trap). So: let `Err`
    through, and map every other Exception to a handler-error. A bug does not heal on redelivery,
    so it becomes `fatal`; errors that may be transient become `retry`.
    """

    @functools.wraps(export)
    def wrapper(*args):
        try:
            return export(*args)
        except Err:
            raise
        except (OSError, TimeoutError) as e:
            log.log(log.Level.WARN, f"{export.__name__}: {type(e).__name__}: {e}")
            raise Err(HandlerError_Retry(f"{type(e).__name__}: {e}"))
        except Exception as e:  # noqa: BLE001 - deliberately broad, see above
            log.log(log.Level.ERROR, f"{export.__name__}: {type(e).__name__}: {e}")
            raise Err(HandlerError_Fatal(f"{type(e).__name__}: {e}"))

    return wrapper


def key(meta: types.ObjectMeta) -> str:
    return f"{meta.namespace}/{meta.name}" if meta.namespace is not None else meta.name


def flag(value: bool) -> str:
    return "true" if value else "false"


def label(meta: types.ObjectMeta, name: str):
    for k, v in meta.labels:
        if k == name:
            return v
    return None


def bench(new: types.Object, old: types.Object = None) -> bool:
    """True when the call is a benchmark call and has been handled."""
    mode = label(new.meta, BENCH_LABEL)
    if mode == "noop":
        return True
    if mode == "parse":
        if old is not None:
            json.loads(old.json)
        json.loads(new.json)
        return True
    return False


def outcome(obj: types.Object) -> None:
    """Returns normally for ok; raises Err for retry/fatal; escapes for trap."""
    value = label(obj.meta, FAIL_LABEL)
    if value == "retry":
        raise Err(HandlerError_Retry(f"{FAIL_LABEL}=retry"))
    if value == "fatal":
        raise Err(HandlerError_Fatal(f"{FAIL_LABEL}=fatal"))
    if value == "trap":
        raise DeliberateTrap(f"{FAIL_LABEL}=trap")


class WitWorld(wit_world.WitWorld):
    def describe(self) -> types.PluginInfo:
        return types.PluginInfo(
            name="configmap-logger",
            subscriptions=[
                types.Subscription(
                    api_version="v1",
                    kind="ConfigMap",
                    namespace=None,
                    label_selector=None,
                    field_selector=None,
                    resync_period_ms=0,
                )
            ],
        )

    @guarded
    def on_add(self, obj: types.Object, is_in_initial_list: bool) -> None:
        if bench(obj):
            return
        log.log(
            log.Level.INFO,
            f"add {key(obj.meta)} rv={obj.meta.resource_version} init={flag(is_in_initial_list)}",
        )
        outcome(obj)

    @guarded
    def on_update(self, old: types.Object, new: types.Object, is_sync: bool) -> None:
        if bench(new, old):
            return
        log.log(
            log.Level.INFO,
            f"update {key(new.meta)} rv={old.meta.resource_version}->{new.meta.resource_version}"
            f" sync={flag(is_sync)}",
        )
        outcome(new)

    @guarded
    def on_delete(self, obj: types.Object, final_state_unknown: bool) -> None:
        if bench(obj):
            return
        log.log(
            log.Level.INFO,
            f"delete {key(obj.meta)} rv={obj.meta.resource_version}"
            f" final-state-unknown={flag(final_state_unknown)}",
        )
        outcome(obj)
