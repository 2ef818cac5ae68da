//! The worker loop: the one place that decides when a call starts (slots, quarantine pause,
//! `on-synced` ahead of the queue, idle instances released) and waits for calls to end.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::synced::{SyncedEvent, SyncedState};
use super::verdict::call_kind;
use super::{Dispatcher, Guest, IDLE_RELEASE};
use crate::plugins::delivery::queue::{Finish, Item, QueueKey, Work};
use crate::plugins::delivery::shard_gate::{SlotGuard, in_slot, shard_hash};
use crate::plugins::delivery::state::StateEvent;
use crate::runtime::{CallError, CallKind, HandlerOutcome, MemoryBudget, ObjectKey};

impl Dispatcher {
    /// Delivers queued notifications to guests made by `make_guest` (lazily, at most the
    /// concurrency, reused from call to call) until stopped. Returns when the dispatcher is
    /// stopped (after the calls in flight) or killed (abandoning them).
    pub async fn run<G: Guest, F: FnMut() -> G>(&self, make_guest: &mut F) {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => return,
            _ = self.gate.cancelled() => {}
        }
        // One instance up front answers what the handler exports; the others come on demand.
        let mut idle: Vec<G> = vec![make_guest()];
        // When each idle instance last ended a call (in step with `idle`); the oldest comes first.
        let mut idle_since = vec![tokio::time::Instant::now()];
        let budget = idle[0].memory_budget();
        // Another instance only while one more fits the plugin's memory budget; with none
        // free, the calls wait for an instance instead of failing for want of memory.
        let room = || budget.as_ref().is_none_or(MemoryBudget::room_for_another);
        let mut created = 1usize;
        self.set_instances(created);
        let mut failures = 0u32;
        let wants_synced = idle[0].wants_synced();
        let mut synced = if wants_synced {
            SyncedState::Waiting
        } else {
            SyncedState::Done
        };
        let mut calls = FuturesUnordered::new();
        // Quarantine: no new call until then; calls in flight run on.
        let mut paused: Option<tokio::time::Instant> = None;
        loop {
            if paused.is_some_and(|until| tokio::time::Instant::now() >= until) {
                paused = None;
                self.report(StateEvent::Resumed);
            }
            let stopping = self.stop.is_cancelled();
            if stopping && calls.is_empty() {
                break;
            }
            if self.replayed.swap(false, Ordering::AcqRel) && wants_synced {
                synced = synced.step(SyncedEvent::Replayed);
            }
            self.synced_pending
                .store(synced.pending(), Ordering::Release);
            let now = tokio::time::Instant::now();
            while idle_since.first().is_some_and(|&t| now >= t + IDLE_RELEASE) {
                idle_since.remove(0);
                drop(idle.remove(0));
                created -= 1;
                self.set_instances(created);
            }
            let take = !stopping
                && paused.is_none()
                && calls.len() < self.concurrency
                && (!idle.is_empty() || calls.is_empty() || room());
            // The replay counts as handled only once every initial-list call has ended, so
            // `on-synced` never overlaps one; it takes a free slot ahead of the queue.
            if take && synced.due(|| self.replay_handled()) {
                let guest = self.instance(&mut idle, &mut idle_since, &mut created, make_guest);
                synced = synced.step(SyncedEvent::Started);
                self.synced_in_flight.store(true, Ordering::Release);
                self.handles.calls_in_flight.inc();
                if let Some(o) = &self.observer {
                    o.call_started(&self.plugin, CallKind::Synced);
                }
                calls.push(call(guest, Job::Synced, None));
                continue;
            }
            let release_at = idle_since.first().map(|&t| t + IDLE_RELEASE);
            let wake = [paused.or_else(|| synced.wake_at()), release_at]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                biased;
                _ = self.kill.cancelled() => {
                    if !calls.is_empty() {
                        tracing::warn!(plugin = %self.plugin, calls = calls.len(), "in-flight calls abandoned: the plugin is being stopped");
                    }
                    drop(calls);
                    self.recover_in_flight();
                    return;
                }
                _ = self.stop.cancelled(), if !stopping => continue,
                Some(ended) = calls.next(), if !calls.is_empty() => {
                    let (guest, job, result, took) = ended;
                    idle.push(guest);
                    idle_since.push(tokio::time::Instant::now());
                    let guest = idle.last().expect("just pushed");
                    match job {
                        Job::Object(qk, item) => {
                            self.call_ended(qk, item, result, took, &mut failures, guest);
                        }
                        Job::Synced => {
                            let result = result.outcome();
                            let outcome = self.synced_ended(result, took, &mut failures, guest);
                            let now = tokio::time::Instant::now();
                            synced = synced.step(SyncedEvent::Ended(&outcome, now));
                        }
                    }
                    // Calls that were in flight when the plugin was quarantined do not
                    // quarantine it again: the pause already stands for their failures.
                    if paused.is_none()
                        && let Some(until) = self.quarantine_if_due(failures)
                    {
                        paused = Some(until);
                    }
                }
                next = self.queue.next(), if take => {
                    let Some((qk, item)) = next else { continue };
                    // A sharded plugin's call starts only while its slot is this replica's;
                    // what is not (moved away, or the replica is fenced) is dropped, not retried.
                    let Ok(guard) = self.shard_admit(&qk, &item) else {
                        self.handles.shard_refused.inc();
                        self.queue.finish(&qk, Finish::Done(item));
                        continue;
                    };
                    let guest = self.instance(&mut idle, &mut idle_since, &mut created, make_guest);
                    self.in_flight
                        .lock()
                        .insert(qk.clone(), item.work.is_initial());
                    self.handles.calls_in_flight.inc();
                    if let Some(o) = &self.observer {
                        o.call_started(&self.plugin, call_kind(&item.work));
                    }
                    calls.push(call(guest, Job::Object(qk, item), guard));
                }
                _ = sleep_until(wake) => continue,
                _ = self.wake.notified() => continue,
            }
        }
        self.set_instances(0);
        tracing::debug!(plugin = %self.plugin, version = self.version, "plugin worker stopped");
    }

    /// An idle instance, or a new one (the worker holds at most the concurrency: one per call
    /// in flight).
    fn instance<G: Guest, F: FnMut() -> G>(
        &self,
        idle: &mut Vec<G>,
        idle_since: &mut Vec<tokio::time::Instant>,
        created: &mut usize,
        make_guest: &mut F,
    ) -> G {
        idle_since.pop();
        idle.pop().unwrap_or_else(|| {
            *created += 1;
            self.set_instances(*created);
            make_guest()
        })
    }
}

