//! SharedIndexInformer: one reflector + DeltaFIFO + indexer + processor per informer key,
//! shared by every handler registered for that key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::delta_fifo::{Delta, DeltaFifo, DeltaObject, DeltaType, Popped};
use super::indexer::Indexer;
use super::list_watch::ListerWatcher;
use super::listener::{Listener, Notification, ResourceEventHandler};
use super::metrics::{InformerCounters, InformerMetrics};
use super::processor::{Processor, ProcessorState};
use super::reflector::{Reflector, ReflectorConfig, ReflectorParts, TransformFunc};
use super::resync::determine_resync_period;
use super::shard::{ShardRanges, ShardScope};
use super::{InformerError, InformerKey};

/// Process-wide listener ids (also the `handler` metric label).
static NEXT_LISTENER_ID: AtomicU64 = AtomicU64::new(1);

/// One informer. Handlers registered before [`run`](Self::run) see the initial list through the
/// FIFO; later ones get a replay of the cache first.
pub struct SharedIndexInformer {
    key: InformerKey,
    name: String,
    lw: Arc<dyn ListerWatcher>,
    indexer: Indexer,
    fifo: Arc<DeltaFifo>,
    processor: Arc<Processor>,
    config: ReflectorConfig,
    metrics: InformerMetrics,
    counters: InformerCounters,
    cancel: CancellationToken,
    started: AtomicBool,
    stopped: AtomicBool,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    last_sync_rv: Arc<Mutex<String>>,
    transform: Mutex<Option<TransformFunc>>,
    /// Held ranges a sharded key follows (see [`set_shard_scope`](Self::set_shard_scope)).
    shard_scope: Mutex<Option<tokio::sync::watch::Receiver<ShardRanges>>>,
}

impl std::fmt::Debug for SharedIndexInformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("key", &self.name)
            .finish()
    }
}

impl SharedIndexInformer {
    /// A stopped-until-run informer over `lw`.
    pub fn new(
        key: InformerKey,
        lw: Arc<dyn ListerWatcher>,
        metrics: InformerMetrics,
        config: ReflectorConfig,
    ) -> Arc<Self> {
        let name = key.to_string();
        let indexer = Indexer::new();
        let fifo = Arc::new(DeltaFifo::new(Some(indexer.clone()), true));
        Arc::new(Self {
            counters: metrics.informer(&name),
            key,
            name,
            lw,
            indexer,
            fifo,
            processor: Arc::new(Processor::default()),
            config,
            metrics,
            cancel: CancellationToken::new(),
            started: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
            last_sync_rv: Arc::new(Mutex::new(String::new())),
            transform: Mutex::new(None),
            shard_scope: Mutex::new(None),
        })
    }

    /// The informer's key.
    pub fn key(&self) -> &InformerKey {
        &self.key
    }

    /// The shared cache.
    pub fn indexer(&self) -> &Indexer {
        &self.indexer
    }

    /// The informer's DeltaFIFO (diagnostics, benchmarks).
    pub fn fifo(&self) -> &Arc<DeltaFifo> {
        &self.fifo
    }

    /// The listener set and resync plan (test seams).
    #[cfg(test)]
    pub(crate) fn processor(&self) -> &Arc<Processor> {
        &self.processor
    }

    /// True once the initial list has been fully processed.
    pub fn has_synced(&self) -> bool {
        self.fifo.has_synced()
    }

    /// True after [`stop`](Self::stop).
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The resourceVersion the reflector is in sync with.
    pub fn last_sync_resource_version(&self) -> String {
        self.last_sync_rv.lock().clone()
    }

    /// Whether this informer has seen the server's state as of `resource_version` (by an event
    /// or a progress bookmark) and passed everything on: its FIFO is empty and every listener
    /// has handed its notifications to its handler. With everything on one thread (the
    /// scenario runner), this is "caught up and quiet".
    pub fn caught_up(&self, resource_version: u64) -> bool {
        let seen = self
            .last_sync_rv
            .lock()
            .parse::<u64>()
            .is_ok_and(|rv| rv >= resource_version);
        seen && self.has_synced() && self.fifo.is_empty() && self.processor.listeners_idle()
    }

    /// Number of registered handlers.
    pub fn handler_count(&self) -> usize {
        self.processor.len()
    }

    /// Smallest effective resync period among handlers (client-go's check period).
    pub fn resync_check_period(&self) -> Option<Duration> {
        self.processor.check_period()
    }

