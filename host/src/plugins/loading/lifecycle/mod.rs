//! Plugin lifecycle: load, hot-swap and unload, each all-or-nothing.
//!
//! A new version is compiled, instantiated and asked to `describe()` itself on a blocking
//! thread, under the plugin's deadline; only when every subscription is valid and resolves, and
//! its grants (see `super::grants`) cover everything it asks for, is it attached to the informers
//! (its replay of the cache queues up behind a closed gate). Then the old version is detached
//! and stopped — its in-flight call ends or hits its deadline — and only then does the new
//! version start delivering, so two versions never run calls at once. Any
//! failure leaves the old version running.
//!
//! What v1 still had queued is dropped when it stops, and that is safe: v2 was attached before
//! v1 was detached, so v2's replay holds the current state of every object and every later
//! change reaches v2's queue. What v2 cannot learn from the replay is an object deleted while v1
//! had that delete queued; v2 never saw that object either, so for v2 it never existed.
//! Handlers that keep external state reconcile such orphans after their replay.
//!
//! Delivery (dispatcher, listeners, worker) is separate from the described version, so under
//! leader election a version can exist without one (a standby) and get a fresh one, with a full
//! replay, whenever this replica wins the Lease (`standby.rs`; the tasks that follow the Lease live
//! above loading, in `crate::plugins::leadership`).
//!
//! No lock shared between plugins is held while waiting for a guest: each plugin has its own
//! slot whose async mutex orders the operations on that plugin only, and status readers see a
//! snapshot behind a short synchronous lock.

mod prepare;
mod standby;
mod status;

use crate::plugins::delivery::shard_gate::ShardGate;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::describe::{PluginFiles, check_file_name, plugin_name, read_plugin};
use super::error::LoadError;
use super::manifest::Manifest;
use crate::informer::{
    HandlerRegistration, InformerError, InformerFactory, InformerKey, SyncProbe,
};
use crate::plugins::capabilities::kube_client::ClusterContext;
use crate::plugins::capabilities::projected::Projections;
use crate::plugins::delivery::attachment::{AttachError, Attachable, Delivery, DeliveryMode};
use crate::plugins::delivery::dispatch::{DispatchConfig, Dispatcher};
use crate::plugins::delivery::state::{PluginState, SharedState, StateEvent};
use crate::plugins::grants::{GrantChange, GrantPolicy, Grants};
use crate::plugins::metrics::{LoadLabels, PluginMetrics};
use standby::WarmCache;
pub use status::{LoadOutcome, MemoryUse, PluginStatus};

use crate::runtime::{
    HandlerInstance, Limits, LoadFailed, MemoryBudget, PluginInfo, PluginSettings, Runtime,
    SharedObserver, VersionLoaded,
};

/// What status readers see of one plugin; never held across an await.
struct View {
    path: PathBuf,
    /// Shared with the version's delivery, which reports quarantine and worker panics to it.
    state: SharedState,
    version: u64,
    info: Option<PluginInfo>,
    grants: Option<Arc<Grants>>,
    /// The running version's `[settings]`, to say how a swap changed them.
    settings: Option<Arc<PluginSettings>>,
    /// The running version's memory budget, shared by its instances.
    memory: Option<MemoryBudget>,
    /// The delivering dispatcher, if the running version delivers.
    dispatcher: Option<Arc<Dispatcher>>,
    /// The sync probes of the version's [`WarmCache`] listeners (leader election only).
    standby_probes: Vec<SyncProbe>,
}

impl View {
    /// A standby is ready when its caches are; a delivering version when it has also handled
    /// its replay.
    fn ready(&self) -> bool {
        if self.state.get() == PluginState::Standby {
            return self.version > 0 && self.standby_probes.iter().all(SyncProbe::has_synced);
        }
        self.dispatcher.as_ref().is_some_and(|d| d.replay_handled())
    }
}

/// One plugin name's place in the manager.
struct Slot {
    /// Orders load, swap and unload of this plugin; holds the running version.
    op: tokio::sync::Mutex<Option<Active>>,
    view: Arc<parking_lot::Mutex<View>>,
}

impl Slot {
    fn step(&self, event: StateEvent) {
        self.view.lock().state.step(event);
    }
}

