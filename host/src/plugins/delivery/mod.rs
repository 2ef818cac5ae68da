//! Delivery: how one plugin version's notifications reach its guest.
//!
//! Informer listeners push into a bounded per-plugin [`queue`] (one ordered stream, an object
//! never handed out twice at once, coalescing above `max-queued`); a [`dispatch`]er drains it
//! with up to `concurrency` calls at once, retries and
//! [`quarantine`] after failures in a row; a [`worker`] thread owns the guest; [`state`] is the
//! plugin's state machine. For a controller, [`keys`] turns every event into keys of its
//! primary kind, which the same queue holds once each.
//!
//! Knows nothing of files, manifests, grants or leadership: `loading` hands it a described
//! version and decides when a delivery starts and stops.

pub(crate) mod attachment;
// Its `pub` items are the crate's own unless the `bench` feature re-exports them.
#[cfg_attr(not(feature = "bench"), allow(unreachable_pub))]
pub(crate) mod dispatch;
pub(crate) mod keys;
pub(crate) mod quarantine;
pub(crate) mod queue;
pub(crate) mod shard_gate;
pub(crate) mod state;
pub(crate) mod worker;
