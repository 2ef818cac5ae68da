//! [`ShardView`]: what a guest's `shard` import (0.3.0) reads, and the fence every side-effecting
//! host import consults. The runtime knows nothing of Leases, slots or rings: the plugins layer
//! installs a view that answers from the replica's current slot ownership; a plugin that does not
//! shard gets [`NotSharded`], which owns everything and is never fenced.

use std::sync::Arc;

/// What a plugin shards by (the manifest's `shard` key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShardBy {
    /// One replica (the leader) handles every object.
    #[default]
    None,
    /// FNV-1a 64 of `metadata.uid`.
    Uid,
    /// FNV-1a 64 of `metadata.namespace` (`""` when cluster-scoped).
    Namespace,
}

/// A replica's share of the hash space, as a guest may ask about it.
pub trait ShardView: Send + Sync {
    /// What the plugin shards by.
    fn by(&self) -> ShardBy;
    /// The held ranges `[start, end)` (`end` `None` for 2^64), in order; empty while none is
    /// held or the replica is fenced.
    fn ranges(&self) -> Vec<(u64, Option<u64>)>;
    /// Whether an object whose shard key is `value` is this replica's right now.
    fn owns(&self, value: &str) -> bool;
    /// Whether a side effect (a kube write, an Event, an HTTP request) may leave the host now:
    /// `false` once the replica could not renew its Lease in time, so a process resumed after a
    /// pause acts on nothing it may have lost.
    fn may_act(&self) -> bool;
}

/// The view of a plugin that does not shard: everything is its own.
pub struct NotSharded;

impl ShardView for NotSharded {
    fn by(&self) -> ShardBy {
        ShardBy::None
    }
    fn ranges(&self) -> Vec<(u64, Option<u64>)> {
        vec![(0, None)]
    }
    fn owns(&self, _: &str) -> bool {
        true
    }
    fn may_act(&self) -> bool {
        true
    }
}

/// The default view.
pub fn not_sharded() -> Arc<dyn ShardView> {
    Arc::new(NotSharded)
}