/// The running version of a plugin.
struct Active {
    digest: [u8; 32],
    version: u64,
    /// Whether this version was loaded with a `NAME.toml`: a later version without one is
    /// refused rather than given the default grants.
    had_manifest: bool,
    /// What each delivery of this version is made from.
    plan: DeliveryPlan,
    /// [`WarmCache`] listeners holding the informers (leader election only).
    standby: Vec<HandlerRegistration>,
    /// Present while the version delivers (always without leader election).
    delivery: Option<Delivery>,
}

impl Active {
    /// Stops the delivery, then releases the informers.
    async fn stop(self) {
        if let Some(d) = self.delivery {
            d.stop().await;
        }
        release(self.standby).await;
    }
}

/// A described version, ready to be given a delivery (at load, and at every leadership win).
struct DeliveryPlan {
    template: HandlerInstance,
    subscriptions: Vec<Attachable>,
    dispatch: DispatchConfig,
}

/// The load error for a delivery that could not be attached.
fn attach_error(path: &Path, e: AttachError) -> LoadError {
    match e {
        AttachError::Subscription(key, e) => subscription_error(path, &key, e),
        AttachError::Worker(e) => LoadError::Busy {
            path: path.to_path_buf(),
            message: format!("cannot start worker thread: {e}"),
        },
    }
}

/// The load error for a subscription the informers cannot serve.
fn subscription_error(path: &Path, key: &InformerKey, e: InformerError) -> LoadError {
    let message = format!("subscription {key} cannot be served: {e}");
    let path = path.to_path_buf();
    match e {
        // A kind not served yet (a CRD installed later) or a server that is down may resolve
        // by itself: retried with backoff.
        InformerError::DiscoveryUnavailable { .. } | InformerError::UnknownKind { .. } => {
            LoadError::Unavailable { path, message }
        }
        _ => LoadError::Invalid { path, message },
    }
}

pub(in crate::plugins) struct Inner {
    runtime: Runtime,
    factory: InformerFactory,
    metrics: PluginMetrics,
    defaults: Limits,
    /// Calls in flight per plugin whose manifest sets no `concurrency`.
    default_concurrency: usize,
    grants: GrantPolicy,
    /// Where granted `kube` calls and Events go; without it every call is refused.
    cluster: Option<Arc<ClusterContext>>,
    slots: parking_lot::Mutex<HashMap<String, Arc<Slot>>>,
    /// Digest of the last content that failed permanently per file, so a rescan does not
    /// retry (and re-log) the same bad bytes until the file changes. Keyed by path, not name:
    /// files whose names are refused may share one (lossily decoded) name.
    failed: parking_lot::Mutex<HashMap<PathBuf, [u8; 32]>>,
    versions: AtomicU64,
    /// Cancelled at shutdown: loads in progress give up.
    closing: CancellationToken,
    /// Leadership to follow (leader election); `None` means always deliver.
    leadership: Option<watch::Receiver<bool>>,
    /// One projection cache per distinct projection in use, shared by the plugins using it.
    projections: Projections,
    /// Where each version's calls run.
    delivery: DeliveryMode,
    /// Sees every plugin's lifecycle and every call begin and end (the runtime's observer).
    observer: Option<SharedObserver>,
    /// The replica's slot gate on a sharded host: sharded plugins deliver through it and
    /// follow the slots instead of leadership.
    shard_gate: Option<Arc<ShardGate>>,
}

/// What a [`PluginManager`] is made of; see `crate::host::HostBuilder`, which assembles it.
pub struct ManagerConfig {
    /// The engine every plugin's instances come from (its observer sees every call).
    pub runtime: Runtime,
    /// The shared informers plugins subscribe through.
    pub factory: InformerFactory,
    /// The plugin layer's metric families.
    pub metrics: PluginMetrics,
    /// Limits for plugins without a manifest.
    pub defaults: Limits,
    /// Calls in flight per plugin whose manifest sets no `concurrency` (`--default-concurrency`).
    pub default_concurrency: usize,
    /// What each plugin is granted.
    pub grants: GrantPolicy,
    /// Where granted `kube` calls and Events go; `None` refuses every call.
    pub cluster: Option<Arc<ClusterContext>>,
    /// Leadership to follow (leader election): deliver only while it reads `true`, stand by
    /// warm otherwise. `None` always delivers.
    pub leadership: Option<watch::Receiver<bool>>,
    /// Where calls run.
    pub delivery: DeliveryMode,
    /// The replica's slot gate when the host runs sharded (`--sharding`); `None` delivers
    /// every plugin as if it did not shard.
    pub shard_gate: Option<Arc<ShardGate>>,
}

