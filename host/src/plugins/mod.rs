//! Plugins: the glue between informers and the WASM runtime.
//!
//! Each plugin file becomes a [`PluginManager`] entry whose subscriptions are listeners on the
//! shared informers; notifications flow through a bounded per-plugin queue to a worker thread
//! that owns the guest instance. The [`DirectoryWatcher`] keeps the set of plugins equal to the
//! files in the plugins directory. What each plugin may do beyond receiving events is what its
//! [`Grants`] allow; a plugin asking for more is not loaded. Under leader election the manager follows leadership
//! (see `leadership.rs`): a standby keeps its plugins loaded and caches warm but delivers nothing.
//!
//! Knows nothing of wasmtime (the runtime's instances are one [`Guest`] implementation) nor of
//! how informers list and watch (it registers handlers on a factory).

mod cache_reader;
mod dispatch;
mod event_recorder;
mod events;
mod grants;
mod kube_client;
mod leadership;
mod lifecycle;
mod manifest;
mod metrics;
mod projected;
mod projection;
mod quarantine;
mod queue;
mod state;
mod subscriptions;
mod watcher;
mod worker;

#[cfg(test)]
mod tests;

pub use cache_reader::SubscribedCache;
pub use dispatch::{CallTap, DispatchConfig, Dispatcher, Guest, StateSink};
pub use event_recorder::{EVENT_BACKLOG, EVENT_BURST, EVENT_QPS, MAX_SERIES, SERIES_WINDOW};
pub use events::{CallOutcome, PluginEvent};
pub use grants::{
    DEFAULT_WRITE_BURST, DEFAULT_WRITE_QPS, GrantError, GrantPolicy, GrantSource, Grants,
    GrantsTable, Missing, OriginPattern, READ_VERBS, Verb, WriteGrant, toml_lines,
};
pub use kube_client::{CallObserver, ClusterContext, KUBE_CALL_TIMEOUT, PluginClient};
pub use lifecycle::{
    DescribedPlugin, LoadError, LoadOutcome, MAX_PLUGIN_BYTES, PluginManager, PluginStatus,
    describe_file, describe_plugin, informer_key, plugin_name,
};
pub use manifest::{Manifest, ManifestError};
pub use metrics::{
    CallKind, EventDropLabels, EventLabels, KubeRequestLabels, PluginMetrics, VerbLabels,
};
pub use projected::{ProjectionCache, Projections};
pub use projection::{MAX_FIELDS, MAX_POINTER_BYTES, Projection, ProjectionError};
pub use quarantine::QuarantinePolicy;
pub use queue::{DEFAULT_MAX_QUEUED, coalesce};
pub use state::{PluginState, StateEvent};
pub use subscriptions::{
    MAX_SUBSCRIPTIONS, SubscriptionError, SubscriptionPlan, validate_subscriptions,
};
pub use watcher::{DirectoryWatcher, is_plugin_file};
pub use worker::spawn_worker;
