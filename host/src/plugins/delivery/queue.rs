//! One plugin version's queue: notifications per object in order, retries with per-object
//! backoff, and a bound on what a plugin that does not keep up can make the host hold.
//!
//! Below the cap every notification is delivered in order, exactly as the informer produced it.
//! At the cap a new notification for an object that already waits is folded into that object's
//! waiting ones ([`coalesce`]), so a hung, quarantined or slow plugin costs at most
//! `max(cap, one notification per object)`: memory stays O(objects), not O(events).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::informer::Notification;
use crate::workqueue::RateLimitingQueue;

/// Default `max-queued`: notifications one plugin may have waiting before they coalesce per
/// object. Large enough that a burst (a relist of a big namespace) is delivered verbatim.
pub const DEFAULT_MAX_QUEUED: usize = 10_000;

/// Queue items are per subscription and object, so notifications for one object stay ordered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct QueueKey {
    /// Index of the subscription in the plugin's (merged) subscriptions.
    pub subscription: u32,
    /// `namespace/name` of the object.
    pub key: Arc<str>,
}

/// A notification plus how often delivery already failed with `retry`.
pub(crate) struct Item {
    /// What to deliver.
    pub notification: Notification,
    /// `retry` results so far.
    pub attempts: u32,
}

/// What the worker did with an item it took.
pub(crate) enum Finish {
    /// Delivered (ok, fatal, or a failed call): forget its backoff.
    Done(Item),
    /// The handler asked for a retry: deliver again after backoff, unless something newer for
    /// the object is waiting (then the stale item is dropped).
    Retry(Item),
    /// The call never ended (its worker panicked); the item is gone, only its key is known.
    Abandoned {
        /// Whether it was an initial add.
        initial: bool,
    },
}

/// Metric handles the queue updates.
pub(crate) struct QueueMetrics {
    /// Notifications waiting.
    pub depth: Gauge,
    /// Notifications folded into another one at the cap.
    pub coalesced: Counter,
}

/// The bounded, per-object ordered queue of one plugin version.
pub(crate) struct PluginQueue {
    plugin: Arc<str>,
    cap: usize,
    queue: RateLimitingQueue<QueueKey>,
    pending: Mutex<Pending>,
    /// Initial-list notifications not yet handled: the plugin is not ready while non-zero.
    initial_outstanding: AtomicUsize,
    /// Set while over the cap, so the coalescing episode is logged once.
    coalescing: AtomicBool,
    metrics: QueueMetrics,
}

#[derive(Default)]
struct Pending {
    by_key: HashMap<QueueKey, VecDeque<Item>>,
    total: usize,
    /// Keys with more than one item waiting: what can still be coalesced when a new object
    /// arrives over the cap.
    multi: HashSet<QueueKey>,
}

/// What folding one object's waiting items into one removed.
#[derive(Default)]
struct Folded {
    removed: usize,
    removed_initial: usize,
    added_initial: usize,
}

impl Pending {
    /// Folds `qk`'s waiting items (plus `extra`, the newest) into one transition.
    fn fold(&mut self, qk: &QueueKey, extra: Option<Notification>) -> Folded {
        let list = self.by_key.entry(qk.clone()).or_default();
        let merged: Vec<Notification> = list
            .drain(..)
            .map(|i| i.notification)
            .chain(extra)
            .collect();
        let mut f = Folded::default();
        if merged.is_empty() {
            return f;
        }
        let old_count = merged.len();
        f.removed_initial = merged.iter().filter(|n| n.is_initial()).count();
        if let Some(one) = coalesce(merged) {
            f.added_initial = usize::from(one.is_initial());
            list.push_back(Item {
                notification: one,
                attempts: 0,
            });
        }
        let kept = list.len();
        f.removed = old_count - kept;
        self.multi.remove(qk);
        if kept == 0 {
            self.by_key.remove(qk);
        }
        f
    }
}

