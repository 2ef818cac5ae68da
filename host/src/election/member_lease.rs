//! Member Leases of a shard ring: reading the ring (one consistent LIST by label) and writing
//! this replica's own Lease, which says who holds it, for how long, and which slots it claims.
//!
//! The claims live in two annotations, `kubewasm.dev/slots: "0,3,7"` (sorted) and
//! `kubewasm.dev/slot-count: "16"`, so `kubectl get lease -l kubewasm.dev/ring=NAME -o yaml`
//! shows the whole ring. Every write is a create or a replace at the resourceVersion it was
//! based on (409 → [`WriteError::Conflict`]), as for the leader Lease.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Preconditions};

use super::lease_lock::{WriteError, store_lease};

/// Label naming the ring a member Lease belongs to.
pub(super) const RING_LABEL: &str = "kubewasm.dev/ring";
/// Annotation listing the slots a member claims, sorted, comma-separated.
pub(super) const SLOTS_ANNOTATION: &str = "kubewasm.dev/slots";
/// Annotation stating how many slots the member cuts the hash space into.
pub(super) const SLOT_COUNT_ANNOTATION: &str = "kubewasm.dev/slot-count";

/// What a member Lease claims, as this replica understands it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claims {
    /// The slots (bit `s` = slot `s`) of a member that counts slots as we do.
    Slots(u64),
    /// A member that cuts the space differently (another `slot-count`, or annotations we cannot
    /// read): its slots overlap ours in unknown ways, so it is taken to claim every slot.
    Foreign {
        /// The slot count it states, if readable.
        count: Option<u32>,
    },
}

/// A member Lease as read from (or written to) the server.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MemberLease {
    /// The Lease's name, `{ring}-{member}`; the member's key in the slot plan.
    pub name: String,
    /// `spec.holderIdentity`; empty when the member released it.
    pub holder: String,
    /// `spec.leaseDurationSeconds`; zero when absent.
    pub duration: Duration,
    /// The slots it claims.
    pub claims: Claims,
    /// The Lease as the server returned it; the base of our next write when it is ours (boxed:
    /// it is large and travels through every step).
    pub lease: Box<Lease>,
}

impl MemberLease {
    /// Interprets a Lease of a ring whose members cut the space into `slots` slots.
    pub(super) fn from_lease(lease: Lease, slots: u32) -> Self {
        let spec = lease.spec.as_ref();
        let annotations = lease.metadata.annotations.as_ref();
        let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
        let claims = match (get(SLOT_COUNT_ANNOTATION), get(SLOTS_ANNOTATION)) {
            (None, None | Some("")) => Claims::Slots(0),
            (None, Some(_)) => Claims::Foreign { count: None },
            (Some(count), listed) => match count.trim().parse::<u32>() {
                Ok(n) if n == slots => match parse_slots(listed.unwrap_or(""), slots) {
                    Some(mask) => Claims::Slots(mask),
                    None => Claims::Foreign { count: Some(n) },
                },
                Ok(n) => Claims::Foreign { count: Some(n) },
                Err(_) => Claims::Foreign { count: None },
            },
        };
        Self {
            name: lease.metadata.name.clone().unwrap_or_default(),
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            duration: Duration::from_secs(
                spec.and_then(|s| s.lease_duration_seconds)
                    .unwrap_or(0)
                    .max(0) as u64,
            ),
            claims,
            lease: Box::new(lease),
        }
    }

    /// The resourceVersion a write based on this Lease must match.
    pub(super) fn resource_version(&self) -> Option<&str> {
        self.lease.metadata.resource_version.as_deref()
    }

    /// The claimed slots when they are ours to read (our own Lease always is).
    pub(super) fn slots(&self) -> u64 {
        match self.claims {
            Claims::Slots(m) => m,
            Claims::Foreign { .. } => 0,
        }
    }
}

/// `"0,3,7"` for slots 0, 3 and 7.
pub(super) fn format_slots(mask: u64) -> String {
    (0..64)
        .filter(|s| mask & (1u64 << s) != 0)
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The mask of a `kubewasm.dev/slots` value, or `None` when it is not a list of slots below
/// `slots`.
pub(super) fn parse_slots(text: &str, slots: u32) -> Option<u64> {
    let mut mask = 0u64;
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let s: u32 = part.parse().ok()?;
        if s >= slots {
            return None;
        }
        mask |= 1u64 << s;
    }
    Some(mask)
}

/// What this replica writes into its own Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MemberRecord {
    /// The holder identity; empty to leave the ring at once.
    pub holder: String,
    /// The lease duration it states.
    pub duration: Duration,
    /// The slots it claims.
    pub claims: u64,
}

/// The ring's Leases in one namespace, and this replica's own among them.
#[derive(Clone)]
pub(super) struct MemberLeases {
    api: Api<Lease>,
    ring: String,
    own: String,
    slots: u32,
}