/// Owns every loaded plugin and attaches each to the shared informers.
#[derive(Clone)]
pub struct PluginManager {
    inner: Arc<Inner>,
}

impl PluginManager {
    /// A manager with no plugins. With leadership to follow, start following it with
    /// `crate::plugins::follow_leadership` (the host's builder does).
    pub fn new(config: ManagerConfig) -> Self {
        let observer = config.runtime.observer().cloned();
        PluginManager {
            inner: Arc::new(Inner {
                runtime: config.runtime,
                factory: config.factory,
                projections: Projections::new(&config.metrics),
                metrics: config.metrics,
                defaults: config.defaults,
                default_concurrency: config.default_concurrency,
                grants: config.grants,
                cluster: config.cluster,
                slots: parking_lot::Mutex::new(HashMap::new()),
                failed: parking_lot::Mutex::new(HashMap::new()),
                versions: AtomicU64::new(0),
                closing: CancellationToken::new(),
                leadership: config.leadership,
                delivery: config.delivery,
                observer,
                shard_gate: config.shard_gate,
            }),
        }
    }

    /// Whether every running plugin has handled everything queued for it now: nothing ready
    /// in its queue, no call in flight, no `on-synced` due. Notifications waiting for a retry
    /// backoff do not count: they wait for time to pass.
    pub fn is_idle(&self) -> bool {
        self.slots().iter().all(|(_, slot)| {
            let d = slot.view.lock().dispatcher.clone();
            d.is_none_or(|d| d.is_stopped() || d.is_idle())
        })
    }

    /// The plugin layer's metric families.
    pub fn metrics(&self) -> &PluginMetrics {
        &self.inner.metrics
    }

    /// The informers the plugins are attached to.
    pub fn factory(&self) -> &InformerFactory {
        &self.inner.factory
    }

