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
//! Files, one role each: `config` (what to compete for, how fast), `lease_lock` (reading
//! and writing the record in the Lease), `state` (the state machine, no I/O), `elector` (the
//! task performing its actions, the public handle), `metrics`, and `slots` (for sharding: which
//! live member of a ring holds which slot of the hash space, a pure rule with no I/O).
//!
//! This module knows nothing of informers or plugins: it publishes leadership on a
//! `tokio::sync::watch` channel, and whoever delivers events follows it.

mod config;
mod elector;
mod lease_lock;
mod metrics;
mod slots;
mod state;

pub use config::ElectionConfig;
pub use elector::LeaderElector;
pub use metrics::ElectionMetrics;
pub use slots::{assign as assign_slots, owned as owned_slots, slot_of, slot_range};
