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

/// The subscription number of a controller's primary kind, under which its reconcile keys
/// queue (its primary is always its first subscription).
pub(crate) const PRIMARY: u32 = 0;

/// Queue items are per subscription and object, so notifications for one object stay ordered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct QueueKey {
    /// Index of the subscription in the plugin's (merged) subscriptions.
    pub subscription: u32,
    /// `namespace/name` of the object.
    pub key: Arc<str>,
}

/// What one queued item asks of the guest.
pub(crate) enum Work {
    /// A handler's notification about the item's object.
    Notify(Notification),
    /// A controller's reconcile of the item's key, a key of its primary kind; `initial` while
    /// it stands for an initial-list notification (the first pass is not over before it ends).
    Reconcile {
        /// Whether an initial-list notification named the key.
        initial: bool,
    },
    /// A controller's `keys-for` of a watched object's notification (the `guest` mapping).
    MapKeys(Notification),
}

impl Work {
    /// Whether it counts towards the replay (`on-synced` and readiness wait for it).
    pub(crate) fn is_initial(&self) -> bool {
        match self {
            Work::Notify(n) | Work::MapKeys(n) => n.is_initial(),
            Work::Reconcile { initial } => *initial,
        }
    }

    /// The notification it carries, if any (a reconcile carries only its key).
    pub(crate) fn notification(&self) -> Option<&Notification> {
        match self {
            Work::Notify(n) | Work::MapKeys(n) => Some(n),
            Work::Reconcile { .. } => None,
        }
    }
}

/// Queued work plus how often it already failed with `retry`.
pub(crate) struct Item {
    /// What to do.
    pub work: Work,
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
    /// A reconcile succeeded and asks for its key again after the delay, unless an event named
    /// the key meanwhile (then that reconcile runs now and decides again).
    RequeueAfter(Item, std::time::Duration),
    /// The call never ended (its worker panicked); the item is gone, only its key is known.
    Abandoned {
        /// Whether it was an initial add.
        initial: bool,
    },
}

/// Metric handles the queue updates.
pub(crate) struct QueueMetrics {
    /// Notifications waiting, in all of the plugin's versions (a hot swap drains one while the
    /// next fills): each queue adds and removes its own.
    pub depth: Gauge,
    /// Notifications folded into another one at the cap.
    pub coalesced: Counter,
}

/// Where one object the queue knows stands (client-go's dirty/processing marking); changed
/// only by [`Mark::step`], whose result [`Pending::apply`] mirrors into the indexes. An object
/// with no mark is not in the queue at all: nothing of it waits and no call for it is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Waiting to be handed out, indexed in `ready` under its oldest notification's arrival.
    Ready(u64),
    /// Handed out; its call has not ended, so it is not handed out again (its newer
    /// notifications wait behind it).
    Processing,
    /// A retry waiting for its backoff until the instant (`delayed` is indexed by both).
    Delayed(Instant, u64),
}

/// What happened to one object: the input of [`Mark::step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MarkEvent {
    /// Its waiting notifications changed (one was queued, or its backlog was folded).
    Queued,
    /// It was handed out to a call.
    HandedOut,
    /// Its call ended (done, failed or abandoned), its retry's backoff ended, or a newer
    /// notification superseded its waiting retry: it takes its place in the stream again.
    Released,
    /// Its call asked for a retry, due at the instant (the number makes the index key unique).
    RetryAt(Instant, u64),
}

