//! One listener per registered handler (client-go processorListener): an unbounded ordered
//! buffer drained by the listener's own task, so a slow handler only delays itself.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;

use super::object::SharedObject;
use kubewasm_apimachinery::LabelSelector;

/// Receives an informer's notifications. Called from the handler's own listener task, in order;
/// must not block for long (it only delays this handler, but its backlog grows without bound).
pub trait ResourceEventHandler: Send + Sync + 'static {
    /// `is_in_initial_list` is true for the informer's first population and for a late
    /// joiner's replay of the cache.
    fn on_add(&self, obj: &SharedObject, is_in_initial_list: bool);
    /// `is_sync` is true when both versions have the same resourceVersion (resync, or a relist
    /// that found the object unchanged); such updates reach only handlers due for a resync.
    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool);
    /// `final_state_unknown` is true for a deletion inferred by a relist; `obj` is then the last
    /// known state (client-go `DeletedFinalStateUnknown`).
    fn on_delete(&self, obj: &SharedObject, final_state_unknown: bool);
    /// Every notification buffered for this handler has been delivered: the end of a burst.
    /// A handler that batches (a controller's keys) hands its batch on here.
    fn drained(&self) {}
    /// A sharded informer's held ranges changed and everything its relist implied has been
    /// delivered: gained objects as initial adds, changes and deletions as usual (objects that
    /// left the scope leave the cache silently). With `gained` (the held ranges widened), the
    /// place to report a gained slot's replay as synced, even of a slot without objects; a
    /// rescope that only gave ranges up replayed nothing. Never called on unsharded informers.
    fn rescoped(&self, _gained: bool) {}
}

/// Lets a shared handler be registered directly (and wrapped by adapters).
impl<H: ResourceEventHandler + ?Sized> ResourceEventHandler for Arc<H> {
    fn on_add(&self, obj: &SharedObject, init: bool) {
        (**self).on_add(obj, init)
    }
    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool) {
        (**self).on_update(old, new, is_sync)
    }
    fn on_delete(&self, obj: &SharedObject, fsu: bool) {
        (**self).on_delete(obj, fsu)
    }
    fn drained(&self) {
        (**self).drained()
    }
    fn rescoped(&self, gained: bool) {
        (**self).rescoped(gained)
    }
}

/// One notification as a [`ResourceEventHandler`] receives it, for handlers that queue them.
#[derive(Clone, Debug)]
pub enum Notification {
    /// `on_add`.
    Add {
        /// The new object.
        obj: SharedObject,
        /// `is_in_initial_list`.
        initial: bool,
    },
    /// `on_update`.
    Update {
        /// The previous state.
        old: SharedObject,
        /// The current state.
        new: SharedObject,
        /// Nothing changed on the server (resync, or an unchanged object after a relist).
        is_sync: bool,
    },
    /// `on_delete`.
    Delete {
        /// The last known state.
        obj: SharedObject,
        /// Inferred from a relist rather than seen as a watch event.
        final_state_unknown: bool,
    },
}

impl Notification {
    /// The object the notification is about (the new state of an update).
    pub fn object(&self) -> &SharedObject {
        match self {
            Notification::Add { obj, .. } | Notification::Delete { obj, .. } => obj,
            Notification::Update { new, .. } => new,
        }
    }

    /// The export's flag: `is_in_initial_list`, `is_sync` or `final_state_unknown`.
    pub fn flag(&self) -> bool {
        match self {
            Notification::Add { initial, .. } => *initial,
            Notification::Update { is_sync, .. } => *is_sync,
            Notification::Delete {
                final_state_unknown,
                ..
            } => *final_state_unknown,
        }
    }

    /// Whether this is an add of the initial list (or of a replay).
    pub fn is_initial(&self) -> bool {
        matches!(self, Notification::Add { initial: true, .. })
    }
}

/// What a listener's buffer holds: notifications, and the end of a rescope's delivery.
enum Item {
    Note(Notification),
    Rescoped(bool),
}

