//! The state of one plugin, as operators see it on `/plugins` and in `/readyz`.
//!
//! One enum, changed only by [`PluginState::step`]: the lifecycle (load, swap, unload) and the
//! worker (quarantine, panic, restart) report what happened, and the step function decides what
//! that means for the plugin, so the rules live in one place.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

/// Where one plugin (all versions of one file) stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum PluginState {
    /// A version is being compiled, described and attached; nothing of it runs yet (a previous
    /// version, if any, keeps running meanwhile).
    #[default]
    Loading,
    /// A version receives notifications.
    Running,
    /// Deliveries are paused after consecutive failed calls; notifications keep queueing
    /// (bounded) and delivery resumes at `until`.
    Quarantined {
        /// When delivery resumes.
        #[serde(with = "unix_millis")]
        until: SystemTime,
    },
    /// The last load failed (and no version runs), or the worker panicked and is being
    /// restarted.
    Failed {
        /// What went wrong, naming the file or the panic.
        cause: String,
        /// Whether the host retries by itself (transient causes, worker restarts) rather than
        /// waiting for the file to change.
        retrying: bool,
    },
    /// The running version is being stopped (unload or shutdown).
    Stopping,
    /// A version is loaded, described and its informers run (caches warm), but it receives
    /// nothing: another replica holds the leader Lease. Ready as a standby.
    Standby,
}

/// What happened to a plugin; the input of [`PluginState::step`].
#[derive(Clone, Debug)]
pub enum StateEvent {
    /// A load or swap started.
    LoadStarted,
    /// A version is attached and receiving.
    Loaded,
    /// A load or swap failed; `running` says whether a previous version keeps running.
    LoadFailed {
        /// The error, naming the file.
        cause: String,
        /// Transient failures are retried by the host.
        retrying: bool,
        /// A previous version is still running.
        running: bool,
    },
    /// The worker paused deliveries for `pause`.
    Quarantined {
        /// How long.
        pause: Duration,
    },
    /// The worker resumed deliveries (after a quarantine or a restart).
    Resumed,
    /// The worker thread panicked; it is restarted after a backoff.
    WorkerPanicked {
        /// The panic message.
        message: String,
    },
    /// Unloading started.
    StopRequested,
    /// The version delivers nothing because this replica does not lead (it loaded as a standby,
    /// or leadership was lost and its delivery stopped).
    StandingBy,
}

impl PluginState {
    /// The state after `event`.
    pub fn step(self, event: StateEvent) -> PluginState {
        use PluginState as S;
        use StateEvent as E;
        match (self, event) {
            // A failed swap leaves the running version as it was.
            (
                previous,
                E::LoadFailed {
                    running: true,
                    cause,
                    ..
                },
            ) => match previous {
                S::Loading => S::Running,
                other => {
                    tracing::debug!(cause = %cause, "new version rejected; running version kept");
                    other
                }
            },
            (
                _,
                E::LoadFailed {
                    cause, retrying, ..
                },
            ) => S::Failed { cause, retrying },
            // While a version runs, a swap in progress is not shown as Loading: what operators
            // need to know is whether events are being delivered.
            (S::Running, E::LoadStarted) => S::Running,
            (S::Quarantined { until }, E::LoadStarted) => S::Quarantined { until },
            (S::Standby, E::LoadStarted) => S::Standby,
            (_, E::LoadStarted) => S::Loading,
            (_, E::Loaded) => S::Running,
            (S::Stopping, _) => S::Stopping,
            (_, E::StopRequested) => S::Stopping,
            (_, E::StandingBy) => S::Standby,
            // Late reports of a delivery that was stopped when leadership was lost.
            (S::Standby, E::Quarantined { .. } | E::Resumed | E::WorkerPanicked { .. }) => {
                S::Standby
            }
            (_, E::Quarantined { pause }) => S::Quarantined {
                until: SystemTime::now() + pause,
            },
            (_, E::Resumed) => S::Running,
            (_, E::WorkerPanicked { message }) => S::Failed {
                cause: format!("worker panicked: {message}"),
                retrying: true,
            },
        }
    }

    /// Whether notifications are being delivered right now.
    pub fn is_running(&self) -> bool {
        matches!(self, PluginState::Running)
    }

