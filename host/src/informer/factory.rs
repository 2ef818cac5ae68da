//! SharedInformerFactory: one informer per [`InformerKey`], created on first use and stopped
//! when its last handler goes away.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::indexer::Indexer;
use super::kube_source::KubeSourceFactory;
use super::list_watch::SourceFactory;
use super::listener::ResourceEventHandler;
use super::metrics::InformerMetrics;
use super::reflector::{ReflectorConfig, TransformFunc};
use super::shard::ShardRanges;
use super::shared_informer::{HandlerHandle, SharedIndexInformer};
use super::{InformerError, InformerKey};

struct Inner {
    source: Arc<dyn SourceFactory>,
    metrics: InformerMetrics,
    config: ReflectorConfig,
    informers: Mutex<HashMap<InformerKey, Arc<SharedIndexInformer>>>,
    /// Serialises creation so two first handlers for one key share a single informer.
    create: tokio::sync::Mutex<()>,
    shut_down: std::sync::atomic::AtomicBool,
    transform: Mutex<Option<TransformFunc>>,
    /// The held ranges every sharded informer follows (empty until `set_shard_scope`).
    scope: Arc<tokio::sync::watch::Sender<ShardRanges>>,
    /// Copies the caller's scope channel into `scope`.
    scope_forward: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Test seam: runs once when `remove` is about to stop an informer it found idle.
    #[cfg(test)]
    before_idle_stop: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// Hands out shared informers. Cheap to clone.
#[derive(Clone)]
pub struct InformerFactory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for InformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerFactory")
            .field("informers", &self.keys())
            .finish()
    }
}

impl InformerFactory {
    /// Informers backed by the API server behind `client` (kinds resolved through discovery).
    pub fn new(client: kube::Client, metrics: InformerMetrics) -> Self {
        Self::with_source(Arc::new(KubeSourceFactory::new(client)), metrics)
    }

    /// Informers backed by any source (tests use scripted ones).
    pub fn with_source(source: Arc<dyn SourceFactory>, metrics: InformerMetrics) -> Self {
        Self::with_config(source, metrics, ReflectorConfig::default())
    }

