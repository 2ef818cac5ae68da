//! Delivery of one plugin version's queued notifications to its guests: up to `concurrency`
//! calls at once, each on an instance of its own, never two for one object (the queue marks an
//! object processing), per-object order, retries, quarantine after failures in a row (counted
//! across instances), and the stop/kill signals the lifecycle uses.
//!
//! The calls are futures interleaved on the plugin's one thread: a call waiting on the host
//! (HTTP, `kube`, a timer) lets the others run; a guest computing holds the thread until it
//! yields at the next epoch tick, so CPU-bound guests get one core per plugin whatever N is.
//!
//! The guest is behind the small [`Guest`] trait, so the delivery rules are tested on a paused
//! clock with scripted guests; [`super::worker`] runs the loop on the plugin's own thread.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio_util::sync::CancellationToken;

use super::quarantine::QuarantinePolicy;
use super::queue::{Finish, Item, PluginQueue, QueueKey, QueueMetrics};
use super::state::{SharedState, StateEvent};
use crate::informer::{Notification, ResourceEventHandler, SharedObject, SyncProbe};
use crate::plugins::capabilities::projected::ProjectionCache;
use crate::plugins::metrics::{CallLabels, ErrorKind, ErrorLabels, PluginLabels, PluginMetrics};
use crate::runtime::{
    CallEnded, CallError, CallKind, CallOutcome, CalledObject, HandlerInstance, HandlerOutcome,
    HandlerWorld, MemoryBudget, Quarantined, SharedObserver,
};

/// How often an idle worker checks whether its replay is complete, so `on-synced` is called
/// even when the last initial add was handled before the informers reported synced (client-go
/// polls `HasSynced` at the same period).
pub(crate) const SYNCED_POLL: Duration = Duration::from_millis(100);
/// First pause before `on-synced` is called again after a `retry` or a failed call; doubles per
/// attempt up to [`SYNCED_RETRY_MAX`].
pub(crate) const SYNCED_RETRY_BASE: Duration = Duration::from_millis(500);
/// Longest pause between `on-synced` attempts.
pub(crate) const SYNCED_RETRY_MAX: Duration = Duration::from_secs(60);

/// One version of a handler, as the dispatcher calls it.
pub trait Guest {
    /// Delivers one notification; dropping the future abandons the call.
    fn deliver(
        &mut self,
        n: &Notification,
    ) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send;

    /// Whether the handler exports `on-synced` (0.2.0 handlers).
    fn wants_synced(&self) -> bool {
        false
    }

    /// Calls `on-synced`; dropping the future abandons the call.
    fn synced(&mut self) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send {
        async { Ok(HandlerOutcome::Ok) }
    }

    /// Whether a host line about this guest's call (a retry, a failure) may be written: a guest
    /// fails or retries as often as it is called, so real instances draw on their plugin's
    /// [`GuestCausedLog`](crate::runtime::GuestCausedLog).
    fn admit_line(&self) -> bool {
        true
    }

    /// The plugin's memory budget, which all its instances share: the dispatcher creates
    /// another instance only while one more fits (`None`: no budget, always).
    fn memory_budget(&self) -> Option<MemoryBudget> {
        None
    }
}

impl Guest for HandlerInstance {
    fn admit_line(&self) -> bool {
        self.guest_caused_log().admit()
    }

    fn memory_budget(&self) -> Option<MemoryBudget> {
        Some(HandlerInstance::memory_budget(self).clone())
    }

    async fn deliver(&mut self, n: &Notification) -> Result<HandlerOutcome, CallError> {
        match n {
            Notification::Add { obj, initial } => self.on_add(&**obj, *initial).await,
            Notification::Update { old, new, is_sync } => {
                self.on_update(&**old, &**new, *is_sync).await
            }
            Notification::Delete {
                obj,
                final_state_unknown,
            } => self.on_delete(&**obj, *final_state_unknown).await,
        }
    }

    fn wants_synced(&self) -> bool {
        self.world() == HandlerWorld::V0_2
    }

    async fn synced(&mut self) -> Result<HandlerOutcome, CallError> {
        self.on_synced().await
    }
}

