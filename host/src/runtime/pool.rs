//! [`InstanceSlots`]: the pooling allocator's instance slots shared out per plugin.
//!
//! The engine's pool is sized so that only its count of component instances can run out: every
//! other pool (core instances, memories, tables, stacks) holds the per-component maximum for
//! each of those instances (see `engine.rs`), so a component of 32 core instances costs one
//! slot like any other. The slots are then reserved per plugin version when it is loaded, one
//! per instance it may run at once (its concurrency), at most half of the reservable slots per
//! plugin: a plugin that asks for more than that or than is left runs fewer calls at once (the
//! load says so, naming it), one that finds none left is refused. A new version of a loaded plugin reuses its old version's slots (the two never run
//! calls at once: a swapped-in version waits for the old one's last call), so a hot swap at the
//! same concurrency always finds them. A share of the pool ([`UNRESERVED_SHARE`]) is never
//! reserved, for one-off instances (`describe` at load, `kubewasm check`) and the few instances
//! of two versions alive together during a swap. So a plugin at concurrency 64 cannot leave
//! another unable to run or to swap.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::metrics::RuntimeMetrics;

/// One in this many of the pool's slots stays unreserved, for one-off instances.
pub(crate) const UNRESERVED_SHARE: u32 = 8;

/// The pool's reservable slots; clones share them.
#[derive(Clone, Debug)]
pub(crate) struct InstanceSlots {
    inner: Arc<Mutex<Slots>>,
    /// `kubewasm_runtime_pool_slots{plugin}` and `kubewasm_runtime_pool_short{plugin}`.
    metrics: RuntimeMetrics,
}

#[derive(Debug)]
struct Slots {
    reservable: u32,
    /// Each plugin's reservations (one per loaded version); a plugin holds the largest.
    plugins: HashMap<String, Vec<u32>>,
}

impl Slots {
    fn held(&self, plugin: &str) -> u32 {
        self.plugins
            .get(plugin)
            .and_then(|v| v.iter().max().copied())
            .unwrap_or(0)
    }

    fn reserved(&self) -> u32 {
        self.plugins
            .values()
            .map(|v| v.iter().max().copied().unwrap_or(0))
            .sum()
    }
}

/// No slot is left for a plugin.
#[derive(Debug, thiserror::Error)]
#[error(
    "plugin {plugin}: no instance slot left in the host's pool: the {reservable} reservable \
     slots are all reserved by loaded plugins (lower their concurrency or raise the pool size)"
)]
pub struct PoolFull {
    /// The plugin refused.
    pub plugin: String,
    /// Slots plugins may reserve in all.
    pub reservable: u32,
}

/// A plugin version's slots, given back when the last instance holding it is dropped.
#[derive(Debug)]
pub struct PoolReservation {
    slots: InstanceSlots,
    plugin: String,
    granted: u32,
    wanted: u32,
}

impl PoolReservation {
    /// Instances the plugin may run at once: what it asked for, or fewer if the pool had fewer.
    pub fn granted(&self) -> u32 {
        self.granted
    }

    /// Whether it got fewer than it asked for.
    pub fn capped(&self) -> bool {
        self.granted < self.wanted
    }
}

impl Drop for PoolReservation {
    fn drop(&mut self) {
        let mut s = self.slots.inner.lock();
        if let Some(held) = s.plugins.get_mut(&self.plugin) {
            if let Some(i) = held.iter().position(|&n| n == self.granted) {
                held.swap_remove(i);
            }
            if held.is_empty() {
                s.plugins.remove(&self.plugin);
            }
        }
        self.slots
            .metrics
            .set_pool_slots(&self.plugin, s.held(&self.plugin));
    }
}

impl InstanceSlots {
    /// Slots for a pool of `total` component instances.
    pub(crate) fn new(total: u32, metrics: RuntimeMetrics) -> Self {
        let reservable = total.saturating_sub(total / UNRESERVED_SHARE).max(1);
        Self {
            inner: Arc::new(Mutex::new(Slots {
                reservable,
                plugins: HashMap::new(),
            })),
            metrics,
        }
    }

    /// Reserves up to `wanted` slots (at least one) for `plugin`, on top of what its loaded
    /// versions hold already.
    pub(crate) fn reserve(&self, plugin: &str, wanted: u32) -> Result<PoolReservation, PoolFull> {
        let wanted = wanted.max(1);
        let mut s = self.inner.lock();
        let held = s.held(plugin);
        let free = s.reservable.saturating_sub(s.reserved());
        let share = (s.reservable / 2).max(1);
        let granted = wanted.min(share).min(held + free);
        if granted < wanted {
            self.metrics.pool_short(plugin);
        }
        if granted == 0 {
            return Err(PoolFull {
                plugin: plugin.to_owned(),
                reservable: s.reservable,
            });
        }
        s.plugins
            .entry(plugin.to_owned())
            .or_default()
            .push(granted);
        self.metrics.set_pool_slots(plugin, s.held(plugin));
        Ok(PoolReservation {
            slots: self.clone(),
            plugin: plugin.to_owned(),
            granted,
            wanted,
        })
    }

    /// Slots reserved now, and how many may be.
    pub(crate) fn usage(&self) -> (u32, u32) {
        let s = self.inner.lock();
        (s.reserved(), s.reservable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_greedy_plugin_gets_half_and_the_last_slot_is_refused_until_given_back() {
        let metrics = RuntimeMetrics::unregistered();
        let slots = InstanceSlots::new(16, metrics.clone());
        assert_eq!(slots.usage(), (0, 14));
        let greedy = slots.reserve("greedy", 64).unwrap();
        assert_eq!(greedy.granted(), 7, "half of the reservable slots");
        assert!(greedy.capped());
        let neighbour = slots.reserve("neighbour", 4).unwrap();
        assert_eq!((neighbour.granted(), neighbour.capped()), (4, false));
        let swapped = slots.reserve("greedy", 64).unwrap();
        assert_eq!(
            swapped.granted(),
            7,
            "a new version reuses the old one's slots"
        );
        assert_eq!(slots.usage(), (11, 14));
        assert_eq!(metrics.pool_slots("greedy"), 7);
        let third = slots.reserve("third", 8).unwrap();
        assert_eq!(third.granted(), 3, "what is left");
        let refused = slots.reserve("fourth", 1).unwrap_err();
        assert!(refused.to_string().contains("plugin fourth"), "{refused}");
        drop(greedy);
        assert_eq!(
            slots.usage(),
            (14, 14),
            "the swapped-in version still holds 7"
        );
        drop(swapped);
        let fourth = slots.reserve("fourth", 1).unwrap();
        assert_eq!(fourth.granted(), 1);
        assert_eq!(slots.usage(), (8, 14));
        assert_eq!(metrics.pool_slots("greedy"), 0);
    }
}
