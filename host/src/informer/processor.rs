//! The shared processor: the set of listeners of one informer and the routing of notifications
//! (sync notifications only to listeners whose syncing flag is set).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::listener::{Listener, Notification};
use super::resync::ListenerResync;

pub(crate) struct Entry {
    pub listener: Arc<Listener>,
    pub resync: ListenerResync,
}

/// Listener set; its lock is client-go's `blockDeltas`: delta processing, late-join replay and
/// handler removal exclude each other.
#[derive(Default)]
pub(crate) struct ProcessorState {
    pub entries: Vec<Entry>,
}

impl ProcessorState {
    /// client-go `distribute`: `sync` notifications go only to syncing listeners.
    pub(super) fn distribute(&self, n: Notification, sync: bool) {
        let mut iter = self
            .entries
            .iter()
            .filter(|e| !sync || e.resync.syncing)
            .peekable();
        while let Some(e) = iter.next() {
            if iter.peek().is_none() {
                e.listener.add(n);
                return;
            }
            e.listener.add(n.clone());
        }
    }

    /// Tells every listener, after what it was given so far, that a rescope is delivered
    /// (`gained`: the held ranges widened).
    pub(super) fn rescoped(&self, gained: bool) {
        for e in &self.entries {
            e.listener.rescoped(gained);
        }
    }
}

/// Owner of the listener set and of the resync plan.
#[derive(Default)]
pub(crate) struct Processor {
    state: Mutex<ProcessorState>,
    /// Signalled whenever the resync plan changes (listener added or removed).
    pub plan_changed: Notify,
    /// Test seam: runs once, right after the next read of the resync plan, so tests can land
    /// a registration exactly there.
    #[cfg(test)]
    pub after_plan_read: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Processor {
    pub(super) fn lock(&self) -> MutexGuard<'_, ProcessorState> {
        self.state.lock()
    }

    /// Registers a listener; the caller replays the cache while still holding the lock.
    pub(super) fn add_locked(
        &self,
        st: &mut ProcessorState,
        listener: Arc<Listener>,
        period: Option<Duration>,
    ) {
        st.entries.push(Entry {
            listener,
            resync: ListenerResync::new(period, Instant::now()),
        });
        self.plan_changed.notify_waiters();
    }

    /// Removes a listener (idempotent; unknown ids are ignored). Returns it if it was present.
    pub(super) fn remove(&self, id: u64) -> Option<Arc<Listener>> {
        let mut st = self.state.lock();
        let pos = st.entries.iter().position(|e| e.listener.id == id)?;
        let e = st.entries.remove(pos);
        e.listener.stop();
        drop(st);
        self.plan_changed.notify_waiters();
        Some(e.listener)
    }

    /// Whether every listener has handed on everything it was given.
    pub(super) fn listeners_idle(&self) -> bool {
        self.state
            .lock()
            .entries
            .iter()
            .all(|e| e.listener.is_idle())
    }

    pub(super) fn len(&self) -> usize {
        self.state.lock().entries.len()
    }

    /// client-go `shouldResync`: recompute every syncing flag; true if anyone is due.
    pub(super) fn should_resync(&self, now: Instant) -> bool {
        let mut st = self.state.lock();
        let mut any = false;
        for e in &mut st.entries {
            any |= e.resync.check(now);
        }
        any
    }

    /// Earliest due time of any listener, if any listener resyncs at all.
    pub(super) fn next_resync(&self) -> Option<Instant> {
        let next = self
            .state
            .lock()
            .entries
            .iter()
            .filter_map(|e| e.resync.next)
            .min();
        #[cfg(test)]
        if let Some(hook) = self.after_plan_read.lock().take() {
            hook();
        }
        next
    }

    /// Smallest effective period (the equivalent of client-go's resync check period).
    pub(super) fn check_period(&self) -> Option<Duration> {
        self.state
            .lock()
            .entries
            .iter()
            .filter_map(|e| e.resync.period)
            .min()
    }

    /// Effective period of each listener, in registration order.
    pub(super) fn periods(&self) -> Vec<(u64, Option<Duration>)> {
        self.state
            .lock()
            .entries
            .iter()
            .map(|e| (e.listener.id, e.resync.period))
            .collect()
    }

    /// Stops every listener (informer shutdown).
    pub(super) fn stop_all(&self) -> Vec<Arc<Listener>> {
        let mut st = self.state.lock();
        let all: Vec<_> = st.entries.drain(..).map(|e| e.listener).collect();
        for l in &all {
            l.stop();
        }
        all
    }
}