/// Where one delivery stands with `on-synced`; changed only by [`SyncedState::step`].
///
/// `on-synced` is one of the plugin's concurrent calls: it waits for the replay (so for every
/// initial-list call to end), then takes a free slot like any notification, ahead of them (at
/// concurrency 1 that is client-go's order: `HasSynced` turns true after the initial list was
/// handled, before anything newer), and never holds up the other slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncedState {
    /// The replay is not handled yet: due once every subscription's informer has synced and
    /// every initial add has been handled.
    Waiting,
    /// In flight, after `attempts` earlier tries.
    Calling { attempts: u32 },
    /// Called and answered `retry`, or the call failed: due again at the instant, after
    /// `attempts` tries.
    Backoff {
        until: tokio::time::Instant,
        attempts: u32,
    },
    /// Called and ended (ok or fatal), or the handler has no such export.
    Done,
}

/// What happened to `on-synced`: the input of [`SyncedState::step`].
#[derive(Clone, Copy, Debug)]
enum SyncedEvent<'a> {
    /// A call started.
    Started,
    /// The call ended with the outcome, at the instant.
    Ended(&'a CallOutcome, tokio::time::Instant),
}

impl SyncedState {
    /// The next state after `event`. Pure: the clock comes with the event.
    fn step(self, event: SyncedEvent<'_>) -> SyncedState {
        match (self, event) {
            (SyncedState::Waiting, SyncedEvent::Started) => SyncedState::Calling { attempts: 0 },
            (SyncedState::Backoff { attempts, .. }, SyncedEvent::Started) => {
                SyncedState::Calling { attempts }
            }
            (SyncedState::Calling { attempts }, SyncedEvent::Ended(outcome, now)) => {
                match outcome {
                    CallOutcome::Ok | CallOutcome::Fatal(_) => SyncedState::Done,
                    CallOutcome::Retry(_) | CallOutcome::Failed(_) => {
                        let attempts = attempts + 1;
                        let pause = crate::workqueue::ExponentialBackoff::new(
                            SYNCED_RETRY_BASE,
                            SYNCED_RETRY_MAX,
                        )
                        .after_failures(attempts);
                        SyncedState::Backoff {
                            until: now + pause,
                            attempts,
                        }
                    }
                }
            }
            // A call starts only when due and ends only when started: nothing else happens.
            (state, _) => state,
        }
    }

    /// Whether to call now, given whether the replay has been handled.
    fn due(self, replay_handled: impl FnOnce() -> bool) -> bool {
        match self {
            SyncedState::Waiting => replay_handled(),
            SyncedState::Backoff { until, .. } => tokio::time::Instant::now() >= until,
            SyncedState::Calling { .. } | SyncedState::Done => false,
        }
    }

    /// Whether the call is still to come or in flight (the worker is not idle for it).
    fn pending(self) -> bool {
        matches!(self, SyncedState::Waiting | SyncedState::Calling { .. })
    }

    /// When an idle worker should look again.
    fn wake_at(self) -> Option<tokio::time::Instant> {
        match self {
            SyncedState::Waiting => Some(tokio::time::Instant::now() + SYNCED_POLL),
            SyncedState::Backoff { until, .. } => Some(until),
            SyncedState::Calling { .. } | SyncedState::Done => None,
        }
    }
}

/// How long an instance may stay unused before it is dropped and its memory given back to the
/// plugin's budget (and the pooling allocator's slot to the host); the next call that needs it
/// instantiates a fresh one.
pub(crate) const IDLE_RELEASE: Duration = Duration::from_secs(60);

/// Most calls one plugin may have in flight (`concurrency`): each holds an instance of its
/// own (memory, a pooling slot), and past a few dozen waiting calls a plugin is better split.
pub const MAX_CONCURRENCY: usize = 64;

/// Per-plugin delivery settings (from the manifest and host defaults).
#[derive(Clone, Debug)]
pub struct DispatchConfig {
    /// Notifications waiting before they coalesce per object (`max-queued`).
    pub max_queued: usize,
    /// When consecutive failed calls pause deliveries.
    pub quarantine: QuarantinePolicy,
    /// Calls in flight at once (`concurrency`), each on its own instance; `None` takes the
    /// host's default (`--default-concurrency`, else 1). Clamped to 1..=[`MAX_CONCURRENCY`].
    pub concurrency: Option<usize>,
}