    fn slots(&self) -> Vec<(String, Arc<Slot>)> {
        self.inner
            .slots
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Every known plugin (running, loading, failed or stopping), sorted by name. Never waits
    /// for a plugin operation.
    pub async fn status(&self) -> Vec<PluginStatus> {
        let mut out: Vec<_> = self
            .slots()
            .into_iter()
            .map(|(name, slot)| {
                let v = slot.view.lock();
                PluginStatus {
                    name,
                    path: v.path.clone(),
                    state: v.state.get(),
                    version: v.version,
                    info: v.info.clone(),
                    grants: v.grants.clone(),
                    ready: v.ready(),
                    queue_depth: v.dispatcher.as_ref().map_or(0, |d| d.depth()),
                    concurrency: v.dispatcher.as_ref().map_or(0, |d| d.concurrency()),
                    calls_in_flight: v.dispatcher.as_ref().map_or(0, |d| d.calls_in_flight()),
                    instances: v.dispatcher.as_ref().map_or(0, |d| d.instances()),
                    memory: v.memory.as_ref().map(|m| MemoryUse {
                        budget_bytes: m.limit(),
                        used_bytes: m.used(),
                    }),
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Whether the plugin called `name` runs and has handled its replay.
    pub async fn plugin_ready(&self, name: &str) -> bool {
        let slot = self.inner.slots.lock().get(name).cloned();
        slot.is_some_and(|s| s.view.lock().ready())
    }

    /// Why the host is not ready yet, one line per plugin: a plugin still loading its first
    /// version, or a running version that has not handled its replay. Empty when ready.
    pub async fn not_ready(&self) -> Vec<String> {
        self.status()
            .await
            .into_iter()
            .filter_map(|p| match (&p.state, p.version, p.ready) {
                (PluginState::Loading, 0, _) => Some(format!("plugin {}: loading", p.name)),
                (_, v, false) if v > 0 => Some(format!(
                    "plugin {} ({}): has not consumed its initial list",
                    p.name,
                    p.state.name()
                )),
                _ => None,
            })
            .collect()
    }

    /// Ready when every plugin's informers have synced and it has handled its replay.
    pub async fn is_ready(&self) -> bool {
        self.not_ready().await.is_empty()
    }

    /// Names of plugins with a running version.
    pub async fn names(&self) -> Vec<String> {
        let mut v: Vec<_> = self
            .slots()
            .into_iter()
            .filter(|(_, s)| s.view.lock().version > 0)
            .map(|(n, _)| n)
            .collect();
        v.sort();
        v
    }

    fn count(&self, plugin: &str, result: &'static str) {
        self.inner
            .metrics
            .loads
            .get_or_create(&LoadLabels {
                plugin: plugin.to_string(),
                result,
            })
            .inc();
    }

    fn slot(&self, name: &str, path: &Path) -> Arc<Slot> {
        self.inner
            .slots
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Slot {
                    op: tokio::sync::Mutex::new(None),
                    view: Arc::new(parking_lot::Mutex::new(View {
                        path: path.to_path_buf(),
                        state: SharedState::default(),
                        version: 0,
                        info: None,
                        grants: None,
                        settings: None,
                        memory: None,
                        dispatcher: None,
                        standby_probes: Vec::new(),
                    })),
                })
            })
            .clone()
    }

    /// Loads `path`, or hot-swaps it in if a plugin of that name runs already. On error the
    /// running version (if any) is untouched.
    pub async fn load_file(&self, path: &Path) -> Result<LoadOutcome, LoadError> {
        let name = plugin_name(path);
        let slot = self.slot(&name, path);
        let result = match read_plugin(path) {
            Ok(files) => self.load_inner(&name, &slot, path, files).await,
            Err(e) => Err(e),
        };
        self.report(&name, &slot, path, result).await
    }

    /// Like [`PluginManager::load_file`], but a file whose content already failed permanently
    /// is skipped silently until it changes — the directory watcher calls this on every rescan.
    pub async fn reconcile_file(&self, path: &Path) -> Option<Result<LoadOutcome, LoadError>> {
        let name = plugin_name(path);
        let files = read_plugin(path);
        if let Ok(f) = &files
            && self.inner.failed.lock().get(path) == Some(&f.digest)
        {
            return None;
        }
        let slot = self.slot(&name, path);
        let result = match files {
            Ok(files) => self.load_inner(&name, &slot, path, files).await,
            Err(e) => Err(e),
        };
        Some(self.report(&name, &slot, path, result).await)
    }

    /// Counts, logs, tells the observer and records in the plugin's state a failed load.
    async fn report(
        &self,
        name: &str,
        slot: &Arc<Slot>,
        path: &Path,
        result: Result<LoadOutcome, LoadError>,
    ) -> Result<LoadOutcome, LoadError> {
        if let Err(e) = &result {
            let running = slot.view.lock().version > 0;
            let retrying = e.is_retriable();
            self.count(name, "failed");
            if running {
                tracing::error!(plugin = %name, path = %path.display(), error = %e, retrying, "new version not loaded; the running version keeps running");
            } else {
                tracing::error!(plugin = %name, path = %path.display(), error = %e, retrying, "plugin not loaded");
            }
            let cause = e.to_string();
            slot.step(StateEvent::LoadFailed {
                cause: cause.clone(),
                retrying,
                running,
            });
            if let Some(o) = &self.inner.observer {
                let failed = LoadFailed {
                    path,
                    error: &cause,
                    retrying,
                    running,
                };
                o.load_failed(name, &failed);
            }
        }
        result
    }

    /// Loads or swaps in one version, in named steps: skip what already runs, describe, hold
    /// the informers (a standby's warm cache), attach a delivery (when leading), replace the
    /// running version, then say what happened. Any failure before the replacement leaves the
    /// running version untouched; a permanent one is remembered so rescans skip the same bytes.
    async fn load_inner(
        &self,
        name: &str,
        slot: &Arc<Slot>,
        path: &Path,
        files: PluginFiles,
    ) -> Result<LoadOutcome, LoadError> {
        let digest = files.digest;
        // Waits only for another operation on this same plugin.
        let mut active = slot.op.lock().await;
        if active.as_ref().is_some_and(|a| a.digest == digest) {
            // What runs is what the files say again (a restored manifest): no failure stands.
            self.inner.failed.lock().remove(path);
            return Ok(LoadOutcome::Unchanged);
        }
        slot.step(StateEvent::LoadStarted);
        let remember = |e: LoadError| {
            if !e.is_retriable() {
                self.inner.failed.lock().insert(path.to_path_buf(), digest);
            }
            e
        };
        let had_manifest = files.manifest.is_some();
        if !had_manifest && active.as_ref().is_some_and(|a| a.had_manifest) {
            // The default grants can be wider than the manifest that went away.
            return Err(remember(LoadError::Invalid {
                path: Manifest::path_for(path),
                message: "manifest missing: the running version was loaded with it and keeps \
                          running with its grants; restore the manifest (a plugin that had one \
                          never falls back to the default grants)"
                    .into(),
            }));
        }
        check_file_name(path).map_err(|source| {
            remember(LoadError::Name {
                path: path.to_path_buf(),
                source,
            })
        })?;
        let prepared = self
            .prepare(name, path, files.wasm, files.manifest)
            .await
            .map_err(remember)?;
        let version = self.inner.versions.fetch_add(1, Ordering::Relaxed) + 1;
        let memory = prepared.instance.memory_budget().clone();
        let plan = DeliveryPlan {
            template: prepared.instance,
            subscriptions: prepared.subscriptions,
            dispatch: prepared.dispatch,
        };
        let standby = self
            .hold_informers(&plan.subscriptions, path)
            .await
            .map_err(remember)?;
        // The replay queues up behind the closed gate of the new dispatcher.
        let delivery = if self.delivers(&plan) {
            match self.attach(name, version, slot, &plan).await {
                Ok(d) => Some(d),
                Err(e) => {
                    release(standby).await;
                    return Err(remember(attach_error(path, e)));
                }
            }
        } else {
            None
        };
        self.inner.failed.lock().remove(path);
        let installed = delivery.as_ref().map(Delivery::installed);
        let standby_probes = standby.iter().map(|r| r.sync_probe()).collect();
        let new = Active {
            digest,
            version,
            had_manifest,
            plan,
            standby,
            delivery,
        };
        let outcome = match active.replace(new) {
            Some(old) => {
                let from = old.version;
                // v1 finishes (or abandons at its deadline) its calls in flight before v2 starts.
                old.stop().await;
                LoadOutcome::Swapped { from, to: version }
            }
            None => LoadOutcome::Loaded { version },
        };
        let before = {
            let mut v = slot.view.lock();
            v.path = path.to_path_buf();
            v.version = version;
            v.info = Some(prepared.info.clone());
            v.memory = Some(memory);
            v.standby_probes = standby_probes;
            let settings = v.settings.replace(prepared.settings.clone());
            (v.grants.replace(prepared.grants.clone()), settings)
        };
        if let ((Some(before), settings), LoadOutcome::Swapped { from, to }) = (before, &outcome) {
            log_grant_change(name, *from, *to, &before, &prepared.grants);
            if let Some(settings) = settings {
                log_settings_change(name, *from, *to, &settings, &prepared.settings);
            }
        }
        self.install(slot, installed);
        drop(active);
        self.announce(name, path, &outcome, &prepared.info);
        Ok(outcome)
    }

    /// Under leader election the informers are held by listeners of their own, so the cache
    /// stays warm whether or not this replica delivers; without it, nothing to hold.
    async fn hold_informers(
        &self,
        subscriptions: &[Attachable],
        path: &Path,
    ) -> Result<Vec<HandlerRegistration>, LoadError> {
        let mut standby = Vec::new();
        if self.inner.leadership.is_none() {
            return Ok(standby);
        }
        for (key, _, _) in subscriptions {
            match self
                .inner
                .factory
                .add_handler(key, Arc::new(WarmCache), None)
                .await
            {
                Ok(r) => standby.push(r),
                Err(e) => {
                    release(standby).await;
                    return Err(subscription_error(path, key, e));
                }
            }
        }
        Ok(standby)
    }

    /// Counts, logs and tells the observer of a successful load or swap.
    fn announce(&self, name: &str, path: &Path, outcome: &LoadOutcome, info: &PluginInfo) {
        let replaced = match *outcome {
            LoadOutcome::Swapped { from, to } => {
                self.count(name, "swapped");
                tracing::info!(plugin = %name, from, to, path = %path.display(), "plugin hot-swapped");
                Some(from)
            }
            _ => {
                self.count(name, "loaded");
                tracing::info!(plugin = %name, version = outcome_version(outcome), path = %path.display(), subscriptions = info.subscriptions.len(), "plugin loaded");
                None
            }
        };
        if let Some(o) = &self.inner.observer {
            let loaded = VersionLoaded {
                version: outcome_version(outcome),
                replaced,
                path,
                info,
            };
            o.version_loaded(name, &loaded);
        }
    }

    /// A new delivery of `plan` for `version`: a dispatcher registered on every subscription
    /// (each replays the cache into its queue) and its worker, with the gate still closed.
    fn attach<'a>(
        &'a self,
        name: &'a str,
        version: u64,
        slot: &'a Slot,
        plan: &DeliveryPlan,
    ) -> impl Future<Output = Result<Delivery, AttachError>> + Send + 'a {
        // The instance template is not Sync, so no reference to it may live across an await.
        let template = plan.template.fresh();
        let (subscriptions, dispatch) = (plan.subscriptions.clone(), plan.dispatch.clone());
        self.attach_parts(name, version, slot, template, subscriptions, dispatch)
    }