    /// Like [`with_source`](Self::with_source) with non-default reflector knobs.
    pub fn with_config(
        source: Arc<dyn SourceFactory>,
        metrics: InformerMetrics,
        config: ReflectorConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                metrics,
                config,
                informers: Mutex::new(HashMap::new()),
                create: tokio::sync::Mutex::new(()),
                shut_down: std::sync::atomic::AtomicBool::new(false),
                transform: Mutex::new(None),
                scope: Arc::new(tokio::sync::watch::channel(Vec::new()).0),
                scope_forward: Mutex::new(None),
                #[cfg(test)]
                before_idle_stop: Mutex::new(None),
            }),
        }
    }

    /// Transform applied by every informer created from now on (e.g. dropping `managedFields`
    /// to save cache memory); informers already running keep theirs.
    pub fn set_transform(&self, f: TransformFunc) {
        *self.inner.transform.lock() = Some(f);
    }

    /// The held ranges `[start, end)` of KEP-5866's hash space (`end` up to 2^64; empty =
    /// nothing held) that every sharded informer ([`InformerKey::sharded`]) of this factory
    /// follows, running ones included: each change relists them with the new `shardSelector`.
    /// Until this is called they hold nothing. A later call replaces the channel; when its
    /// sender goes, the last ranges stay. Call within a Tokio runtime.
    pub fn set_shard_scope(&self, mut scope: tokio::sync::watch::Receiver<ShardRanges>) {
        let tx = self.inner.scope.clone();
        let first = scope.borrow_and_update().clone();
        tx.send_if_modified(|v| replace_if_changed(v, first));
        let task = tokio::spawn(async move {
            while scope.changed().await.is_ok() {
                let next = scope.borrow_and_update().clone();
                tx.send_if_modified(|v| replace_if_changed(v, next));
            }
        });
        if let Some(old) = self.inner.scope_forward.lock().replace(task) {
            old.abort();
        }
    }

    /// Registers `handler` on the informer for `key`, resolving the kind and starting the
    /// informer if it is new; a late joiner first receives the cache as initial adds.
    pub async fn add_handler(
        &self,
        key: &InformerKey,
        handler: Arc<dyn ResourceEventHandler>,
        resync: Option<Duration>,
    ) -> Result<HandlerRegistration, InformerError> {
        use std::sync::atomic::Ordering;
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(InformerError::Stopped(key.to_string()));
        }
        let existing = self.inner.informers.lock().get(key).cloned();
        let (informer, handle) = match existing {
            Some(inf) => {
                let h = inf.add_event_handler(handler.clone(), resync);
                match h {
                    Ok(h) => (inf, h),
                    // Raced with the removal of its last handler: start a fresh informer.
                    Err(InformerError::Stopped(_)) => self.create(key, handler, resync).await?,
                    Err(e) => return Err(e),
                }
            }
            None => self.create(key, handler, resync).await?,
        };
        Ok(HandlerRegistration {
            informer,
            handle,
            factory: Arc::downgrade(&self.inner),
        })
    }

    async fn create(
        &self,
        key: &InformerKey,
        handler: Arc<dyn ResourceEventHandler>,
        resync: Option<Duration>,
    ) -> Result<(Arc<SharedIndexInformer>, HandlerHandle), InformerError> {
        let _guard = self.inner.create.lock().await;
        if let Some(inf) = self.inner.informers.lock().get(key).cloned()
            && let Ok(h) = inf.add_event_handler(handler.clone(), resync)
        {
            return Ok((inf, h));
        }
        let lw = self.inner.source.lister_watcher(key).await?;
        let informer = SharedIndexInformer::new(
            key.clone(),
            lw,
            self.inner.metrics.clone(),
            self.inner.config.clone(),
        );
        if let Some(t) = self.inner.transform.lock().clone() {
            informer.set_transform(t)?;
        }
        if key.shard.is_some() {
            informer.set_shard_scope(self.inner.scope.subscribe())?;
        }
        let handle = informer.add_event_handler(handler, resync)?;
        let mut map = self.inner.informers.lock();
        if self
            .inner
            .shut_down
            .load(std::sync::atomic::Ordering::Acquire)
        {
            informer.stop();
            return Err(InformerError::Stopped(key.to_string()));
        }
        map.insert(key.clone(), informer.clone());
        informer.run();
        tracing::info!(informer = %key, "informer started");
        drop(map);
        Ok((informer, handle))
    }

    /// The shared cache of a running informer (read-only use).
    pub fn indexer(&self, key: &InformerKey) -> Option<Indexer> {
        self.inner
            .informers
            .lock()
            .get(key)
            .map(|i| i.indexer().clone())
    }

    /// The running informer for `key` (diagnostics and tests).
    pub fn informer(&self, key: &InformerKey) -> Option<Arc<SharedIndexInformer>> {
        self.inner.informers.lock().get(key).cloned()
    }

    /// Whether the informer for `key` exists and has synced its initial list.
    pub fn has_synced(&self, key: &InformerKey) -> bool {
        self.inner
            .informers
            .lock()
            .get(key)
            .is_some_and(|i| i.has_synced())
    }

    /// Keys of the running informers.
    pub fn keys(&self) -> Vec<InformerKey> {
        self.inner.informers.lock().keys().cloned().collect()
    }

    /// Installs the test seam run when a removal is about to stop an idle informer.
    #[cfg(test)]
    pub(crate) fn set_before_idle_stop(&self, f: impl FnOnce() + Send + 'static) {
        *self.inner.before_idle_stop.lock() = Some(Box::new(f));
    }

    /// Whether every running informer is [caught up](SharedIndexInformer::caught_up) with
    /// `resource_version`.
    pub fn caught_up(&self, resource_version: u64) -> bool {
        self.keys().iter().all(|k| {
            self.informer(k)
                .is_none_or(|i| i.is_stopped() || i.caught_up(resource_version))
        })
    }

    /// Stops every informer and refuses new handlers.
    pub async fn shutdown(&self) {
        self.inner
            .shut_down
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.inner.scope_forward.lock().take() {
            t.abort();
        }
        let all: Vec<_> = self
            .inner
            .informers
            .lock()
            .drain()
            .map(|(_, i)| i)
            .collect();
        for i in &all {
            i.stop();
        }
        for i in &all {
            i.join().await;
        }
    }
}