impl PluginQueue {
    /// An empty queue holding at most `cap` notifications before coalescing (at least 1).
    pub(crate) fn new(plugin: Arc<str>, cap: usize, metrics: QueueMetrics) -> Self {
        PluginQueue {
            plugin,
            cap: cap.max(1),
            queue: RateLimitingQueue::with_default_limiter(),
            pending: Mutex::new(Pending::default()),
            initial_outstanding: AtomicUsize::new(0),
            coalescing: AtomicBool::new(false),
            metrics,
        }
    }

    /// Notifications waiting.
    pub(crate) fn depth(&self) -> usize {
        self.pending.lock().total
    }

    /// Whether no notification is ready to be handed out now (those waiting for a retry
    /// backoff are not ready).
    pub(crate) fn ready_is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// True once every initial-list notification queued so far has been handled.
    pub(crate) fn initial_list_consumed(&self) -> bool {
        self.initial_outstanding.load(Ordering::Acquire) == 0
    }

    /// Queues `n` for `subscription`; never blocks.
    pub(crate) fn push(&self, subscription: u32, n: Notification) {
        let qk = QueueKey {
            subscription,
            key: n.object().key().into(),
        };
        let mut pending = self.pending.lock();
        let n_initial = usize::from(n.is_initial());
        let (mut removed_initial, mut added_initial) = (0usize, n_initial);
        let list = pending.by_key.entry(qk.clone()).or_default();
        // A notification waiting for a retry is superseded by anything newer for the object:
        // redelivering a stale state after a fresh one would go back in time.
        if list.front().is_some_and(|p| p.attempts > 0) {
            let stale = list.pop_front().expect("front exists");
            removed_initial += usize::from(stale.notification.is_initial());
            pending.total -= 1;
            self.queue.forget(&qk);
        }
        let over_cap = pending.total >= self.cap;
        let waiting = pending.by_key.get(&qk).map_or(0, VecDeque::len);
        if over_cap && waiting > 0 {
            let f = pending.fold(&qk, Some(n));
            // `n` was never counted as outstanding, so it is not settled either.
            removed_initial += f.removed_initial - n_initial;
            added_initial = f.added_initial;
            pending.total = pending.total + 1 - f.removed;
            self.metrics.coalesced.inc_by(f.removed as u64);
            self.start_coalescing();
        } else {
            let list = pending.by_key.entry(qk.clone()).or_default();
            list.push_back(Item {
                notification: n,
                attempts: 0,
            });
            if list.len() > 1 {
                pending.multi.insert(qk.clone());
            }
            pending.total += 1;
            if over_cap {
                // A new object over the cap: make room by folding another object's backlog,
                // so the queue holds at most max(cap, one notification per object).
                if let Some(other) = pending.multi.iter().next().cloned() {
                    let f = pending.fold(&other, None);
                    removed_initial += f.removed_initial;
                    added_initial += f.added_initial;
                    pending.total -= f.removed;
                    self.metrics.coalesced.inc_by(f.removed as u64);
                    if !pending.by_key.contains_key(&other) {
                        self.queue.forget(&other);
                    }
                }
                self.start_coalescing();
            }
        }
        let queued = pending.by_key.contains_key(&qk);
        self.metrics.depth.set(pending.total as i64);
        drop(pending);
        if added_initial > 0 {
            self.initial_outstanding
                .fetch_add(added_initial, Ordering::AcqRel);
        }
        self.settle(removed_initial);
        if queued {
            self.queue.add(qk);
        }
    }

    fn start_coalescing(&self) {
        if !self.coalescing.swap(true, Ordering::AcqRel) {
            tracing::warn!(plugin = %self.plugin, cap = self.cap,
                "plugin is not keeping up: its queue reached max-queued; notifications per object now coalesce into one transition");
        }
    }

    /// Readiness bookkeeping for `initial` initial adds that were delivered or left the queue.
    fn settle(&self, initial: usize) {
        if initial > 0 {
            self.initial_outstanding
                .fetch_sub(initial, Ordering::AcqRel);
        }
    }

    /// The next item to deliver; `None` once shut down. An item is handed out at most once
    /// until [`PluginQueue::finish`] is called for its key.
    pub(crate) async fn next(&self) -> Option<(QueueKey, Item)> {
        loop {
            let qk = match self.queue.try_get() {
                Some(qk) => qk,
                None => self.queue.get().await?,
            };
            if let Some(item) = self.take(&qk) {
                return Some((qk, item));
            }
            self.queue.done(&qk);
        }
    }

