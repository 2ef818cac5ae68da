//! Delivery of informer notifications to one plugin version: a per-key ordered queue with
//! retries, drained by a dedicated worker thread that owns the guest instance.
//!
//! Each plugin version has its own queue and thread, so a slow, looping or crashing handler
//! delays nobody else, and a guest call never blocks a tokio worker.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::events::{CallOutcome, PluginEvent};
use super::metrics::{CallKind, CallLabels, ErrorKind, ErrorLabels, PluginLabels, PluginMetrics};
use crate::informer::{ResourceEventHandler, SharedObject};
use crate::runtime::{CallError, HandlerInstance, HandlerOutcome};
use crate::workqueue::RateLimitingQueue;

/// Consecutive failed calls (traps, deadlines, memory exhaustion) before a plugin is paused.
pub const QUARANTINE_AFTER: u32 = 5;
/// First quarantine length; doubles with every further quarantine up to [`QUARANTINE_MAX`].
pub const QUARANTINE_BASE: Duration = Duration::from_secs(1);
/// Longest quarantine.
pub const QUARANTINE_MAX: Duration = Duration::from_secs(300);

/// Polls of an empty queue before the worker parks (each is a `yield_now`).
const SPIN_BEFORE_PARK: usize = 64;

/// One notification as client-go's `ResourceEventHandler` would receive it.
#[derive(Clone)]
pub enum Notification {
    /// `on-add`.
    Add {
        /// The new object.
        obj: SharedObject,
        /// Delivered as part of an initial list or replay.
        init: bool,
    },
    /// `on-update`.
    Update {
        /// The previous state.
        old: SharedObject,
        /// The current state.
        new: SharedObject,
        /// A resync or an unchanged relist, not a change on the server.
        sync: bool,
    },
    /// `on-delete`.
    Delete {
        /// The last known state.
        obj: SharedObject,
        /// Inferred from a relist rather than seen as a watch event.
        final_state_unknown: bool,
    },
}

impl Notification {
    fn kind(&self) -> CallKind {
        match self {
            Notification::Add { .. } => CallKind::Add,
            Notification::Update { .. } => CallKind::Update,
            Notification::Delete { .. } => CallKind::Delete,
        }
    }

    fn flag(&self) -> bool {
        match self {
            Notification::Add { init, .. } => *init,
            Notification::Update { sync, .. } => *sync,
            Notification::Delete {
                final_state_unknown,
                ..
            } => *final_state_unknown,
        }
    }

    fn object(&self) -> &SharedObject {
        match self {
            Notification::Add { obj, .. } | Notification::Delete { obj, .. } => obj,
            Notification::Update { new, .. } => new,
        }
    }
}

/// A notification plus how often delivery already failed with `retry`.
struct Pending {
    notification: Notification,
    attempts: u32,
}

/// Queue items are per subscription and object, so notifications for one object stay ordered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueKey {
    /// Index of the subscription in the plugin's `describe()` result.
    pub subscription: u32,
    /// `namespace/name` of the object.
    pub key: Arc<str>,
}

/// Metric handles resolved once per plugin so the hot path does no label lookups.
struct Handles {
    calls: [Counter; 3],
    retry_errors: Counter,
    fatal_errors: Counter,
    trap_errors: Counter,
    deadline_errors: Counter,
    oom_errors: Counter,
    instantiate_errors: Counter,
    retries: Counter,
    quarantines: Counter,
    call_seconds: Histogram,
    queue_depth: Gauge,
}

impl Handles {
    fn new(m: &PluginMetrics, plugin: &str) -> Self {
        let call = |call| {
            m.events
                .get_or_create(&CallLabels {
                    plugin: plugin.to_string(),
                    call,
                })
                .clone()
        };
        let err = |kind| {
            m.errors
                .get_or_create(&ErrorLabels {
                    plugin: plugin.to_string(),
                    kind,
                })
                .clone()
        };
        let p = PluginLabels {
            plugin: plugin.to_string(),
        };
        Handles {
            calls: [
                call(CallKind::Add),
                call(CallKind::Update),
                call(CallKind::Delete),
            ],
            retry_errors: err(ErrorKind::Retry),
            fatal_errors: err(ErrorKind::Fatal),
            trap_errors: err(ErrorKind::Trap),
            deadline_errors: err(ErrorKind::Deadline),
            oom_errors: err(ErrorKind::OutOfMemory),
            instantiate_errors: err(ErrorKind::Instantiate),
            retries: m.retries.get_or_create(&p).clone(),
            quarantines: m.quarantines.get_or_create(&p).clone(),
            call_seconds: m.call_seconds.get_or_create(&p).clone(),
            queue_depth: m.queue_depth.get_or_create(&p).clone(),
        }
    }
}

/// The delivery side of one plugin version: informer listeners push into it, its worker drains it.
pub struct Dispatcher {
    plugin: Arc<str>,
    version: u64,
    queue: RateLimitingQueue<QueueKey>,
    pending: Mutex<HashMap<QueueKey, VecDeque<Pending>>>,
    /// Initial-list notifications not yet handled: the plugin is not ready while this is non-zero.
    initial_outstanding: AtomicUsize,
    handles: Handles,
    events: broadcast::Sender<PluginEvent>,
    stop: CancellationToken,
}

