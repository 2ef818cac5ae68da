//! The manager's side of leader election: a standby keeps every version's informers warm with
//! listeners that deliver nothing, and on each leadership change the versions gain or lose their
//! delivery. The tasks that follow the Lease live above loading (`crate::plugins::leadership`);
//! this file only offers them the two operations.

use std::sync::{Arc, Weak};

use super::{Inner, PluginManager, Slot};
use crate::informer::{ResourceEventHandler, SharedObject};
use crate::plugins::delivery::state::StateEvent;

/// A listener that ignores every notification: registered for each subscription of a version
/// under leader election, it keeps the informer (and its cache) running while no delivery is
/// attached.
pub(super) struct WarmCache;

impl ResourceEventHandler for WarmCache {
    fn on_add(&self, _: &SharedObject, _: bool) {}
    fn on_update(&self, _: &SharedObject, _: &SharedObject, _: bool) {}
    fn on_delete(&self, _: &SharedObject, _: bool) {}
}

impl PluginManager {
    /// A weak reference for the leadership followers, so they never keep the manager alive.
    pub(in crate::plugins) fn downgrade(&self) -> Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// Kills every plugin's delivery at once (queues dropped, in-flight calls abandoned)
    /// without waiting for anything; [`PluginManager::follow_leadership`] detaches them later.
    /// Returns how many deliveries were stopped.
    pub(in crate::plugins) fn stop_deliveries_now(&self) -> usize {
        let mut stopped = 0;
        for (_, slot) in self.slots() {
            let mut v = slot.view.lock();
            // A sharded plugin follows the slots, not leadership.
            if v.dispatcher.as_ref().is_some_and(|d| d.is_sharded()) {
                continue;
            }
            if let Some(d) = v.dispatcher.take() {
                d.kill();
                stopped += 1;
            }
            if v.version > 0 {
                v.state.step(StateEvent::StandingBy);
            }
        }
        stopped
    }

    /// Brings every plugin in line with leadership: a leader's versions each get a delivery
    /// (a full replay of the cache, then every later event); a standby's have none. Each plugin
    /// waits only for operations on itself.
    pub(in crate::plugins) async fn follow_leadership(&self) {
        let slots = self.slots();
        futures::future::join_all(
            slots
                .iter()
                .map(|(name, slot)| self.follow_in_slot(name, slot)),
        )
        .await;
    }

    async fn follow_in_slot(&self, name: &str, slot: &Slot) {
        let mut op = slot.op.lock().await;
        let Some(active) = op.as_mut() else { return };
        let leading = self.delivers(&active.plan);
        let live = active
            .delivery
            .as_ref()
            .is_some_and(|d| !d.dispatcher.is_stopped());
        if leading && live {
            return;
        }
        if let Some(old) = active.delivery.take() {
            old.dispatcher.kill();
            old.stop().await;
        }
        if !leading || self.inner.closing.is_cancelled() {
            self.install(slot, None);
            return;
        }
        match self.attach(name, active.version, slot, &active.plan).await {
            Ok(d) => {
                let installed = d.installed();
                active.delivery = Some(d);
                self.install(slot, Some(installed));
                tracing::info!(plugin = %name, version = active.version, "delivering: cache replayed to the plugin");
            }
            Err(e) => {
                tracing::error!(plugin = %name, version = active.version, error = %e,
                    "leader cannot deliver to this plugin; retried at the next leadership change or reload");
            }
        }
    }

    /// The manager behind a weak reference held by a background task.
    pub(in crate::plugins) fn upgrade(inner: &Weak<Inner>) -> Option<PluginManager> {
        inner.upgrade().map(|inner| PluginManager { inner })
    }
}