    async fn attach_parts(
        &self,
        name: &str,
        version: u64,
        slot: &Slot,
        template: HandlerInstance,
        subscriptions: Vec<Attachable>,
        dispatch: DispatchConfig,
    ) -> Result<Delivery, AttachError> {
        let state = slot.view.lock().state.clone();
        let dispatcher = Dispatcher::with_state(
            name,
            version,
            &self.inner.metrics,
            &dispatch,
            state,
            self.inner.observer.clone(),
        );
        Delivery::start(
            dispatcher,
            &self.inner.factory,
            subscriptions,
            template,
            self.inner.delivery.clone(),
        )
        .await
    }

    /// Whether this replica delivers `plan`: a sharded plugin always (its gate decides per
    /// object), any other while it leads.
    fn delivers(&self, plan: &DeliveryPlan) -> bool {
        plan.dispatch.shard.is_some() || self.leading()
    }

    /// The replica's slot gate, when the host runs sharded.
    pub(in crate::plugins) fn shard_gate(&self) -> Option<&Arc<ShardGate>> {
        self.inner.shard_gate.as_ref()
    }

    /// Whether this replica delivers: always without leader election.
    fn leading(&self) -> bool {
        self.inner.leadership.as_ref().is_none_or(|rx| *rx.borrow())
    }

