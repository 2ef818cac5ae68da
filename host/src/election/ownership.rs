//! [`SlotOwnership`]: what a shard ring publishes, and the checks a consumer makes at use.

use tokio::time::Instant;

use super::slots::{slot_of, slot_range};

/// The slots this replica may handle, as last published by its [`super::ShardRing`].
///
/// A snapshot can go stale without a new one arriving (a process paused past its renew
/// deadline resumes holding the old one), so a consumer asks [`SlotOwnership::holds_hash`] at
/// the moment it acts, never only when the snapshot changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotOwnership {
    /// How many slots the hash space is cut into.
    pub slots: u32,
    /// The slots held: bit `s` is slot `s`.
    pub held: u64,
    /// The end of the ownership unless renewed: the send time of the last successful write of
    /// our Lease plus the renew deadline, which passes before any rival may see the Lease
    /// expire. `None` before the first renewal.
    pub valid_until: Option<Instant>,
    /// Incremented on every change of `held`, so consumers can tell a new set from a renewal.
    pub epoch: u64,
}

impl SlotOwnership {
    /// Nothing held, ever: what a ring publishes before it has claimed anything.
    pub fn none(slots: u32) -> Self {
        Self {
            slots,
            held: 0,
            valid_until: None,
            epoch: 0,
        }
    }

    /// Whether `slot` is in the held set (validity aside).
    pub fn holds(&self, slot: u32) -> bool {
        slot < 64 && self.held & (1u64 << slot) != 0
    }

    /// Whether the ownership has not run out at `now`; false at once for a snapshot kept past
    /// its renew deadline.
    pub fn valid(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|t| now < t)
    }

    /// Whether an object whose key hashes to `hash` is this replica's to handle at `now`.
    pub fn holds_hash(&self, hash: u64, now: Instant) -> bool {
        self.slots != 0 && self.valid(now) && self.holds(slot_of(hash, self.slots))
    }

    /// The held part of the hash space as half-open `[start, end)` ranges, adjacent slots
    /// merged (`end` is 2^64 for the last slot): what a `shardRange` selector lists.
    pub fn ranges(&self) -> Vec<(u64, u128)> {
        let mut out: Vec<(u64, u128)> = Vec::new();
        for s in (0..self.slots.min(64)).filter(|&s| self.holds(s)) {
            let (start, end) = slot_range(s, self.slots);
            match out.last_mut() {
                Some(last) if last.1 == u128::from(start) => last.1 = end,
                _ => out.push((start, end)),
            }
        }
        out
    }

    /// How many slots are held.
    pub fn count(&self) -> u32 {
        self.held.count_ones()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn validity_and_ranges() {
        let now = Instant::now();
        let o = SlotOwnership {
            slots: 16,
            held: 0b1000_0000_0000_0111 | (1 << 5),
            valid_until: Some(now + Duration::from_secs(1)),
            epoch: 3,
        };
        assert!(o.holds(0) && o.holds(5) && o.holds(15) && !o.holds(4) && !o.holds(64));
        assert!(o.valid(now));
        assert!(!o.valid(now + Duration::from_secs(1)));
        assert!(o.holds_hash(0x0123, now));
        assert!(!o.holds_hash(0x0123, now + Duration::from_secs(2)));
        assert!(!o.holds_hash(0x4000_0000_0000_0000, now));
        assert_eq!(
            o.ranges(),
            vec![
                (0, 3 << 60),
                (5 << 60, 6 << 60),
                (0xf000_0000_0000_0000, 1 << 64)
            ]
        );
        let all = SlotOwnership {
            slots: 1,
            held: 1,
            ..o.clone()
        };
        assert_eq!(all.ranges(), vec![(0, 1 << 64)]);
        assert!(!SlotOwnership::none(16).valid(now));
        assert!(SlotOwnership::none(16).ranges().is_empty());
        assert_eq!(o.count(), 5);
    }
}
