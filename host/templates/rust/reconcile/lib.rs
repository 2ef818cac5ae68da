//! {{name}}: a kubewasm controller (world `controller` of `kubewasm:handler@0.3.0`, through the
//! Rust SDK in `sdk/`) of {{api-version}} {{kind}}.
//!
//! The host turns every event of a {{kind}} into its key and calls `reconcile` once per key
//! however many events led there, never twice at once; the SDK reads the {{kind}} from the cache
//! first (`None` when it is gone). This one logs what it finds and records a Normal Event
//! `Reconciled` about each {{kind}} it sees (the one act it needs a grant for: `events = true` in
//! {{name}}.toml).

use kubewasm_sdk::{
    Controller, Controls, DynamicObject, Lazy, ObjectKey, Outcome, Result, events, info, settings,
};

struct App;

impl Controller for App {
    /// Any kind, typed in its metadata; for a built-in kind use its type from
    /// `kubewasm_sdk::api` (e.g. `api::core::v1::ConfigMap`) and drop `.kind(..)` below.
    type Kind = DynamicObject;

    fn describe() -> Controls {
        // Kinds this controller creates with an owner reference (`kube::apply_owned`) go in
        // `.owns::<K>()`: their events reconcile the owner. Grant each in {{name}}.toml.
        Controls::new("{{name}}")
            .kind("{{api-version}}", "{{kind}}")
            .events()
    }

    /// A `[settings]` value of the wrong type refuses the load, naming the key.
    fn validate_settings() -> Result<()> {
        settings::get::<String>("note")?;
        Ok(())
    }

    // `Outcome::Done` is "as wanted"; `Outcome::RequeueAfter(d)` comes back later; an `Err` of
    // `retry` backs off per key, `fatal` waits for the next event.
    fn reconcile(key: &ObjectKey, primary: Option<Lazy<DynamicObject>>) -> Result<Outcome> {
        let Some(obj) = primary else {
            info!("reconcile {key}: gone");
            return Ok(Outcome::Done);
        };
        info!("reconcile {key}: present");
        let note = settings::get::<String>("note")?
            .unwrap_or_else(|| format!("{{name}} reconciled {key}"));
        events::normal(&obj, "Reconciled", "Reconcile", &note);
        Ok(Outcome::Done)
    }

    fn on_synced() -> Result<()> {
        info!("synced");
        Ok(())
    }
}

kubewasm_sdk::controller!(App);
