//! [`ShardGate`]: the one place a sharded plugin's call is allowed to start, and what a slot's
//! release waits for.
//!
//! The ring (`crate::election`) publishes this replica's [`SlotOwnership`]; the gate reads it at
//! the moment a call would start, under the lock that counts the calls in flight per slot:
//! - a call starts only while the replica's own unexpired Lease lists the object's slot
//!   (`valid_until` is checked against the clock, not a timer, so a process resumed after a
//!   pause sees at once that it may no longer act);
//! - a release first publishes the smaller ownership (no new call starts for the released
//!   slots), then [`ShardGate::drain`] waits until their calls have ended, or the grace period
//!   passes: from then on the stragglers' side effects fail closed ([`ShardGate::may_act`]);
//! - the check and the count share one lock, so no call can slip in between "published" and
//!   "counted".
//!
//! Knows nothing of Leases: it follows a `watch` channel, as delivery follows leadership.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use kubewasm_apimachinery::fnv1a64;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::election::{SlotDrain, SlotOwnership, slot_of};
use crate::runtime::{ShardBy, ShardView};

/// Most slots a ring may cut the hash space into: one bit each in a `u64`.
pub(crate) const MAX_SLOTS: u32 = 64;

/// Calls in flight per slot, and the slots whose release gave up waiting for them.
struct Counts {
    in_flight: [u32; MAX_SLOTS as usize],
    /// Released after the grace period with calls still running: those calls act no more.
    abandoned: u64,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            in_flight: [0; MAX_SLOTS as usize],
            abandoned: 0,
        }
    }
}

/// The replica's slot gate, shared by every sharded plugin.
#[derive(Default)]
pub struct ShardGate {
    ownership: OnceLock<watch::Receiver<SlotOwnership>>,
    counts: Mutex<Counts>,
    ended: Notify,
}

/// A call of a sharded plugin in progress; ending it (or abandoning it) frees its slot.
pub struct SlotGuard {
    gate: Arc<ShardGate>,
    slot: u32,
}

impl SlotGuard {
    /// The slot of the call.
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut c = self.gate.counts.lock();
        c.in_flight[self.slot as usize] = c.in_flight[self.slot as usize].saturating_sub(1);
        drop(c);
        self.gate.ended.notify_waiters();
    }
}

impl ShardGate {
    /// A gate that admits nothing until [`ShardGate::follow`] gives it the ring's ownership.
    pub fn new() -> Arc<ShardGate> {
        Arc::new(ShardGate::default())
    }

    /// Follows `ownership` from now on (once; later calls are ignored).
    pub fn follow(&self, ownership: watch::Receiver<SlotOwnership>) {
        let _ = self.ownership.set(ownership);
    }

    /// The ownership as published last, if the gate follows a ring yet.
    fn current(&self) -> Option<SlotOwnership> {
        self.ownership.get().map(|rx| rx.borrow().clone())
    }

    /// Admits a call about an object whose shard key hashes to `hash`, counting it in flight
    /// until the guard drops; `None` when the slot is not this replica's right now.
    pub fn enter(self: &Arc<Self>, hash: u64) -> Option<SlotGuard> {
        let mut c = self.counts.lock();
        let own = self.current()?;
        if !own.holds_hash(hash, Instant::now()) {
            return None;
        }
        let slot = slot_of(hash, own.slots);
        c.in_flight[slot as usize] += 1;
        c.abandoned &= !(1u64 << slot);
        Some(SlotGuard {
            gate: self.clone(),
            slot,
        })
    }

    /// Whether a call about an object of `slot` may still have side effects: the replica is
    /// not fenced, and the slot's release did not give up on it.
    fn may_act_in(&self, slot: Option<u32>) -> bool {
        let Some(own) = self.current() else {
            return false;
        };
        if !own.valid(Instant::now()) {
            return false;
        }
        slot.is_none_or(|s| self.counts.lock().abandoned & (1u64 << s) == 0)
    }

    /// Resolves once no call of a slot in `released` is in flight, or at `grace`, after which
    /// the remaining calls of those slots act no more.
    pub async fn drain(self: Arc<Self>, released: u64, grace: Duration) {
        let deadline = Instant::now() + grace;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let mut c = self.counts.lock();
                let busy = (0..MAX_SLOTS)
                    .filter(|&s| released & (1u64 << s) != 0 && c.in_flight[s as usize] > 0)
                    .fold(0u64, |m, s| m | (1u64 << s));
                if busy == 0 {
                    return;
                }
                if Instant::now() >= deadline {
                    c.abandoned |= busy;
                    tracing::warn!(
                        slots = ?slots_of(busy),
                        "shard release: calls still in flight at the end of the grace period; \
                         their side effects fail from now on"
                    );
                    return;
                }
            }
            let _ = tokio::time::timeout_at(deadline, ended).await;
        }
    }
}

/// The slot numbers of a mask, for log lines.
fn slots_of(mask: u64) -> Vec<u32> {
    (0..MAX_SLOTS).filter(|s| mask & (1u64 << s) != 0).collect()
}

/// The ring's drain, through the shared gate.
pub struct GateDrain(pub Arc<ShardGate>);

impl SlotDrain for GateDrain {
    fn drain(&self, released: u64, grace: Duration) -> BoxFuture<'static, ()> {
        Box::pin(self.0.clone().drain(released, grace))
    }
}

