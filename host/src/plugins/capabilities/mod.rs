//! Capabilities: what a running guest may do beyond receiving events, each under its grants.
//!
//! [`kube_client`] carries out `kube` calls under the identity [`acting_as`] puts on them; [`event_recorder`] records Events with client-go's
//! rate limit and series folding; [`cache_reader`] answers reads from the informers' caches;
//! [`projection`] and [`projected`] cut objects to the fields a subscription asked for.
//!
//! These implement the small traits the runtime defines (`ClusterAccess`, `CacheReader`), so
//! the runtime never learns where an answer came from.

pub(crate) mod acting_as;
pub(crate) mod cache_reader;
pub(crate) mod event_recorder;
pub(crate) mod kube_client;
pub(crate) mod projected;
pub(crate) mod projection;