/// What a call answered: an outcome, or (`keys-for`) the keys it named.
pub(super) enum Answer {
    /// Every export but `keys-for`.
    Outcome(Result<HandlerOutcome, CallError>),
    /// `keys-for`.
    Keys(Result<Vec<ObjectKey>, CallError>),
}

impl Answer {
    /// The outcome, a `keys-for` that answered counting as `ok`.
    pub(super) fn outcome(self) -> Result<HandlerOutcome, CallError> {
        match self {
            Answer::Outcome(r) => r,
            Answer::Keys(r) => r.map(|_| HandlerOutcome::Ok),
        }
    }
}

/// What a call is about.
enum Job {
    /// A notification about an object (marked processing in the queue until it ends).
    Object(QueueKey, Item),
    /// `on-synced`.
    Synced,
}

/// One call on its own instance; hands the instance back with the result so the next call
/// reuses it. Dropping the future abandons the call (and drops the instance).
async fn call<G: Guest>(
    mut guest: G,
    job: Job,
    guard: Option<SlotGuard>,
) -> (G, Job, Answer, Duration) {
    let started = Instant::now();
    let slot = guard.as_ref().map(SlotGuard::slot);
    let run = async {
        match &job {
            Job::Object(qk, item) => match &item.work {
                Work::Notify(n) => Answer::Outcome(guest.deliver(n).await),
                Work::Reconcile { .. } => {
                    let key = ObjectKey::from_cache_key(&qk.key);
                    Answer::Outcome(guest.reconcile(&key).await)
                }
                Work::MapKeys(n) => Answer::Keys(guest.keys_for(n.object()).await),
            },
            Job::Synced => Answer::Outcome(guest.synced().await),
        }
    };
    let result = in_slot(slot, run).await;
    drop(guard);
    (guest, job, result, started.elapsed())
}

impl Dispatcher {
    /// Admits a call of a sharded plugin (`Ok(None)` for one that does not shard, and for work
    /// that names no object of a sharded kind), or refuses it.
    fn shard_admit(&self, qk: &QueueKey, item: &Item) -> Result<Option<SlotGuard>, ()> {
        let Some((by, gate)) = &self.shard else {
            return Ok(None);
        };
        let hash = match &item.work {
            Work::Notify(n) => {
                let m = n.object().meta();
                shard_hash(*by, &m.uid, m.namespace.as_deref())
            }
            // A controller shards by namespace: its key says which.
            Work::Reconcile { .. } => {
                let ns = qk.key.split_once('/').map(|(ns, _)| ns);
                shard_hash(*by, "", ns)
            }
            // Owned and watched kinds are not sharded; the keys they name are checked when
            // they are reconciled.
            Work::MapKeys(_) => None,
        };
        match hash {
            None => Ok(None),
            Some(h) => gate.enter(h).map(Some).ok_or(()),
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