impl Mark {
    /// The mark after `event`, given the arrival number of the object's oldest waiting
    /// notification (`None`: nothing waits); `None` when the queue is to forget the object.
    /// Pure: no clock, no I/O.
    fn step(this: Option<Mark>, event: MarkEvent, oldest: Option<u64>) -> Option<Mark> {
        match (this, event) {
            // A busy object's new notifications wait behind its call or its retry.
            (Some(m @ (Mark::Processing | Mark::Delayed(..))), MarkEvent::Queued) => Some(m),
            // Otherwise it is ready under its oldest notification (or gone without one).
            (Some(Mark::Ready(_)) | None, MarkEvent::Queued) | (_, MarkEvent::Released) => {
                oldest.map(Mark::Ready)
            }
            (_, MarkEvent::HandedOut) => Some(Mark::Processing),
            (_, MarkEvent::RetryAt(at, n)) => Some(Mark::Delayed(at, n)),
        }
    }
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
    /// This queue's share of the depth gauge, which the versions of a plugin share during a
    /// hot swap: each adds its own changes rather than setting its own total.
    reported: usize,
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
        f.removed_initial = items.iter().filter(|i| i.work.is_initial()).count();
        // One key's items are all of one sort: its subscription's (a reconcile key never has
        // more than one waiting, so it is never folded).
        let map_keys = matches!(items[0].work, Work::MapKeys(_));
        let merged: Vec<Notification> = items
            .into_iter()
            .filter_map(|i| match i.work {
                Work::Notify(n) | Work::MapKeys(n) => Some(n),
                Work::Reconcile { .. } => None,
            })
            .collect();
        if let Some(one) = coalesce(merged) {
            f.added_initial = usize::from(one.is_initial());
            let work = if map_keys {
                Work::MapKeys(one)
            } else {
                Work::Notify(one)
            };
            w.items.push_back(Item {
                work,
                attempts: 0,
                seq,
            });
        }
        f.removed = old_count - w.items.len();
        self.multi.remove(qk);
        self.apply(qk, MarkEvent::Queued);
        f
    }

    /// Steps `qk`'s mark with `event` and mirrors the result into the indexes: `ready` and
    /// `delayed` hold exactly the objects marked so, and an object without a mark is forgotten.
    fn apply(&mut self, qk: &QueueKey, event: MarkEvent) {
        let Some(w) = self.by_key.get_mut(qk) else {
            return;
        };
        let old = w.mark;
        let new = Mark::step(Some(old), event, w.items.front().map(|i| i.seq));
        if new == Some(old) {
            return;
        }
        match old {
            Mark::Ready(seq) => {
                self.ready.remove(&seq);
            }
            Mark::Delayed(at, n) => {
                self.delayed.remove(&(at, n));
            }
            Mark::Processing => {}
        }
        let Some(new) = new else {
            self.by_key.remove(qk);
            self.multi.remove(qk);
            return;
        };
        w.mark = new;
        match new {
            Mark::Ready(seq) => {
                self.ready.insert(seq, qk.clone());
            }
            Mark::Delayed(at, n) => {
                self.delayed.insert((at, n), qk.clone());
            }
            Mark::Processing => {}
        }
    }

    /// Starts tracking `qk` with `item` as its only waiting notification.
    fn insert(&mut self, qk: &QueueKey, item: Item) {
        let Some(mark) = Mark::step(None, MarkEvent::Queued, Some(item.seq)) else {
            return;
        };
        if let Mark::Ready(seq) = mark {
            self.ready.insert(seq, qk.clone());
        }
        self.by_key.insert(
            qk.clone(),
            Waiting {
                items: VecDeque::from([item]),
                mark,
            },
        );
    }

    /// Makes retries whose backoff has ended ready.
    fn promote_due(&mut self, now: Instant) {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let qk = entry.remove();
            self.apply(&qk, MarkEvent::Released);
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
        self.total -= 1;
        self.apply(qk, MarkEvent::Released);
        Some(stale.work.is_initial())
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
        self.push_work(subscription, Work::Notify(n));
    }

    /// Queues a `keys-for` of `n` for a controller's `subscription`; never blocks.
    pub(crate) fn push_map_keys(&self, subscription: u32, n: Notification) {
        self.push_work(subscription, Work::MapKeys(n));
    }

    /// Queues a reconcile of the primary `key` (client-go's `Add`): a key waits at most once,
    /// however many events name it; one whose reconcile is in flight waits behind it; one
    /// waiting for a retry's backoff or a requeue's delay is ready now (keeping its failures
    /// so far, as client-go keeps them until `Forget`). Never blocks; memory is one item per
    /// primary key, whatever the rate of events.
    pub(crate) fn push_reconcile(&self, key: Arc<str>, initial: bool) {
        let qk = QueueKey {
            subscription: PRIMARY,
            key,
        };
        let mut pending = self.pending.lock();
        if pending.shut {
            return;
        }
        let mut added_initial = 0;
        let waiting = pending.by_key.get(&qk).map(|w| (w.items.len(), w.mark));
        match waiting {
            Some((n, mark)) if n > 0 => {
                if let Some(w) = pending.by_key.get_mut(&qk)
                    && let Some(item) = w.items.front_mut()
                    && initial
                    && !item.work.is_initial()
                {
                    item.work = Work::Reconcile { initial: true };
                    added_initial = 1;
                }
                if matches!(mark, Mark::Delayed(..)) {
                    pending.apply(&qk, MarkEvent::Released);
                }
            }
            waiting => {
                let seq = pending.seq();
                let item = Item {
                    work: Work::Reconcile { initial },
                    attempts: 0,
                    seq,
                };
                added_initial = usize::from(initial);
                if waiting.is_some() {
                    if let Some(w) = pending.by_key.get_mut(&qk) {
                        w.items.push_back(item);
                    }
                    pending.apply(&qk, MarkEvent::Queued);
                } else {
                    pending.insert(&qk, item);
                }
                pending.total += 1;
            }
        }
        self.report_depth(&mut pending);
        drop(pending);
        if added_initial > 0 {
            self.initial_outstanding
                .fetch_add(added_initial, Ordering::AcqRel);
        }
        self.notify.notify_one();
    }

    fn push_work(&self, subscription: u32, work: Work) {
        let Some(n) = work.notification() else { return };
        let qk = QueueKey {
            subscription,
            key: n.object().key().into(),
        };
        let mut pending = self.pending.lock();
        if pending.shut {
            return;
        }
        let n_initial = usize::from(work.is_initial());
        let (mut removed_initial, mut added_initial) = (0usize, n_initial);
        if let Some(initial) = pending.drop_stale_retry(&qk) {
            removed_initial += usize::from(initial);
            self.limiter.forget(&qk);
        }
        let seq = pending.seq();
        let item = Item {
            work,
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
            match pending.by_key.get_mut(&qk) {
                Some(w) => {
                    w.items.push_back(item);
                    if w.items.len() > 1 {
                        pending.multi.insert(qk.clone());
                    }
                    pending.apply(&qk, MarkEvent::Queued);
                }
                None => pending.insert(&qk, item),
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
                }
                self.start_coalescing();
            }
        }
        self.report_depth(&mut pending);
        drop(pending);
        if added_initial > 0 {
            self.initial_outstanding
                .fetch_add(added_initial, Ordering::AcqRel);
        }
        self.settle(removed_initial);
        self.notify.notify_one();
    }

    /// Moves the depth gauge by how much this queue's total changed since it last did.
    fn report_depth(&self, pending: &mut Pending) {
        let (now, before) = (pending.total as i64, pending.reported as i64);
        if now > before {
            self.metrics.depth.inc_by(now - before);
        } else if now < before {
            self.metrics.depth.dec_by(before - now);
        }
        pending.reported = pending.total;
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
        pending.apply(&qk, MarkEvent::HandedOut);
        let w = pending.by_key.get_mut(&qk)?;
        let item = w.items.pop_front()?;
        if w.items.len() <= 1 {
            pending.multi.remove(&qk);
        }
        pending.total -= 1;
        self.report_depth(pending);
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
                usize::from(item.work.is_initial())
            }
            Finish::RequeueAfter(mut item, after) => {
                // A success: its failures are forgotten, and the first pass has seen the key.
                self.limiter.forget(qk);
                let settled = usize::from(item.work.is_initial());
                let shut = pending.shut;
                if let Some(w) = pending.by_key.get_mut(qk)
                    && w.items.is_empty()
                    && !shut
                {
                    item.attempts = 0;
                    item.work = Work::Reconcile { initial: false };
                    w.items.push_front(item);
                    let n = pending.seq();
                    pending.apply(qk, MarkEvent::RetryAt(Instant::now() + after, n));
                    pending.total += 1;
                    self.report_depth(&mut pending);
                    drop(pending);
                    self.settle(settled);
                    self.notify.notify_one();
                    return;
                }
                settled
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
                        pending.apply(qk, MarkEvent::RetryAt(at, n));
                        pending.total += 1;
                        self.report_depth(&mut pending);
                        drop(pending);
                        self.notify.notify_one();
                        return;
                    }
                    // A reconcile's key is named again meanwhile: that waiting reconcile runs
                    // now, carrying the failures on (client-go forgets them only on success).
                    Some(w) if !shut && matches!(item.work, Work::Reconcile { .. }) => {
                        let mut settled = usize::from(item.work.is_initial());
                        if let Some(next) = w.items.front_mut() {
                            next.attempts = item.attempts + 1;
                            // Its initial mark moves on to the waiting one: nothing settles.
                            if settled == 1 && !next.work.is_initial() {
                                next.work = Work::Reconcile { initial: true };
                                settled = 0;
                            }
                        }
                        settled
                    }
                    _ => {
                        self.limiter.forget(qk);
                        usize::from(item.work.is_initial())
                    }
                }
            }
        };
        pending.apply(qk, MarkEvent::Released);
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
            .filter(|i| i.work.is_initial())
            .count();
        pending.total = 0;
        pending.multi.clear();
        pending.ready.clear();
        pending.delayed.clear();
        self.report_depth(&mut pending);
        drop(pending);
        self.settle(initial);
        self.notify.notify_one();
    }
}