    /// Leadership of this replica: `None` without leader election, else whether it leads.
    pub fn leadership(&self) -> Option<bool> {
        self.inner.leadership.as_ref().map(|rx| *rx.borrow())
    }

    /// Shows `delivery` (or none) as the slot's current one and opens its gate if this replica
    /// leads; otherwise kills it and marks the plugin a standby. Leadership is read under the
    /// view lock, the lock [`PluginManager::stop_deliveries_now`] kills under, so a delivery is
    /// never opened after a loss was acted on.
    fn install(&self, slot: &Slot, delivery: Option<Arc<Dispatcher>>) {
        let mut v = slot.view.lock();
        let leading = self.leading() || delivery.as_ref().is_some_and(|d| d.is_sharded());
        let event = match &delivery {
            Some(d) if leading => {
                d.open();
                StateEvent::Loaded
            }
            Some(d) => {
                d.kill();
                StateEvent::StandingBy
            }
            None => StateEvent::StandingBy,
        };
        v.dispatcher = match delivery {
            Some(d) if leading => Some(d),
            _ => None,
        };
        v.state.step(event);
    }

    /// Stops and detaches the plugin called `name`; its informers stop when no listener is
    /// left. Waits for its calls in flight (bounded by its deadline), never for other plugins.
    pub async fn unload(&self, name: &str) -> bool {
        let slot = self.inner.slots.lock().get(name).cloned();
        self.inner
            .failed
            .lock()
            .retain(|path, _| plugin_name(path) != name);
        let Some(slot) = slot else { return false };
        slot.step(StateEvent::StopRequested);
        let mut op = slot.op.lock().await;
        let removed = op.take();
        if let Some(a) = removed {
            let version = a.version;
            a.stop().await;
            self.count(name, "unloaded");
            tracing::info!(plugin = %name, version, "plugin unloaded");
            if let Some(o) = &self.inner.observer {
                o.unloaded(name, version);
            }
        }
        drop(op);
        let mut slots = self.inner.slots.lock();
        if slots.get(name).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
            slots.remove(name);
        }
        true
    }

    /// Unloads every plugin, e.g. at shutdown. In-flight calls may finish within `grace`; then
    /// they are abandoned, and loads in progress give up at once.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.closing.cancel();
        let slots = self.slots();
        let kill = {
            let slots = slots.clone();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                for (name, slot) in slots {
                    if let Some(d) = slot.view.lock().dispatcher.clone()
                        && !d.is_stopped()
                    {
                        tracing::warn!(plugin = %name, "shutdown grace period over; abandoning the in-flight call");
                    }
                    if let Some(d) = slot.view.lock().dispatcher.clone() {
                        d.kill();
                    }
                }
            })
        };
        futures::future::join_all(slots.iter().map(|(name, _)| self.unload(name))).await;
        kill.abort();
    }

    /// Unloads every plugin, waiting for in-flight calls to end (each bounded by its deadline).
    pub async fn unload_all(&self) {
        self.shutdown(Duration::MAX).await
    }
}

