//! The smallest `kubewasm:handler@0.2.0` handler: logs one line per notification, like the 0.1.0
//! `configmap-logger`, plus `synced` from `on-synced`. The object's `kubewasm.io/try` label makes
//! it attempt one of the acting imports and log what the host answered, which is how the host's
//! tests see that a call outside the plugin's grants is refused:
//!
//! - `write`: merge-patches an annotation onto the object (`kube.patch`);
//! - `apply`: server-side applies a ConfigMap `<name>-applied` beside it (`kube.apply`);
//! - `get`: reads the object from the API server (`kube.get`);
//! - `event`: records a Normal Event about the object (`events.emit`);
//! - `http`: sends `GET http://127.0.0.1:9/` (`wasi:http/outgoing-handler`);
//! - `show`: logs the object's JSON as received and as `cache.get` returns it, so the host's
//!   tests see exactly what crossed into the guest (the `fields` and `metadata-only` builds
//!   subscribe with that projection).

wit_bindgen::generate!({
    path: "../../../wit/0.2.0",
    world: "handler",
    generate_all,
});

use kubewasm::handler::cache;
use kubewasm::handler::events::{self, EventType};
use kubewasm::handler::kube::{self, PatchType, WriteOptions};
use kubewasm::handler::log::{Level, log};
use kubewasm::handler::types::{ApiError, ObjectMeta, Permission, Subscription};
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, OutgoingRequest, Scheme};

struct LoggerV2;

/// `namespace/name`, or `name` for cluster-scoped objects.
fn key(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name),
        None => meta.name.clone(),
    }
}

fn label<'a>(meta: &'a ObjectMeta, name: &str) -> Option<&'a str> {
    meta.labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn api_error(e: &ApiError) -> String {
    format!("{} {}: {}", e.code, e.reason, e.message)
}

/// Performs the `kubewasm.io/try` action, if any, and logs the host's answer.
fn attempt(meta: &ObjectMeta) {
    let Some(action) = label(meta, "kubewasm.io/try") else {
        return;
    };
    let answer = match action {
        "write" => kube::patch(
            &meta.api_version,
            &meta.kind,
            meta.namespace.as_deref(),
            &meta.name,
            PatchType::Merge,
            r#"{"metadata":{"annotations":{"kubewasm.io/seen":"true"}}}"#,
            None,
            WriteOptions {
                dry_run: false,
                force: false,
            },
        )
        .map(|o| format!("ok rv={}", o.meta.resource_version))
        .unwrap_or_else(|e| format!("error {}", api_error(&e))),
        "apply" => {
            let ns = meta.namespace.as_deref().unwrap_or("default");
            let applied = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"namespace":"{ns}","name":"{}-applied"}},"data":{{"seen":"true"}}}}"#,
                meta.name
            );
            let opts = WriteOptions {
                dry_run: false,
                force: true,
            };
            kube::apply(&applied, opts)
                .map(|o| format!("ok rv={}", o.meta.resource_version))
                .unwrap_or_else(|e| format!("error {}", api_error(&e)))
        }
        "get" => kube::get(
            &meta.api_version,
            &meta.kind,
            meta.namespace.as_deref(),
            &meta.name,
        )
        .map(|o| format!("ok found={}", o.is_some()))
        .unwrap_or_else(|e| format!("error {}", api_error(&e))),
        "event" => {
            events::emit(meta, EventType::Normal, "Seen", "Log", "seen by logger-v2");
            "emitted".to_string()
        }
        "http" => http_get("127.0.0.1:9"),
        "show" => return,
        other => format!("unknown action {other:?}"),
    };
    log(
        Level::Info,
        &format!("try {action} {}: {answer}", key(meta)),
    );
}

/// One plain-HTTP GET of `/` on `authority`; returns the status or the error code.
fn http_get(authority: &str) -> String {
    let request = OutgoingRequest::new(Fields::new());
    // The setters only fail on syntactically invalid values, which these are not.
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some("/"));
    let future = match outgoing_handler::handle(request, None) {
        Ok(f) => f,
        Err(e) => return format!("error {e:?}"),
    };
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => format!("ok status={}", response.status()),
        Some(Ok(Err(e))) => format!("error {e:?}"),
        Some(Err(())) => "error response already taken".to_string(),
        None => "error response not ready".to_string(),
    }
}

/// The JSON pointers the `fields` build keeps.
fn fields() -> Vec<String> {
    if cfg!(feature = "fields") {
        vec!["/data/keep".to_string(), "/binaryData".to_string()]
    } else {
        Vec::new()
    }
}

/// Logs the JSON received and what the cache holds for the object (action `show`).
fn show(obj: &Object) {
    let m = &obj.meta;
    if label(m, "kubewasm.io/try") != Some("show") {
        return;
    }
    log(Level::Info, &format!("json {} {}", key(m), obj.json));
    let cached = match cache::get(&m.api_version, &m.kind, m.namespace.as_deref(), &m.name) {
        Ok(Some(o)) => o.json,
        Ok(None) => "none".to_string(),
        Err(e) => format!("error {e}"),
    };
    log(Level::Info, &format!("cached {} {cached}", key(m)));
}

/// The permissions the `describe-asks` build asks for; none otherwise.
fn asks() -> Vec<Permission> {
    if !cfg!(feature = "describe-asks") {
        return Vec::new();
    }
    vec![
        Permission {
            api_version: "v1".to_string(),
            kind: "Service".to_string(),
            namespace: Some("default".to_string()),
            verbs: vec!["get".to_string(), "patch".to_string(), "apply".to_string()],
        },
        Permission {
            api_version: "v1".to_string(),
            kind: "ConfigMap".to_string(),
            namespace: None,
            verbs: vec!["get".to_string()],
        },
    ]
}

impl Guest for LoggerV2 {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "logger-v2".to_string(),
            subscriptions: vec![Subscription {
                api_version: "v1".to_string(),
                kind: "ConfigMap".to_string(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                resync_period_ms: 0,
                metadata_only: cfg!(feature = "metadata-only"),
                fields: fields(),
            }],
            permissions: asks(),
            http_origins: if cfg!(feature = "describe-asks") {
                vec!["http://127.0.0.1:9000".to_string()]
            } else {
                Vec::new()
            },
            events: cfg!(feature = "describe-asks"),
        }
    }

    fn on_add(obj: Object, is_in_initial_list: bool) -> Result<(), HandlerError> {
        let m = &obj.meta;
        log(
            Level::Info,
            &format!(
                "add {} rv={} init={is_in_initial_list}",
                key(m),
                m.resource_version
            ),
        );
        show(&obj);
        attempt(m);
        Ok(())
    }

    fn on_update(old: Object, new: Object, is_sync: bool) -> Result<(), HandlerError> {
        let m = &new.meta;
        log(
            Level::Info,
            &format!(
                "update {} rv={}->{} sync={is_sync}",
                key(m),
                old.meta.resource_version,
                m.resource_version
            ),
        );
        show(&new);
        attempt(m);
        Ok(())
    }

    fn on_delete(obj: Object, final_state_unknown: bool) -> Result<(), HandlerError> {
        let m = &obj.meta;
        log(
            Level::Info,
            &format!(
                "delete {} rv={} final-state-unknown={final_state_unknown}",
                key(m),
                m.resource_version
            ),
        );
        Ok(())
    }

    fn on_synced() -> Result<(), HandlerError> {
        log(Level::Info, "synced");
        Ok(())
    }
}

export!(LoggerV2);
