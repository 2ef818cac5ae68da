//! DeltaFIFO (classic path): per-key delta lists in a FIFO of keys, with client-go's dedup,
//! Replace-with-tombstones, resync-skips-pending-keys and initial-population accounting.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::indexer::Indexer;
use super::object::{KubeObject, SharedObject};

/// What happened to an object (client-go `DeltaType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// Observed creation (watch ADDED).
    Added,
    /// Observed change (watch MODIFIED).
    Updated,
    /// Observed or inferred deletion.
    Deleted,
    /// Listed again by a relist (`EmitDeltaTypeReplaced`).
    Replaced,
    /// Replayed from the cache by a resync.
    Sync,
    /// Listed by the relist after a sharded informer's held ranges changed: new to the cache it
    /// is an initial add (a gained slot's replay), unchanged it is not delivered at all.
    Rescoped,
    /// Left a sharded informer's held ranges: removed from the cache without a notification
    /// (it moved to another replica, it was not deleted).
    Evicted,
}

impl DeltaType {
    /// client-go's string form, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DeltaType::Added => "Added",
            DeltaType::Updated => "Updated",
            DeltaType::Deleted => "Deleted",
            DeltaType::Replaced => "Replaced",
            DeltaType::Sync => "Sync",
            DeltaType::Rescoped => "Rescoped",
            DeltaType::Evicted => "Evicted",
        }
    }
}

/// A deletion the informer inferred from a relist rather than observed: it carries the last
/// state we knew (client-go `DeletedFinalStateUnknown`), `None` if even that was gone.
#[derive(Clone, Debug)]
pub struct DeletedFinalStateUnknown {
    /// Cache key of the deleted object.
    pub key: String,
    /// Last known state, if any.
    pub obj: Option<SharedObject>,
}

/// Payload of a delta: the object version, or a tombstone.
#[derive(Clone, Debug)]
pub enum DeltaObject {
    /// A concrete object version.
    Object(SharedObject),
    /// An inferred deletion.
    Tombstone(DeletedFinalStateUnknown),
}

impl DeltaObject {
    /// The key the delta belongs to (tombstones carry their own, like `DeletionHandlingMetaNamespaceKeyFunc`).
    pub fn key(&self) -> &str {
        match self {
            DeltaObject::Object(o) => o.key(),
            DeltaObject::Tombstone(t) => &t.key,
        }
    }

    /// The key as a shared string: the object's own for versions (no copy), a new one for the
    /// rare tombstone.
    fn shared_key(&self) -> Arc<str> {
        match self {
            DeltaObject::Object(o) => o.shared_key().clone(),
            DeltaObject::Tombstone(t) => t.key.as_str().into(),
        }
    }

    /// The object version, unwrapping a tombstone to its last known state.
    pub fn object(&self) -> Option<&SharedObject> {
        match self {
            DeltaObject::Object(o) => Some(o),
            DeltaObject::Tombstone(t) => t.obj.as_ref(),
        }
    }

    /// True for an inferred deletion.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, DeltaObject::Tombstone(_))
    }
}

/// One queued change.
#[derive(Clone, Debug)]
pub struct Delta {
    /// What happened.
    pub kind: DeltaType,
    /// The object (or tombstone) it happened to.
    pub object: DeltaObject,
}

/// Capacity (in keys) above which a drained FIFO gives its tables back.
const SHRINK_ABOVE: usize = 1024;

/// The queue entry that follows a rescope relist's keys ([`DeltaFifo::mark_rescoped`]). No
/// object key contains a NUL.
const RESCOPE_MARK: &str = "\0rescoped";

/// What a pop hands the informer.
pub(crate) enum Popped {
    /// One key's deltas and whether they belong to the initial list.
    Deltas(Vec<Delta>, bool),
    /// Every key of the last rescope relist has been popped; `true` when one of the rescopes
    /// the mark covers widened the held ranges (a gained slot's replay is delivered).
    Rescoped(bool),
}