impl Dispatcher {
    /// A dispatcher with an empty queue; nothing is delivered until [`Dispatcher::spawn_worker`].
    pub fn new(
        plugin: &str,
        version: u64,
        metrics: &PluginMetrics,
        events: broadcast::Sender<PluginEvent>,
    ) -> Arc<Self> {
        Arc::new(Dispatcher {
            plugin: plugin.into(),
            version,
            queue: RateLimitingQueue::with_default_limiter(),
            pending: Mutex::new(HashMap::new()),
            initial_outstanding: AtomicUsize::new(0),
            handles: Handles::new(metrics, plugin),
            events,
            stop: CancellationToken::new(),
        })
    }

    /// The listener adapter for subscription number `subscription`.
    pub fn handler(self: &Arc<Self>, subscription: u32) -> Arc<dyn ResourceEventHandler> {
        Arc::new(SubscriptionHandler {
            dispatcher: self.clone(),
            subscription,
        })
    }

    /// True once every initial-list notification delivered so far has been handled.
    pub fn initial_list_consumed(&self) -> bool {
        self.initial_outstanding.load(Ordering::Acquire) == 0
    }

    /// Notifications queued and not yet handled.
    pub fn depth(&self) -> usize {
        self.pending.lock().values().map(VecDeque::len).sum()
    }

    fn enqueue(&self, subscription: u32, notification: Notification) {
        if matches!(notification, Notification::Add { init: true, .. }) {
            self.initial_outstanding.fetch_add(1, Ordering::AcqRel);
        }
        let qk = QueueKey {
            subscription,
            key: notification.object().key().into(),
        };
        {
            let mut pending = self.pending.lock();
            let list = pending.entry(qk.clone()).or_default();
            // A notification waiting for a retry is superseded by anything newer for the object:
            // redelivering a stale state after a fresh one would go back in time.
            if list.front().is_some_and(|p| p.attempts > 0) {
                let stale = list.pop_front().expect("front exists");
                self.settle(&stale.notification);
                self.queue.forget(&qk);
            }
            list.push_back(Pending {
                notification,
                attempts: 0,
            });
        }
        self.handles.queue_depth.inc();
        self.queue.add(qk);
    }

    /// Bookkeeping for a notification that leaves the queue, handled or not.
    fn settle(&self, n: &Notification) {
        self.settle_initial(matches!(n, Notification::Add { init: true, .. }));
    }

