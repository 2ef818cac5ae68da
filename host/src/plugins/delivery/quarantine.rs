//! When a plugin that keeps failing should be left alone for a while.

use std::time::Duration;

/// Exponential backoff after repeated failed calls (traps, deadlines, memory exhaustion), so a
/// broken plugin does not burn CPU re-instantiating for every event: the dispatcher counts
/// failures in a row and holds the plugin's notifications back for the returned duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuarantinePolicy {
    /// Failures in a row before the first quarantine.
    pub threshold: u32,
    /// First quarantine; doubles with every further failure.
    pub base: Duration,
    /// Longest quarantine.
    pub max: Duration,
}

impl Default for QuarantinePolicy {
    fn default() -> Self {
        Self {
            threshold: 5,
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl QuarantinePolicy {
    /// How long to quarantine after `consecutive_failures` failures in a row; `None` below the
    /// threshold.
    pub fn backoff(&self, consecutive_failures: u32) -> Option<Duration> {
        let over = consecutive_failures.checked_sub(self.threshold)?;
        let factor = 1u32.checked_shl(over.min(31)).unwrap_or(u32::MAX);
        Some(self.base.saturating_mul(factor).min(self.max))
    }
}
