//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several kubewasm replicas
//! exactly one delivers events while the others stand by warm.
//!
//! The algorithm is client-go's `leaderelection` package, on kube's typed `Api<Lease>`:
//! - a standby reads the Lease every retry period (2 s by default, slightly jittered) and takes it
//!   over when it is free, missing, or has not changed for the lease duration (15 s) it states,
//!   measured on the standby's own clock from when it first saw the current version;
//! - the leader renews every retry period and steps down if no renewal succeeded within the renew
//!   deadline (10 s) of the last one it sent; being shorter than the lease duration, the deadline
//!   passes before any standby can take over, so two replicas never both believe they lead;
//! - every write is a create or a replace at the resourceVersion it was based on, so racing
//!   replicas get 409 Conflict instead of overwriting each other;
//! - [`LeaderElector::release`] (on SIGTERM) stops leading, then clears the holder, so a standby
//!   takes over at its next retry instead of after the lease duration.
//!
//! Not kube-lease-manager: it detects racing claims through server-side-apply field-ownership
//! conflicts (which the embedded API server does not implement, so it could not be tested
//! here), counts durations in whole seconds and has no renew deadline separate from the lease.
//!
//! # Active-active sharding: [`ShardRing`]
//!
//! Instead of one leader, every replica of a ring (named by the election id) holds a Lease of
//! its own and handles the objects of some *slots*: the 64-bit FNV-1a space of KEP-5866's key
//! cut into `S` equal slots (`--shard-slots`, a power of two ≤ 64), planned over the live
//! members by bounded-load rendezvous hashing ([`assign_slots`]; a join or leave moves about
//! `S / N` slots). The promise: **a replica handles an object only while its own unexpired
//! Lease lists the object's slot, and never while another live Lease lists it.** The protocol:
//! - Member Lease `{ring}-{member}`, label `kubewasm.dev/ring={ring}`, `holderIdentity` this
//!   replica's identity, annotations `kubewasm.dev/slots: "0,3,7"` (the slots it *claims*) and
//!   `kubewasm.dev/slot-count: "16"`. Every write is a create or a replace at the
//!   resourceVersion read (409 → re-read, write again next round).
//! - Every retry period: renew our Lease (a successful write sent at `t` makes the ownership
//!   valid until `t + renew_deadline`), then LIST the ring by label (a consistent read). A
//!   Lease is live until it has kept one resourceVersion for its `leaseDurationSeconds`
//!   measured from when *we* first saw that version (client-go's rule; our monotonic clock,
//!   never a remote timestamp). Live members are the live Leases with a holder, ourselves
//!   included; one with another slot count is taken to claim every slot (logged once).
//! - **Release** (a claimed slot the plan gives away): publish ownership without it, then
//!   [`SlotDrain::drain`] (its calls in flight end, or the grace passes), then write our Lease
//!   without it. Only then may another replica claim it. Drains run beside the renewals.
//! - **Acquire** (a slot the plan gives us): only while no live Lease lists it. Write our Lease
//!   with it, then LIST again; publish it only if that read shows no other live Lease listing
//!   it, else write it out again and back off (jittered). Of two racing claimers the later
//!   writer's read sees the earlier claim, reads being linearizable; the earlier one's read
//!   may miss the later claim, but the later one then withdraws. A claimed slot a live rival
//!   also lists stays published only if it was published already and the plan gives it to us.
//! - **Fencing**: if no renewal succeeded by `valid_until`, a timer publishes `held = 0`, and
//!   [`SlotOwnership::valid`] answers false for any older snapshot, so a process resumed after
//!   a pause acts on nothing before it renews and re-confirms every claim by a fresh LIST
//!   (rivals that saw its Lease expire may have taken some: those it writes out). Since
//!   `renew_deadline < lease_duration` and a rival first saw our last write no earlier than we
//!   sent it, we stop strictly before any rival may see our Lease expire (clock *rates* must
//!   agree, as for leader election; offsets do not matter).
//! - [`ShardRing::release`] (SIGTERM) publishes `held = 0`, drains everything, then writes the
//!   Lease with no slots and no holder and deletes it: the survivors take over at their next
//!   round. Dropping the [`ShardRing`] is a crash: `held = 0` at once, nothing written, and the
//!   survivors wait out the Lease.
//!
//! Files, one role each: `config` (what to compete for, how fast), `lease_lock` (reading
//! and writing the record in the Lease), `state` (the state machine, no I/O), `elector` (the
//! task performing its actions, the public handle), `metrics`, and `slots` (for sharding: which
//! live member of a ring holds which slot of the hash space, a pure rule with no I/O). For the
//! ring: `member_lease` (reading the ring, writing our member Lease), `membership` (its state
//! machine, no I/O), `ring` (the task and the public handle), `ownership` (what it publishes)
//! and `ring_metrics`.
//!
//! This module knows nothing of informers or plugins: it publishes leadership, or slot
//! ownership, on a `tokio::sync::watch` channel, and whoever delivers events follows it.

mod config;
mod elector;
mod lease_lock;
mod member_lease;
mod membership;
mod metrics;
mod ownership;
mod ring;
mod ring_metrics;
#[cfg(test)]
mod ring_tests;
mod slots;
mod state;

pub use config::{DEFAULT_SHARD_SLOTS, ElectionConfig, LEASE_VERBS, RingConfig};
pub use elector::LeaderElector;
pub use metrics::ElectionMetrics;
pub use ownership::SlotOwnership;
pub use ring::{NoCallsInFlight, ShardRing, SlotDrain};
pub use ring_metrics::RingMetrics;
pub use slots::{assign as assign_slots, owned as owned_slots, slot_of, slot_range};