    fn settle_initial(&self, initial: bool) {
        self.handles.queue_depth.dec();
        if initial {
            self.initial_outstanding.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Stops delivery: the worker finishes its in-flight call, then exits; queued notifications
    /// are dropped (a successor version gets a replay of the cache instead).
    pub fn stop(&self) {
        self.stop.cancel();
        self.queue.shut_down();
        let mut pending = self.pending.lock();
        for (_, list) in pending.drain() {
            for p in list {
                self.settle(&p.notification);
            }
        }
    }

    /// Starts the thread that owns `instance` and calls it for every queued notification.
    pub fn spawn_worker(
        self: &Arc<Self>,
        instance: HandlerInstance,
        rt: tokio::runtime::Handle,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let d = self.clone();
        std::thread::Builder::new()
            .name(format!("plugin-{}", self.plugin))
            .spawn(move || d.run(instance, rt))
    }

    /// The next queued item. A busy stream is drained without parking: the worker polls for a
    /// few microseconds before it sleeps on the queue, since a park/unpark per item costs more
    /// than a typical guest call.
    fn next_item(&self, rt: &tokio::runtime::Handle) -> Option<QueueKey> {
        for _ in 0..SPIN_BEFORE_PARK {
            if let Some(item) = self.queue.try_get() {
                return Some(item);
            }
            std::thread::yield_now();
        }
        rt.block_on(self.queue.get())
    }

    fn run(self: Arc<Self>, mut instance: HandlerInstance, rt: tokio::runtime::Handle) {
        let mut consecutive_failures = 0u32;
        let mut quarantine_level = 0u32;
        while let Some(qk) = self.next_item(&rt) {
            let next = self
                .pending
                .lock()
                .get_mut(&qk)
                .and_then(VecDeque::pop_front);
            let Some(mut item) = next else {
                self.queue.done(&qk);
                continue;
            };
            if self.stop.is_cancelled() {
                self.queue.done(&qk);
                break;
            }
            let kind = item.notification.kind();
            let flag = item.notification.flag();
            let initial = matches!(item.notification, Notification::Add { init: true, .. });
            let started = Instant::now();
            let result = call(&mut instance, &item.notification);
            self.handles
                .call_seconds
                .observe(started.elapsed().as_secs_f64());
            self.handles.calls[kind as usize].inc();

            let mut requeued = false;
            let outcome = match result {
                Ok(HandlerOutcome::Ok) => {
                    consecutive_failures = 0;
                    self.queue.forget(&qk);
                    CallOutcome::Ok
                }
                Ok(HandlerOutcome::Fatal(msg)) => {
                    consecutive_failures = 0;
                    self.handles.fatal_errors.inc();
                    self.queue.forget(&qk);
                    tracing::warn!(plugin = %self.plugin, key = %qk.key, call = ?kind, error = %msg, "handler reported a fatal error; notification not retried");
                    CallOutcome::Fatal(msg)
                }
                Ok(HandlerOutcome::Retry(msg)) => {
                    consecutive_failures = 0;
                    self.handles.retry_errors.inc();
                    let mut pending = self.pending.lock();
                    let list = pending.entry(qk.clone()).or_default();
                    if list.is_empty() && !self.stop.is_cancelled() {
                        item.attempts += 1;
                        let attempts = item.attempts;
                        list.push_front(item);
                        drop(pending);
                        requeued = true;
                        self.handles.retries.inc();
                        self.queue.add_rate_limited(qk.clone());
                        tracing::info!(plugin = %self.plugin, key = %qk.key, call = ?kind, attempts, reason = %msg, "handler asked for a retry");
                    } else {
                        self.queue.forget(&qk);
                        tracing::info!(plugin = %self.plugin, key = %qk.key, call = ?kind, reason = %msg, "retry dropped: a newer notification for the object is queued");
                    }
                    CallOutcome::Retry(msg)
                }
                Err(err) => {
                    consecutive_failures += 1;
                    match &err {
                        CallError::Trap(_) => self.handles.trap_errors.inc(),
                        CallError::DeadlineExceeded => self.handles.deadline_errors.inc(),
                        CallError::OutOfMemory => self.handles.oom_errors.inc(),
                        CallError::Instantiate(_) => self.handles.instantiate_errors.inc(),
                    };
                    self.queue.forget(&qk);
                    tracing::error!(plugin = %self.plugin, key = %qk.key, call = ?kind, error = %err, "handler failed; instance discarded, a fresh one serves the next call");
                    CallOutcome::Failed(err.to_string())
                }
            };
            if !requeued {
                self.settle_initial(initial);
            }
            // Publishing costs a little per call, so only when someone listens.
            if self.events.receiver_count() > 0 {
                let _ = self.events.send(PluginEvent::Called {
                    plugin: self.plugin.clone(),
                    version: self.version,
                    call: kind,
                    key: qk.key.clone(),
                    flag,
                    outcome,
                });
            }
            if self.pending.lock().get(&qk).is_some_and(|l| !l.is_empty()) && !requeued {
                self.queue.add(qk.clone());
            } else {
                let mut pending = self.pending.lock();
                if pending.get(&qk).is_some_and(VecDeque::is_empty) {
                    pending.remove(&qk);
                }
            }
            self.queue.done(&qk);

            if consecutive_failures >= QUARANTINE_AFTER {
                quarantine_level += 1;
                consecutive_failures = 0;
                let pause = QUARANTINE_BASE
                    .saturating_mul(1 << (quarantine_level - 1).min(16))
                    .min(QUARANTINE_MAX);
                self.handles.quarantines.inc();
                tracing::error!(plugin = %self.plugin, failures = QUARANTINE_AFTER, pause_secs = pause.as_secs_f64(), "plugin quarantined after consecutive failed calls; notifications keep queueing");
                let _ = self.events.send(PluginEvent::Quarantined {
                    plugin: self.plugin.to_string(),
                    pause,
                });
                let stop = self.stop.clone();
                rt.block_on(async move {
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop.cancelled() => {}
                    }
                });
            } else if consecutive_failures == 0 {
                quarantine_level = 0;
            }
        }
        tracing::debug!(plugin = %self.plugin, version = self.version, "plugin worker stopped");
    }
}

fn call(instance: &mut HandlerInstance, n: &Notification) -> Result<HandlerOutcome, CallError> {
    match n {
        Notification::Add { obj, init } => instance.on_add(&**obj, *init),
        Notification::Update { old, new, sync } => instance.on_update(&**old, &**new, *sync),
        Notification::Delete {
            obj,
            final_state_unknown,
        } => instance.on_delete(&**obj, *final_state_unknown),
    }
}

/// Adapts informer callbacks to a dispatcher: enqueueing is all it does, so the informer's
/// listener never waits for a guest.
struct SubscriptionHandler {
    dispatcher: Arc<Dispatcher>,
    subscription: u32,
}

impl ResourceEventHandler for SubscriptionHandler {
    fn on_add(&self, obj: &SharedObject, is_in_initial_list: bool) {
        self.dispatcher.enqueue(
            self.subscription,
            Notification::Add {
                obj: obj.clone(),
                init: is_in_initial_list,
            },
        );
    }

    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool) {
        self.dispatcher.enqueue(
            self.subscription,
            Notification::Update {
                old: old.clone(),
                new: new.clone(),
                sync: is_sync,
            },
        );
    }

    fn on_delete(&self, obj: &SharedObject, final_state_unknown: bool) {
        self.dispatcher.enqueue(
            self.subscription,
            Notification::Delete {
                obj: obj.clone(),
                final_state_unknown,
            },
        );
    }
}
