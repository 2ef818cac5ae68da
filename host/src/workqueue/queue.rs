//! The basic queue state (client-go `Typed[T]`): FIFO + dirty set + processing set, plus the
//! delayed items waiting for their ready time.

use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;

use tokio::time::Instant;

/// Everything guarded by the queue lock.
pub(crate) struct QueueState<T> {
    pub queue: VecDeque<T>,
    pub dirty: HashSet<T>,
    pub processing: HashSet<T>,
    pub shutting_down: bool,
    pub drain: bool,
    /// Delayed items: ready time per item (earliest wins) and a min-heap of (ready, seq).
    pub waiting: HashMap<T, Instant>,
    pub heap: BinaryHeap<std::cmp::Reverse<(Instant, u64)>>,
    pub heap_items: HashMap<u64, T>,
    pub seq: u64,
}

impl<T: Clone + Eq + Hash> Default for QueueState<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
            shutting_down: false,
            drain: false,
            waiting: HashMap::new(),
            heap: BinaryHeap::new(),
            heap_items: HashMap::new(),
            seq: 0,
        }
    }
}

impl<T: Clone + Eq + Hash> QueueState<T> {
    /// client-go `Add`: ignored while shutting down; a dirty item is not queued twice; an item
    /// being processed is only marked dirty and re-queued by `done`.
    pub(super) fn add(&mut self, item: T) -> bool {
        if self.shutting_down || self.dirty.contains(&item) {
            return false;
        }
        self.dirty.insert(item.clone());
        if self.processing.contains(&item) {
            return false;
        }
        self.queue.push_back(item);
        true
    }

    /// Pops the next ready item into `processing`.
    pub(super) fn get(&mut self) -> Option<T> {
        let item = self.queue.pop_front()?;
        self.processing.insert(item.clone());
        self.dirty.remove(&item);
        Some(item)
    }

    /// client-go `Done`: a dirty item goes back to the queue.
    pub(super) fn done(&mut self, item: &T) -> bool {
        self.processing.remove(item);
        if self.dirty.contains(item) {
            self.queue.push_back(item.clone());
            return true;
        }
        false
    }

    /// Schedules `item` at `ready`, keeping the earlier time if it is already waiting.
    pub(super) fn add_waiting(&mut self, item: T, ready: Instant) {
        if let Some(existing) = self.waiting.get(&item)
            && *existing <= ready
        {
            return;
        }
        self.waiting.insert(item.clone(), ready);
        self.seq += 1;
        self.heap.push(std::cmp::Reverse((ready, self.seq)));
        self.heap_items.insert(self.seq, item);
    }

    /// Moves every delayed item whose time has come into the queue (through `add`, so dedup
    /// applies). Returns the next ready time still pending.
    pub(super) fn promote(&mut self, now: Instant) -> (bool, Option<Instant>) {
        let mut added = false;
        while let Some(std::cmp::Reverse((ready, seq))) = self.heap.peek().copied() {
            let Some(item) = self.heap_items.get(&seq) else {
                self.heap.pop();
                continue;
            };
            // Stale heap entry: the item was rescheduled earlier (or already fired).
            if self.waiting.get(item) != Some(&ready) {
                self.heap.pop();
                self.heap_items.remove(&seq);
                continue;
            }
            if ready > now {
                return (added, Some(ready));
            }
            self.heap.pop();
            let item = self.heap_items.remove(&seq).expect("present");
            self.waiting.remove(&item);
            added |= self.add(item);
        }
        (added, None)
    }
}
