"""{{name}}: a kubewasm controller (world kubewasm:handler@0.3.0 `controller`) of {{api-version}} {{kind}}.

The host turns every event of a {{kind}} into its key and calls `reconcile(key, primary)` once
per key however many events led there, never twice at once; the SDK reads the {{kind}} from the
cache first (None when it is gone). This one logs what it finds and records a Normal Event
`Reconciled` about each {{kind}} it sees (the one act it needs a grant for: `events = true` in
{{name}}.toml). Built on the kubewasm SDK in sdk/kubewasm_sdk.
"""

from kubewasm_sdk import Controller, done, events, log, settings, subscription, world


class App(Controller):
    name = "{{name}}"
    primary = subscription("{{api-version}}", "{{kind}}")
    # Kinds this controller creates with an owner reference (`kube.apply_owned(primary, obj)`):
    # their events reconcile the owner. Each kind must also be granted in {{name}}.toml.
    owns = []
    events = True

    def validate_settings(self):
        # A `[settings]` value of the wrong type refuses the load, naming the key.
        settings.get("note", str)

    # Returning (or `done()`) is "as wanted"; `requeue_after(seconds)` comes back later; `raise
    # Retry("why")` backs off per key; `raise Fatal("why")` waits for the next event.
    def reconcile(self, key, primary):
        if primary is None:
            log.info(f"reconcile {key}: gone")
            return done()
        log.info(f"reconcile {key}: present")
        note = settings.get("note", str, f"{{name}} reconciled {key}")
        events.normal(primary, "Reconciled", "Reconcile", note)
        return done()

    def on_synced(self):
        log.info("synced")


WitWorld = world(App())
