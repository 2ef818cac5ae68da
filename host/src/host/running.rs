//! [`Host`]: a running host, built by [`HostBuilder`](super::HostBuilder), and its orderly stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::election::LeaderElector;
use crate::informer::InformerFactory;
use crate::plugins::{DirectoryWatcher, PluginManager};
use crate::runtime::Runtime;

/// A running host; [`Host::shutdown`] stops it in order (watcher, plugins, informers, endpoints).
pub struct Host {
    /// The plugin manager, for loading files directly and subscribing to events.
    pub manager: PluginManager,
    /// The shared informers.
    pub factory: InformerFactory,
    /// The engine the plugins run on (to describe a file without loading it).
    pub runtime: Runtime,
    /// The metrics registry served at `/metrics`.
    pub registry: Arc<Registry>,
    /// Bound address of `/metrics`, if enabled.
    pub metrics_addr: Option<SocketAddr>,
    /// Bound address of `/healthz` and `/readyz`, if enabled.
    pub health_addr: Option<SocketAddr>,
    stop: CancellationToken,
    watcher: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// True until the plugins directory's initial contents are loaded (`/readyz` says 503).
    starting: Arc<AtomicBool>,
    shutdown_grace: Duration,
    elector: Option<LeaderElector>,
}

impl Host {
    /// A host of these parts with its endpoints served; see [`super::HostBuilder::start`].
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn serve(
        manager: PluginManager,
        factory: InformerFactory,
        runtime: Runtime,
        registry: Arc<Registry>,
        metrics_addr: Option<SocketAddr>,
        health_addr: Option<SocketAddr>,
        shutdown_grace: Duration,
        elector: Option<LeaderElector>,
        starting: bool,
    ) -> anyhow::Result<Host> {
        let stop = CancellationToken::new();
        let starting = Arc::new(AtomicBool::new(starting));
        let (metrics_addr, health_addr) = super::endpoints::serve(
            metrics_addr,
            health_addr,
            registry.clone(),
            manager.clone(),
            starting.clone(),
            stop.clone(),
        )
        .await?;
        Ok(Host {
            manager,
            factory,
            runtime,
            registry,
            metrics_addr,
            health_addr,
            stop,
            watcher: None,
            starting,
            shutdown_grace,
            elector,
        })
    }

    /// Starts watching `dir` (after loading what it holds), for hosts started without one.
    ///
    /// Every plugin already there loads on its own and delivers as soon as it is compiled and
    /// described: the first to subscribe starts an informer, later ones join it with a replay
    /// of its cache (`is-in-initial-list` adds), as on a hot swap, so one slow compile delays
    /// nobody else. This returns, and `/readyz` turns ready, only once every load has settled.
    pub async fn watch_directory(mut self, dir: PathBuf) -> anyhow::Result<Host> {
        anyhow::ensure!(
            self.watcher.is_none(),
            "the host already watches a plugins directory"
        );
        if !dir.is_dir() {
            anyhow::bail!(
                "plugins directory {} does not exist or is not a directory",
                dir.display()
            );
        }
        let mut w = DirectoryWatcher::new(dir, self.manager.clone());
        w.rescan().await;
        self.starting.store(false, Ordering::Release);
        self.watcher = Some(tokio::spawn(w.run(self.stop.clone())));
        Ok(self)
    }

    /// Resolves when the host was asked to stop.
    pub async fn stopped(&self) {
        self.stop.cancelled().await
    }

    /// This replica's leader election identity, if it competes for a Lease.
    pub fn identity(&self) -> Option<&str> {
        self.elector.as_ref().map(LeaderElector::identity)
    }

    /// Stops watching, unloads every plugin (closing their watches), releases the leader Lease
    /// and stops the informers and endpoints. In-flight handler calls may finish within the
    /// shutdown grace period; then they are abandoned, so this returns within about that period
    /// whatever the guests do. The Lease is released only once nothing delivers any more, so
    /// the standby that takes it over at once never overlaps with this replica.
    pub async fn shutdown(self) {
        self.stop.cancel();
        if let Some(w) = self.watcher {
            let _ = w.await;
        }
        self.manager.shutdown(self.shutdown_grace).await;
        if let Some(e) = self.elector {
            e.release().await;
        }
        self.factory.shutdown().await;
    }
}
