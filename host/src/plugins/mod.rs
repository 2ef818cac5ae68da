//! Plugins: the glue between informers and the WASM runtime, in rooms by job, each importing
//! only the rooms listed after it.
//!
//! - `leadership.rs`: follows the election's channel (`follow_leadership`): a standby keeps
//!   its plugins loaded and caches warm, and delivers nothing.
//! - `loading/`: a file (and its `NAME.toml`) becomes a running version: describe, grants,
//!   manifest, subscriptions, the [`PluginManager`]'s lifecycle (load, hot swap, unload), the
//!   `DirectoryWatcher` that keeps the plugins equal to a folder's files and the
//!   `PluginSources` that keep them equal to OCI artifacts.
//! - `delivery/`: notifications flow through a bounded per-plugin queue to a `Dispatcher` and
//!   the worker that owns the guest instance; quarantine and the plugin state machine.
//! - `capabilities/`: what a guest may do beyond receiving events, each within its [`Grants`]:
//!   `kube` calls, Events, cache reads, projections.
//! - `grants/`: the operator's policy, which loading and capabilities both read.
//!
//! `metrics.rs` serves them all; what happens to plugins is told to the runtime's
//! [`Observer`](crate::runtime::Observer). Only what this file re-exports is public; everything
//! else is the rooms' business.
//!
//! Knows nothing of wasmtime (the runtime's instances are one implementation of its `Guest`
//! trait) nor of how informers list and watch (it registers handlers on a factory).

mod capabilities;
mod delivery;
mod grants;
mod leadership;
mod loading;
mod metrics;

#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod tests;

pub use capabilities::kube_client::{ClusterContext, PluginClient};
pub use capabilities::projected::ProjectionCache;
pub use capabilities::projection::{Projection, ProjectionError};
pub use delivery::attachment::{CallGate, DeliveryMode};
pub use delivery::dispatch::{DispatchConfig, MAX_CONCURRENCY};
// A dispatcher without a runtime or informers, only for `host/benches/queue.rs`.
pub(crate) use capabilities::kube_client::plugin_account;
#[cfg(feature = "bench")]
pub use delivery::dispatch::{Dispatcher, Guest};
pub use delivery::quarantine::QuarantinePolicy;
pub use delivery::queue::DEFAULT_MAX_QUEUED;
pub use delivery::shard_gate::{GateDrain, ShardGate};
pub use delivery::state::{PluginState, StateEvent};
pub use grants::NEVER_GRANTED_SUBRESOURCES;
pub(crate) use grants::{DEFAULT_PLUGINS_CONFIGMAP, PLUGIN_ACCOUNT_PREFIX};
pub use grants::{
    DefaultGrantsError, GrantError, GrantPolicy, GrantSource, Grants, GrantsTable, HostPod,
    InvalidAsk, Missing, OriginError, OriginPattern, OriginProblem, OwnName, OwnObject, OwnObjects,
    OwnScope, ResourceGrant, Verb, WriteGrant,
};
pub(crate) use grants::{NamespaceList, READ_VERBS, host_pod_objects};
pub(crate) use leadership::follow_leadership;
pub(crate) use loading::describe::DescribedPlugin;
pub use loading::describe::NameError;
pub(crate) use loading::describe::{describe_file, plugin_name};
pub use loading::error::LoadError;
pub use loading::lifecycle::{LoadOutcome, ManagerConfig, MemoryUse, PluginManager, PluginStatus};
pub use loading::manifest::{Manifest, ManifestError};
pub(crate) use loading::sources::PluginSources;
pub(crate) use loading::sources::metrics::SourceMetrics;
pub use loading::sources::{SourcesFileError, read_sources_file};
pub(crate) use loading::watcher::DirectoryWatcher;
pub(crate) use loading::watcher::is_plugin_file;
pub use metrics::{EventDropLabels, PluginMetrics, RateLimitLabels};
