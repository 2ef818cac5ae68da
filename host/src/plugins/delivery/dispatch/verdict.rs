//! What a call's result means once it has ended: metrics, the log line, failures in a row and
//! quarantine, the queue's marking and the observer, kept apart from the loop that starts calls.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::run::Answer;
use super::{Dispatcher, Guest};
use crate::plugins::delivery::keys::{PrimaryLookup, existing};
use crate::plugins::delivery::queue::{Finish, Item, QueueKey, Work};
use crate::plugins::delivery::state::StateEvent;
use crate::runtime::{
    CallEnded, CallError, CallKind, CallOutcome, CalledObject, HandlerOutcome, ObjectKey,
    Quarantined,
};

/// Most keys one `keys-for` answer may name; the rest are dropped with a warning. Each names a
/// cached primary or nothing, so this only bounds the work one answer can cause.
pub(crate) const MAX_KEYS_PER_ANSWER: usize = 1000;

impl Dispatcher {
    /// Books a call that ended: metrics, the verdict, the queue's marking, and the observer.
    pub(super) fn call_ended<G: Guest>(
        &self,
        qk: QueueKey,
        item: Item,
        answer: Answer,
        took: Duration,
        failures: &mut u32,
        guest: &G,
    ) {
        self.in_flight.lock().remove(&qk);
        self.handles.calls_in_flight.dec();
        let kind = call_kind(&item.work);
        self.handles.call_seconds.observe(took.as_secs_f64());
        self.handles.calls[kind as usize].inc();
        // Publishing costs a little per call, so only when someone listens.
        let delivered = self.observer.is_some().then(|| self.delivered(&item.work));
        let result = match answer {
            Answer::Keys(Ok(keys)) => {
                self.reconcile_named(&qk.key, keys, item.work.is_initial(), guest);
                Ok(HandlerOutcome::Ok)
            }
            other => other.outcome(),
        };
        let admit = || guest.admit_line();
        let outcome = self.judge(&qk.key, kind, item.attempts, result, failures, admit);
        let reconcile = matches!(item.work, Work::Reconcile { .. });
        let finish = match outcome {
            CallOutcome::Retry(_) => Finish::Retry(item),
            // A reconcile is level-triggered: a failed one is due again, with backoff.
            CallOutcome::Failed(_) if reconcile => Finish::Retry(item),
            CallOutcome::RequeueAfter(after) if reconcile => Finish::RequeueAfter(item, after),
            _ => Finish::Done(item),
        };
        self.queue.finish(&qk, finish);
        if let Some(delivered) = delivered {
            self.publish_call(&qk.key, kind, delivered, outcome);
        }
    }

    /// Queues reconciles of the keys a `keys-for` answer named, each only if it names a cached
    /// primary (so a guest cannot make the host hold keys of objects that do not exist).
    fn reconcile_named<G: Guest>(
        &self,
        from: &str,
        keys: Vec<ObjectKey>,
        initial: bool,
        guest: &G,
    ) {
        let Some(c) = &self.controller else { return };
        if keys.len() > MAX_KEYS_PER_ANSWER && guest.admit_line() {
            tracing::warn!(plugin = %self.plugin, key = from, named = keys.len(), kept = MAX_KEYS_PER_ANSWER,
                "keys-for named more keys than one answer may; the rest are dropped");
        }
        for k in keys.into_iter().take(MAX_KEYS_PER_ANSWER) {
            let found = match &k.namespace {
                Some(ns) if !ns.is_empty() && !ns.contains('/') => {
                    let key = format!("{ns}/{}", k.name);
                    (!k.name.contains('/') && c.uid_at(&key).is_some()).then(|| key.into())
                }
                Some(_) => None,
                None => existing(None, &k.name, c),
            };
            if let Some(key) = found {
                self.queue.push_reconcile(key, initial);
            }
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
            Ok(HandlerOutcome::RequeueAfter(after)) => {
                *failures = 0;
                CallOutcome::RequeueAfter(after)
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

impl Dispatcher {
    /// What observers are told of the object of `work`: a notification's object, or for a
    /// reconcile the primary kind (the key is told beside it).
    fn delivered(&self, work: &Work) -> Delivered {
        match work.notification() {
            Some(n) => {
                let meta = n.object().meta();
                Delivered {
                    api_version: meta.api_version.clone(),
                    kind: meta.kind.clone(),
                    resource_version: meta.resource_version.clone(),
                    flag: n.flag(),
                }
            }
            None => {
                let (api_version, kind) = self.controller.as_ref().map_or_else(
                    || (String::new(), String::new()),
                    |c| (c.plan.api_version.clone(), c.plan.primary.kind.clone()),
                );
                Delivered {
                    api_version,
                    kind,
                    resource_version: String::new(),
                    flag: work.is_initial(),
                }
            }
        }
    }
}

/// The export `work` is delivered to.
pub(super) fn call_kind(work: &Work) -> CallKind {
    use crate::informer::Notification;
    match work {
        Work::Notify(Notification::Add { .. }) => CallKind::Add,
        Work::Notify(Notification::Update { .. }) => CallKind::Update,
        Work::Notify(Notification::Delete { .. }) => CallKind::Delete,
        Work::Reconcile { .. } => CallKind::Reconcile,
        Work::MapKeys(_) => CallKind::KeysFor,
    }
}