    /// Effective resync period of each handler id.
    pub fn resync_periods(&self) -> Vec<(u64, Option<Duration>)> {
        self.processor.periods()
    }

    /// Sets the transform applied to every object before it is cached; only before `run`.
    pub fn set_transform(&self, f: TransformFunc) -> Result<(), InformerError> {
        if self.started.load(Ordering::Acquire) || self.is_stopped() {
            return Err(InformerError::AlreadyStarted(self.name.clone()));
        }
        *self.transform.lock() = Some(f);
        Ok(())
    }

    /// The held ranges `[start, end)` a sharded key ([`InformerKey::sharded`]) follows: every
    /// list asks for their union, and a change relists. Only before `run`; a sharded informer
    /// run without a scope holds nothing (it never lists), so a missing scope cannot make a
    /// replica handle another's objects. Ignored for unsharded keys.
    pub fn set_shard_scope(
        &self,
        scope: tokio::sync::watch::Receiver<ShardRanges>,
    ) -> Result<(), InformerError> {
        if self.started.load(Ordering::Acquire) || self.is_stopped() {
            return Err(InformerError::AlreadyStarted(self.name.clone()));
        }
        *self.shard_scope.lock() = Some(scope);
        Ok(())
    }

    /// Registers a handler. After start, the cache is replayed to it as initial adds, atomically
    /// with respect to delta processing (queued deltas reach it later as normal notifications).
    pub fn add_event_handler(
        &self,
        handler: Arc<dyn ResourceEventHandler>,
        resync: Option<Duration>,
    ) -> Result<HandlerHandle, InformerError> {
        let mut st = self.processor.lock();
        // Checked under the processor lock, which `stop` also takes: no orphan listeners.
        if self.is_stopped() {
            return Err(InformerError::Stopped(self.name.clone()));
        }
        let id = NEXT_LISTENER_ID.fetch_add(1, Ordering::Relaxed);
        let period = determine_resync_period(resync);
        let listener = Listener::spawn(
            id,
            self.name.clone(),
            handler,
            self.metrics.listener_depth(&self.name, id),
        );
        self.processor.add_locked(&mut st, listener.clone(), period);
        if self.started.load(Ordering::Acquire) {
            for obj in self.indexer.list() {
                listener.add(Notification::Add { obj, initial: true });
            }
        }
        drop(st);
        Ok(HandlerHandle { id, listener })
    }

    /// Removes a handler, dropping its undelivered notifications. Idempotent; an id belonging
    /// to another informer is ignored. Returns the number of handlers left.
    pub fn remove_event_handler(&self, id: u64) -> usize {
        if self.processor.remove(id).is_some() {
            self.metrics.remove_listener(&self.name, id);
        }
        self.processor.len()
    }

    /// Starts the reflector and the process loop on the current runtime. A second call is a no-op.
    pub fn run(self: &Arc<Self>) {
        if self.is_stopped() || self.started.swap(true, Ordering::AcqRel) {
            tracing::warn!(informer = %self.name, "informer already started or stopped");
            return;
        }
        let mut reflector = Reflector::new(ReflectorParts {
            name: self.name.clone(),
            api_version: self.key.api_version.clone(),
            kind: self.key.kind.clone(),
            lw: self.lw.clone(),
            fifo: self.fifo.clone(),
            processor: self.processor.clone(),
            counters: self.counters.clone(),
            config: self.config.clone(),
            cancel: self.cancel.clone(),
            last_sync_rv: self.last_sync_rv.clone(),
            shard: self.key.shard.map(|field| ShardScope {
                field,
                ranges: self
                    .shard_scope
                    .lock()
                    .clone()
                    .unwrap_or_else(|| tokio::sync::watch::channel(Vec::new()).1),
            }),
        });
        reflector.transform = self.transform.lock().clone();
        let refl = tokio::spawn(reflector.run());
        let me = self.clone();
        let process = tokio::spawn(async move {
            loop {
                let processed = me
                    .fifo
                    .pop_marked(|p| match p {
                        Popped::Deltas(deltas, init) => me.process_deltas(deltas, init),
                        Popped::Rescoped(grew) => me.processor.lock().rescoped(grew),
                    })
                    .await;
                if processed.is_none() {
                    return;
                }
                // Stay fair to listeners and the reflector on a busy queue.
                tokio::task::consume_budget().await;
            }
        });
        self.tasks.lock().extend([refl, process]);
    }

