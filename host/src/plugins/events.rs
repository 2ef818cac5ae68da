//! Lifecycle and delivery events a host publishes, so that tests, `kubewasm dev` and tooling
//! can await what happened instead of polling logs or sleeping.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::{CallKind, CallOutcome, PluginInfo};

/// Something a plugin host did.
#[derive(Clone, Debug)]
pub enum PluginEvent {
    /// A plugin file was loaded for the first time and is receiving its replay.
    Loaded {
        /// Plugin name (file stem).
        plugin: String,
        /// Host-assigned version number, unique for the process.
        version: u64,
        /// What the handler's `describe()` returned (after manifest overrides).
        info: PluginInfo,
    },
    /// A changed file replaced the running version.
    Swapped {
        /// Plugin name (file stem).
        plugin: String,
        /// The version that stopped.
        from: u64,
        /// The version now receiving.
        to: u64,
    },
    /// A file could not be loaded; any previous version keeps running.
    LoadFailed {
        /// Plugin name (file stem).
        plugin: String,
        /// The offending file.
        path: PathBuf,
        /// The cause, naming the file.
        error: String,
    },
    /// A plugin was removed and its listeners detached.
    Unloaded {
        /// Plugin name (file stem).
        plugin: String,
        /// The version that stopped.
        version: u64,
    },
    /// A handler export was called.
    Called {
        /// Plugin name (file stem); shared, as this event is published for every call.
        plugin: Arc<str>,
        /// The plugin version that handled it.
        version: u64,
        /// Which export.
        call: CallKind,
        /// `namespace/name` of the object.
        key: Arc<str>,
        /// The object's `apiVersion` (empty when nobody listened as the call ended).
        api_version: String,
        /// The object's `kind` (likewise).
        kind: String,
        /// The delivered object's resourceVersion (the new one for an update), so tooling can
        /// reconstruct what the handler has seen.
        resource_version: String,
        /// `is-in-initial-list`, `is-sync` or `final-state-unknown`, by export.
        flag: bool,
        /// How it ended.
        outcome: CallOutcome,
    },
    /// A 0.2.0 handler's `on-synced` was called: its replay was handled, so it has seen every
    /// object its subscriptions hold.
    Synced {
        /// Plugin name (file stem).
        plugin: Arc<str>,
        /// The plugin version that handled it.
        version: u64,
        /// How it ended (a `retry` or a failed call is called again after a backoff).
        outcome: CallOutcome,
    },
    /// A plugin was paused after consecutive failed calls.
    Quarantined {
        /// Plugin name (file stem).
        plugin: String,
        /// How long deliveries are paused.
        pause: Duration,
    },
}