impl Drop for PluginQueue {
    /// A queue dropped without [`PluginQueue::shut_down`] takes its share off the gauge too.
    fn drop(&mut self) {
        let reported = std::mem::take(&mut self.pending.get_mut().reported);
        self.metrics.depth.dec_by(reported as i64);
    }
}

/// Folds the notifications an object has waiting (oldest first) into the one transition a
/// plugin that saw none of them needs: from the state it last saw (the first one's "before") to
/// the newest state. An add whose object was deleted before the plugin saw either disappears.
pub(crate) fn coalesce(notifications: Vec<Notification>) -> Option<Notification> {
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

#[cfg(test)]
mod tests {
    use super::{Mark, MarkEvent};
    use tokio::time::Instant;

    #[test]
    fn a_queued_object_is_ready_under_its_oldest_notification() {
        assert_eq!(
            Mark::step(None, MarkEvent::Queued, Some(3)),
            Some(Mark::Ready(3))
        );
        assert_eq!(
            Mark::step(Some(Mark::Ready(3)), MarkEvent::Queued, Some(3)),
            Some(Mark::Ready(3))
        );
        // Its backlog folded into a newer first one, or into nothing at all.
        assert_eq!(
            Mark::step(Some(Mark::Ready(3)), MarkEvent::Queued, Some(7)),
            Some(Mark::Ready(7))
        );
        assert_eq!(
            Mark::step(Some(Mark::Ready(3)), MarkEvent::Queued, None),
            None
        );
    }

    #[test]
    fn a_busy_object_keeps_its_mark_while_notifications_queue_behind_it() {
        let at = Instant::now();
        for busy in [Mark::Processing, Mark::Delayed(at, 9)] {
            for oldest in [None, Some(4)] {
                assert_eq!(
                    Mark::step(Some(busy), MarkEvent::Queued, oldest),
                    Some(busy)
                );
            }
        }
    }

    #[test]
    fn a_call_ending_puts_the_object_back_in_the_stream_or_forgets_it() {
        assert_eq!(
            Mark::step(Some(Mark::Ready(2)), MarkEvent::HandedOut, Some(5)),
            Some(Mark::Processing)
        );
        assert_eq!(
            Mark::step(Some(Mark::Processing), MarkEvent::Released, Some(5)),
            Some(Mark::Ready(5))
        );
        assert_eq!(
            Mark::step(Some(Mark::Processing), MarkEvent::Released, None),
            None
        );
    }

    #[test]
    fn a_retry_waits_for_its_backoff_then_takes_its_place_again() {
        let at = Instant::now();
        let delayed = Mark::step(Some(Mark::Processing), MarkEvent::RetryAt(at, 6), Some(2));
        assert_eq!(delayed, Some(Mark::Delayed(at, 6)));
        // Backoff over: ready under the retried notification's original arrival.
        assert_eq!(
            Mark::step(delayed, MarkEvent::Released, Some(2)),
            Some(Mark::Ready(2))
        );
        // Superseded by a newer notification: the stale retry is gone, nothing else waits yet.
        assert_eq!(Mark::step(delayed, MarkEvent::Released, None), None);
    }
}
