//! The one exponential backoff rule: every retry loop in the host (the per-item rate limiter,
//! plugin loads, registry pulls, synced calls, worker restarts) waits `base · 2^retries`,
//! capped at `max`, so the numbers are tuned in one place and read the same everywhere.

use std::time::Duration;

/// `base · 2^retries`, capped at `max` (client-go's `ItemExponentialFailureRateLimiter`
/// formula). No jitter: the callers retry few items each, on their own schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExponentialBackoff {
    base: Duration,
    max: Duration,
}

impl ExponentialBackoff {
    /// Waits starting at `base` and doubling up to `max`.
    pub(crate) const fn new(base: Duration, max: Duration) -> Self {
        ExponentialBackoff { base, max }
    }

    /// The wait after `retries` earlier failures: `base` for the first failure (0 earlier),
    /// then doubling, never over `max` and never overflowing however large `retries` is.
    pub(crate) fn delay(&self, retries: u32) -> Duration {
        if self.base.is_zero() {
            return Duration::ZERO;
        }
        let mut wait = self.base;
        // Doubling stops at `max`, so this runs at most ~100 times (Duration spans 2^94 ns).
        for _ in 0..retries {
            if wait >= self.max {
                break;
            }
            wait = wait.saturating_mul(2);
        }
        wait.min(self.max)
    }

    /// The wait before attempt `attempt + 1` when `attempt` (1-based) just failed: what a
    /// counter of consecutive failures reads.
    pub(crate) fn after_failures(&self, failures: u32) -> Duration {
        self.delay(failures.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::ExponentialBackoff;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_from_base_up_to_max() {
        let b = ExponentialBackoff::new(5 * MS, 1000 * MS);
        let waits: Vec<_> = (0..10).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(b.after_failures(1), 5 * MS);
        assert_eq!(
            b.after_failures(0),
            5 * MS,
            "no failure yet waits as the first"
        );
        assert_eq!(b.after_failures(3), 20 * MS);
    }

    #[test]
    fn never_overflows() {
        let b = ExponentialBackoff::new(Duration::from_secs(1), Duration::MAX);
        assert_eq!(b.delay(u32::MAX), Duration::MAX);
        let b = ExponentialBackoff::new(Duration::from_nanos(1), Duration::from_secs(3600));
        // Past 2^31 (where a shift of a u32 factor would stop) the wait still grows to max.
        assert_eq!(b.delay(45), Duration::from_secs(3600));
        assert_eq!(b.delay(33), Duration::from_nanos(1 << 33));
        assert_eq!(
            ExponentialBackoff::new(Duration::ZERO, MS).delay(9),
            Duration::ZERO
        );
    }

    #[test]
    fn a_base_over_max_is_capped() {
        let b = ExponentialBackoff::new(Duration::from_secs(90), Duration::from_secs(60));
        assert_eq!(b.delay(0), Duration::from_secs(60));
    }
}
