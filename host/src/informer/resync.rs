//! Per-handler resync bookkeeping. Resync replays the cache (never a re-list). As in client-go,
//! each handler keeps its own next resync time across relists. Unlike client-go, the timer is
//! re-planned from every handler's own due time whenever handlers come or go, so a late
//! handler's shorter period is honoured exactly (k/k#48941).

use std::time::Duration;

use tokio::time::Instant;

/// Smallest resync period a handler can get (client-go `minimumResyncPeriod`).
pub(crate) const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// Effective period for a requested one: `None`/zero = never, below 1 s = 1 s (with a warning).
pub(super) fn determine_resync_period(requested: Option<Duration>) -> Option<Duration> {
    match requested {
        None => None,
        Some(p) if p.is_zero() => None,
        Some(p) if p < MINIMUM_RESYNC_PERIOD => {
            tracing::warn!(
                requested = ?p,
                "resync period is too small; changing it to the minimum of {MINIMUM_RESYNC_PERIOD:?}"
            );
            Some(MINIMUM_RESYNC_PERIOD)
        }
        Some(p) => Some(p),
    }
}

/// One listener's resync schedule and routing flag.
#[derive(Debug)]
pub(crate) struct ListenerResync {
    pub period: Option<Duration>,
    pub next: Option<Instant>,
    /// client-go's "syncing" flag: starts true, recomputed only at each resync check, and decides
    /// who receives `is_sync` updates (including unchanged objects of a relist).
    pub syncing: bool,
}

impl ListenerResync {
    pub(super) fn new(period: Option<Duration>, now: Instant) -> Self {
        Self {
            period,
            next: period.map(|p| now + p),
            syncing: true,
        }
    }

    /// client-go `shouldResync(now)`: due listeners become syncing and are re-armed.
    pub(super) fn check(&mut self, now: Instant) -> bool {
        let due = matches!((self.period, self.next), (Some(_), Some(n)) if now >= n);
        if due && let Some(p) = self.period {
            self.next = Some(now + p);
        }
        self.syncing = due;
        due
    }
}