impl DispatchConfig {
    /// The effective number of calls in flight at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency.unwrap_or(1).clamp(1, MAX_CONCURRENCY)
    }
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            max_queued: super::queue::DEFAULT_MAX_QUEUED,
            quarantine: QuarantinePolicy::default(),
            concurrency: None,
        }
    }
}

/// Whether the informers of a dispatcher's subscriptions have synced.
pub(in crate::plugins) type SyncedCheck = Box<dyn Fn() -> bool + Send + Sync>;

/// Metric handles resolved once per plugin so the hot path does no label lookups.
struct Handles {
    calls: [Counter; 4],
    retry_errors: Counter,
    fatal_errors: Counter,
    trap_errors: Counter,
    deadline_errors: Counter,
    oom_errors: Counter,
    instantiate_errors: Counter,
    retries: Counter,
    quarantines: Counter,
    worker_restarts: Counter,
    call_seconds: Histogram,
    calls_in_flight: Gauge,
    instances: Gauge,
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
                call(CallKind::Synced),
            ],
            retry_errors: err(ErrorKind::Retry),
            fatal_errors: err(ErrorKind::Fatal),
            trap_errors: err(ErrorKind::Trap),
            deadline_errors: err(ErrorKind::Deadline),
            oom_errors: err(ErrorKind::OutOfMemory),
            instantiate_errors: err(ErrorKind::Instantiate),
            retries: m.retries.get_or_create(&p).clone(),
            quarantines: m.quarantines.get_or_create(&p).clone(),
            worker_restarts: m.worker_restarts.get_or_create(&p).clone(),
            call_seconds: m.call_seconds.get_or_create(&p).clone(),
            calls_in_flight: m.calls_in_flight.get_or_create(&p).clone(),
            instances: m.instances.get_or_create(&p).clone(),
        }
    }
}

/// The delivery side of one plugin version: informer listeners push into its queue, its worker
/// drains it through [`Dispatcher::run`].
pub struct Dispatcher {
    plugin: Arc<str>,
    version: u64,
    queue: PluginQueue,
    handles: Handles,
    quarantine: QuarantinePolicy,
    /// The plugin's state, shared with the lifecycle: quarantine, resume and worker panics
    /// step it.
    state: SharedState,
    /// Delivery starts only when this is cancelled: a swapped-in version waits until the
    /// previous version's last call has ended.
    gate: CancellationToken,
    /// No further deliveries; the calls in flight may finish.
    stop: CancellationToken,
    /// Abandon the in-flight calls too (end of a shutdown grace period).
    kill: CancellationToken,
    /// Calls in flight at most.
    concurrency: usize,
    /// The keys being delivered and whether each is an initial add, so a worker that panicked
    /// mid-call (or abandons its calls) can return them to the queue.
    in_flight: Mutex<HashMap<QueueKey, bool>>,
    /// Guest instances the worker holds now (for `/plugins`).
    instances: std::sync::atomic::AtomicUsize,
    /// Whether every subscription's informer has synced, set once they are registered.
    informers_synced: OnceLock<SyncedCheck>,
    /// `on-synced` is still to be called once the replay is handled (or is being called).
    synced_pending: AtomicBool,
    /// An `on-synced` call is in flight (for [`Dispatcher::calls_in_flight`]).
    synced_in_flight: AtomicBool,
    /// Makes an idle worker look at its `on-synced` state now instead of at its next poll
    /// (see [`Dispatcher::is_idle`]).
    wake: tokio::sync::Notify,
    /// Sees each call begin and end, synchronously on the worker, so that what the guest did
    /// in between can be attributed to the call, and each quarantine.
    observer: Option<SharedObserver>,
}

impl Dispatcher {
    /// A dispatcher with an empty queue and a state of its own (nobody else reads it);
    /// nothing is delivered until [`Dispatcher::open`]. Only the queue bench builds one alone.
    #[cfg_attr(not(feature = "bench"), allow(dead_code))]
    pub fn new(
        plugin: &str,
        version: u64,
        metrics: &PluginMetrics,
        config: &DispatchConfig,
        observer: Option<SharedObserver>,
    ) -> Arc<Self> {
        Self::with_state(
            plugin,
            version,
            metrics,
            config,
            SharedState::default(),
            observer,
        )
    }

