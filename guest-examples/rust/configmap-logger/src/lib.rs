//! The reference handler: logs one line per notification with its flags, and lets the object's
//! `kubewasm.io/fail` label choose the outcome. Handlers in other languages reproduce this output
//! byte for byte, so keep the formats below stable.
//!
//! The `kubewasm.io/bench` label (on-update: of the new object) exists for
//! `tests/benches/languages.rs`: `noop` returns at once, `parse` parses the JSON and returns;
//! neither logs, so the benchmark measures the call itself and not the log pipeline.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "handler",
});

use kubewasm::handler::log::{Level, log};
use kubewasm::handler::types::{ObjectMeta, Subscription};

struct ConfigMapLogger;

/// `namespace/name`, or `name` for cluster-scoped objects.
fn key(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name),
        None => meta.name.clone(),
    }
}

/// Handles the `kubewasm.io/bench` label: `Some(result)` when the call is a benchmark call and is
/// done. Invalid JSON under `parse` is `fatal`, as a real handler would answer it.
fn bench(new: &Object, old: Option<&Object>) -> Option<Result<(), HandlerError>> {
    let mode = new
        .meta
        .labels
        .iter()
        .find(|(k, _)| k == "kubewasm.io/bench")
        .map(|(_, v)| v.as_str())?;
    match mode {
        "noop" => Some(Ok(())),
        "parse" => Some(old.into_iter().chain([new]).try_for_each(|o| {
            // black_box: a parse whose value is unused could otherwise be optimised away.
            serde_json::from_str::<serde_json::Value>(&o.json)
                .map(|v| drop(std::hint::black_box(v)))
                .map_err(|e| HandlerError::Fatal(format!("invalid JSON: {e}")))
        })),
        _ => None,
    }
}

/// Maps the `kubewasm.io/fail` label to an outcome; `trap` panics after the line was logged.
fn outcome(meta: &ObjectMeta) -> Result<(), HandlerError> {
    let fail = meta
        .labels
        .iter()
        .find(|(k, _)| k == "kubewasm.io/fail")
        .map(|(_, v)| v.as_str());
    match fail {
        Some("retry") => Err(HandlerError::Retry("kubewasm.io/fail=retry".to_string())),
        Some("fatal") => Err(HandlerError::Fatal("kubewasm.io/fail=fatal".to_string())),
        Some("trap") => panic!("kubewasm.io/fail=trap"),
        _ => Ok(()),
    }
}

impl Guest for ConfigMapLogger {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "configmap-logger".to_string(),
            subscriptions: vec![Subscription {
                api_version: "v1".to_string(),
                kind: "ConfigMap".to_string(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                resync_period_ms: 0,
            }],
        }
    }

    fn on_add(obj: Object, is_in_initial_list: bool) -> Result<(), HandlerError> {
        if let Some(r) = bench(&obj, None) {
            return r;
        }
        let m = &obj.meta;
        log(
            Level::Info,
            &format!(
                "add {} rv={} init={is_in_initial_list}",
                key(m),
                m.resource_version
            ),
        );
        outcome(m)
    }

    fn on_update(old: Object, new: Object, is_sync: bool) -> Result<(), HandlerError> {
        if let Some(r) = bench(&new, Some(&old)) {
            return r;
        }
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
        outcome(m)
    }

    fn on_delete(obj: Object, final_state_unknown: bool) -> Result<(), HandlerError> {
        if let Some(r) = bench(&obj, None) {
            return r;
        }
        let m = &obj.meta;
        log(
            Level::Info,
            &format!(
                "delete {} rv={} final-state-unknown={final_state_unknown}",
                key(m),
                m.resource_version
            ),
        );
        outcome(m)
    }
}

export!(ConfigMapLogger);
