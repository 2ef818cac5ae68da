//! The controllers of kube-controller-manager a controller under development expects a cluster
//! to run, on one background task: the garbage collector (`gc.rs`), the namespace lifecycle
//! (`namespaces.rs`) and, with `Config::workloads`, the workload controllers with a fake node
//! and kubelet (`workloads/`).
//!
//! Timing, which tests rely on: the store tells [`Controllers`] of every write while it still
//! holds its lock (`store::Observer`), so the work a write causes is queued before the writer's
//! client has its answer. The task does queued work in order, as soon as it is queued (no resync
//! period, no rate limit, no backoff: a 409 requeues the work at the back), each piece through
//! the same semantics as API writes. Work that must wait (a simulated Pod starting after
//! `WorkloadConfig::pod_ready_delay`) is held by a timer ([`Controllers::enqueue_after`]) and
//! counts as pending. [`Controllers::is_idle`] is true exactly when nothing is queued, pending
//! or running, so a test waits for `ApiServer::controllers_idle` instead of sleeping.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use crate::App;
use crate::gc::{self, Graph};
use crate::namespaces::{self, Tracker};
use crate::status::ApiError;
use crate::store::{Obj, ObjKey, Observer};
use crate::workloads;

/// One piece of controller work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Work {
    /// The garbage collector's.
    Gc(gc::Work),
    /// The namespace controller's.
    Namespace(namespaces::Work),
    /// The workload controllers', scheduler's and kubelet's (`Config::workloads`).
    Workload(workloads::Work),
}

/// Why a piece of work did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Failed {
    /// A write a controller made was refused (a 409 means the object changed meanwhile: the
    /// work is queued again).
    #[error("{controller}: writing {what}: {}", .error.message)]
    Write {
        /// Which controller.
        controller: &'static str,
        /// The object written.
        what: String,
        /// The server's answer (boxed: a `Result` carrying it stays small on the happy path).
        error: Box<ApiError>,
    },
    /// A stored object a controller reads does not decode as its kind (the work is dropped:
    /// the next write of the object runs it again).
    #[error("{controller}: reading {what}: {error}")]
    Decode {
        /// Which controller.
        controller: &'static str,
        /// The object read.
        what: String,
        /// What did not decode.
        error: serde_json::Error,
    },
}

impl Failed {
    /// Whether the work should run again (the object changed between read and write).
    pub fn is_conflict(&self) -> bool {
        match self {
            Failed::Write { error, .. } => error.code == 409,
            Failed::Decode { .. } => false,
        }
    }
}

struct State {
    graph: Graph,
    namespaces: Tracker,
    workloads: workloads::Tracker,
    /// Work held by timers ([`Controllers::enqueue_after`]), not queued yet.
    pending: usize,
    queue: VecDeque<Work>,
    /// What `queue` holds, so a piece of work is queued once until it runs.
    queued: HashSet<Work>,
}

/// The controllers' shared state: the garbage collector's graph and the work queue.
pub struct Controllers {
    state: Mutex<State>,
    wake: Notify,
    /// True while nothing is queued or running.
    idle: watch::Sender<bool>,
}

impl Controllers {
    /// Controllers with nothing to do yet; `namespace_defaults` is `Config::namespace_defaults`,
    /// `workloads` whether `Config::workloads` is on.
    pub fn new(namespace_defaults: bool, workloads: bool) -> Controllers {
        Controllers {
            state: Mutex::new(State {
                graph: Graph::default(),
                namespaces: Tracker::new(namespace_defaults),
                workloads: workloads::Tracker::new(workloads),
                pending: 0,
                queue: VecDeque::new(),
                queued: HashSet::new(),
            }),
            wake: Notify::new(),
            idle: watch::Sender::new(true),
        }
    }
}

impl Controllers {
    /// Read the garbage collector's graph.
    pub fn with_graph<R>(&self, f: impl FnOnce(&Graph) -> R) -> R {
        f(&self.state.lock().graph)
    }

    /// Queue `work` (once: already queued work stays where it is).
    pub fn enqueue(&self, work: Work) {
        let mut s = self.state.lock();
        self.push(&mut s, work);
    }

    /// Queue `work` once `delay` has passed (at once for zero); until then the controllers are
    /// not idle. On tokio's paused clock (`kubewasm test`) the delay passes as soon as the
    /// runtime has nothing else to do.
    pub fn enqueue_after(self: &Arc<Self>, work: Work, delay: Duration) {
        if delay.is_zero() {
            return self.enqueue(work);
        }
        {
            let mut s = self.state.lock();
            s.pending += 1;
            self.idle
                .send_if_modified(|idle| std::mem::replace(idle, false));
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut s = me.state.lock();
            s.pending -= 1;
            me.push(&mut s, work);
            // Wake the task even when the work was queued already: it decides idleness.
            me.wake.notify_one();
        });
    }

    fn push(&self, s: &mut State, work: Work) {
        if s.queued.insert(work.clone()) {
            s.queue.push_back(work);
            self.idle
                .send_if_modified(|idle| std::mem::replace(idle, false));
            self.wake.notify_one();
        }
    }

    /// Whether nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        *self.idle.borrow()
    }

    /// Wait until nothing is queued or running.
    pub async fn wait_idle(&self) {
        let mut rx = self.idle.subscribe();
        let _ = rx.wait_for(|idle| *idle).await;
    }

    /// The next piece of work; `None` (and idle) when the queue is empty.
    fn next(&self) -> Option<Work> {
        let mut s = self.state.lock();
        match s.queue.pop_front() {
            Some(w) => {
                s.queued.remove(&w);
                Some(w)
            }
            None => {
                // Under the state lock, as `push` clears it: no enqueue falls in between.
                if s.pending == 0 {
                    self.idle
                        .send_if_modified(|idle| !std::mem::replace(idle, true));
                }
                None
            }
        }
    }
}

impl Observer for Controllers {
    fn observe(&self, res: &str, key: &ObjKey, prev: Option<&Obj>, next: Option<&Obj>) {
        let mut s = self.state.lock();
        let mut gc = Vec::new();
        s.graph.observe(res, key, prev, next, &mut gc);
        let mut ns = Vec::new();
        s.namespaces.observe(res, key, prev, next, &mut ns);
        let mut wl = Vec::new();
        s.workloads.observe(res, key, prev, next, &mut wl);
        for w in gc
            .into_iter()
            .map(Work::Gc)
            .chain(ns.into_iter().map(Work::Namespace))
            .chain(wl.into_iter().map(Work::Workload))
        {
            self.push(&mut s, w);
        }
    }
}

/// The controllers' task: does queued work until the server goes.
pub async fn run(app: Weak<App>, controllers: Arc<Controllers>) {
    loop {
        let Some(work) = controllers.next() else {
            controllers.wake.notified().await;
            continue;
        };
        let Some(app) = app.upgrade() else {
            return;
        };
        let result = match &work {
            Work::Gc(w) => gc::process(&app, w),
            Work::Namespace(w) => namespaces::process(&app, w),
            Work::Workload(w) => workloads::process(&app, w),
        };
        match result {
            Ok(()) => {}
            Err(e) if e.is_conflict() => controllers.enqueue(work),
            Err(e) => tracing::warn!("{e}"),
        }
        drop(app);
        tokio::task::yield_now().await;
    }
}
