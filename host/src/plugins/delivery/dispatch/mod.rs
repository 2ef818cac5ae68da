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

mod guest;
mod run;
mod subscription;
mod synced;
mod verdict;

pub use guest::Guest;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio_util::sync::CancellationToken;

use super::keys::{PrimaryKind, PrimaryLookup};
use super::quarantine::QuarantinePolicy;
use super::queue::{Finish, PluginQueue, QueueKey, QueueMetrics};
use super::state::{SharedState, StateEvent};
use crate::informer::{Indexer, SyncProbe};
use crate::plugins::delivery::shard_gate::ShardGate;
use crate::plugins::metrics::{CallLabels, ErrorKind, ErrorLabels, PluginLabels, PluginMetrics};
use crate::runtime::{CallKind, PluginInfo, Role, SharedObserver};

/// How often an idle worker checks whether its replay is complete, so `on-synced` is called
/// even when the last initial add was handled before the informers reported synced (client-go
/// polls `HasSynced` at the same period).
pub(crate) const SYNCED_POLL: Duration = Duration::from_millis(100);
/// First pause before `on-synced` is called again after a `retry` or a failed call; doubles per
/// attempt up to [`SYNCED_RETRY_MAX`].
pub(crate) const SYNCED_RETRY_BASE: Duration = Duration::from_millis(500);
/// Longest pause between `on-synced` attempts.
pub(crate) const SYNCED_RETRY_MAX: Duration = Duration::from_secs(60);

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
    /// For a controller: what each subscription is to it, so events become keys.
    pub(crate) controller: Option<Arc<ControllerPlan>>,
    /// For a sharded plugin on a sharded host: what it shards by and the replica's gate, which
    /// every call must pass.
    pub(crate) shard: Option<(crate::runtime::ShardBy, Arc<ShardGate>)>,
}

/// What a controller's dispatcher needs to turn events into keys of its primary kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerPlan {
    /// What each subscription is, in the plugin's subscription order (the primary first).
    pub(crate) roles: Vec<Role>,
    /// The primary kind, as owner references name it.
    pub(crate) primary: PrimaryKind,
    /// The primary's `apiVersion`, for what observers are told of a reconcile.
    pub(crate) api_version: String,
}

impl ControllerPlan {
    /// The plan of a described controller; `None` for an event handler.
    pub(crate) fn of(info: &PluginInfo) -> Option<ControllerPlan> {
        let roles = info.controller.clone()?;
        let primary = info.subscriptions.first()?;
        Some(ControllerPlan {
            roles,
            primary: PrimaryKind::new(&primary.api_version, &primary.kind),
            api_version: primary.api_version.clone(),
        })
    }
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
            controller: None,
            shard: None,
        }
    }
}

/// Whether the informers of a dispatcher's subscriptions have synced.
pub(in crate::plugins) type SyncedCheck = Box<dyn Fn() -> bool + Send + Sync>;

/// Metric handles resolved once per plugin so the hot path does no label lookups.
struct Handles {
    calls: [Counter; 6],
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
    shard_refused: Counter,
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
                call(CallKind::Reconcile),
                call(CallKind::KeysFor),
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
            shard_refused: m.shard_refused.get_or_create(&p).clone(),
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
    /// A subscription replayed more objects as initial adds since the worker last looked
    /// (slots gained): `on-synced` is due again after them.
    replayed: AtomicBool,
    /// Makes an idle worker look at its `on-synced` state now instead of at its next poll
    /// (see [`Dispatcher::is_idle`]).
    wake: tokio::sync::Notify,
    /// Sees each call begin and end, synchronously on the worker, so that what the guest did
    /// in between can be attributed to the call, and each quarantine.
    observer: Option<SharedObserver>,
    /// A controller's plan and its primary cache; `None` for an event handler.
    controller: Option<Controller>,
    /// What the plugin shards by and the replica's gate; `None` when it does not shard.
    shard: Option<(crate::runtime::ShardBy, Arc<ShardGate>)>,
}

/// A controller's side of its dispatcher: the plan, and the primary kind's cache once its
/// subscription is registered (owner references and mappings are checked against it).
pub(super) struct Controller {
    pub(super) plan: Arc<ControllerPlan>,
    cache: OnceLock<Indexer>,
}

impl PrimaryLookup for Controller {
    fn uid_at(&self, key: &str) -> Option<String> {
        let obj = self.cache.get()?.get(key)?;
        Some(obj.meta().uid.clone())
    }
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
            replayed: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            observer,
            controller: config.controller.clone().map(|plan| Controller {
                plan,
                cache: OnceLock::new(),
            }),
            shard: config.shard.clone(),
        })
    }

    /// A subscription's informer replayed the objects of gained slots as initial adds:
    /// `on-synced` is called again once they are handled (if the guest exports it).
    pub(crate) fn replayed(&self) {
        self.replayed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Whether this plugin's deliveries follow the replica's slots rather than leadership.
    pub(crate) fn is_sharded(&self) -> bool {
        self.shard.is_some()
    }

    /// The plugin name.
    pub fn plugin(&self) -> &Arc<str> {
        &self.plugin
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

    /// Hands a controller its primary kind's cache, before its owned and watched kinds are
    /// registered (their replays are checked against it).
    pub(crate) fn attach_primary(&self, indexer: Indexer) {
        if let Some(c) = &self.controller {
            let _ = c.cache.set(indexer);
        }
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
}
