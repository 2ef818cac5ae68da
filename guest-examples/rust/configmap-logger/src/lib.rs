//! The reference handler: logs one line per notification with its flags, and lets the object's
//! `kubewasm.io/fail` label choose the outcome. Handlers in other languages reproduce this output
//! byte for byte, so keep the formats below stable. A `kubewasm:handler@0.1.0` component (the
//! SDK's `handler_v0_1!`): the cross-language conformance reference is the 0.1.0 world.
//!
//! The `kubewasm.io/bench` label (on-update: of the new object) exists for
//! `tests/benches/languages.rs`: `noop` returns at once, `parse` parses the JSON and returns;
//! neither logs, so the benchmark measures the call itself and not the log pipeline. Everything
//! here reads the metadata the host extracted: no object is ever decoded.

use kubewasm_sdk::api::core::v1::ConfigMap;
use kubewasm_sdk::{
    Describe, Error, FinalStateUnknown, Handler, Init, Lazy, Named, Result, Sync, info, serde_json,
};

struct ConfigMapLogger;

/// Handles the `kubewasm.io/bench` label: `Some(result)` when the call is a benchmark call and is
/// done. Invalid JSON under `parse` is `fatal`, as a real handler would answer it.
fn bench(new: &Lazy<ConfigMap>, old: Option<&Lazy<ConfigMap>>) -> Option<Result<()>> {
    match new.label("kubewasm.io/bench")? {
        "noop" => Some(Ok(())),
        "parse" => Some(old.into_iter().chain([new]).try_for_each(|o| {
            // black_box: a parse whose value is unused could otherwise be optimised away.
            serde_json::from_str::<serde_json::Value>(o.json())
                .map(|v| drop(std::hint::black_box(v)))
                .map_err(|e| Error::fatal(format!("invalid JSON: {e}")))
        })),
        _ => None,
    }
}

/// Maps the `kubewasm.io/fail` label to an outcome; `trap` panics after the line was logged.
fn outcome(obj: &Lazy<ConfigMap>) -> Result<()> {
    match obj.label("kubewasm.io/fail") {
        Some("retry") => Err(Error::retry("kubewasm.io/fail=retry")),
        Some("fatal") => Err(Error::fatal("kubewasm.io/fail=fatal")),
        Some("trap") => panic!("kubewasm.io/fail=trap"),
        _ => Ok(()),
    }
}

impl Handler for ConfigMapLogger {
    type Kind = ConfigMap;

    fn describe() -> Describe {
        Describe::new("configmap-logger")
    }

    fn on_add(obj: &Lazy<ConfigMap>, init: Init) -> Result<()> {
        if let Some(r) = bench(obj, None) {
            return r;
        }
        let (key, rv) = (obj.key(), obj.resource_version());
        info!("add {key} rv={rv} init={}", init.0);
        outcome(obj)
    }

    fn on_update(old: &Lazy<ConfigMap>, new: &Lazy<ConfigMap>, sync: Sync) -> Result<()> {
        if let Some(r) = bench(new, Some(old)) {
            return r;
        }
        let (key, rv) = (new.key(), new.resource_version());
        info!(
            "update {key} rv={}->{rv} sync={}",
            old.resource_version(),
            sync.0
        );
        outcome(new)
    }

    fn on_delete(obj: &Lazy<ConfigMap>, unknown: FinalStateUnknown) -> Result<()> {
        if let Some(r) = bench(obj, None) {
            return r;
        }
        let (key, rv) = (obj.key(), obj.resource_version());
        info!("delete {key} rv={rv} final-state-unknown={}", unknown.0);
        outcome(obj)
    }
}

kubewasm_sdk::handler_v0_1!(ConfigMapLogger);
