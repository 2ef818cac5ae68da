//! What the manager tells the outside about each plugin: the outcome of a load and the
//! snapshot `/plugins`, `/readyz`, logs and tests read. Plain data, so readers never hold a lock.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::plugins::delivery::state::PluginState;
use crate::plugins::grants::Grants;
use crate::runtime::PluginInfo;

/// What a successful [`PluginManager::load_file`](super::PluginManager::load_file) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadOutcome {
    /// First version of this plugin.
    Loaded {
        /// The new version number.
        version: u64,
    },
    /// Replaced a running version.
    Swapped {
        /// The version that stopped.
        from: u64,
        /// The version now running.
        to: u64,
    },
    /// The file and manifest are byte-for-byte what is already running.
    Unchanged,
}

/// A snapshot of one plugin, for `/plugins`, `/readyz`, logs and tests.
#[derive(Clone, Debug, Serialize)]
pub struct PluginStatus {
    /// Plugin name (file stem).
    pub name: String,
    /// The file it was (last) loaded from.
    pub path: PathBuf,
    /// Where the plugin stands.
    #[serde(flatten)]
    pub state: PluginState,
    /// Host-assigned version of the running version; 0 when none runs.
    pub version: u64,
    /// What the running version's `describe()` returned (after manifest overrides and merging).
    pub info: Option<PluginInfo>,
    /// What the running version is granted.
    pub grants: Option<Arc<Grants>>,
    /// A version runs, every subscription's informer has synced and the plugin has handled its
    /// replay.
    pub ready: bool,
    /// Notifications waiting.
    pub queue_depth: usize,
    /// Calls the running version may have in flight at once (its `concurrency`).
    pub concurrency: usize,
    /// Calls in flight now.
    pub calls_in_flight: usize,
    /// Guest instances its worker holds now (created lazily, at most `concurrency`).
    pub instances: usize,
    /// The running version's memory: its budget (the worst case of all its instances together,
    /// linear memory and what the host holds for them) and what they use now.
    pub memory: Option<MemoryUse>,
}

/// A plugin's memory budget and its use, in bytes.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MemoryUse {
    /// The most its instances may use together (`memory` in its manifest): its worst case.
    pub budget_bytes: u64,
    /// What they use now.
    pub used_bytes: u64,
}