/// Keys are the objects' own shared strings, so queueing a version allocates no key.
#[derive(Default)]
struct State {
    items: HashMap<Arc<str>, Vec<Delta>>,
    queue: VecDeque<Arc<str>>,
    populated: bool,
    initial_population_count: usize,
    closed: bool,
    /// Whether a rescope the queued mark covers widened the held ranges.
    mark_grew: bool,
}

fn is_mark(key: &str) -> bool {
    key == RESCOPE_MARK
}

impl State {
    fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    fn queue_action(&mut self, kind: DeltaType, object: DeltaObject) {
        match self.items.get_mut(object.key()) {
            Some(deltas) => {
                deltas.push(Delta { kind, object });
                dedup(deltas);
            }
            None => {
                let key = object.shared_key();
                self.queue.push_back(key.clone());
                self.items.insert(key, vec![Delta { kind, object }]);
            }
        }
    }
}

/// Only the last two deltas are compared, and only deletion pairs merge: keep the older real
/// delete, but prefer a newer delete over an older tombstone (it holds more information).
fn dedup(deltas: &mut Vec<Delta>) {
    let n = deltas.len();
    if n < 2 {
        return;
    }
    let (a, b) = (&deltas[n - 2], &deltas[n - 1]);
    if a.kind == DeltaType::Deleted && b.kind == DeltaType::Deleted {
        if a.object.is_tombstone() {
            deltas.remove(n - 2);
        } else {
            deltas.pop();
        }
    }
}

/// The informer's work queue between the reflector and the process loop. One lock guards the
/// whole state and `pop` runs the processor under it, so resync, replace and `has_synced` are
/// atomic with respect to delta processing, exactly as in client-go.
pub struct DeltaFifo {
    state: Mutex<State>,
    notify: Notify,
    known: Option<Indexer>,
    emit_replaced: bool,
}

impl DeltaFifo {
    /// A FIFO that consults `known` (the informer's indexer) for deletes, relists and resyncs.
    /// `emit_replaced` selects `Replaced` (as the shared informer does) over `Sync` for relists.
    pub fn new(known: Option<Indexer>, emit_replaced: bool) -> Self {
        Self {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            known,
            emit_replaced,
        }
    }

    fn wake(&self) {
        self.notify.notify_waiters();
    }

    /// Queues an `Added` delta.
    pub fn add(&self, obj: SharedObject) {
        let mut s = self.state.lock();
        s.populated = true;
        s.queue_action(DeltaType::Added, DeltaObject::Object(obj));
        drop(s);
        self.wake();
    }

    /// Queues an `Updated` delta.
    pub fn update(&self, obj: SharedObject) {
        let mut s = self.state.lock();
        s.populated = true;
        s.queue_action(DeltaType::Updated, DeltaObject::Object(obj));
        drop(s);
        self.wake();
    }

    /// Queues a `Deleted` delta unless the key is unknown to both the queue and the cache.
    pub fn delete(&self, obj: DeltaObject) {
        let mut s = self.state.lock();
        s.populated = true;
        let key = obj.key();
        let queued = s.items.contains_key(key);
        let known = self.known.as_ref().is_some_and(|k| k.get(key).is_some());
        if !queued && !known {
            return;
        }
        s.queue_action(DeltaType::Deleted, obj);
        drop(s);
        self.wake();
    }

    /// Re-queues deltas for a key that is not queued any more (client-go `AddIfNotPresent`).
    pub fn add_if_not_present(&self, key: String, deltas: Vec<Delta>) {
        if deltas.is_empty() {
            return;
        }
        let mut s = self.state.lock();
        s.populated = true;
        if s.items.contains_key(key.as_str()) {
            return;
        }
        let key: Arc<str> = key.into();
        s.queue.push_back(key.clone());
        s.items.insert(key, deltas);
        drop(s);
        self.wake();
    }

    /// Replaces the world with a fresh list: every item gets `Replaced` (or `Sync`), every queued
    /// or cached key missing from the list gets a `Deleted` tombstone with its newest known state.
    pub fn replace(&self, list: Vec<SharedObject>) {
        let action = if self.emit_replaced {
            DeltaType::Replaced
        } else {
            DeltaType::Sync
        };
        self.replace_with(list, action, &|_| true);
    }

