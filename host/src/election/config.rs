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
}