/// A registered handler's delivery machinery.
pub(crate) struct Listener {
    pub id: u64,
    tx: Mutex<Option<mpsc::UnboundedSender<Item>>>,
    removed: Arc<AtomicBool>,
    /// Initial adds handed to the buffer but not yet returned from `on_add` (synctrack).
    pending_initial: Arc<AtomicI64>,
    depth: Gauge,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Listener {
    /// Spawns the delivery task on the current tokio runtime.
    pub(super) fn spawn(
        id: u64,
        informer: String,
        handler: Arc<dyn ResourceEventHandler>,
        depth: Gauge,
    ) -> Arc<Self> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
        let removed = Arc::new(AtomicBool::new(false));
        let pending_initial = Arc::new(AtomicI64::new(0));
        let (r, p, d) = (removed.clone(), pending_initial.clone(), depth.clone());
        let task = tokio::spawn(async move {
            while let Some(item) = rx.recv().await {
                if r.load(Ordering::Acquire) {
                    break;
                }
                d.dec();
                let n = match item {
                    Item::Note(n) => n,
                    Item::Rescoped(gained) => {
                        if std::panic::catch_unwind(AssertUnwindSafe(|| handler.rescoped(gained)))
                            .is_err()
                        {
                            tracing::error!(informer = %informer, handler = id,
                                "event handler panicked after a rescope; handler keeps running");
                        }
                        if rx.is_empty()
                            && std::panic::catch_unwind(AssertUnwindSafe(|| handler.drained()))
                                .is_err()
                        {
                            tracing::error!(informer = %informer, handler = id,
                                "event handler panicked at the end of a burst; handler keeps running");
                        }
                        continue;
                    }
                };
                let initial = matches!(n, Notification::Add { initial: true, .. });
                let res = std::panic::catch_unwind(AssertUnwindSafe(|| match &n {
                    Notification::Add { obj, initial } => handler.on_add(obj, *initial),
                    Notification::Update { old, new, is_sync } => {
                        handler.on_update(old, new, *is_sync)
                    }
                    Notification::Delete {
                        obj,
                        final_state_unknown,
                    } => handler.on_delete(obj, *final_state_unknown),
                }));
                if initial {
                    p.fetch_sub(1, Ordering::AcqRel);
                }
                if res.is_err() {
                    tracing::error!(informer = %informer, handler = id,
                        "event handler panicked; notification skipped, handler keeps running");
                }
                if rx.is_empty()
                    && std::panic::catch_unwind(AssertUnwindSafe(|| handler.drained())).is_err()
                {
                    tracing::error!(informer = %informer, handler = id,
                        "event handler panicked at the end of a burst; handler keeps running");
                }
            }
        });
        Arc::new(Self {
            id,
            tx: Mutex::new(Some(tx)),
            removed,
            pending_initial,
            depth,
            task: Mutex::new(Some(task)),
        })
    }

    /// Buffers a notification; never blocks.
    pub(super) fn add(&self, n: Notification) {
        let g = self.tx.lock();
        let Some(tx) = g.as_ref() else { return };
        if matches!(n, Notification::Add { initial: true, .. }) {
            self.pending_initial.fetch_add(1, Ordering::AcqRel);
        }
        self.depth.inc();
        if tx.send(Item::Note(n)).is_err() {
            self.depth.dec();
        }
    }

    /// Buffers the end of a rescope's delivery, after everything buffered so far.
    pub(super) fn rescoped(&self, gained: bool) {
        let g = self.tx.lock();
        let Some(tx) = g.as_ref() else { return };
        self.depth.inc();
        if tx.send(Item::Rescoped(gained)).is_err() {
            self.depth.dec();
        }
    }

    /// Whether nothing handed to this listener is still waiting to be delivered. The count
    /// drops only when a notification is taken for delivery, and delivery itself never awaits,
    /// so on a single-threaded runtime "idle" also means "handled".
    pub(super) fn is_idle(&self) -> bool {
        self.depth.get() <= 0 || self.tx.lock().is_none()
    }

    /// Whether every initial add handed to this listener has been delivered.
    pub(super) fn initial_delivered(&self) -> bool {
        self.pending_initial.load(Ordering::Acquire) <= 0
    }

    /// Stops delivery at once, discarding buffered notifications.
    pub(super) fn stop(&self) {
        self.removed.store(true, Ordering::Release);
        self.tx.lock().take();
        self.depth.set(0);
    }

    /// The delivery task, for joining on shutdown.
    pub(super) fn take_task(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.task.lock().take()
    }
}

/// Adapts a handler to see only objects passing a label selector, turning updates that cross the
/// selector boundary into adds or deletes (client-go `FilteringResourceEventHandler`).
pub struct FilteringHandler<H> {
    /// Only objects whose labels match are delivered.
    pub selector: LabelSelector,
    /// The wrapped handler.
    pub inner: H,
}

impl<H: ResourceEventHandler> ResourceEventHandler for FilteringHandler<H> {
    fn on_add(&self, obj: &SharedObject, init: bool) {
        if self.selector.matches(&obj.meta().labels) {
            self.inner.on_add(obj, init);
        }
    }

    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool) {
        let o = self.selector.matches(&old.meta().labels);
        let n = self.selector.matches(&new.meta().labels);
        match (o, n) {
            (true, true) => self.inner.on_update(old, new, is_sync),
            (false, true) => self.inner.on_add(new, false),
            (true, false) => self.inner.on_delete(old, false),
            (false, false) => {}
        }
    }

    fn on_delete(&self, obj: &SharedObject, fsu: bool) {
        if self.selector.matches(&obj.meta().labels) {
            self.inner.on_delete(obj, fsu);
        }
    }

    fn drained(&self) {
        self.inner.drained();
    }

    fn rescoped(&self, gained: bool) {
        self.inner.rescoped(gained);
    }
}
