//! Following leadership: with leader election, only the replica that leads delivers events.
//!
//! The plugins layer sees leadership only as a `watch::Receiver<bool>` (the election module
//! publishes it; it knows nothing of plugins). A standby loads, describes and attaches every
//! plugin as usual except for delivery: each version holds its informers through a listener
//! that ignores everything (loading's `WarmCache`), so the caches stay current, and no
//! dispatcher or worker exists for it.
//!
//! - **Winning**: every running version gets a fresh dispatcher attached to its informers, which
//!   replays the cache to it as `on-add` with `is-in-initial-list = true` (the same late-joiner
//!   replay a hot swap gets), then every later event.
//! - **Losing**: every dispatcher is killed at once — queues dropped, in-flight calls abandoned —
//!   before anything waits on a lock, then the dispatchers are detached. The next win replays the
//!   cache again, so nothing queued at the loss needs to survive it.
//!
//! Two tasks follow the channel: one only kills (synchronously, so a slow plugin operation can
//! never delay stepping down), one reconciles each plugin with the current value under that
//! plugin's own lock. A load that finishes concurrently reads leadership under the same view lock
//! the killer takes, so it either sees the loss or is killed after it.
//!
//! A watch channel keeps only the latest value: a loss and a re-win both missed by these tasks
//! would leave the delivery running, which is harmless because no other replica can have led in
//! between without first waiting out the lease duration.

use tokio::sync::watch;

use crate::plugins::loading::lifecycle::PluginManager;

/// Makes `manager` follow `leadership`: starts the two follower tasks, which end when its sender
/// is dropped or the manager is gone. Call it once, inside a Tokio runtime, with the receiver
/// the manager was configured with.
pub(crate) fn follow_leadership(manager: &PluginManager, leadership: watch::Receiver<bool>) {
    let manager = manager.downgrade();
    let mut rx = leadership.clone();
    let killer = manager.clone();
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let leading = *rx.borrow_and_update();
            if leading {
                continue;
            }
            let Some(m) = PluginManager::upgrade(&killer) else {
                return;
            };
            let stopped = m.stop_deliveries_now();
            tracing::warn!(
                plugins = stopped,
                "not the leader: deliveries stopped, in-flight calls abandoned; standing by"
            );
        }
    });
    let mut rx = leadership;
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let leading = *rx.borrow_and_update();
            let Some(m) = PluginManager::upgrade(&manager) else {
                return;
            };
            if leading {
                tracing::info!("leader: replaying the cache to every plugin, then delivering");
            }
            m.follow_leadership().await;
        }
    });
}
