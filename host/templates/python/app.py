"""{{name}}: a kubewasm handler (world kubewasm:handler@0.2.0) for {{api-version}} {{kind}}.

Logs every call with the object's key and records a Normal Event `Observed` about each object it
sees added (the one act it needs a grant for: `events = true` in {{name}}.toml).
"""

import wit_world
from wit_world.imports import events, log
from wit_world.imports import kubewasm_handler_types as types


def key(meta: types.ObjectMeta) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects."""
    return f"{meta.namespace}/{meta.name}" if meta.namespace is not None else meta.name


def flag(b: bool) -> str:
    # Python spells booleans True/False; the log lines match the other languages' true/false.
    return "true" if b else "false"


class WitWorld(wit_world.WitWorld):
    def describe(self) -> types.PluginInfo:
        return types.PluginInfo(
            name="{{name}}",
            subscriptions=[
                types.Subscription(
                    api_version="{{api-version}}",
                    kind="{{kind}}",
                    namespace=None,
                    label_selector=None,
                    field_selector=None,
                    resync_period_ms=0,
                    metadata_only=False,
                    fields=[],
                )
            ],
            permissions=[],
            http_origins=[],
            # Asks for the `events` grant; without it the plugin is not loaded.
            events=True,
        )

    # Returning normally is `ok`; `raise componentize_py_types.Err(HandlerError_Retry("why"))`
    # (from wit_world.imports.kubewasm_handler_types) asks for a redelivery with backoff.
    def on_add(self, obj: types.Object, is_in_initial_list: bool) -> None:
        k = key(obj.meta)
        log.log(log.Level.INFO, f"add {k} init={flag(is_in_initial_list)}")
        events.emit(obj.meta, events.EventType.NORMAL, "Observed", "Observe", f"{{name}} saw {k}")

    def on_update(self, old: types.Object, new: types.Object, is_sync: bool) -> None:
        log.log(log.Level.INFO, f"update {key(new.meta)} sync={flag(is_sync)}")

    def on_delete(self, obj: types.Object, final_state_unknown: bool) -> None:
        log.log(log.Level.INFO, f"delete {key(obj.meta)} final-state-unknown={flag(final_state_unknown)}")

    def on_synced(self) -> None:
        log.log(log.Level.INFO, "synced")