    /// Short name for logs and the readiness detail.
    pub fn name(&self) -> &'static str {
        match self {
            PluginState::Loading => "loading",
            PluginState::Running => "running",
            PluginState::Quarantined { .. } => "quarantined",
            PluginState::Failed { .. } => "failed",
            PluginState::Stopping => "stopping",
            PluginState::Standby => "standby",
        }
    }
}

/// One plugin's state, held by the lifecycle (which reports loads, swaps and unloads and shows
/// it on `/plugins`) and by each of its deliveries (which report quarantine, resume and worker
/// panics): every report is one [`PluginState::step`] under a short lock, never held across an
/// await.
#[derive(Clone, Debug, Default)]
pub(crate) struct SharedState(Arc<parking_lot::Mutex<Held>>);

#[derive(Debug, Default)]
struct Held {
    state: PluginState,
    /// What stepped it, in order (tests read it through [`SharedState::steps`]).
    #[cfg(test)]
    steps: Vec<&'static str>,
}

impl SharedState {
    /// Steps the state with `event`.
    pub(crate) fn step(&self, event: StateEvent) {
        let mut held = self.0.lock();
        #[cfg(test)]
        held.steps.push(match &event {
            StateEvent::Quarantined { .. } => "quarantined",
            StateEvent::Resumed => "resumed",
            StateEvent::WorkerPanicked { .. } => "panicked",
            _ => "other",
        });
        let old = std::mem::take(&mut held.state);
        held.state = old.step(event);
    }

    /// The state now.
    pub(crate) fn get(&self) -> PluginState {
        self.0.lock().state.clone()
    }

    /// What stepped the state so far: `quarantined`, `resumed`, `panicked` or `other`.
    #[cfg(test)]
    pub(crate) fn steps(&self) -> Vec<&'static str> {
        self.0.lock().steps.clone()
    }
}

mod unix_millis {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub(super) fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        s.serialize_u64(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(running: bool) -> StateEvent {
        StateEvent::LoadFailed {
            cause: "x.wasm: bad".into(),
            retrying: false,
            running,
        }
    }

    #[test]
    fn load_then_fail_then_fix() {
        let s = PluginState::Loading.step(failed(false));
        assert_eq!(s.name(), "failed");
        let s = s.step(StateEvent::LoadStarted).step(StateEvent::Loaded);
        assert!(s.is_running());
    }

    #[test]
    fn a_failed_swap_keeps_the_running_state() {
        let s = PluginState::Running
            .step(StateEvent::LoadStarted)
            .step(failed(true));
        assert!(s.is_running());
        let q = PluginState::Running.step(StateEvent::Quarantined {
            pause: Duration::from_secs(1),
        });
        assert_eq!(
            q.clone().step(StateEvent::LoadStarted).name(),
            "quarantined"
        );
        assert_eq!(q.step(StateEvent::Resumed).name(), "running");
    }

    #[test]
    fn stopping_is_final_and_panics_are_failures_that_retry() {
        let s = PluginState::Running.step(StateEvent::StopRequested);
        assert_eq!(s.clone().step(StateEvent::Resumed), PluginState::Stopping);
        let p = PluginState::Running.step(StateEvent::WorkerPanicked {
            message: "boom".into(),
        });
        assert_eq!(
            p,
            PluginState::Failed {
                cause: "worker panicked: boom".into(),
                retrying: true
            }
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["state"], "failed");
    }

    #[test]
    fn a_standby_stays_one_until_it_delivers() {
        let s = PluginState::Loading.step(StateEvent::StandingBy);
        assert_eq!(s.name(), "standby");
        assert_eq!(
            s.clone().step(StateEvent::LoadStarted).step(failed(true)),
            PluginState::Standby
        );
        assert_eq!(s.clone().step(StateEvent::Resumed), PluginState::Standby);
        assert!(s.clone().step(StateEvent::Loaded).is_running());
        let lost = PluginState::Quarantined {
            until: SystemTime::now(),
        }
        .step(StateEvent::StandingBy);
        assert_eq!(lost, PluginState::Standby);
        assert_eq!(
            PluginState::Stopping.step(StateEvent::StandingBy),
            PluginState::Stopping
        );
        assert_eq!(
            serde_json::to_value(PluginState::Standby).unwrap()["state"],
            "standby"
        );
    }
}