impl MemberLeases {
    /// The ring `ring` in `namespace`, this replica's Lease being `own`.
    pub(super) fn new(
        client: kube::Client,
        namespace: &str,
        ring: &str,
        own: &str,
        slots: u32,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            ring: ring.to_string(),
            own: own.to_string(),
            slots,
        }
    }

    /// Every Lease of the ring, by a consistent read (no resourceVersion: served from etcd, so
    /// it reflects every write that completed before it was sent).
    pub(super) async fn list(&self) -> Result<Vec<MemberLease>, kube::Error> {
        let lp = ListParams::default().labels(&format!("{RING_LABEL}={}", self.ring));
        let list = self.api.list(&lp).await?;
        Ok(list
            .items
            .into_iter()
            .map(|l| MemberLease::from_lease(l, self.slots))
            .collect())
    }

    /// Writes our Lease: creates it when `base` is `None`, otherwise replaces `base` at its
    /// resourceVersion.
    pub(super) async fn write(
        &self,
        record: &MemberRecord,
        base: Option<&MemberLease>,
        wall: Timestamp,
    ) -> Result<MemberLease, WriteError> {
        let lease = render(&self.ring, &self.own, self.slots, record, base, wall);
        store_lease(&self.api, &self.own, base.is_some(), &lease)
            .await
            .map(|l| MemberLease::from_lease(l, self.slots))
    }

    /// Deletes our Lease if it is still at `base`'s resourceVersion (gone already counts as done).
    pub(super) async fn delete(&self, base: &MemberLease) -> Result<(), kube::Error> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: base.resource_version().map(str::to_string),
                uid: base.lease.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&self.own, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The Lease `own` of ring `ring` that `record` becomes, keeping whatever `base` has that we
/// do not manage.
pub(super) fn render(
    ring: &str,
    own: &str,
    slots: u32,
    record: &MemberRecord,
    base: Option<&MemberLease>,
    wall: Timestamp,
) -> Lease {
    let mut lease = match base {
        Some(b) => (*b.lease).clone(),
        None => Lease {
            metadata: ObjectMeta {
                name: Some(own.to_string()),
                ..ObjectMeta::default()
            },
            spec: None,
        },
    };
    lease
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(RING_LABEL.to_string(), ring.to_string());
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(SLOTS_ANNOTATION.to_string(), format_slots(record.claims));
    annotations.insert(SLOT_COUNT_ANNOTATION.to_string(), slots.to_string());
    let previous = base.map(|b| b.holder.as_str());
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if previous != Some(record.holder.as_str()) || spec.acquire_time.is_none() {
        spec.acquire_time = Some(MicroTime(wall));
    }
    spec.holder_identity = (!record.holder.is_empty()).then(|| record.holder.clone());
    // The wire carries whole seconds: round up, so nobody waits less than we meant.
    let secs = record.duration.as_secs() + u64::from(record.duration.subsec_nanos() > 0);
    spec.lease_duration_seconds = Some(secs.clamp(1, i32::MAX as u64) as i32);
    spec.renew_time = Some(MicroTime(wall));
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_annotations(pairs: &[(&str, &str)]) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("r-a".into()),
                annotations: Some(
                    pairs
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("a/1".into()),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn claims_round_trip_and_foreign_slot_counts_claim_everything() {
        assert_eq!(format_slots(0b1000_1001), "0,3,7");
        assert_eq!(format_slots(0), "");
        assert_eq!(parse_slots("0,3,7", 16), Some(0b1000_1001));
        assert_eq!(parse_slots("", 16), Some(0));
        assert_eq!(parse_slots("16", 16), None);
        assert_eq!(parse_slots("x", 16), None);
        assert_eq!(format_slots(1 << 63), "63");
        let ours = |pairs: &[(&str, &str)]| MemberLease::from_lease(with_annotations(pairs), 16);
        let m = ours(&[(SLOT_COUNT_ANNOTATION, "16"), (SLOTS_ANNOTATION, "1,2")]);
        assert_eq!(m.claims, Claims::Slots(0b110));
        assert_eq!((m.name.as_str(), m.holder.as_str()), ("r-a", "a/1"));
        assert_eq!(m.duration, Duration::from_secs(15));
        assert_eq!(ours(&[]).claims, Claims::Slots(0));
        assert_eq!(
            ours(&[(SLOT_COUNT_ANNOTATION, "32"), (SLOTS_ANNOTATION, "1")]).claims,
            Claims::Foreign { count: Some(32) }
        );
        assert_eq!(
            ours(&[(SLOTS_ANNOTATION, "1")]).claims,
            Claims::Foreign { count: None }
        );
        assert_eq!(
            ours(&[(SLOT_COUNT_ANNOTATION, "16"), (SLOTS_ANNOTATION, "99")]).claims,
            Claims::Foreign { count: Some(16) }
        );
    }
}