    /// [`replace`](Self::replace) for a sharded informer: missing keys whose last known state
    /// fails `in_scope` get `Evicted` instead of a tombstone, and with `rescope` the listed
    /// items get `Rescoped` instead of `Replaced`.
    pub fn replace_scoped(
        &self,
        list: Vec<SharedObject>,
        in_scope: &dyn Fn(&KubeObject) -> bool,
        rescope: bool,
    ) {
        let action = if rescope {
            DeltaType::Rescoped
        } else if self.emit_replaced {
            DeltaType::Replaced
        } else {
            DeltaType::Sync
        };
        self.replace_with(list, action, in_scope);
    }

    fn replace_with(
        &self,
        list: Vec<SharedObject>,
        action: DeltaType,
        in_scope: &dyn Fn(&KubeObject) -> bool,
    ) {
        let mut s = self.state.lock();
        // Which deletion a missing key gets: gone from the server, or gone from our scope.
        let gone = |obj: &Option<SharedObject>| match obj {
            Some(o) if !in_scope(o) => DeltaType::Evicted,
            _ => DeltaType::Deleted,
        };
        let keys: HashSet<Arc<str>> = list.iter().map(|o| o.shared_key().clone()).collect();
        for obj in list {
            s.queue_action(action, DeltaObject::Object(obj));
        }
        let mut queued_deletions = 0;
        let missing: Vec<(String, Option<SharedObject>)> = s
            .items
            .iter()
            .filter(|(k, _)| !keys.contains(&**k) && !is_mark(k))
            .map(|(k, d)| {
                let newest = d.last().and_then(|d| d.object.object().cloned());
                (k.to_string(), newest)
            })
            .collect();
        for (key, obj) in missing {
            queued_deletions += 1;
            s.queue_action(
                gone(&obj),
                DeltaObject::Tombstone(DeletedFinalStateUnknown { key, obj }),
            );
        }
        if let Some(known) = &self.known {
            for key in known.list_keys() {
                if keys.contains(key.as_str()) || s.items.contains_key(key.as_str()) {
                    continue;
                }
                let obj = known.get(&key);
                queued_deletions += 1;
                s.queue_action(
                    gone(&obj),
                    DeltaObject::Tombstone(DeletedFinalStateUnknown { key, obj }),
                );
            }
        }
        if !s.populated {
            s.populated = true;
            s.initial_population_count = keys.len() + queued_deletions;
        }
        drop(s);
        self.wake();
    }

    /// Queues the mark that tells the informer, once popped, that everything queued so far (a
    /// rescope relist) has been processed; `grew`: the rescope widened the held ranges. A mark
    /// still queued moves to the back: one mark covers the relists it follows.
    pub fn mark_rescoped(&self, grew: bool) {
        let mut s = self.state.lock();
        s.mark_grew |= grew;
        s.queue.retain(|k| !is_mark(k));
        s.queue.push_back(RESCOPE_MARK.into());
        drop(s);
        self.wake();
    }

    /// Queues `Sync` for every cached key that has no pending deltas (a pending delta is newer
    /// than the cache, so syncing the cached value would be stale: k/k#32125).
    pub fn resync(&self) {
        let Some(known) = &self.known else { return };
        let mut s = self.state.lock();
        let mut any = false;
        for key in known.list_keys() {
            if s.items.contains_key(key.as_str()) {
                continue;
            }
            if let Some(obj) = known.get(&key) {
                s.queue_action(DeltaType::Sync, DeltaObject::Object(obj));
                any = true;
            }
        }
        drop(s);
        if any {
            self.wake();
        }
    }

    /// True once the first `replace` (or any add/update/delete before it) has been fully popped.
    pub fn has_synced(&self) -> bool {
        self.state.lock().has_synced()
    }

