//! What a call's result means once it has ended: metrics, the log line, failures in a row and
//! quarantine, the queue's marking and the observer, kept apart from the loop that starts calls.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Dispatcher, Guest};
use crate::informer::Notification;
use crate::plugins::delivery::queue::{Finish, Item, QueueKey};
use crate::plugins::delivery::state::StateEvent;
use crate::runtime::{
    CallEnded, CallError, CallKind, CallOutcome, CalledObject, HandlerOutcome, Quarantined,
};

impl Dispatcher {
    /// Books a call that ended: metrics, the verdict, the queue's marking, and the observer.
    pub(super) fn call_ended<G: Guest>(
        &self,
        qk: QueueKey,
        item: Item,
        result: Result<HandlerOutcome, CallError>,
        took: Duration,
        failures: &mut u32,
        guest: &G,
    ) {
        self.in_flight.lock().remove(&qk);
        self.handles.calls_in_flight.dec();
        let kind = call_kind(&item.notification);
        self.handles.call_seconds.observe(took.as_secs_f64());
        self.handles.calls[kind as usize].inc();
        // Publishing costs a little per call, so only when someone listens.
        let delivered = self
            .observer
            .is_some()
            .then(|| Delivered::of(&item.notification));
        let admit = || guest.admit_line();
        let outcome = self.judge(&qk.key, kind, item.attempts, result, failures, admit);
        let finish = match outcome {
            CallOutcome::Retry(_) => Finish::Retry(item),
            _ => Finish::Done(item),
        };
        self.queue.finish(&qk, finish);
        if let Some(delivered) = delivered {
            self.publish_call(&qk.key, kind, delivered, outcome);
        }
    }

    /// Tells the observer (on this thread, so it can attribute what the guest did) how a call
    /// about an object ended.
    fn publish_call(&self, key: &Arc<str>, call: CallKind, d: Delivered, outcome: CallOutcome) {
        if let Some(o) = &self.observer {
            let object = CalledObject {
                key,
                api_version: &d.api_version,
                kind: &d.kind,
                resource_version: &d.resource_version,
                flag: d.flag,
            };
            let ended = CallEnded {
                version: self.version,
                call,
                object: Some(object),
                outcome: &outcome,
            };
            o.call_ended(&self.plugin, &ended);
        }
    }

    /// Books an `on-synced` call that ended: metrics, the verdict, and the observer.
    pub(super) fn synced_ended<G: Guest>(
        &self,
        result: Result<HandlerOutcome, CallError>,
        took: Duration,
        failures: &mut u32,
        guest: &G,
    ) -> CallOutcome {
        self.synced_in_flight.store(false, Ordering::Release);
        self.handles.calls_in_flight.dec();
        self.handles.call_seconds.observe(took.as_secs_f64());
        self.handles.calls[CallKind::Synced as usize].inc();
        let admit = || guest.admit_line();
        let outcome = self.judge("(on-synced)", CallKind::Synced, 0, result, failures, admit);
        if matches!(outcome, CallOutcome::Ok) {
            tracing::info!(plugin = %self.plugin, version = self.version, "on-synced handled: the plugin has seen every object");
        }
        if let Some(o) = &self.observer {
            let ended = CallEnded {
                version: self.version,
                call: CallKind::Synced,
                object: None,
                outcome: &outcome,
            };
            o.call_ended(&self.plugin, &ended);
        }
        outcome
    }

    /// Quarantines the plugin when `failures` calls in a row failed (on any of its
    /// instances): returns until when no new call may start.
    pub(super) fn quarantine_if_due(&self, failures: u32) -> Option<tokio::time::Instant> {
        let pause = self.quarantine.backoff(failures)?;
        self.handles.quarantines.inc();
        tracing::error!(plugin = %self.plugin, failures, pause_secs = pause.as_secs_f64(), "plugin quarantined after consecutive failed calls; notifications keep queueing");
        self.report(StateEvent::Quarantined { pause });
        if let Some(o) = &self.observer {
            let quarantined = Quarantined {
                version: self.version,
                failures,
                pause,
            };
            o.quarantined(&self.plugin, &quarantined);
        }
        Some(tokio::time::Instant::now() + pause)
    }

    /// Classifies a call's result: counts failures, logs, and tracks failures in a row. `key`
    /// names the object (already validated by the informer), `attempts` its earlier retries;
    /// `admit` says whether the plugin's budget for guest-caused lines allows the log line.
    fn judge(
        &self,
        key: &str,
        kind: CallKind,
        attempts: u32,
        result: Result<HandlerOutcome, CallError>,
        failures: &mut u32,
        admit: impl FnOnce() -> bool,
    ) -> CallOutcome {
        match result {
            Ok(HandlerOutcome::Ok) => {
                *failures = 0;
                CallOutcome::Ok
            }
            Ok(HandlerOutcome::Fatal(msg)) => {
                *failures = 0;
                self.handles.fatal_errors.inc();
                if admit() {
                    tracing::warn!(plugin = %self.plugin, key, call = ?kind, error = %msg, "handler reported a fatal error; not retried");
                }
                CallOutcome::Fatal(msg)
            }
            Ok(HandlerOutcome::Retry(msg)) => {
                *failures = 0;
                self.handles.retry_errors.inc();
                self.handles.retries.inc();
                if admit() {
                    tracing::info!(plugin = %self.plugin, key, call = ?kind, attempts = attempts + 1, reason = %msg, "handler asked for a retry (a notification is dropped instead if a newer one for the object is queued)");
                }
                CallOutcome::Retry(msg)
            }
            Err(err) => {
                *failures += 1;
                match &err {
                    CallError::Trap(_) => self.handles.trap_errors.inc(),
                    CallError::DeadlineExceeded => self.handles.deadline_errors.inc(),
                    CallError::OutOfMemory => self.handles.oom_errors.inc(),
                    CallError::Instantiate(_) | CallError::PoolExhausted { .. } => {
                        self.handles.instantiate_errors.inc()
                    }
                };
                if admit() {
                    tracing::error!(plugin = %self.plugin, key, call = ?kind, error = %err, "handler failed; instance discarded, a fresh one serves the next call");
                }
                CallOutcome::Failed(err.to_string())
            }
        }
    }
}

/// What observers are told of the object a call was about.
struct Delivered {
    api_version: String,
    kind: String,
    resource_version: String,
    flag: bool,
}

impl Delivered {
    fn of(n: &Notification) -> Delivered {
        let meta = n.object().meta();
        Delivered {
            api_version: meta.api_version.clone(),
            kind: meta.kind.clone(),
            resource_version: meta.resource_version.clone(),
            flag: n.flag(),
        }
    }
}

/// The export a notification is delivered to.
pub(super) fn call_kind(n: &Notification) -> CallKind {
    match n {
        Notification::Add { .. } => CallKind::Add,
        Notification::Update { .. } => CallKind::Update,
        Notification::Delete { .. } => CallKind::Delete,
    }
}
