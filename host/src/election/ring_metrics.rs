//! Prometheus metrics of a shard ring.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `kubewasm_shard_*`: what this replica holds and how the ring around it behaves; cheap to
/// clone.
#[derive(Clone, Debug, Default)]
pub struct RingMetrics {
    held: Gauge,
    members: Gauge,
    acquisitions: Counter,
    releases: Counter,
    fenced: Gauge,
    renew_failures: Counter,
}

impl RingMetrics {
    /// Registers the metrics in the registry the binary serves.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        registry.register(
            "kubewasm_shard_slots_held",
            "Slots this replica delivers events for (published, confirmed, not fenced)",
            m.held.clone(),
        );
        registry.register(
            "kubewasm_shard_ring_members",
            "Live members of the shard ring this replica saw at its last read, itself included",
            m.members.clone(),
        );
        registry.register(
            "kubewasm_shard_slot_acquisitions",
            "Slots this replica started holding",
            m.acquisitions.clone(),
        );
        registry.register(
            "kubewasm_shard_slot_releases",
            "Slots this replica stopped holding (moved, released or fenced)",
            m.releases.clone(),
        );
        registry.register(
            "kubewasm_shard_fenced",
            "1 while this replica could not renew its member Lease in time and holds nothing",
            m.fenced.clone(),
        );
        registry.register(
            "kubewasm_shard_renew_failures",
            "Writes of this replica's member Lease that failed or conflicted",
            m.renew_failures.clone(),
        );
        m
    }

    /// Metrics that are counted but exported nowhere (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::default()
    }

    /// Records a newly published held set, given the previous one.
    pub(super) fn set_held(&self, before: u64, after: u64) {
        self.held.set(i64::from(after.count_ones()));
        self.acquisitions
            .inc_by(u64::from((after & !before).count_ones()));
        self.releases
            .inc_by(u64::from((before & !after).count_ones()));
    }

    pub(super) fn set_members(&self, n: usize) {
        self.members.set(n as i64);
    }

    pub(super) fn set_fenced(&self, fenced: bool) {
        self.fenced.set(i64::from(fenced));
    }

    pub(super) fn renew_failed(&self) {
        self.renew_failures.inc();
    }

    /// Slots held now, by the gauge (for tests).
    pub fn held(&self) -> u64 {
        self.held.get() as u64
    }

    /// Live members seen at the last read (for tests).
    pub fn members(&self) -> u64 {
        self.members.get() as u64
    }

    /// Slots acquired so far (for tests).
    pub fn acquisitions(&self) -> u64 {
        self.acquisitions.get()
    }

    /// Slots released so far (for tests).
    pub fn releases(&self) -> u64 {
        self.releases.get()
    }

    /// Whether the fence gauge reads 1 (for tests).
    pub fn is_fenced(&self) -> bool {
        self.fenced.get() == 1
    }

    /// Failed or conflicting writes so far (for tests).
    pub fn renew_failures(&self) -> u64 {
        self.renew_failures.get()
    }
}
