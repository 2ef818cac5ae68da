//! Audits that every ConfigMap carries `app.kubernetes.io/name` and keeps the set of violators
//! (a `kubewasm:handler@0.1.0` component, the SDK's `handler_v0_1!`).
//!
//! The set is derived state built from events. Events alone can leave it wrong (a handler that
//! returned early, an instance that was restarted after a trap and lost its memory, a bug), so
//! the handler asks for a periodic resync and uses it to converge:
//! - every `on-update(is-sync = true)` re-checks that one object against the set;
//! - at most once per resync period, a full audit recomputes the set from `cache.list` and logs
//!   every object whose status changed without the handler noticing ("drift").
//!
//! Only labels are read, which the host extracts: no ConfigMap is ever decoded.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kubewasm_sdk::api::core::v1::ConfigMap;
use kubewasm_sdk::{
    Describe, Error, FinalStateUnknown, Handler, Init, Lazy, Named, Result, Sync, cache, info, warn,
};

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

fn compliant(obj: &Lazy<ConfigMap>) -> bool {
    obj.label(REQUIRED_LABEL).is_some_and(|v| !v.is_empty())
}

/// Records the object's current status; returns true if the set changed.
fn record(state: &mut State, obj: &Lazy<ConfigMap>) -> bool {
    if compliant(obj) {
        state.violators.remove(&obj.key())
    } else {
        state.violators.insert(obj.key())
    }
}

/// Recomputes the violators from the informer cache and reports what the events missed.
fn full_audit(state: &mut State) -> Result<()> {
    let all = cache::list::<ConfigMap>(None, None)
        .map_err(|e| Error::retry(format!("cache.list failed: {e}")))?;
    let fresh: BTreeSet<String> = all
        .iter()
        .filter(|o| !compliant(o))
        .map(Lazy::key)
        .collect();
    for k in state.violators.difference(&fresh) {
        warn!("drift {k}: no longer a violator (missed event)");
    }
    for k in fresh.difference(&state.violators) {
        warn!("drift {k}: violator not seen before (missed event)");
    }
    info!("audit: {} configmaps, {} violators", all.len(), fresh.len());
    state.violators = fresh;
    state.last_audit = Some(Instant::now());
    Ok(())
}

impl Handler for LabelAuditor {
    type Kind = ConfigMap;

    fn describe() -> Describe {
        Describe::new("label-auditor").resync(RESYNC)
    }

    fn on_add(obj: &Lazy<ConfigMap>, _: Init) -> Result<()> {
        STATE.with_borrow_mut(|s| {
            if record(s, obj) && !compliant(obj) {
                warn!("violation {}: missing {REQUIRED_LABEL}", obj.key());
            }
        });
        Ok(())
    }

    fn on_update(_: &Lazy<ConfigMap>, new: &Lazy<ConfigMap>, sync: Sync) -> Result<()> {
        STATE.with_borrow_mut(|s| {
            let changed = record(s, new);
            let k = new.key();
            match (sync.0, changed, compliant(new)) {
                // A resync replay should never change anything: if it does, events were missed.
                (true, true, _) => warn!("drift {k}: corrected on resync"),
                (false, true, true) => info!("fixed {k}"),
                (false, true, false) => warn!("violation {k}: missing {REQUIRED_LABEL}"),
                _ => {}
            }
            let due = s
                .last_audit
                .is_none_or(|t| t.elapsed() >= RESYNC - RESYNC / 10);
            if sync.0 && due { full_audit(s) } else { Ok(()) }
        })
    }

    fn on_delete(obj: &Lazy<ConfigMap>, _: FinalStateUnknown) -> Result<()> {
        STATE.with_borrow_mut(|s| s.violators.remove(&obj.key()));
        Ok(())
    }
}

kubewasm_sdk::handler_v0_1!(LabelAuditor);
