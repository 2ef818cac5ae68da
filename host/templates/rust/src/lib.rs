//! {{name}}: a kubewasm handler (world `kubewasm:handler@0.3.0` `handler`, through the Rust SDK in `sdk/`)
//! for {{api-version}} {{kind}}.
//!
//! Logs every call with the object's key and records a Normal Event `Observed` about each object
//! it sees added (the one act it needs a grant for: `events = true` in {{name}}.toml).

use kubewasm_sdk::{
    Describe, DynamicObject, FinalStateUnknown, Handler, Init, Lazy, Result, Sync, events, info,
};

struct Observer;

impl Handler for Observer {
    /// Any kind, typed in its metadata; for a built-in kind use its type from
    /// `kubewasm_sdk::api` (e.g. `api::core::v1::ConfigMap`) and drop `.kind(..)` below.
    type Kind = DynamicObject;

    fn describe() -> Describe {
        // Asks for the `events` grant; without it the plugin is not loaded.
        Describe::new("{{name}}").kind("{{api-version}}", "{{kind}}").events()
    }

    // Objects arrive as `Lazy`: `key()`, labels, uid … come free; `obj.get()?` decodes the
    // typed object on first use.
    fn on_add(obj: &Lazy<DynamicObject>, init: Init) -> Result<()> {
        let k = obj.key();
        info!("add {k} init={}", init.0);
        events::normal(obj, "Observed", "Observe", &format!("{{name}} saw {k}"));
        Ok(())
    }

    fn on_update(_old: &Lazy<DynamicObject>, new: &Lazy<DynamicObject>, sync: Sync) -> Result<()> {
        info!("update {} sync={}", new.key(), sync.0);
        Ok(())
    }

    fn on_delete(obj: &Lazy<DynamicObject>, unknown: FinalStateUnknown) -> Result<()> {
        info!("delete {} final-state-unknown={}", obj.key(), unknown.0);
        Ok(())
    }

    fn on_synced() -> Result<()> {
        info!("synced");
        Ok(())
    }
}

kubewasm_sdk::handler!(Observer);
