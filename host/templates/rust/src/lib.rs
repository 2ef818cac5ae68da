//! {{name}}: a kubewasm handler (world `kubewasm:handler@0.2.0`) for {{api-version}} {{kind}}.
//!
//! Logs every call with the object's key and records a Normal Event `Observed` about each object
//! it sees added (the one act it needs a grant for: `events = true` in {{name}}.toml).

wit_bindgen::generate!({
    path: "wit",
    world: "handler",
    // The world imports wasi:http; its bindings are generated here, not taken from a crate.
    generate_all,
});

use kubewasm::handler::events::{self, EventType};
use kubewasm::handler::log::{Level, log};
use kubewasm::handler::types::{ObjectMeta, Subscription};

struct Handler;

/// `namespace/name`, or `name` for cluster-scoped objects.
fn key(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name),
        None => meta.name.clone(),
    }
}

impl Guest for Handler {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "{{name}}".to_string(),
            subscriptions: vec![Subscription {
                api_version: "{{api-version}}".to_string(),
                kind: "{{kind}}".to_string(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                resync_period_ms: 0,
                metadata_only: false,
                fields: Vec::new(),
            }],
            permissions: Vec::new(),
            http_origins: Vec::new(),
            // Asks for the `events` grant; without it the plugin is not loaded.
            events: true,
        }
    }

    fn on_add(obj: Object, is_in_initial_list: bool) -> Result<(), HandlerError> {
        let k = key(&obj.meta);
        log(Level::Info, &format!("add {k} init={is_in_initial_list}"));
        events::emit(
            &obj.meta,
            EventType::Normal,
            "Observed",
            "Observe",
            &format!("{{name}} saw {k}"),
        );
        Ok(())
    }

    fn on_update(_old: Object, new: Object, is_sync: bool) -> Result<(), HandlerError> {
        log(Level::Info, &format!("update {} sync={is_sync}", key(&new.meta)));
        Ok(())
    }

    fn on_delete(obj: Object, final_state_unknown: bool) -> Result<(), HandlerError> {
        let k = key(&obj.meta);
        log(Level::Info, &format!("delete {k} final-state-unknown={final_state_unknown}"));
        Ok(())
    }

    fn on_synced() -> Result<(), HandlerError> {
        log(Level::Info, "synced");
        Ok(())
    }
}

export!(Handler);
