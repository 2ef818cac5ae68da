//! Prometheus metrics of leader election.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `kubewasm_leader` and `kubewasm_leader_transitions_total`; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ElectionMetrics {
    leader: Gauge,
    transitions: Counter,
}

impl ElectionMetrics {
    /// Registers the metrics in the registry the binary serves.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        registry.register(
            "kubewasm_leader",
            "1 while this replica holds the leader Lease and delivers events, else 0",
            m.leader.clone(),
        );
        registry.register(
            "kubewasm_leader_transitions",
            "Times this replica became or stopped being the leader",
            m.transitions.clone(),
        );
        m
    }

    /// Metrics that are counted but exported nowhere (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::default()
    }

    /// Records a change of leadership.
    pub(super) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
        self.transitions.inc();
    }

    /// Whether the gauge says this replica leads (for tests).
    pub fn is_leader(&self) -> bool {
        self.leader.get() == 1
    }

    /// Leadership changes counted so far (for tests).
    pub fn transitions(&self) -> u64 {
        self.transitions.get()
    }
}
