//! [`GuestCausedLog`]: the per-plugin limit on host log lines a guest can cause (a denied
//! `kube` call, a dropped Event, a refused HTTP request, a handler's retry or failure). A guest
//! repeats such a call as often as it likes, so each of these lines is written only with a
//! token from the plugin's budget: [`HOST_LINES_PER_SECOND`] per second with bursts of
//! [`HOST_LINE_BURST`], shared by every instance and capability of the plugin. Lines beyond it
//! are dropped, counted in `kubewasm_runtime_host_log_dropped_total{plugin}` and announced once
//! per episode, by the same rule as the guest's own output (see `line_budget.rs`).
//!
//! Using it is one condition in front of the line:
//!
//! ```ignore
//! if self.log.admit() {
//!     tracing::warn!(target: TARGET, plugin = self.log.plugin(), "call refused: …");
//! }
//! ```
//!
//! The plugins layer creates one per plugin where it loads the plugin and hands clones to the
//! instance ([`HandlerInstance::with_guest_caused_log`](super::HandlerInstance::with_guest_caused_log))
//! and to its capabilities. Lines that only the operator or the host itself can cause (a
//! plugin loaded, a manifest invalid) do not go through it.

use std::sync::Arc;

use super::line_budget::{BudgetKind, LineBudget};
use super::metrics::RuntimeMetrics;

/// Sustained host lines per second one plugin can cause before they are dropped.
pub const HOST_LINES_PER_SECOND: u32 = 20;
/// Host lines one plugin can cause at once (a burst of refusals while it starts, say) before
/// the sustained rate applies.
pub const HOST_LINE_BURST: u32 = 100;

static GUEST_CAUSED: BudgetKind = BudgetKind {
    what: "host logging caused by the plugin",
    metric: "kubewasm_runtime_host_log_dropped_total",
    per_second: HOST_LINES_PER_SECOND,
    burst: HOST_LINE_BURST,
};

/// One plugin's budget for host lines it caused; clones share it.
#[derive(Clone)]
pub struct GuestCausedLog {
    budget: Arc<LineBudget>,
}

impl GuestCausedLog {
    /// A full budget for `plugin`, counting drops in `metrics`.
    pub fn new(plugin: &str, metrics: &RuntimeMetrics) -> Self {
        let dropped = metrics.host_log_dropped_counter(plugin);
        Self {
            budget: Arc::new(LineBudget::new(plugin.into(), &GUEST_CAUSED, dropped)),
        }
    }

    /// Whether one more line may be written now; `false` means drop it (already counted).
    pub fn admit(&self) -> bool {
        self.budget.admit()
    }

    /// The plugin the lines are about, for their `plugin` field.
    pub fn plugin(&self) -> &str {
        self.budget.plugin()
    }
}

impl std::fmt::Debug for GuestCausedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestCausedLog")
            .field("plugin", &self.plugin())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::LogCapture;

    #[tokio::test(start_paused = true)]
    async fn clones_share_one_budget_and_drops_are_counted_and_announced_once() {
        let capture = LogCapture::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(capture.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let metrics = RuntimeMetrics::unregistered();
        let a = GuestCausedLog::new("noisy", &metrics);
        let b = a.clone();
        let admitted = (0..HOST_LINE_BURST * 3)
            .filter(|i| if i % 2 == 0 { a.admit() } else { b.admit() })
            .count();
        assert_eq!(admitted, HOST_LINE_BURST as usize);
        assert_eq!(
            metrics.host_log_dropped("noisy"),
            u64::from(HOST_LINE_BURST * 2)
        );
        let warnings: Vec<_> = capture
            .json_lines()
            .into_iter()
            .filter(|e| e["level"] == "WARN")
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0]["fields"]["plugin"], "noisy");
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let again = (0..HOST_LINES_PER_SECOND * 2).filter(|_| b.admit()).count();
        assert_eq!(
            again, HOST_LINES_PER_SECOND as usize,
            "one second earns the rate"
        );
        let infos: Vec<_> = capture
            .json_lines()
            .into_iter()
            .filter(|e| e["level"] == "INFO")
            .collect();
        assert_eq!(infos.len(), 1, "{infos:?}");
        assert_eq!(infos[0]["fields"]["dropped"], HOST_LINE_BURST * 2);
    }
}
