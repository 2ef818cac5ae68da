//! One plugin version's queue: notifications per object in order, one ordered stream across
//! objects, retries with per-object backoff, and a bound on what a plugin that does not keep up
//! can make the host hold.
//!
//! Workqueue semantics (client-go's *marking*): an object handed out is *processing* until its
//! call ends; its later notifications wait behind it and it is handed out again only then, so
//! no two calls for one object ever overlap, however many calls the plugin runs at once.
//! Objects are handed out by the arrival of their oldest waiting notification, so with one
//! call at a time the plugin sees exactly the informer's order across objects (as a client-go
//! handler does), and with N no busy object starves another.
//!
//! Below the cap every notification is delivered in order, exactly as the informer produced it.
//! At the cap a new notification for an object that already waits is folded into that object's
//! waiting ones ([`coalesce`]), so a hung, quarantined or slow plugin costs at most
//! `max(cap, one notification per object)`: memory stays O(objects), not O(events).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

use crate::informer::Notification;
use crate::workqueue::{MaxOfRateLimiter, RateLimiter, default_controller_rate_limiter};

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
    /// Arrival number of the (oldest) notification this item stands for: the stream order.
    seq: u64,
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

/// Where one object stands in the queue (client-go's dirty/processing marking); changed only
/// by [`Pending::reindex`] and the hand-out and finish paths below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Not indexed yet: [`Pending::reindex`] makes it `Ready` or forgets the object.
    Idle,
    /// Waiting to be handed out, indexed in `ready` under its oldest notification's arrival.
    Ready(u64),
    /// Handed out; its call has not ended, so it is not handed out again.
    Processing,
    /// A retry waiting for its backoff, indexed in `delayed`.
    Delayed(Instant, u64),
}

/// One object's waiting notifications and its mark.
struct Waiting {
    items: VecDeque<Item>,
    mark: Mark,
}

#[derive(Default)]
struct Pending {
    by_key: HashMap<QueueKey, Waiting>,
    total: usize,
    /// Keys with more than one item waiting: what can still be coalesced when a new object
    /// arrives over the cap.
    multi: HashSet<QueueKey>,
    /// Objects ready to hand out, by the arrival of their oldest waiting notification.
    ready: BTreeMap<u64, QueueKey>,
    /// Objects whose retry waits for its backoff, by when it ends.
    delayed: BTreeMap<(Instant, u64), QueueKey>,
    /// Arrival counter (also makes `delayed` keys unique).
    next_seq: u64,
    shut: bool,
}

/// What folding one object's waiting items into one removed.
#[derive(Default)]
struct Folded {
    removed: usize,
    removed_initial: usize,
    added_initial: usize,
}

impl Pending {
    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Folds `qk`'s waiting items (plus `extra`, the newest) into one transition, which keeps
    /// the place of the oldest in the stream.
    fn fold(&mut self, qk: &QueueKey, extra: Option<Item>) -> Folded {
        let mut f = Folded::default();
        let Some(w) = self.by_key.get_mut(qk) else {
            return f;
        };
        let items: Vec<Item> = w.items.drain(..).chain(extra).collect();
        let Some(seq) = items.first().map(|i| i.seq) else {
            return f;
        };
        let old_count = items.len();
        f.removed_initial = items.iter().filter(|i| i.notification.is_initial()).count();
        let merged: Vec<Notification> = items.into_iter().map(|i| i.notification).collect();
        if let Some(one) = coalesce(merged) {
            f.added_initial = usize::from(one.is_initial());
            w.items.push_back(Item {
                notification: one,
                attempts: 0,
                seq,
            });
        }
        f.removed = old_count - w.items.len();
        self.multi.remove(qk);
        self.reindex(qk);
        f
    }

    /// Puts an object that is neither processing nor delayed where its oldest waiting
    /// notification belongs in the stream, or forgets it when nothing waits.
    fn reindex(&mut self, qk: &QueueKey) {
        let Some(w) = self.by_key.get_mut(qk) else {
            return;
        };
        if let Mark::Ready(seq) = w.mark {
            self.ready.remove(&seq);
            w.mark = Mark::Idle;
        }
        if w.mark != Mark::Idle {
            return;
        }
        match w.items.front() {
            Some(first) => {
                w.mark = Mark::Ready(first.seq);
                self.ready.insert(first.seq, qk.clone());
            }
            None => {
                self.by_key.remove(qk);
                self.multi.remove(qk);
            }
        }
    }

