//! Plugins from OCI registries, named in a sources file the operator controls
//! (`--plugin-sources FILE`): [`file`] reads and checks it, [`sync`] keeps each plugin equal to
//! its source, [`metrics`] counts pulls. Loading itself is the same lifecycle as a dropped file.

pub(crate) mod file;
pub(crate) mod metrics;
pub(crate) mod sync;

use std::path::Path;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::lifecycle::PluginManager;
use crate::registry::Registry;
use metrics::SourceMetrics;
use sync::SourceSync;

pub use file::SourcesFileError;

/// The plugin names a sources file lists, checked exactly as the host checks it at start
/// (references, keys, manifests): how a deployment's file is validated before it ships.
pub fn read_sources_file(path: &Path) -> Result<Vec<String>, SourcesFileError> {
    Ok(file::load(path)?.into_iter().map(|s| s.name).collect())
}

/// The plugins of a sources file, each kept equal to its source by a task of its own.
pub(crate) struct PluginSources {
    tasks: Vec<JoinHandle<()>>,
    /// Private (0700) directory the pulled components are loaded from.
    _staging: tempfile::TempDir,
}

impl PluginSources {
    /// Reads the sources file at `path`, pulls and loads every plugin it names (side by side, each delivering as
    /// soon as it is loaded), then keeps following them until `stop`. Returns once every first
    /// attempt has settled (each within the registry's pull deadline) or `stop`; failures are logged and retried, never fatal. A sources file that
    /// does not parse is an error naming the file and entry.
    pub(crate) async fn start(
        path: &Path,
        registry: Registry,
        manager: PluginManager,
        metrics: SourceMetrics,
        stop: CancellationToken,
    ) -> anyhow::Result<PluginSources> {
        let sources = file::load(path)?;
        let staging = tempfile::Builder::new()
            .prefix("kubewasm-sources-")
            .tempdir()?;
        let mut syncs: Vec<SourceSync> = sources
            .into_iter()
            .map(|s| {
                SourceSync::new(
                    s,
                    registry.clone(),
                    manager.clone(),
                    staging.path(),
                    metrics.clone(),
                )
            })
            .collect();
        // Each first attempt ends within the registry's pull deadline; a stop ends them all.
        tokio::select! {
            _ = futures::future::join_all(syncs.iter_mut().map(SourceSync::attempt)) => {}
            _ = stop.cancelled() => {}
        }
        let tasks = syncs
            .into_iter()
            .map(|s| tokio::spawn(s.run(stop.clone())))
            .collect();
        Ok(PluginSources {
            tasks,
            _staging: staging,
        })
    }

    /// Waits for every source's task to end (after the stop token was cancelled).
    pub(crate) async fn stopped(self) {
        futures::future::join_all(self.tasks).await;
    }
}