/// Detaches listeners that were attached for a load that then failed.
async fn release(registrations: Vec<HandlerRegistration>) {
    for r in registrations {
        r.remove().await;
    }
}

/// The version a successful load made run (0 for an unchanged file, which publishes nothing).
fn outcome_version(outcome: &LoadOutcome) -> u64 {
    match *outcome {
        LoadOutcome::Loaded { version } => version,
        LoadOutcome::Swapped { to, .. } => to,
        LoadOutcome::Unchanged => 0,
    }
}

/// Says how a swap changed a plugin's grants: a warning when it may do more than before (an
/// operator should notice a widening), an info line when it may only do less.
fn log_grant_change(name: &str, from: u64, to: u64, before: &Grants, after: &Grants) {
    let change = GrantChange::between(before, after);
    if change.is_empty() {
        return;
    }
    if change.added.is_empty() {
        tracing::info!(plugin = %name, from, to, "grants narrowed: {change}");
    } else {
        tracing::warn!(plugin = %name, from, to, "grants changed: {change}");
    }
}

/// Says which `[settings]` keys a swap added, removed or changed. Keys only: values are the
/// operator's and may be long or private, and the operator has the file.
fn log_settings_change(
    name: &str,
    from: u64,
    to: u64,
    before: &PluginSettings,
    after: &PluginSettings,
) {
    let (old, new) = (&before.values, &after.values);
    let keys = |pick: &dyn Fn(&(String, String)) -> bool, of: &[(String, String)]| {
        of.iter()
            .filter(|kv| pick(kv))
            .map(|(k, _)| crate::text::foreign(k, 128))
            .collect::<Vec<_>>()
    };
    let added = keys(&|(k, _)| before.get(k).is_none(), new);
    let removed = keys(&|(k, _)| after.get(k).is_none(), old);
    let changed = keys(&|(k, v)| before.get(k).is_some_and(|o| o != v), new);
    if added.is_empty() && removed.is_empty() && changed.is_empty() {
        return;
    }
    let list = |l: &[String]| {
        if l.is_empty() {
            "nothing".to_string()
        } else {
            l.join(", ")
        }
    };
    tracing::info!(plugin = %name, from, to,
        "settings changed: added {}; removed {}; changed {}", list(&added), list(&removed), list(&changed));
}
