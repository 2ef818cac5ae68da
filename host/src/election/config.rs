//! What an elector competes for and how fast: the Lease's coordinates, this replica's identity and
//! the three durations of client-go's `LeaderElectionConfig`.

use std::time::Duration;

use kubewasm_apimachinery::validation::validate_dns1123_subdomain;

/// Lease duration of controller-runtime (and kube-controller-manager).
pub(super) const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Renew deadline of controller-runtime.
pub(super) const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Retry period of controller-runtime.
pub(super) const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The RBAC verbs on `coordination.k8s.io` Leases the host needs in its election namespace:
/// the leader Lease is got, created and updated; a sharded replica also lists and watches the
/// ring's member Leases and deletes its own on SIGTERM. `deploy/rbac.yaml` and
/// `kubewasm rbac --leases` both grant exactly these.
pub const LEASE_VERBS: &[&str] = &["get", "list", "watch", "create", "update", "delete"];

/// Configuration of one [`super::LeaderElector`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionConfig {
    /// Name of the `coordination.k8s.io/v1` Lease (`--leader-election-id`).
    pub lease_name: String,
    /// Namespace of the Lease (`--leader-election-namespace`).
    pub namespace: String,
    /// This replica's holder identity; must differ between replicas.
    pub identity: String,
    /// How long a standby waits after the Lease last changed before it may take it over.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal. Shorter than
    /// `lease_duration`, so a leader cut off from the API server steps down before anyone can
    /// take over.
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// The controller-runtime defaults (15 s / 10 s / 2 s) with a fresh identity.
    pub fn new(lease_name: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: default_identity(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Rejects settings under which two replicas could lead at once, naming the culprit.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (what, value) in [
            ("--leader-election-id", &self.lease_name),
            ("--leader-election-namespace", &self.namespace),
        ] {
            if validate_dns1123_subdomain(value).is_err() {
                anyhow::bail!(
                    "{what} {value:?} is not a valid object name (lower-case alphanumerics, '-' and '.', at most 253)"
                );
            }
        }
        if self.identity.is_empty() || self.identity.len() > 253 {
            anyhow::bail!("leader election identity must be 1 to 253 characters");
        }
        if self.retry_period.is_zero() {
            anyhow::bail!("--leader-election-retry-period must be positive");
        }
        if self.renew_deadline <= self.retry_period {
            anyhow::bail!(
                "--leader-election-renew-deadline ({:?}) must be longer than --leader-election-retry-period ({:?})",
                self.renew_deadline,
                self.retry_period
            );
        }
        if self.lease_duration <= self.renew_deadline {
            anyhow::bail!(
                "--leader-election-lease-duration ({:?}) must be longer than --leader-election-renew-deadline ({:?})",
                self.lease_duration,
                self.renew_deadline
            );
        }
        if self.lease_duration > Duration::from_secs(i32::MAX as u64) {
            anyhow::bail!("--leader-election-lease-duration is too long");
        }
        Ok(())
    }
}

/// Slot count of a shard ring unless `--shard-slots` says otherwise.
pub const DEFAULT_SHARD_SLOTS: u32 = 16;

/// Configuration of one [`super::ShardRing`]: the election settings (the ring's name is
/// `election.lease_name`), this replica's member name, the slot count and the drain grace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingConfig {
    /// Namespace, ring name (`lease_name`), holder identity and the three durations, with the
    /// meaning they have for leader election.
    pub election: ElectionConfig,
    /// This replica's name in the ring (its Pod's name); its Lease is `{ring}-{member}`.
    pub member: String,
    /// How many slots the hash space is cut into: a power of two, 1 to 64, the same on every
    /// member (`--shard-slots`).
    pub slots: u32,
    /// How long releasing a slot waits for its calls in flight before abandoning them.
    pub drain_grace: Duration,
}

impl RingConfig {
    /// The name of this replica's member Lease.
    pub fn lease_name(&self) -> String {
        format!("{}-{}", self.election.lease_name, self.member)
    }

    /// Rejects settings under which the ring could not keep its promise, naming the culprit.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.election.validate()?;
        let ring = &self.election.lease_name;
        // The ring's name is also the value of the members' `kubewasm.dev/ring` label.
        if ring.len() > 63 {
            anyhow::bail!(
                "--leader-election-id {ring:?} is too long to name a shard ring (at most 63 characters: it is a label value)"
            );
        }
        if self.member.is_empty() || validate_dns1123_subdomain(&self.lease_name()).is_err() {
            anyhow::bail!(
                "shard member name {:?} does not make a valid Lease name {:?} (lower-case alphanumerics, '-' and '.', at most 253 in all)",
                self.member,
                self.lease_name()
            );
        }
        if !(1..=64).contains(&self.slots) || !self.slots.is_power_of_two() {
            anyhow::bail!(
                "--shard-slots {} must be a power of two from 1 to 64",
                self.slots
            );
        }
        Ok(())
    }
}

/// `hostname_random`, as controller-runtime builds it: the pod name says which replica leads,
/// the random part keeps a restarted pod from mistaking its predecessor's lease for its own.
pub(super) fn default_identity() -> String {
    let host = crate::identity::replica_name();
    let host = crate::text::truncate(&host, 200);
    format!("{host}_{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_unsafe_orderings_are_refused() {
        let c = ElectionConfig::new("kubewasm", "kubewasm-system");
        c.validate().unwrap();
        assert_ne!(c.identity, ElectionConfig::new("a", "b").identity);
        let mut bad = c.clone();
        bad.renew_deadline = bad.lease_duration;
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("--leader-election-lease-duration")
        );
        let mut bad = c.clone();
        bad.retry_period = bad.renew_deadline;
        assert!(bad.validate().is_err());
        for name in ["Not/A/Name", "a..b", ".a", "a.", ""] {
            let mut bad = c.clone();
            bad.lease_name = name.into();
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("--leader-election-id"), "{name:?}: {e}");
            let mut bad = c.clone();
            bad.namespace = name.into();
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("--leader-election-namespace"), "{name:?}: {e}");
        }
    }

    #[test]
    fn ring_configs_refuse_bad_slot_counts_and_member_names() {
        let ring = RingConfig {
            election: ElectionConfig::new("kubewasm", "kubewasm-system"),
            member: "kubewasm-7d4f-x2".into(),
            slots: DEFAULT_SHARD_SLOTS,
            drain_grace: Duration::from_secs(10),
        };
        ring.validate().unwrap();
        assert_eq!(ring.lease_name(), "kubewasm-kubewasm-7d4f-x2");
        for slots in [0, 3, 12, 128] {
            let e = RingConfig {
                slots,
                ..ring.clone()
            }
            .validate()
            .unwrap_err();
            assert!(e.to_string().contains("--shard-slots"), "{slots}: {e}");
        }
        for slots in [1, 2, 64] {
            RingConfig {
                slots,
                ..ring.clone()
            }
            .validate()
            .unwrap();
        }
        for member in ["", "Pod_1", "a/b", "x."] {
            let e = RingConfig {
                member: member.into(),
                ..ring.clone()
            }
            .validate()
            .unwrap_err();
            assert!(
                e.to_string().contains("shard member name"),
                "{member:?}: {e}"
            );
        }
        let mut long = ring.clone();
        long.election.lease_name = "r".repeat(64);
        assert!(
            long.validate()
                .unwrap_err()
                .to_string()
                .contains("label value")
        );
        let mut bad = ring.clone();
        bad.election.retry_period = Duration::ZERO;
        assert!(bad.validate().is_err());
    }
}