/// Stores `next` unless equal: an unchanged scope must not relist every sharded informer.
fn replace_if_changed(v: &mut ShardRanges, next: ShardRanges) -> bool {
    if *v == next {
        return false;
    }
    *v = next;
    true
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(t) = self.scope_forward.get_mut().take() {
            t.abort();
        }
    }
}

/// A handler's registration on a shared informer.
pub struct HandlerRegistration {
    informer: Arc<SharedIndexInformer>,
    handle: HandlerHandle,
    factory: Weak<Inner>,
}

impl std::fmt::Debug for HandlerRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("informer", self.informer.key())
            .field("id", &self.handle.id)
            .finish()
    }
}

/// Answers a registration's per-handler HasSynced without holding the registration.
#[derive(Clone)]
pub struct SyncProbe {
    informer: Arc<SharedIndexInformer>,
    handle: HandlerHandle,
}

impl SyncProbe {
    /// See [`HandlerRegistration::has_synced`].
    pub fn has_synced(&self) -> bool {
        self.handle.has_synced(&self.informer)
    }
}

impl HandlerRegistration {
    /// A cloneable probe of [`HandlerRegistration::has_synced`] for status reporting.
    pub fn sync_probe(&self) -> SyncProbe {
        SyncProbe {
            informer: self.informer.clone(),
            handle: self.handle.clone(),
        }
    }

    /// Per-handler HasSynced (client-go semantics): the informer has synced and this handler
    /// has returned from every initial `on_add` it was given.
    pub fn has_synced(&self) -> bool {
        self.handle.has_synced(&self.informer)
    }

    /// Polls [`has_synced`](Self::has_synced) every 100 ms (client-go `syncedPollPeriod`);
    /// returns early if the informer stops.
    pub async fn wait_synced(&self) {
        while !self.has_synced() && !self.informer.is_stopped() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The informer key this handler is registered on.
    pub fn key(&self) -> &InformerKey {
        self.informer.key()
    }

    /// The shared cache behind this registration.
    pub fn indexer(&self) -> &Indexer {
        self.informer.indexer()
    }

    /// Listener id of this registration (the `handler` metric label).
    pub fn id(&self) -> u64 {
        self.handle.id
    }

    /// Unregisters the handler, dropping its undelivered notifications. When the informer's
    /// last handler goes, the informer stops and its watch closes.
    pub async fn remove(self) {
        let left = self.informer.remove_event_handler(self.handle.id);
        if left > 0 {
            return;
        }
        if let Some(f) = self.factory.upgrade() {
            let mut map = f.informers.lock();
            #[cfg(test)]
            if let Some(hook) = f.before_idle_stop.lock().take() {
                hook();
            }
            // A concurrent `add_handler` may have joined since: it either registered before this
            // check (the informer stays) or is refused and starts a fresh informer.
            if !self.informer.stop_if_idle() {
                return;
            }
            if map
                .get(self.informer.key())
                .is_some_and(|i| Arc::ptr_eq(i, &self.informer))
            {
                map.remove(self.informer.key());
            }
        } else {
            self.informer.stop();
        }
        tracing::info!(informer = %self.informer.key(), "last handler removed; informer stopped");
        self.informer.join().await;
    }
}