    /// Makes retries whose backoff has ended ready.
    fn promote_due(&mut self, now: Instant) {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let qk = entry.remove();
            if let Some(w) = self.by_key.get_mut(&qk) {
                w.mark = Mark::Idle;
            }
            self.reindex(&qk);
        }
    }

    /// Drops a stale retry at the front of `qk` (anything newer supersedes it: redelivering
    /// a stale state after a fresh one would go back in time). Returns whether it was initial.
    fn drop_stale_retry(&mut self, qk: &QueueKey) -> Option<bool> {
        let w = self.by_key.get_mut(qk)?;
        if w.mark == Mark::Processing || w.items.front().is_none_or(|i| i.attempts == 0) {
            return None;
        }
        let stale = w.items.pop_front()?;
        if let Mark::Delayed(at, n) = w.mark {
            self.delayed.remove(&(at, n));
            w.mark = Mark::Idle;
        }
        self.total -= 1;
        Some(stale.notification.is_initial())
    }
}

/// The bounded, per-object ordered queue of one plugin version.
pub(crate) struct PluginQueue {
    plugin: Arc<str>,
    cap: usize,
    pending: Mutex<Pending>,
    /// Per-object retry backoff (client-go's default controller rate limiter).
    limiter: MaxOfRateLimiter<QueueKey>,
    /// Wakes the one consumer when something may have become ready.
    notify: tokio::sync::Notify,
    /// Initial-list notifications not yet handled: the plugin is not ready while non-zero.
    initial_outstanding: AtomicUsize,
    /// Set while over the cap, so the coalescing episode is logged once.
    coalescing: AtomicBool,
    metrics: QueueMetrics,
}

