//! Fault injection for tests: history compaction, watch endings, failing requests, latency.
//!
//! Everything takes effect immediately and is safe to call from any thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::store::Store;

/// Injectable faults of a running server (see [`crate::ApiServer::faults`]).
pub struct Faults {
    store: Arc<Store>,
    /// Bumped by `end_watches`; every watch ends when it sees a change.
    end_epoch: tokio::sync::watch::Sender<u64>,
    short: AtomicUsize,
    fail: Mutex<(usize, u16)>,
    latency: Mutex<Duration>,
    drop_streams: AtomicUsize,
    /// Watches left that ignore their `shardSelector` (see `ignore_shard_selector`).
    unsharded: AtomicUsize,
    /// While true, watch streams deliver nothing and new watches wait (see `pause_watches`).
    paused: tokio::sync::watch::Sender<bool>,
    /// Bumped by `bookmark_now`; every watch that asked for bookmarks sends one.
    bookmark_epoch: tokio::sync::watch::Sender<u64>,
}

fn take_one(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Faults {
        Faults {
            store,
            end_epoch: tokio::sync::watch::channel(0).0,
            short: AtomicUsize::new(0),
            fail: Mutex::new((0, 500)),
            latency: Mutex::new(Duration::ZERO),
            drop_streams: AtomicUsize::new(0),
            unsharded: AtomicUsize::new(0),
            paused: tokio::sync::watch::channel(false).0,
            bookmark_epoch: tokio::sync::watch::channel(0).0,
        }
    }

    /// The newest resourceVersion (as [`crate::ApiServer::resource_version`]).
    pub fn resource_version(&self) -> u64 {
        self.store.current_rv()
    }

    /// Drop the retained history now: older RVs and continue tokens get 410 Expired.
    pub fn compact(&self) {
        self.store.compact();
    }

    /// End every open watch stream normally (clean EOF); clients resume from their last RV.
    pub fn end_watches(&self) {
        self.end_epoch.send_modify(|e| *e += 1);
    }

    /// The next `n` watches end immediately with no events.
    pub fn short_watches(&self, n: usize) {
        self.short.store(n, Ordering::SeqCst);
    }

    /// The next `n` requests are answered with `status` (429 or 500 make sense) and a Status body.
    pub fn fail_next(&self, n: usize, status: u16) {
        *self.fail.lock() = (n, status);
    }

    /// Delay every request by `d` (zero disables).
    pub fn set_latency(&self, d: Duration) {
        *self.latency.lock() = d;
    }

    /// The next `n` watch streams are cut mid-stream (connection dropped, no clean end).
    pub fn drop_next_streams(&self, n: usize) {
        self.drop_streams.store(n, Ordering::SeqCst);
    }

    /// Hold every watch: open streams stop delivering and new watches wait, until
    /// `resume_watches`. Lets a test change objects the informers must not see, like a client
    /// whose connection hangs (combine with `compact` and `end_watches` for a guaranteed 410).
    pub fn pause_watches(&self) {
        self.paused.send_replace(true);
    }

    /// Release watches held by `pause_watches`.
    pub fn resume_watches(&self) {
        self.paused.send_replace(false);
    }

    /// Every open watch that asked for bookmarks sends a progress BOOKMARK with the newest
    /// resourceVersion now, instead of at its next bookmark interval: a client that has seen it
    /// has seen every change up to that version (how `kubewasm test` knows the informers are
    /// caught up, whatever kinds they watch).
    pub fn bookmark_now(&self) {
        self.bookmark_epoch.send_modify(|e| *e += 1);
    }

    pub(crate) fn bookmark_receiver(&self) -> tokio::sync::watch::Receiver<u64> {
        self.bookmark_epoch.subscribe()
    }

    pub(crate) fn pause_receiver(&self) -> tokio::sync::watch::Receiver<bool> {
        self.paused.subscribe()
    }

    pub(crate) fn end_receiver(&self) -> tokio::sync::watch::Receiver<u64> {
        self.end_epoch.subscribe()
    }

    pub(crate) fn take_short(&self) -> bool {
        take_one(&self.short)
    }

    pub(crate) fn take_drop(&self) -> bool {
        take_one(&self.drop_streams)
    }

    /// The next `n` watches ignore their `shardSelector` and send every object, as a watch that
    /// reached an older API server behind a load balancer would: a sharded client must filter
    /// watch events itself.
    pub fn ignore_shard_selector(&self, n: usize) {
        self.unsharded.store(n, Ordering::SeqCst);
    }

    pub(crate) fn take_unsharded(&self) -> bool {
        take_one(&self.unsharded)
    }

    pub(crate) fn take_failure(&self) -> Option<u16> {
        let mut f = self.fail.lock();
        if f.0 == 0 {
            return None;
        }
        f.0 -= 1;
        Some(f.1)
    }

    pub(crate) fn latency(&self) -> Duration {
        *self.latency.lock()
    }
}

