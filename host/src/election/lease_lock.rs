//! The resource lock (client-go's `LeaseLock`): reads and writes the election record kept in a
//! `coordination.k8s.io/v1` Lease through kube's typed `Api<Lease>`. Every write carries the
//! resourceVersion it was based on, so of two replicas racing for the same Lease one gets 409
//! Conflict and nobody overwrites a claim it has not seen.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

/// The election record (client-go's `LeaderElectionRecord`), as it lives in a Lease's spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct LeaderRecord {
    /// Who holds the Lease; empty when it is free (never acquired, or released).
    pub holder: String,
    /// How long the holder's claim lasts after its last renewal; zero when the Lease names none.
    pub lease_duration: Duration,
    /// When the current holder acquired the Lease.
    pub acquire_time: Option<Timestamp>,
    /// When the current holder last renewed.
    pub renew_time: Option<Timestamp>,
    /// How many times the Lease changed hands.
    pub transitions: i32,
}

impl LeaderRecord {
    fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(s) = spec else {
            return Self::default();
        };
        Self {
            holder: s.holder_identity.clone().unwrap_or_default(),
            lease_duration: Duration::from_secs(s.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            acquire_time: s.acquire_time.as_ref().map(|t| t.0),
            renew_time: s.renew_time.as_ref().map(|t| t.0),
            transitions: s.lease_transitions.unwrap_or(0),
        }
    }

    /// Writes the record into `spec`, leaving fields the record does not cover (strategy,
    /// preferred holder) as they were.
    fn write_to(&self, spec: &mut LeaseSpec) {
        spec.holder_identity = (!self.holder.is_empty()).then(|| self.holder.clone());
        // The wire carries whole seconds: round up, so nobody waits less than the holder meant.
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        spec.lease_duration_seconds = Some(secs.clamp(1, i32::MAX as u64) as i32);
        spec.acquire_time = self.acquire_time.map(MicroTime);
        spec.renew_time = self.renew_time.map(MicroTime);
        spec.lease_transitions = Some(self.transitions);
    }
}

/// A record as read from (or written to) the server, with the Lease object it came from.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Versioned {
    /// The election record.
    pub record: LeaderRecord,
    /// The Lease as the server returned it; the base of the next write (boxed: it is large
    /// and travels through every step).
    pub lease: Box<Lease>,
}

impl Versioned {
    fn from_lease(lease: Lease) -> Self {
        Self {
            record: LeaderRecord::from_spec(lease.spec.as_ref()),
            lease: Box::new(lease),
        }
    }

    /// The resourceVersion a write based on this record must match.
    pub(super) fn resource_version(&self) -> Option<&str> {
        self.lease.metadata.resource_version.as_deref()
    }
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    /// The Lease changed (or was created) since it was read: someone else wrote first.
    #[error("the Lease changed since it was read")]
    Conflict,
    /// Any other failure (network, server, permissions).
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// One Lease, addressed by namespace and name.
#[derive(Clone)]
pub(super) struct LeaseLock {
    api: Api<Lease>,
    name: String,
}

impl LeaseLock {
    /// The Lease `namespace/name`, read and written with `client`.
    pub(super) fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    /// Reads the Lease; `None` when it does not exist yet.
    pub(super) async fn get(&self) -> Result<Option<Versioned>, kube::Error> {
        Ok(self
            .api
            .get_opt(&self.name)
            .await?
            .map(Versioned::from_lease))
    }

    /// Writes `record`: creates the Lease when `base` is `None`, otherwise replaces `base` at its
    /// resourceVersion (409 → [`WriteError::Conflict`]).
    pub(super) async fn write(
        &self,
        record: &LeaderRecord,
        base: Option<&Versioned>,
    ) -> Result<Versioned, WriteError> {
        let mut lease = match base {
            Some(b) => (*b.lease).clone(),
            None => Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: None,
            },
        };
        record.write_to(lease.spec.get_or_insert_with(LeaseSpec::default));
        store_lease(&self.api, &self.name, base.is_some(), &lease)
            .await
            .map(Versioned::from_lease)
    }
}

/// Writes `lease` as the host's field manager: a replace of `name` when it is `existing` (its
/// resourceVersion makes it conditional), else a create; a 409 is a [`WriteError::Conflict`].
/// The leader's Lease and the ring's member Leases are written the same way.
pub(super) async fn store_lease(
    api: &Api<Lease>,
    name: &str,
    existing: bool,
    lease: &Lease,
) -> Result<Lease, WriteError> {
    let pp = PostParams {
        field_manager: Some(crate::identity::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let written = if existing {
        api.replace(name, &pp, lease).await
    } else {
        api.create(&pp, lease).await
    };
    match written {
        Ok(l) => Ok(l),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(WriteError::Conflict),
        Err(e) => Err(WriteError::Api(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_durations_round_up() {
        let r = LeaderRecord {
            holder: "a_1".into(),
            lease_duration: Duration::from_millis(1500),
            acquire_time: Some(Timestamp::UNIX_EPOCH),
            renew_time: Some(Timestamp::UNIX_EPOCH),
            transitions: 3,
        };
        let mut spec = LeaseSpec {
            strategy: Some("OldestEmulationVersion".into()),
            ..LeaseSpec::default()
        };
        r.write_to(&mut spec);
        assert_eq!(spec.lease_duration_seconds, Some(2));
        assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
        let back = LeaderRecord::from_spec(Some(&spec));
        assert_eq!(back.holder, "a_1");
        assert_eq!(back.lease_duration, Duration::from_secs(2));
        assert_eq!(back.transitions, 3);
        let free = LeaderRecord::default();
        free.write_to(&mut spec);
        assert_eq!(spec.holder_identity, None);
        assert_eq!(LeaderRecord::from_spec(None), LeaderRecord::default());
    }
}