    /// Pops the head key without waiting and runs `process(deltas, is_in_initial_list)` under
    /// the FIFO lock. `None` if the queue is empty or closed.
    pub fn try_pop<R>(&self, process: impl FnOnce(Vec<Delta>, bool) -> R) -> Option<R> {
        let mut s = self.state.lock();
        let (deltas, init) = Self::pop_deltas_locked(&mut s)?;
        Some(process(deltas, init))
    }

    /// Pops the next key's deltas, passing over rescope marks (callers that ignore them).
    fn pop_deltas_locked(s: &mut State) -> Option<(Vec<Delta>, bool)> {
        loop {
            match Self::pop_locked(s)? {
                Popped::Deltas(d, init) => return Some((d, init)),
                Popped::Rescoped(_) => continue,
            }
        }
    }

    fn pop_locked(s: &mut State) -> Option<Popped> {
        if s.closed {
            return None;
        }
        let key = s.queue.pop_front()?;
        if is_mark(&key) {
            return Some(Popped::Rescoped(std::mem::take(&mut s.mark_grew)));
        }
        // Computed before the decrement: the last initial item is still "initial".
        let is_in_initial_list = !s.has_synced();
        if s.initial_population_count > 0 {
            s.initial_population_count -= 1;
        }
        let deltas = s.items.remove(&key).unwrap_or_default();
        if s.queue.is_empty() && s.items.capacity() > SHRINK_ABOVE {
            // A drained initial list (or relist) would otherwise keep tables sized for every key
            // for the informer's lifetime; small steady-state queues never get here.
            s.items.shrink_to_fit();
            s.queue.shrink_to_fit();
        }
        Some(Popped::Deltas(deltas, is_in_initial_list))
    }

    /// Waits for a key and processes it like [`try_pop`](Self::try_pop); `None` once closed.
    pub async fn pop<R>(&self, process: impl FnOnce(Vec<Delta>, bool) -> R) -> Option<R> {
        self.pop_any(true, |p| match p {
            Popped::Deltas(d, init) => process(d, init),
            Popped::Rescoped(_) => unreachable!("marks are skipped"),
        })
        .await
    }

    /// Waits for a key or a rescope mark and processes it under the FIFO lock.
    pub(crate) async fn pop_marked<R>(&self, process: impl FnOnce(Popped) -> R) -> Option<R> {
        self.pop_any(false, process).await
    }

    fn pop_one(s: &mut State, skip_marks: bool) -> Option<Popped> {
        if skip_marks {
            Self::pop_deltas_locked(s).map(|(d, init)| Popped::Deltas(d, init))
        } else {
            Self::pop_locked(s)
        }
    }

    async fn pop_any<R>(&self, skip_marks: bool, process: impl FnOnce(Popped) -> R) -> Option<R> {
        // Fast path without registering for wake-ups.
        {
            let mut s = self.state.lock();
            if s.closed {
                return None;
            }
            if let Some(p) = Self::pop_one(&mut s, skip_marks) {
                return Some(process(p));
            }
        }
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.state.lock();
                if s.closed {
                    return None;
                }
                if let Some(p) = Self::pop_one(&mut s, skip_marks) {
                    return Some(process(p));
                }
            }
            notified.await;
        }
    }

    /// Stops the FIFO; pending and future pops return `None`.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.wake();
    }

    /// Keys in queue order.
    pub fn list_keys(&self) -> Vec<String> {
        self.state
            .lock()
            .queue
            .iter()
            .filter(|k| !is_mark(k))
            .map(|k| k.to_string())
            .collect()
    }

    /// Copy of the deltas queued for `key`.
    pub fn get(&self, key: &str) -> Option<Vec<Delta>> {
        self.state.lock().items.get(key).cloned()
    }

    /// Newest queued object of every key (tombstones unwrapped).
    pub fn list(&self) -> Vec<SharedObject> {
        let s = self.state.lock();
        s.queue
            .iter()
            .filter_map(|k| s.items.get(&**k)?.last()?.object.object().cloned())
            .collect()
    }

    /// Number of queued keys (a pending rescope mark counts: it is work not yet delivered).
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