/// Request counters tests assert on (how many lists and watches clients made).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// All list requests.
    pub lists: u64,
    /// All watch requests.
    pub watches: u64,
    /// All write requests (create, update, patch, delete).
    pub writes: u64,
    /// Per resource plural: (lists, watches).
    pub per_resource: HashMap<String, (u64, u64)>,
    /// `METHOD path` of the last [`RECENT_REQUESTS`] requests, oldest first: tests assert
    /// that a request a client should have refused never arrived.
    pub recent: Vec<String>,
    /// `USER METHOD path` of the last [`RECENT_REQUESTS`] requests that named a user in
    /// `Impersonate-User`, oldest first: who a real server would have judged and audited.
    pub impersonated: Vec<String>,
    /// Requests refused by RBAC ([`crate::Config::authorization`]): 403s a real server's
    /// authorizer would have written.
    pub forbidden: u64,
    /// The messages of the last [`RECENT_REQUESTS`] of those refusals, oldest first.
    pub refusals: Vec<String>,
}

/// Requests [`Stats::recent`] remembers.
pub const RECENT_REQUESTS: usize = 4096;

impl Stats {
    /// Lists of one resource (by plural, e.g. `configmaps`).
    pub fn lists_of(&self, plural: &str) -> u64 {
        self.per_resource.get(plural).map(|p| p.0).unwrap_or(0)
    }

    /// Watches of one resource (by plural).
    pub fn watches_of(&self, plural: &str) -> u64 {
        self.per_resource.get(plural).map(|p| p.1).unwrap_or(0)
    }
}

/// Lock-light counters behind [`Stats`].
#[derive(Default)]
pub(crate) struct Counters {
    lists: AtomicU64,
    watches: AtomicU64,
    writes: AtomicU64,
    per_resource: Mutex<HashMap<String, (u64, u64)>>,
    recent: Mutex<std::collections::VecDeque<String>>,
    impersonated: Mutex<std::collections::VecDeque<String>>,
    forbidden: AtomicU64,
    refusals: Mutex<std::collections::VecDeque<String>>,
}

impl Counters {
    pub(crate) fn list(&self, plural: &str) {
        self.lists.fetch_add(1, Ordering::Relaxed);
        self.per_resource
            .lock()
            .entry(plural.to_string())
            .or_default()
            .0 += 1;
    }

    pub(crate) fn watch(&self, plural: &str) {
        self.watches.fetch_add(1, Ordering::Relaxed);
        self.per_resource
            .lock()
            .entry(plural.to_string())
            .or_default()
            .1 += 1;
    }

    pub(crate) fn request(&self, method: &str, path: &str) {
        let mut recent = self.recent.lock();
        if recent.len() >= RECENT_REQUESTS {
            recent.pop_front();
        }
        recent.push_back(format!("{method} {path}"));
    }

    pub(crate) fn impersonated(&self, user: &str, method: &str, path: &str) {
        let mut recent = self.impersonated.lock();
        if recent.len() >= RECENT_REQUESTS {
            recent.pop_front();
        }
        recent.push_back(format!("{user} {method} {path}"));
    }

    pub(crate) fn forbidden(&self, message: &str) {
        self.forbidden.fetch_add(1, Ordering::Relaxed);
        let mut recent = self.refusals.lock();
        if recent.len() >= RECENT_REQUESTS {
            recent.pop_front();
        }
        recent.push_back(message.to_string());
    }

    pub(crate) fn write(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            lists: self.lists.load(Ordering::Relaxed),
            watches: self.watches.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            per_resource: self.per_resource.lock().clone(),
            recent: self.recent.lock().iter().cloned().collect(),
            impersonated: self.impersonated.lock().iter().cloned().collect(),
            forbidden: self.forbidden.load(Ordering::Relaxed),
            refusals: self.refusals.lock().iter().cloned().collect(),
        }
    }
}
