//! Kubernetes informers with client-go semantics (classic DeltaFIFO path), natively in Rust.
//!
//! Pipeline: [`ListerWatcher`] → reflector → [`DeltaFifo`] → process loop (updates the
//! [`Indexer`], then notifies) → one listener per handler → [`ResourceEventHandler`].
//! [`InformerFactory`] shares one informer per [`InformerKey`] between handlers. See
//! `shared/reference/informer-semantics.md` for the normative behaviour.
//!
//! Knows nothing of WebAssembly, plugins or guests: a handler is any [`ResourceEventHandler`],
//! called on the informer's own tasks, and what it does with a notification (queueing,
//! retries, quarantine) is the caller's business. Selector and name syntax come from
//! `kubewasm-apimachinery`, shared with the embedded API server. The API server is reached only
//! through a [`SourceFactory`] ([`KubeSourceFactory`] in production, scripted sources in tests).
//!
//! A [sharded](InformerKey::sharded) informer holds only the objects of the hash ranges its
//! factory's [shard scope](InformerFactory::set_shard_scope) lists (KEP-5866, see `shard.rs`).

mod backoff;
mod delta_fifo;
mod error;
mod factory;
mod indexer;
mod key;
mod kube_source;
mod list_watch;
mod listener;
mod metrics;
mod object;
mod processor;
mod reflector;
mod resync;
mod shard;
mod shared_informer;

#[cfg(test)]
mod tests;

pub use backoff::BackoffConfig;
pub use delta_fifo::{DeletedFinalStateUnknown, Delta, DeltaFifo, DeltaObject, DeltaType};
pub use error::InformerError;
pub use factory::{HandlerRegistration, InformerFactory, SyncProbe};
pub use indexer::{IndexError, Indexer};
pub use key::{InformerKey, InvalidKey, KeyRule, MAX_SELECTOR_LEN};
pub use kube_source::KubeSourceFactory;
pub(crate) use kube_source::{resolve_kind, resource_path};
pub use kubewasm_apimachinery::{LabelSelector, ShardField};
pub use list_watch::{
    ListOptions, ListPage, ListerWatcher, SourceError, SourceErrorKind, SourceFactory,
    SourceObject, WatchEvent, WatchOptions, WatchStream,
};
pub use listener::{FilteringHandler, Notification, ResourceEventHandler};
pub use metrics::InformerMetrics;
pub use object::{KubeObject, MalformedObject, ObjectMeta, SharedObject, json_serialisations};
pub(crate) use object::{Members as JsonMembers, raw_str as raw_json_str};
pub use reflector::ReflectorConfig;
pub use shard::ShardRanges;
pub use shared_informer::{HandlerHandle, SharedIndexInformer};
// Only the unit tests name these.
#[cfg(test)]
use {
    indexer::{IndexFunc, NAMESPACE_INDEX},
    reflector::TransformFunc,
};
