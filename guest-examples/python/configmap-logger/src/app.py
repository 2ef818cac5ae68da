"""configmap-logger: the kubewasm reference handler in Python, on the SDK (sdk/python) and the
world kubewasm:handler@0.1.0.

Logs one line per notification and answers according to the label `kubewasm.io/fail` of the
object (for on-update: the new object):
  retry -> Err(retry), fatal -> Err(fatal), trap -> the instance traps, anything else -> ok.

The label `kubewasm.io/bench` (tests/benches/languages.rs) skips all of that: `noop` returns at
once, `parse` decodes the object(s) and returns; neither logs. The SDK decodes an object only when
the handler reads it as a dict, and `label()` reads the host's metadata, so `noop` parses nothing.
"""

from kubewasm_sdk import Fatal, Handler, Object, Retry, log, subscription, world

FAIL_LABEL = "kubewasm.io/fail"
BENCH_LABEL = "kubewasm.io/bench"


class DeliberateTrap(BaseException):
    """The SDK turns every Exception into a handler-error; a BaseException escapes it and traps
    the instance, which is what `trap` asks for."""


def flag(value: bool) -> str:
    return "true" if value else "false"


def bench(new: Object, old: Object = None) -> bool:
    """True when the call is a benchmark call and has been handled."""
    mode = new.label(BENCH_LABEL)
    if mode == "parse":
        for obj in (old, new):
            if obj is not None:
                len(obj)  # decodes: json.loads of the object
    return mode in ("noop", "parse")


def outcome(obj: Object) -> None:
    """Returns normally for ok; raises Retry/Fatal; escapes the SDK for trap."""
    value = obj.label(FAIL_LABEL)
    if value == "retry":
        raise Retry(f"{FAIL_LABEL}=retry")
    if value == "fatal":
        raise Fatal(f"{FAIL_LABEL}=fatal")
    if value == "trap":
        raise DeliberateTrap(f"{FAIL_LABEL}=trap")


class ConfigMapLogger(Handler):
    name = "configmap-logger"
    subscriptions = [subscription("v1", "ConfigMap")]

    def on_add(self, obj: Object, initial: bool) -> None:
        if bench(obj):
            return
        log.info(f"add {obj.key} rv={obj.resource_version} init={flag(initial)}")
        outcome(obj)

    def on_update(self, old: Object, new: Object, is_sync: bool) -> None:
        if bench(new, old):
            return
        log.info(f"update {new.key} rv={old.resource_version}->{new.resource_version} sync={flag(is_sync)}")
        outcome(new)

    def on_delete(self, obj: Object, unknown: bool) -> None:
        if bench(obj):
            return
        log.info(f"delete {obj.key} rv={obj.resource_version} final-state-unknown={flag(unknown)}")
        outcome(obj)


WitWorld = world(ConfigMapLogger())