    /// Like [`Dispatcher::new`], stepping the plugin's `state` (the lifecycle's) on quarantine,
    /// resume and worker panics.
    pub(in crate::plugins) fn with_state(
        plugin: &str,
        version: u64,
        metrics: &PluginMetrics,
        config: &DispatchConfig,
        state: SharedState,
        observer: Option<SharedObserver>,
    ) -> Arc<Self> {
        let p = PluginLabels {
            plugin: plugin.to_string(),
        };
        let queue_metrics = QueueMetrics {
            depth: metrics.queue_depth.get_or_create(&p).clone(),
            coalesced: metrics.coalesced.get_or_create(&p).clone(),
        };
        let handles = Handles::new(metrics, plugin);
        let plugin: Arc<str> = plugin.into();
        Arc::new(Dispatcher {
            queue: PluginQueue::new(plugin.clone(), config.max_queued, queue_metrics),
            plugin,
            version,
            handles,
            quarantine: config.quarantine,
            state,
            gate: CancellationToken::new(),
            stop: CancellationToken::new(),
            kill: CancellationToken::new(),
            concurrency: config.concurrency(),
            in_flight: Mutex::new(HashMap::new()),
            instances: std::sync::atomic::AtomicUsize::new(0),
            informers_synced: OnceLock::new(),
            synced_pending: AtomicBool::new(false),
            synced_in_flight: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            observer,
        })
    }

    /// The plugin name.
    pub fn plugin(&self) -> &Arc<str> {
        &self.plugin
    }

    /// The listener adapter for subscription number `subscription`; with a `projection`,
    /// what it queues is each object cut to it (shared with every plugin of that projection).
    pub fn handler(
        self: &Arc<Self>,
        subscription: u32,
        projection: Option<Arc<ProjectionCache>>,
    ) -> Arc<dyn ResourceEventHandler> {
        Arc::new(SubscriptionHandler {
            dispatcher: self.clone(),
            subscription,
            projection,
        })
    }

    /// Hands over the sync probes of the registrations this dispatcher's subscriptions got;
    /// until then the replay counts as not handled.
    pub fn watch_sync(&self, probes: Vec<SyncProbe>) {
        self.watch_sync_with(Box::new(move || probes.iter().all(SyncProbe::has_synced)));
    }

    /// [`Dispatcher::watch_sync`] with any check (tests script it).
    pub(in crate::plugins) fn watch_sync_with(&self, check: SyncedCheck) {
        let _ = self.informers_synced.set(check);
    }

    /// The plugin has handled its replay: every subscription's informer has synced (so every
    /// initial add has been queued) and every initial add has been delivered. The rule behind
    /// both readiness and `on-synced`.
    pub fn replay_handled(&self) -> bool {
        self.informers_synced.get().is_some_and(|synced| synced())
            && self.queue.initial_list_consumed()
    }

    /// Whether this dispatcher has nothing to do now: no notification ready, no call in flight,
    /// no `on-synced` due. One waiting for a retry backoff is idle (it waits for time). When
    /// `on-synced` has become due, the worker is woken at once rather than at its next poll,
    /// so a runner on a frozen clock sees it called.
    pub fn is_idle(&self) -> bool {
        if self.calls_in_flight() > 0 || !self.queue.ready_is_empty() {
            return false;
        }
        if self.synced_pending.load(Ordering::Acquire) && self.replay_handled() {
            self.wake.notify_one();
            return false;
        }
        true
    }

    /// Notifications waiting.
    pub fn depth(&self) -> usize {
        self.queue.depth()
    }

    /// Calls in flight now, `on-synced` included.
    pub fn calls_in_flight(&self) -> usize {
        self.in_flight.lock().len() + usize::from(self.synced_in_flight.load(Ordering::Acquire))
    }

    /// Guest instances the worker holds now (created lazily, up to the concurrency).
    pub fn instances(&self) -> usize {
        self.instances.load(Ordering::Relaxed)
    }

    /// Calls this delivery may have in flight at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Lets the worker start delivering.
    pub fn open(&self) {
        self.gate.cancel();
    }