/// The hash KEP-5866 shards an object by, for `by`; `None` when it does not shard.
pub(crate) fn shard_hash(by: ShardBy, uid: &str, namespace: Option<&str>) -> Option<u64> {
    match by {
        ShardBy::None => None,
        ShardBy::Uid => Some(fnv1a64(uid.as_bytes())),
        ShardBy::Namespace => Some(fnv1a64(namespace.unwrap_or("").as_bytes())),
    }
}

tokio::task_local! {
    /// The slot of the call being run on this task, so the fence can tell a straggler of a
    /// released slot from a current call.
    static CALL_SLOT: Option<u32>;
}

/// Runs `call` as a call about `slot`: side effects it causes consult that slot.
pub(crate) async fn in_slot<T>(slot: Option<u32>, call: impl Future<Output = T>) -> T {
    CALL_SLOT.scope(slot, call).await
}

/// A sharded plugin's [`ShardView`]: the gate's ownership, read through the plugin's field.
pub(crate) struct PluginShardView {
    /// The replica's gate.
    pub gate: Arc<ShardGate>,
    /// What the plugin shards by.
    pub by: ShardBy,
}

impl ShardView for PluginShardView {
    fn by(&self) -> ShardBy {
        self.by
    }

    fn ranges(&self) -> Vec<(u64, Option<u64>)> {
        let Some(own) = self.gate.current() else {
            return Vec::new();
        };
        if !own.valid(Instant::now()) {
            return Vec::new();
        }
        own.ranges()
            .into_iter()
            .map(|(start, end)| (start, u64::try_from(end).ok()))
            .collect()
    }

    fn owns(&self, value: &str) -> bool {
        let Some(own) = self.gate.current() else {
            return false;
        };
        own.holds_hash(fnv1a64(value.as_bytes()), Instant::now())
    }

    fn may_act(&self) -> bool {
        let slot = CALL_SLOT.try_with(|s| *s).ok().flatten();
        self.gate.may_act_in(slot)
    }
}

impl std::fmt::Debug for ShardGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardGate")
            .field("ownership", &self.current())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ownership of `held` among 16 slots, valid for a minute from now.
    fn owning(held: u64, epoch: u64) -> SlotOwnership {
        SlotOwnership {
            slots: 16,
            held,
            valid_until: Some(Instant::now() + Duration::from_secs(60)),
            epoch,
        }
    }

    /// A hash in slot `s` of 16.
    fn in_slot_no(s: u32) -> u64 {
        u64::from(s) << 60 | 0x1234
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_starts_only_in_a_held_unexpired_slot() {
        let gate = ShardGate::new();
        assert!(gate.enter(in_slot_no(3)).is_none(), "no ring followed yet");
        let (tx, rx) = watch::channel(owning(1 << 3, 1));
        gate.follow(rx);
        let g = gate.enter(in_slot_no(3)).expect("slot 3 is held");
        assert_eq!(g.slot(), 3);
        assert!(gate.enter(in_slot_no(4)).is_none());
        drop(g);
        // A replica that could not renew (a paused process resumed) sees it at once, before
        // any timer of the ring runs.
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(gate.enter(in_slot_no(3)).is_none());
        let view = PluginShardView {
            gate: gate.clone(),
            by: ShardBy::Uid,
        };
        assert!(!view.may_act());
        assert!(view.ranges().is_empty());
        tx.send(owning(1 << 3, 2)).unwrap();
        assert!(view.may_act());
        assert_eq!(view.ranges(), vec![(3 << 60, Some(4 << 60))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_waits_for_the_slots_calls_and_fences_stragglers_at_the_grace() {
        let gate = ShardGate::new();
        let (tx, rx) = watch::channel(owning(0b110, 1));
        gate.follow(rx);
        let one = gate.enter(in_slot_no(1)).unwrap();
        let two = gate.enter(in_slot_no(2)).unwrap();
        // Slot 1 is released: published first, then drained.
        tx.send(owning(0b100, 2)).unwrap();
        assert!(gate.enter(in_slot_no(1)).is_none());
        let drain = tokio::spawn(gate.clone().drain(0b010, Duration::from_secs(5)));
        tokio::task::yield_now().await;
        assert!(!drain.is_finished(), "slot 1 still has a call in flight");
        drop(two);
        tokio::task::yield_now().await;
        assert!(
            !drain.is_finished(),
            "another slot's call ending does not end the drain"
        );
        drop(one);
        drain.await.unwrap();

        // A call that outlives the grace period may no longer act.
        let stuck = gate.enter(in_slot_no(2)).unwrap();
        tx.send(owning(0, 3)).unwrap();
        let view = PluginShardView {
            gate: gate.clone(),
            by: ShardBy::Uid,
        };
        assert!(in_slot(Some(2), async { view.may_act() }).await);
        gate.clone().drain(0b100, Duration::from_secs(5)).await;
        assert!(!in_slot(Some(2), async { view.may_act() }).await);
        drop(stuck);
        // Held again later: a new call there acts.
        tx.send(owning(0b100, 4)).unwrap();
        let again = gate.enter(in_slot_no(2)).unwrap();
        assert!(in_slot(Some(2), async { view.may_act() }).await);
        drop(again);
    }

    #[test]
    fn objects_hash_by_uid_or_namespace() {
        assert_eq!(shard_hash(ShardBy::None, "u", Some("ns")), None);
        assert_eq!(
            shard_hash(ShardBy::Uid, "u", Some("ns")),
            Some(fnv1a64(b"u"))
        );
        assert_eq!(
            shard_hash(ShardBy::Namespace, "u", Some("ns")),
            Some(fnv1a64(b"ns"))
        );
        assert_eq!(
            shard_hash(ShardBy::Namespace, "u", None),
            Some(fnv1a64(b""))
        );
    }
}
