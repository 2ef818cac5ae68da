//! Audits that every ConfigMap carries `app.kubernetes.io/name` and keeps the set of violators.
//!
//! The set is derived state built from events. Events alone can leave it wrong (a handler that
//! returned early, an instance that was restarted after a trap and lost its memory, a bug), so
//! the handler asks for a periodic resync and uses it to converge:
//! - every `on-update(is-sync = true)` re-checks that one object against the set;
//! - at most once per resync period, a full audit recomputes the set from `cache.list` and logs
//!   every object whose status changed without the handler noticing ("drift").

wit_bindgen::generate!({
    path: "../../../wit",
    world: "handler",
});

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kubewasm::handler::cache;
use kubewasm::handler::log::{Level, log};
use kubewasm::handler::types::{ObjectMeta, Subscription};

const REQUIRED_LABEL: &str = "app.kubernetes.io/name";
const RESYNC: Duration = Duration::from_secs(30);

struct LabelAuditor;

#[derive(Default)]
struct State {
    /// Keys (`namespace/name`) of ConfigMaps missing the required label.
    violators: BTreeSet<String>,
    /// When the last full audit from the cache ran.
    last_audit: Option<Instant>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn key(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name),
        None => meta.name.clone(),
    }
}

fn compliant(meta: &ObjectMeta) -> bool {
    meta.labels
        .iter()
        .any(|(k, v)| k == REQUIRED_LABEL && !v.is_empty())
}

/// Records the object's current status; returns true if the set changed.
fn record(state: &mut State, meta: &ObjectMeta) -> bool {
    let key = key(meta);
    if compliant(meta) {
        state.violators.remove(&key)
    } else {
        state.violators.insert(key)
    }
}

/// Recomputes the violators from the informer cache and reports what the events missed.
fn full_audit(state: &mut State) -> Result<(), HandlerError> {
    let all = cache::list("v1", "ConfigMap", None, None)
        .map_err(|e| HandlerError::Retry(format!("cache.list failed: {e}")))?;
    let fresh: BTreeSet<String> = all
        .iter()
        .filter(|o| !compliant(&o.meta))
        .map(|o| key(&o.meta))
        .collect();
    for k in state.violators.difference(&fresh) {
        log(
            Level::Warn,
            &format!("drift {k}: no longer a violator (missed event)"),
        );
    }
    for k in fresh.difference(&state.violators) {
        log(
            Level::Warn,
            &format!("drift {k}: violator not seen before (missed event)"),
        );
    }
    log(
        Level::Info,
        &format!("audit: {} configmaps, {} violators", all.len(), fresh.len()),
    );
    state.violators = fresh;
    state.last_audit = Some(Instant::now());
    Ok(())
}

impl Guest for LabelAuditor {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "label-auditor".to_string(),
            subscriptions: vec![Subscription {
                api_version: "v1".to_string(),
                kind: "ConfigMap".to_string(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                resync_period_ms: RESYNC.as_millis() as u64,
            }],
        }
    }

    fn on_add(obj: Object, _is_in_initial_list: bool) -> Result<(), HandlerError> {
        STATE.with_borrow_mut(|s| {
            if record(s, &obj.meta) && !compliant(&obj.meta) {
                log(
                    Level::Warn,
                    &format!("violation {}: missing {REQUIRED_LABEL}", key(&obj.meta)),
                );
            }
        });
        Ok(())
    }

    fn on_update(_old: Object, new: Object, is_sync: bool) -> Result<(), HandlerError> {
        STATE.with_borrow_mut(|s| {
            let changed = record(s, &new.meta);
            let k = key(&new.meta);
            match (is_sync, changed, compliant(&new.meta)) {
                // A resync replay should never change anything: if it does, events were missed.
                (true, true, _) => log(Level::Warn, &format!("drift {k}: corrected on resync")),
                (false, true, true) => log(Level::Info, &format!("fixed {k}")),
                (false, true, false) => log(
                    Level::Warn,
                    &format!("violation {k}: missing {REQUIRED_LABEL}"),
                ),
                _ => {}
            }
            let due = s
                .last_audit
                .is_none_or(|t| t.elapsed() >= RESYNC - RESYNC / 10);
            if is_sync && due {
                full_audit(s)
            } else {
                Ok(())
            }
        })
    }

    fn on_delete(obj: Object, _final_state_unknown: bool) -> Result<(), HandlerError> {
        STATE.with_borrow_mut(|s| s.violators.remove(&key(&obj.meta)));
        Ok(())
    }
}

export!(LabelAuditor);
