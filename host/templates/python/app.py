"""{{name}}: a kubewasm handler (world kubewasm:handler@0.2.0) for {{api-version}} {{kind}}.

Logs every call with the object's key and records a Normal Event `Observed` about each object it
sees added (the one act it needs a grant for: `events = true` in {{name}}.toml). Built on the
kubewasm SDK in sdk/kubewasm_sdk (objects as dicts, kube, events, http, log).
"""

from kubewasm_sdk import Handler, events, log, subscription, world


def flag(b: bool) -> str:
    # Python spells booleans True/False; the log lines match the other languages' true/false.
    return "true" if b else "false"


class App(Handler):
    name = "{{name}}"
    subscriptions = [subscription("{{api-version}}", "{{kind}}")]
    # Asks for the `events` grant; without it the plugin is not loaded.
    events = True

    # Returning is `ok`; `raise Retry("why")` asks for a redelivery with backoff, `raise
    # Fatal("why")` gives up; any other exception is a `retry` with its message (never a trap).
    def on_add(self, obj, initial):
        log.info(f"add {obj.key} init={flag(initial)}")
        events.normal(obj, "Observed", "Observe", f"{{name}} saw {obj.key}")

    def on_update(self, old, new, is_sync):
        log.info(f"update {new.key} sync={flag(is_sync)}")

    def on_delete(self, obj, unknown):
        log.info(f"delete {obj.key} final-state-unknown={flag(unknown)}")

    def on_synced(self):
        log.info("synced")


WitWorld = world(App())
