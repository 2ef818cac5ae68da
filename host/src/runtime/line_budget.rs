//! [`LineBudget`]: the one rule for log lines a plugin can make the host write, used for the
//! guest's own output ([`GuestLog`](super::guest_log::GuestLog)) and for the host's lines about
//! what the guest did ([`GuestCausedLog`](super::GuestCausedLog)). A token bucket per plugin;
//! a line without a token is dropped before any work is spent on it and counted, and each
//! episode of drops is announced by one warning (plus one line with the count when lines flow
//! again), so a guest in a loop costs the log a bounded number of lines per second. An episode
//! ends only after [`QUIET`] without a drop: a flood that the refill lets a line through now and
//! then stays one episode, not one per token.

use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use crate::workqueue::BucketRateLimiter;

/// How long lines must pass without a drop before an episode of drops is over.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// Target of the host's announcements about dropped lines.
const RUNTIME_TARGET: &str = "kubewasm::runtime";

/// What a budget limits, for its announcements.
pub(crate) struct BudgetKind {
    /// What the lines are, as the announcement names them (`guest output`).
    pub what: &'static str,
    /// The metric counting the drops, named in the announcement so an operator finds it.
    pub metric: &'static str,
    /// Sustained lines per second.
    pub per_second: u32,
    /// Lines at once before the sustained rate applies.
    pub burst: u32,
}

/// One plugin's token bucket for a kind of line, its drop counter and its episode state.
pub(crate) struct LineBudget {
    plugin: std::sync::Arc<str>,
    kind: &'static BudgetKind,
    bucket: BucketRateLimiter,
    episode: Mutex<Episode>,
    dropped_total: Counter,
}

/// The current episode of drops.
#[derive(Default)]
struct Episode {
    /// Lines dropped in it; 0 when there is none.
    dropped: u64,
    /// When the last of them was dropped.
    last_drop: Option<Instant>,
}

impl LineBudget {
    /// A full budget for `plugin`, counting drops in `dropped_total`.
    pub(crate) fn new(
        plugin: std::sync::Arc<str>,
        kind: &'static BudgetKind,
        dropped_total: Counter,
    ) -> Self {
        Self {
            plugin,
            kind,
            bucket: BucketRateLimiter::new(kind.per_second.into(), kind.burst),
            episode: Mutex::new(Episode::default()),
            dropped_total,
        }
    }

    /// The plugin whose lines these are.
    pub(crate) fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Takes a token for one line; drops, counts and announces when there is none.
    pub(crate) fn admit(&self) -> bool {
        let plugin = &*self.plugin;
        let BudgetKind {
            what,
            metric,
            per_second,
            burst,
        } = *self.kind;
        let now = Instant::now();
        if self.bucket.try_acquire() {
            let mut e = self.episode.lock();
            if e.dropped > 0 && e.last_drop.is_none_or(|t| now - t >= QUIET) {
                let dropped = std::mem::take(&mut e.dropped);
                drop(e);
                tracing::info!(target: RUNTIME_TARGET, plugin, dropped,
                    "{what} is within its rate again; {dropped} lines were dropped");
            }
            return true;
        }
        self.dropped_total.inc();
        let mut e = self.episode.lock();
        e.last_drop = Some(now);
        e.dropped += 1;
        if e.dropped == 1 {
            drop(e);
            tracing::warn!(target: RUNTIME_TARGET, plugin,
                "{what} exceeds {per_second} lines/s (bursts of {burst}); dropping its lines \
                 until it slows down, counted in {metric}");
        }
        false
    }
}