    /// Stops delivery: the worker finishes its calls in flight (bounded by the plugin's
    /// deadline), then exits; queued notifications are dropped — a successor version gets a
    /// replay of the cache instead, which holds the current state of every object.
    pub fn stop(&self) {
        self.stop.cancel();
        self.queue.shut_down();
    }

    /// Like [`Dispatcher::stop`], and abandons the calls in flight at once.
    pub fn kill(&self) {
        self.kill.cancel();
        self.stop();
    }

    /// Whether [`Dispatcher::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    pub(in crate::plugins) fn report(&self, event: StateEvent) {
        self.state.step(event)
    }

    pub(in crate::plugins) fn count_restart(&self) {
        self.handles.worker_restarts.inc();
    }

    pub(in crate::plugins) fn stopped(&self) -> &CancellationToken {
        &self.stop
    }

    /// Returns the keys whose calls never ended (the worker panicked, or abandoned them) to
    /// the queue.
    pub(in crate::plugins) fn recover_in_flight(&self) {
        let abandoned: Vec<_> = self.in_flight.lock().drain().collect();
        for (qk, initial) in abandoned {
            self.queue.finish(&qk, Finish::Abandoned { initial });
        }
        self.synced_in_flight.store(false, Ordering::Release);
        self.handles.calls_in_flight.set(0);
        self.set_instances(0);
    }

    fn set_instances(&self, n: usize) {
        self.instances.store(n, Ordering::Relaxed);
        self.handles.instances.set(n as i64);
    }

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
        let mut synced = if idle[0].wants_synced() {
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
                calls.push(call(guest, Job::Synced));
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
                    let guest = self.instance(&mut idle, &mut idle_since, &mut created, make_guest);
                    self.in_flight
                        .lock()
                        .insert(qk.clone(), item.notification.is_initial());
                    self.handles.calls_in_flight.inc();
                    if let Some(o) = &self.observer {
                        o.call_started(&self.plugin, call_kind(&item.notification));
                    }
                    calls.push(call(guest, Job::Object(qk, item)));
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

    /// Books a call that ended: metrics, the verdict, the queue's marking, and the observer.
    fn call_ended<G: Guest>(
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
    fn synced_ended<G: Guest>(
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
    fn quarantine_if_due(&self, failures: u32) -> Option<tokio::time::Instant> {
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
fn call_kind(n: &Notification) -> CallKind {
    match n {
        Notification::Add { .. } => CallKind::Add,
        Notification::Update { .. } => CallKind::Update,
        Notification::Delete { .. } => CallKind::Delete,
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
) -> (G, Job, Result<HandlerOutcome, CallError>, Duration) {
    let started = Instant::now();
    let result = match &job {
        Job::Object(_, item) => guest.deliver(&item.notification).await,
        Job::Synced => guest.synced().await,
    };
    (guest, job, result, started.elapsed())
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Adapts informer callbacks to a dispatcher: queueing (of the object or its projection) is
/// all it does, so the informer's listener never waits for a guest.
struct SubscriptionHandler {
    dispatcher: Arc<Dispatcher>,
    subscription: u32,
    projection: Option<Arc<ProjectionCache>>,
}

impl SubscriptionHandler {
    /// What the guest is to receive of `obj`: the cached version itself, or its projection.
    fn shown(&self, obj: &SharedObject) -> SharedObject {
        match &self.projection {
            Some(p) => p.project(obj),
            None => obj.clone(),
        }
    }
}

impl ResourceEventHandler for SubscriptionHandler {
    fn on_add(&self, obj: &SharedObject, is_in_initial_list: bool) {
        self.dispatcher.queue.push(
            self.subscription,
            Notification::Add {
                obj: self.shown(obj),
                initial: is_in_initial_list,
            },
        );
    }

    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool) {
        self.dispatcher.queue.push(
            self.subscription,
            Notification::Update {
                old: self.shown(old),
                new: self.shown(new),
                is_sync,
            },
        );
    }

    fn on_delete(&self, obj: &SharedObject, final_state_unknown: bool) {
        self.dispatcher.queue.push(
            self.subscription,
            Notification::Delete {
                obj: self.shown(obj),
                final_state_unknown,
            },
        );
    }
}