impl PluginQueue {
    /// An empty queue holding at most `cap` notifications before coalescing (at least 1).
    pub(crate) fn new(plugin: Arc<str>, cap: usize, metrics: QueueMetrics) -> Self {
        PluginQueue {
            plugin,
            cap: cap.max(1),
            pending: Mutex::new(Pending::default()),
            limiter: default_controller_rate_limiter(),
            notify: tokio::sync::Notify::new(),
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
    /// backoff or behind their object's call in flight are not ready).
    pub(crate) fn ready_is_empty(&self) -> bool {
        self.pending.lock().ready.is_empty()
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
        if pending.shut {
            return;
        }
        let n_initial = usize::from(n.is_initial());
        let (mut removed_initial, mut added_initial) = (0usize, n_initial);
        if let Some(initial) = pending.drop_stale_retry(&qk) {
            removed_initial += usize::from(initial);
            self.limiter.forget(&qk);
        }
        let seq = pending.seq();
        let item = Item {
            notification: n,
            attempts: 0,
            seq,
        };
        let over_cap = pending.total >= self.cap;
        let waiting = pending.by_key.get(&qk).map_or(0, |w| w.items.len());
        if over_cap && waiting > 0 {
            let f = pending.fold(&qk, Some(item));
            // `n` was never counted as outstanding, so it is not settled either.
            removed_initial += f.removed_initial - n_initial;
            added_initial = f.added_initial;
            pending.total = pending.total + 1 - f.removed;
            self.metrics.coalesced.inc_by(f.removed as u64);
            self.start_coalescing();
        } else {
            let w = pending.by_key.entry(qk.clone()).or_insert(Waiting {
                items: VecDeque::new(),
                mark: Mark::Idle,
            });
            w.items.push_back(item);
            let multi = w.items.len() > 1;
            if multi {
                pending.multi.insert(qk.clone());
            }
            pending.total += 1;
            pending.reindex(&qk);
            if over_cap {
                // A new object over the cap: make room by folding another object's backlog,
                // so the queue holds at most max(cap, one notification per object).
                if let Some(other) = pending.multi.iter().next().cloned() {
                    let f = pending.fold(&other, None);
                    removed_initial += f.removed_initial;
                    added_initial += f.added_initial;
                    pending.total -= f.removed;
                    self.metrics.coalesced.inc_by(f.removed as u64);
                }
                self.start_coalescing();
            }
        }
        self.metrics.depth.set(pending.total as i64);
        drop(pending);
        if added_initial > 0 {
            self.initial_outstanding
                .fetch_add(added_initial, Ordering::AcqRel);
        }
        self.settle(removed_initial);
        self.notify.notify_one();
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

    /// The next item to deliver, in stream order; `None` once shut down. An object is handed
    /// out at most once until [`PluginQueue::finish`] is called for its key. One consumer.
    pub(crate) async fn next(&self) -> Option<(QueueKey, Item)> {
        loop {
            let notified = self.notify.notified();
            let wake_at = {
                let mut pending = self.pending.lock();
                if pending.shut {
                    return None;
                }
                pending.promote_due(Instant::now());
                if let Some(taken) = self.take(&mut pending) {
                    return Some(taken);
                }
                pending.delayed.first_key_value().map(|((at, _), _)| *at)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Hands out the oldest ready object's next item and marks the object processing.
    fn take(&self, pending: &mut Pending) -> Option<(QueueKey, Item)> {
        let (_, qk) = pending.ready.pop_first()?;
        let w = pending.by_key.get_mut(&qk)?;
        w.mark = Mark::Processing;
        let item = w.items.pop_front()?;
        if w.items.len() <= 1 {
            pending.multi.remove(&qk);
        }
        pending.total -= 1;
        self.metrics.depth.set(pending.total as i64);
        if pending.total * 2 < self.cap && self.coalescing.swap(false, Ordering::AcqRel) {
            tracing::info!(plugin = %self.plugin, "plugin caught up; notifications are delivered one by one again");
        }
        Some((qk, item))
    }

    /// Ends the processing of an object handed out by [`PluginQueue::next`]: its waiting
    /// notifications (or a retry, after its backoff) take their place in the stream again.
    pub(crate) fn finish(&self, qk: &QueueKey, finish: Finish) {
        let mut pending = self.pending.lock();
        let settled = match finish {
            Finish::Done(item) => {
                self.limiter.forget(qk);
                usize::from(item.notification.is_initial())
            }
            Finish::Abandoned { initial } => {
                self.limiter.forget(qk);
                usize::from(initial)
            }
            Finish::Retry(mut item) => {
                let shut = pending.shut;
                match pending.by_key.get_mut(qk) {
                    Some(w) if w.items.is_empty() && !shut => {
                        item.attempts += 1;
                        w.items.push_front(item);
                        let at = Instant::now() + self.limiter.when(qk);
                        let n = pending.seq();
                        pending.delayed.insert((at, n), qk.clone());
                        if let Some(w) = pending.by_key.get_mut(qk) {
                            w.mark = Mark::Delayed(at, n);
                        }
                        pending.total += 1;
                        self.metrics.depth.set(pending.total as i64);
                        drop(pending);
                        self.notify.notify_one();
                        return;
                    }
                    _ => {
                        self.limiter.forget(qk);
                        usize::from(item.notification.is_initial())
                    }
                }
            }
        };
        if let Some(w) = pending.by_key.get_mut(qk) {
            w.mark = Mark::Idle;
        }
        pending.reindex(qk);
        drop(pending);
        self.settle(settled);
        self.notify.notify_one();
    }

    /// Stops handing out items and drops everything waiting (a successor version gets a replay
    /// of the cache instead).
    pub(crate) fn shut_down(&self) {
        let mut pending = self.pending.lock();
        pending.shut = true;
        let initial = pending
            .by_key
            .drain()
            .flat_map(|(_, w)| w.items)
            .filter(|i| i.notification.is_initial())
            .count();
        pending.total = 0;
        pending.multi.clear();
        pending.ready.clear();
        pending.delayed.clear();
        self.metrics.depth.set(0);
        drop(pending);
        self.settle(initial);
        self.notify.notify_one();
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
