//! Plugins: the glue between informers and the WASM runtime.
//!
//! Each plugin file becomes a [`PluginManager`] entry whose subscriptions are listeners on the
//! shared informers; notifications flow through a per-plugin queue to a worker thread that owns
//! the guest instance. The [`DirectoryWatcher`] keeps the set of plugins equal to the files in
//! the plugins directory.

pub mod cache_reader;
pub mod dispatch;
pub mod events;
pub mod lifecycle;
pub mod manifest;
pub mod metrics;
pub mod watcher;

pub use events::{CallOutcome, PluginEvent};
pub use lifecycle::{
    LoadError, LoadOutcome, PluginManager, PluginStatus, informer_key, plugin_name,
};
pub use manifest::Manifest;
pub use metrics::{CallKind, PluginMetrics};
pub use watcher::DirectoryWatcher;