    fn take(&self, qk: &QueueKey) -> Option<Item> {
        let mut pending = self.pending.lock();
        let list = pending.by_key.get_mut(qk)?;
        let item = list.pop_front()?;
        if list.len() <= 1 {
            pending.multi.remove(qk);
        }
        pending.total -= 1;
        self.metrics.depth.set(pending.total as i64);
        if pending.total * 2 < self.cap && self.coalescing.swap(false, Ordering::AcqRel) {
            tracing::info!(plugin = %self.plugin, "plugin caught up; notifications are delivered one by one again");
        }
        Some(item)
    }

    /// Returns the key of an item taken with [`PluginQueue::next`].
    pub(crate) fn finish(&self, qk: &QueueKey, finish: Finish) {
        let mut requeued = false;
        match finish {
            Finish::Done(item) => {
                self.queue.forget(qk);
                self.settle(usize::from(item.notification.is_initial()));
            }
            Finish::Abandoned { initial } => {
                self.queue.forget(qk);
                self.settle(usize::from(initial));
            }
            Finish::Retry(mut item) => {
                let mut pending = self.pending.lock();
                let list = pending.by_key.entry(qk.clone()).or_default();
                if list.is_empty() && !self.queue.shutting_down() {
                    item.attempts += 1;
                    list.push_front(item);
                    pending.total += 1;
                    requeued = true;
                    self.metrics.depth.set(pending.total as i64);
                    drop(pending);
                } else {
                    drop(pending);
                    self.queue.forget(qk);
                    self.settle(usize::from(item.notification.is_initial()));
                }
            }
        }
        if requeued {
            self.queue.add_rate_limited(qk.clone());
        } else {
            let mut pending = self.pending.lock();
            match pending.by_key.get(qk) {
                Some(l) if !l.is_empty() => {
                    drop(pending);
                    self.queue.add(qk.clone());
                }
                Some(_) => {
                    pending.by_key.remove(qk);
                }
                None => {}
            }
        }
        self.queue.done(qk);
    }

    /// Stops handing out items and drops everything waiting (a successor version gets a replay
    /// of the cache instead).
    pub(crate) fn shut_down(&self) {
        self.queue.shut_down();
        let mut pending = self.pending.lock();
        let initial = pending
            .by_key
            .drain()
            .flat_map(|(_, list)| list)
            .filter(|i| i.notification.is_initial())
            .count();
        pending.total = 0;
        pending.multi.clear();
        self.metrics.depth.set(0);
        drop(pending);
        self.settle(initial);
    }
}

/// Folds the notifications an object has waiting (oldest first) into the one transition a
/// plugin that saw none of them needs: from the state it last saw (the first one's "before") to
/// the newest state. An add whose object was deleted before the plugin saw either disappears.
pub fn coalesce(notifications: Vec<Notification>) -> Option<Notification> {
    let all_sync = notifications
        .iter()
        .all(|n| matches!(n, Notification::Update { is_sync: true, .. }));
    let mut iter = notifications.into_iter();
    let first = iter.next()?;
    let Some(last) = iter.last() else {
        return Some(first);
    };
    // What the plugin last saw: nothing (the first is an add) or a state.
    let before = match &first {
        Notification::Add { .. } => None,
        Notification::Update { old, .. } => Some(old.clone()),
        Notification::Delete { obj, .. } => Some(obj.clone()),
    };
    let initial = first.is_initial();
    match (before, last) {
        (None, Notification::Delete { .. }) => None,
        (None, Notification::Add { obj, .. } | Notification::Update { new: obj, .. }) => {
            Some(Notification::Add { obj, initial })
        }
        (Some(old), Notification::Add { obj: new, .. } | Notification::Update { new, .. }) => {
            Some(Notification::Update {
                old,
                new,
                is_sync: all_sync,
            })
        }
        (Some(_), delete @ Notification::Delete { .. }) => Some(delete),
    }
}
