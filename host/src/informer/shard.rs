//! Informers narrowed to the slots of KEP-5866's hash space this replica holds.
//!
//! The held ranges arrive on a `tokio::sync::watch` channel (a [`ShardScope`]); the reflector
//! sends their union as `shardSelector` on every LIST and WATCH, trusts a LIST's filtering only
//! when the server echoed the selector in `metadata.shardInfo.selector`, filters in the host
//! otherwise, and re-checks every watch event by hash whatever the server claims. A change of
//! the held set ends the watch and relists (a *rescope*, see [`DeltaType::Rescoped`]).
//!
//! [`DeltaType::Rescoped`]: super::DeltaType::Rescoped

use kubewasm_apimachinery::{ShardField, ShardSelector, fnv1a64};
use tokio::sync::watch;

use super::object::KubeObject;

/// Held ranges `[start, end)` of the 64-bit FNV-1a space (`end` up to 2^64); empty = nothing held.
pub type ShardRanges = Vec<(u64, u128)>;

/// The exclusive end covering the top of the hash space.
const FULL_END: u128 = 1 << 64;

/// What a sharded informer follows: the hashed field (from its key) and the held ranges.
#[derive(Clone, Debug)]
pub(crate) struct ShardScope {
    pub field: ShardField,
    pub ranges: watch::Receiver<ShardRanges>,
}

/// Held ranges sorted, merged where they touch, and checked (a bad range is dropped with a
/// warning: a wrong bound must not widen what the replica handles).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Held(Vec<(u64, u128)>);

impl Held {
    pub(crate) fn normalize(raw: &[(u64, u128)]) -> Held {
        let mut v: Vec<(u64, u128)> = raw
            .iter()
            .copied()
            .filter(|&(s, e)| {
                let ok = u128::from(s) < e && e <= FULL_END;
                if !ok {
                    tracing::warn!(start = s, end = %e, "ignoring an empty or out-of-space shard range");
                }
                ok
            })
            .collect();
        v.sort_unstable();
        let mut out: Vec<(u64, u128)> = Vec::with_capacity(v.len());
        for (s, e) in v {
            match out.last_mut() {
                Some(last) if u128::from(s) <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        Held(out)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of disjoint ranges (the gauge).
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether every range of `other` lies within these (both normalized: sorted, merged).
    pub(crate) fn covers(&self, other: &Held) -> bool {
        other.0.iter().all(|&(s, e)| {
            let i = self.0.partition_point(|&(start, _)| start <= s);
            i > 0 && e <= self.0[i - 1].1
        })
    }

    pub(crate) fn contains(&self, hash: u64) -> bool {
        let h = u128::from(hash);
        // Sorted and disjoint: the candidate is the last range starting at or below `hash`.
        let i = self.0.partition_point(|&(s, _)| s <= hash);
        i > 0 && h < self.0[i - 1].1
    }

    /// The `shardSelector` text, or `None` when the union cannot be one (more ranges than a
    /// selector may join): then the server is asked for everything and the host filters.
    pub(crate) fn selector(&self, field: ShardField) -> Option<String> {
        match ShardSelector::new(field, self.0.iter().copied()) {
            Ok(s) => Some(s.to_string()),
            Err(e) => {
                tracing::warn!(error = %e, "held ranges make no shardSelector; filtering in the host");
                None
            }
        }
    }
}

/// The hash KEP-5866 shards `obj` by: of its uid, or of its namespace (`""` when cluster-scoped).
pub(crate) fn shard_hash(field: ShardField, obj: &KubeObject) -> u64 {
    let m = obj.meta();
    let value = match field {
        ShardField::Uid => m.uid.as_str(),
        ShardField::Namespace => m.namespace.as_deref().unwrap_or(""),
    };
    fnv1a64(value.as_bytes())
}

/// The ranges one list/watch cycle runs under: what its LIST asked for and what every watch
/// event of the cycle is re-checked against.
#[derive(Clone, Debug)]
pub(crate) struct Cycle {
    pub field: ShardField,
    pub held: Held,
    /// Sent as `shardSelector`; `None` when nothing is held or the union makes no selector.
    pub selector: Option<String>,
}

impl Cycle {
    pub(crate) fn new(field: ShardField, held: Held) -> Cycle {
        let selector = if held.is_empty() {
            None
        } else {
            held.selector(field)
        };
        Cycle {
            field,
            held,
            selector,
        }
    }

    pub(crate) fn owns(&self, obj: &KubeObject) -> bool {
        self.held.contains(shard_hash(self.field, obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_tells_a_widened_scope_from_a_narrowed_one() {
        let h = Held::normalize(&[(0, 8), (10, 30)]);
        assert!(h.covers(&Held::normalize(&[(0, 8)])));
        assert!(h.covers(&Held::normalize(&[(2, 4), (12, 30)])));
        assert!(
            h.covers(&Held::default()),
            "giving everything up widens nothing"
        );
        assert!(!h.covers(&Held::normalize(&[(0, 9)])), "8..9 is new");
        assert!(!h.covers(&Held::normalize(&[(30, 31)])));
        assert!(
            !h.covers(&Held::normalize(&[(5, 12)])),
            "a range across the gap"
        );
        assert!(!Held::default().covers(&h));
        let all = Held::normalize(&[(0, FULL_END)]);
        assert!(all.covers(&h) && !h.covers(&all));
    }

    #[test]
    fn ranges_are_merged_sorted_and_checked() {
        let h = Held::normalize(&[
            (10, 20),
            (0, 5),
            (5, 8),
            (15, 30),
            (40, 40),
            (1, FULL_END + 1),
        ]);
        assert_eq!(h, Held(vec![(0, 8), (10, 30)]));
        assert!(h.contains(0) && h.contains(7) && h.contains(10) && h.contains(29));
        assert!(!h.contains(8) && !h.contains(9) && !h.contains(30) && !h.contains(u64::MAX));
        let all = Held::normalize(&[(0, FULL_END)]);
        assert!(all.contains(u64::MAX) && all.contains(0));
        assert!(!Held::default().contains(0));
        assert_eq!(
            Cycle::new(ShardField::Uid, Held::normalize(&[(0, 1 << 63)]))
                .selector
                .as_deref(),
            Some("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')")
        );
        assert_eq!(Cycle::new(ShardField::Uid, Held::default()).selector, None);
    }
}
