//! [`Delivery`]: one plugin version's dispatcher attached to its informers, and what drains it
//! (a worker thread, or a task on the caller's runtime: [`DeliveryMode`]).
//!
//! Attaching is all-or-nothing: if one subscription cannot be served, the others are detached
//! again and nothing was delivered, as the dispatcher's gate is still closed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::dispatch::{Dispatcher, Guest};
use super::worker::{RESTART_BACKOFF, spawn_task, spawn_worker};
use crate::informer::{
    HandlerRegistration, InformerError, InformerFactory, InformerKey, Notification,
};
use crate::plugins::capabilities::projected::ProjectionCache;
use crate::runtime::{CallError, HandlerInstance, HandlerOutcome, MemoryBudget};

/// Where a plugin version's calls run; chosen when the host is built.
#[derive(Clone, Debug, Default)]
pub enum DeliveryMode {
    /// Each version on an OS thread of its own with a single-threaded Tokio runtime: a guest
    /// that computes until its deadline occupies only its own thread; a panic there (a host
    /// bug) restarts the worker. What every host uses.
    #[default]
    Threads,
    /// Each version as a task on the runtime that built the manager: the scenario runner's
    /// single thread with a paused clock, where every timer of the host follows the one virtual
    /// clock and "nothing is runnable" means "everything has been handled". A guest that
    /// computes holds that thread, which a host must never allow. Every call first waits for
    /// the gate, if there is one.
    Inline(Option<CallGate>),
}

/// What a call waits for before it starts in [`DeliveryMode::Inline`]. The scenario runner
/// lets the informers catch up with the API server there, so that a call sees in its cache what
/// the calls before it wrote: a transcript then does not depend on whether a watch event or
/// the next call happened to come first.
#[derive(Clone)]
pub struct CallGate(Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>);

impl CallGate {
    /// A gate that awaits what `wait` returns before each call.
    pub fn new(wait: impl Fn() -> BoxFuture<'static, ()> + Send + Sync + 'static) -> CallGate {
        CallGate(Arc::new(wait))
    }
}

impl std::fmt::Debug for CallGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallGate")
    }
}

/// `call`, started only once `wait` is over.
async fn after<T>(wait: BoxFuture<'static, ()>, call: impl Future<Output = T>) -> T {
    wait.await;
    call.await
}

/// A guest whose calls each wait for the gate first.
struct Gated<G> {
    guest: G,
    gate: CallGate,
}

impl<G: Guest> Guest for Gated<G> {
    fn deliver(
        &mut self,
        n: &Notification,
    ) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send {
        let wait = (self.gate.0)();
        after(wait, self.guest.deliver(n))
    }

    fn reconcile(
        &mut self,
        key: &crate::runtime::ObjectKey,
    ) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send {
        let wait = (self.gate.0)();
        after(wait, self.guest.reconcile(key))
    }

    fn keys_for(
        &mut self,
        obj: &crate::informer::SharedObject,
    ) -> impl Future<Output = Result<Vec<crate::runtime::ObjectKey>, CallError>> + Send {
        let wait = (self.gate.0)();
        after(wait, self.guest.keys_for(obj))
    }

    fn wants_synced(&self) -> bool {
        self.guest.wants_synced()
    }

    fn synced(&mut self) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send {
        let wait = (self.gate.0)();
        after(wait, self.guest.synced())
    }

    fn admit_line(&self) -> bool {
        self.guest.admit_line()
    }

    fn memory_budget(&self) -> Option<MemoryBudget> {
        self.guest.memory_budget()
    }
}

/// One subscription ready to attach: its informer, resync period, and the shared projection
/// cache its objects are cut through (held as long as the version is loaded).
pub(crate) type Attachable = (InformerKey, Option<Duration>, Option<Arc<ProjectionCache>>);

/// One version's delivery: its dispatcher on the informers and the worker draining it.
pub(crate) struct Delivery {
    pub(crate) dispatcher: Arc<Dispatcher>,
    registrations: Vec<HandlerRegistration>,
    worker: Worker,
}

/// What drains a dispatcher: its own thread (a host), or a task on the host's runtime (the
/// scenario runner, whose virtual clock must be the only clock).
pub(crate) enum Worker {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

impl Delivery {
    /// What the view shows of it.
    pub(crate) fn installed(&self) -> Arc<Dispatcher> {
        self.dispatcher.clone()
    }

    /// Detaches from the informers first (no new notifications), then lets the worker finish
    /// its in-flight calls (bounded by the plugin's deadline, or abandoned by a kill) and exit.
    pub(crate) async fn stop(self) {
        for r in self.registrations {
            r.remove().await;
        }
        self.dispatcher.stop();
        match self.worker {
            Worker::Thread(worker) => {
                let _ = tokio::task::spawn_blocking(move || worker.join()).await;
            }
            Worker::Task(task) => {
                let _ = task.await;
            }
        }
    }
}

/// Why a delivery could not be attached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttachError {
    #[error("subscription {0} cannot be served: {1}")]
    Subscription(InformerKey, InformerError),
    #[error("cannot start worker thread: {0}")]
    Worker(std::io::Error),
}

