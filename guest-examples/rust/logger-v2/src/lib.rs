//! The smallest `kubewasm:handler@0.2.0` handler: logs one line per notification, like the 0.1.0
//! `configmap-logger`, plus `synced` from `on-synced`. The object's `kubewasm.io/try` label makes
//! it attempt one of the acting imports and log what the host answered, which is how the host's
//! tests see that a call outside the plugin's grants is refused:
//!
//! - `write`: merge-patches an annotation onto the object (`kube.patch`);
//! - `apply`: server-side applies a ConfigMap `<name>-applied` beside it (`kube.apply-outcome`);
//! - `get`: reads the object from the API server (`kube.get`);
//! - `event`: records a Normal Event about the object (`events.emit`);
//! - `http`: sends `GET http://127.0.0.1:9/` (`wasi:http/outgoing-handler`);
//! - `show`: logs the object's JSON as received and as `cache.get` returns it, so the host's
//!   tests see exactly what crossed into the guest (the `fields` and `metadata-only` builds
//!   subscribe with that projection).

use kubewasm_sdk::api::core::v1::ConfigMap;
use kubewasm_sdk::{
    Describe, Error, FinalStateUnknown, Handler, Init, Lazy, Named, ObjectMeta, Result, Sync,
    cache, events, http, info, kube, patch,
};

struct LoggerV2;

/// The host's answer as logged: `ok …`, or the error as the host reported it.
fn answer<T>(r: Result<T>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(t) => ok(t),
        // The `wasi:http` error code, as the host names it.
        Err(Error::Http { message, .. }) => format!("error {message}"),
        Err(e) => format!("error {e}"),
    }
}

fn rv(cm: Lazy<ConfigMap>) -> String {
    format!("ok rv={}", cm.resource_version())
}

/// Performs the `kubewasm.io/try` action, if any, and logs the host's answer.
fn attempt(obj: &Lazy<ConfigMap>) {
    let Some(action) = obj.label("kubewasm.io/try") else {
        return;
    };
    let (ns, name) = (obj.namespace(), obj.name());
    let answer = match action {
        "write" => {
            let seen = patch::annotation("kubewasm.io/seen", Some("true"));
            answer(kube::patch_merge::<ConfigMap>(ns, name, &seen), rv)
        }
        "apply" => {
            let applied = ConfigMap {
                metadata: ObjectMeta {
                    namespace: Some(ns.unwrap_or("default").into()),
                    name: Some(format!("{name}-applied")),
                    ..Default::default()
                },
                data: Some([("seen".to_string(), "true".to_string())].into()),
                ..Default::default()
            };
            answer(kube::apply(&applied), |a| rv(a.object))
        }
        "get" => answer(kube::get::<ConfigMap>(ns, name), |o| {
            format!("ok found={}", o.is_some())
        }),
        "event" => {
            events::normal(obj, "Seen", "Log", "seen by logger-v2");
            "emitted".to_string()
        }
        "http" => answer(http::get("http://127.0.0.1:9/"), |r| {
            format!("ok status={}", r.status)
        }),
        "show" => return,
        other => format!("unknown action {other:?}"),
    };
    info!("try {action} {}: {answer}", obj.key());
}

/// Logs the JSON received and what the cache holds for the object (action `show`).
fn show(obj: &Lazy<ConfigMap>) {
    if obj.label("kubewasm.io/try") != Some("show") {
        return;
    }
    info!("json {} {}", obj.key(), obj.json());
    let cached = match cache::get::<ConfigMap>(obj.namespace(), obj.name()) {
        Ok(Some(o)) => o.json().to_string(),
        Ok(None) => "none".to_string(),
        Err(e) => format!("error {e}"),
    };
    info!("cached {} {cached}", obj.key());
}

impl Handler for LoggerV2 {
    type Kind = ConfigMap;

    fn describe() -> Describe {
        let mut d = Describe::new("logger-v2");
        if cfg!(feature = "fields") {
            d = d.project(&["/data/keep", "/binaryData"]);
        }
        if cfg!(feature = "metadata-only") {
            d = d.metadata_only();
        }
        // The `describe-asks` build asks for a Service write, a ConfigMap read, Events and one
        // HTTP origin; the others for nothing.
        if cfg!(feature = "describe-asks") {
            d = d
                .can_kind("v1", "Service", Some("default"), &["get", "patch", "apply"])
                .can::<ConfigMap>(&["get"])
                .http("http://127.0.0.1:9000")
                .events();
        }
        d
    }

    fn on_add(obj: &Lazy<ConfigMap>, init: Init) -> Result<()> {
        let (key, rv) = (obj.key(), obj.resource_version());
        info!("add {key} rv={rv} init={}", init.0);
        show(obj);
        attempt(obj);
        Ok(())
    }

    fn on_update(old: &Lazy<ConfigMap>, new: &Lazy<ConfigMap>, sync: Sync) -> Result<()> {
        let (key, rv) = (new.key(), new.resource_version());
        info!(
            "update {key} rv={}->{rv} sync={}",
            old.resource_version(),
            sync.0
        );
        show(new);
        attempt(new);
        Ok(())
    }

    fn on_delete(obj: &Lazy<ConfigMap>, unknown: FinalStateUnknown) -> Result<()> {
        let (key, rv) = (obj.key(), obj.resource_version());
        info!("delete {key} rv={rv} final-state-unknown={}", unknown.0);
        Ok(())
    }

    fn on_synced() -> Result<()> {
        info!("synced");
        Ok(())
    }
}

kubewasm_sdk::handler!(LoggerV2);