    /// client-go `processDeltas`: update the cache, then notify (see the spec's table).
    fn process_deltas(&self, deltas: Vec<Delta>, is_in_initial_list: bool) {
        let st: parking_lot::MutexGuard<'_, ProcessorState> = self.processor.lock();
        for d in deltas {
            match d.kind {
                DeltaType::Deleted => {
                    let old = self.indexer.delete(d.object.key());
                    let (obj, fsu) = match d.object {
                        DeltaObject::Object(o) => (o, false),
                        DeltaObject::Tombstone(t) => match t.obj.or(old) {
                            Some(o) => (o, true),
                            None => {
                                tracing::warn!(informer = %self.name, key = %t.key,
                                    "tombstone without any known state; delete not delivered");
                                continue;
                            }
                        },
                    };
                    st.distribute(
                        Notification::Delete {
                            obj,
                            final_state_unknown: fsu,
                        },
                        false,
                    );
                }
                DeltaType::Evicted => {
                    // Moved to another replica: not a deletion, nobody is told.
                    self.indexer.delete(d.object.key());
                }
                DeltaType::Rescoped => {
                    let DeltaObject::Object(obj) = d.object else {
                        continue;
                    };
                    match self.indexer.upsert(obj.clone()) {
                        // Held before and after: only a real change is news.
                        Some(old) if old.resource_version() == obj.resource_version() => {}
                        Some(old) => st.distribute(
                            Notification::Update {
                                old,
                                new: obj,
                                is_sync: false,
                            },
                            false,
                        ),
                        // A gained slot replays like an initial list.
                        None => st.distribute(Notification::Add { obj, initial: true }, false),
                    }
                }
                DeltaType::Added | DeltaType::Updated | DeltaType::Replaced | DeltaType::Sync => {
                    let DeltaObject::Object(obj) = d.object else {
                        continue;
                    };
                    match self.indexer.upsert(obj.clone()) {
                        Some(old) => {
                            let is_sync = old.resource_version() == obj.resource_version();
                            st.distribute(
                                Notification::Update {
                                    old,
                                    new: obj,
                                    is_sync,
                                },
                                is_sync,
                            );
                        }
                        None => st.distribute(
                            Notification::Add {
                                obj,
                                initial: is_in_initial_list,
                            },
                            false,
                        ),
                    }
                }
            }
        }
        drop(st);
        self.counters.objects.set(self.indexer.len() as i64);
    }

    /// Stops the reflector (its watch closes), the process loop and every listener.
    pub fn stop(&self) {
        {
            let _st = self.processor.lock();
            if self.stopped.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        self.shut_down();
    }

    /// Stops the informer only if no handler is registered, deciding under the processor lock
    /// that [`add_event_handler`](Self::add_event_handler) also takes: a concurrent registration
    /// either lands first (and the informer keeps running) or is refused with `Stopped`, never
    /// kept by a stopping informer. Returns whether the informer is stopped.
    pub fn stop_if_idle(&self) -> bool {
        {
            let st = self.processor.lock();
            if !st.entries.is_empty() {
                return false;
            }
            if self.stopped.swap(true, Ordering::AcqRel) {
                return true;
            }
        }
        self.shut_down();
        true
    }

    /// The second half of stopping, once `stopped` is set.
    fn shut_down(&self) {
        self.cancel.cancel();
        self.fifo.close();
        let listeners = self.processor.stop_all();
        let mut tasks = self.tasks.lock();
        for l in listeners {
            self.metrics.remove_listener(&self.name, l.id);
            tasks.extend(l.take_task());
        }
        self.processor.plan_changed.notify_waiters();
    }

    /// Waits for the informer's tasks after [`stop`](Self::stop).
    pub async fn join(&self) {
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock());
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// A registered handler inside one informer.
#[derive(Clone)]
pub struct HandlerHandle {
    /// Listener id (unique in the process).
    pub id: u64,
    listener: Arc<Listener>,
}

impl std::fmt::Debug for HandlerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerHandle")
            .field("id", &self.id)
            .finish()
    }
}

impl HandlerHandle {
    /// Per-handler HasSynced: the informer has synced and this handler has consumed every
    /// initial add handed to it.
    pub fn has_synced(&self, informer: &SharedIndexInformer) -> bool {
        informer.has_synced() && self.listener.initial_delivered()
    }
}