impl Delivery {
    /// Registers `dispatcher` on every subscription (each replays the cache into its queue,
    /// behind the still-closed gate) and starts what drains it.
    pub(crate) async fn start(
        dispatcher: Arc<Dispatcher>,
        factory: &InformerFactory,
        subscriptions: Vec<Attachable>,
        template: HandlerInstance,
        mode: DeliveryMode,
    ) -> Result<Delivery, AttachError> {
        let mut registrations = Vec::with_capacity(subscriptions.len());
        for (i, (key, resync, projection)) in subscriptions.into_iter().enumerate() {
            match factory
                .add_handler(&key, dispatcher.handler(i as u32, projection), resync)
                .await
            {
                Ok(r) => {
                    // A controller's primary comes first: its cache is there before the owned
                    // and watched kinds replay into their mapping.
                    if i == 0 {
                        dispatcher.attach_primary(r.indexer().clone());
                    }
                    registrations.push(r)
                }
                Err(e) => {
                    detach(registrations, &dispatcher).await;
                    return Err(AttachError::Subscription(key, e));
                }
            }
        }
        dispatcher.watch_sync(registrations.iter().map(|r| r.sync_probe()).collect());
        let worker = match mode {
            DeliveryMode::Inline(None) => Worker::Task(spawn_task(
                dispatcher.clone(),
                move || template.fresh(),
                RESTART_BACKOFF,
            )),
            DeliveryMode::Inline(Some(gate)) => Worker::Task(spawn_task(
                dispatcher.clone(),
                move || Gated {
                    guest: template.fresh(),
                    gate: gate.clone(),
                },
                RESTART_BACKOFF,
            )),
            DeliveryMode::Threads => {
                match spawn_worker(
                    dispatcher.clone(),
                    move || template.fresh(),
                    RESTART_BACKOFF,
                ) {
                    Ok(worker) => Worker::Thread(worker),
                    Err(e) => {
                        detach(registrations, &dispatcher).await;
                        return Err(AttachError::Worker(e));
                    }
                }
            }
        };
        Ok(Delivery {
            dispatcher,
            registrations,
            worker,
        })
    }
}

/// Undoes a partial attach.
async fn detach(registrations: Vec<HandlerRegistration>, dispatcher: &Dispatcher) {
    for r in registrations {
        r.remove().await;
    }
    dispatcher.stop();
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::informer::KubeObject;

    /// Counts the calls that reached it.
    struct Probe(Arc<AtomicUsize>);

    impl Guest for Probe {
        async fn deliver(&mut self, _: &Notification) -> Result<HandlerOutcome, CallError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(HandlerOutcome::Ok)
        }

        fn wants_synced(&self) -> bool {
            true
        }

        async fn synced(&mut self) -> Result<HandlerOutcome, CallError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(HandlerOutcome::Ok)
        }
    }

    /// Neither a notification nor `on-synced` reaches the guest before the gate lets that one
    /// call through.
    #[tokio::test]
    async fn a_gated_call_reaches_the_guest_only_through_the_gate() {
        let permits = Arc::new(Semaphore::new(0));
        let gate = {
            let permits = permits.clone();
            CallGate::new(move || {
                let permits = permits.clone();
                Box::pin(async move { permits.acquire().await.expect("open").forget() })
            })
        };
        let reached = Arc::new(AtomicUsize::new(0));
        let mut guest = Gated {
            guest: Probe(reached.clone()),
            gate,
        };
        let n = Notification::Add {
            obj: Arc::new(
                KubeObject::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"namespace": "ns", "name": "a", "uid": "u", "resourceVersion": "1"},
                }))
                .unwrap(),
            ),
            initial: false,
        };
        {
            let mut call = std::pin::pin!(guest.deliver(&n));
            for _ in 0..3 {
                assert!(futures::poll!(call.as_mut()).is_pending());
                tokio::task::yield_now().await;
            }
            assert_eq!(reached.load(Ordering::SeqCst), 0);
            permits.add_permits(1);
            assert!(matches!(call.await, Ok(HandlerOutcome::Ok)));
            assert_eq!(reached.load(Ordering::SeqCst), 1);
        }
        let mut call = std::pin::pin!(guest.synced());
        assert!(futures::poll!(call.as_mut()).is_pending());
        assert_eq!(reached.load(Ordering::SeqCst), 1);
        permits.add_permits(1);
        assert!(matches!(call.await, Ok(HandlerOutcome::Ok)));
        assert_eq!(reached.load(Ordering::SeqCst), 2);
    }
}
