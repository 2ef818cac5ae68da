//! [`Host`]: a running host, built by [`HostBuilder`](super::HostBuilder), and its orderly stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::election::{LeaderElector, ShardRing};
use crate::informer::InformerFactory;
use crate::plugins::{DirectoryWatcher, PluginManager, PluginSources, SourceMetrics};
use crate::registry::Registry as ArtifactRegistry;
use crate::runtime::Runtime;

/// A running host; [`Host::shutdown`] stops it in order (watcher and sources, plugins,
/// informers, endpoints).
pub struct Host {
    manager: PluginManager,
    factory: InformerFactory,
    runtime: Runtime,
    registry: Arc<Registry>,
    metrics_addr: Option<SocketAddr>,
    health_addr: Option<SocketAddr>,
    stop: CancellationToken,
    watcher: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// The plugins of a sources file, if the host follows one.
    sources: Option<PluginSources>,
    /// True until the plugins directory's initial contents are loaded (`/readyz` says 503).
    starting: Arc<AtomicBool>,
    shutdown_grace: Duration,
    elector: Option<LeaderElector>,
    ring: Option<ShardRing>,
}

/// The parts [`super::HostBuilder::start`] assembles a [`Host`] from, named so that
/// [`Host::serve`] does not take them as a long positional list.
pub(super) struct HostParts {
    /// Loads, runs and unloads the plugins.
    pub manager: PluginManager,
    /// The informers the plugins watch through.
    pub factory: InformerFactory,
    /// The Wasm runtime the plugins run in.
    pub runtime: Runtime,
    /// Metrics served on the metrics endpoint.
    pub registry: Arc<Registry>,
    /// Where to serve `/metrics`, if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Where to serve `/healthz` and `/readyz`, if anywhere.
    pub health_addr: Option<SocketAddr>,
    /// How long in-flight handler calls may run on at shutdown.
    pub shutdown_grace: Duration,
    /// The leader elector, if the host stands for election.
    pub elector: Option<LeaderElector>,
    /// The shard ring's member, if the host runs sharded.
    pub ring: Option<ShardRing>,
    /// True if initial plugins are still to be loaded (`/readyz` says 503 until then).
    pub starting: bool,
}

impl Host {
    /// A host of these parts with its endpoints served; see [`super::HostBuilder::start`].
    pub(super) async fn serve(parts: HostParts) -> anyhow::Result<Host> {
        let HostParts {
            manager,
            factory,
            runtime,
            registry,
            metrics_addr,
            health_addr,
            shutdown_grace,
            elector,
            ring,
            starting,
        } = parts;
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
            sources: None,
            starting,
            shutdown_grace,
            elector,
            ring,
        })
    }

    /// Loads the plugins of a plugins directory and of a sources file side by side (each
    /// delivering as soon as it is loaded), then keeps following both; `/readyz` turns ready
    /// once every first load has settled, a pull's within the registry's pull deadline. The
    /// directory is watched as soon as its own first loads settled.
    pub(super) async fn load_initial(
        mut self,
        dir: Option<PathBuf>,
        sources: Option<(PathBuf, ArtifactRegistry, SourceMetrics)>,
    ) -> anyhow::Result<Host> {
        if let Some(dir) = &dir {
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
        }
        anyhow::ensure!(
            sources.is_none() || self.sources.is_none(),
            "the host already follows a sources file"
        );
        let manager = self.manager.clone();
        let watch_stop = self.stop.clone();
        // The directory is watched as soon as its own plugins settled, whatever a registry
        // does meanwhile: a slow pull delays only readiness, and that within its deadline.
        let directory = async {
            match dir {
                Some(dir) => {
                    let mut w = DirectoryWatcher::new(dir, manager.clone());
                    w.rescan().await;
                    Some(tokio::spawn(w.run(watch_stop)))
                }
                None => None,
            }
        };
        let stop = self.stop.clone();
        let from_registries = async {
            match sources {
                Some((file, registry, metrics)) => {
                    PluginSources::start(&file, registry, manager.clone(), metrics, stop)
                        .await
                        .map(Some)
                }
                None => Ok(None),
            }
        };
        let (w, sources) = tokio::join!(directory, from_registries);
        let sources = match sources {
            Ok(s) => s,
            Err(e) => {
                // The host does not start: the watcher already running stops with it.
                self.stop.cancel();
                if let Some(w) = w {
                    let _ = w.await;
                }
                return Err(e);
            }
        };
        if let Some(sources) = sources {
            self.sources = Some(sources);
        }
        if let Some(w) = w {
            self.watcher = Some(w);
        }
        self.starting.store(false, Ordering::Release);
        Ok(self)
    }

    /// The plugin manager, for loading files directly and reading what `/plugins` shows.
    pub fn manager(&self) -> &PluginManager {
        &self.manager
    }

    /// The informers the plugins share, for reading their caches and sync state.
    pub fn factory(&self) -> &InformerFactory {
        &self.factory
    }

    /// The engine the plugins run on, to describe a file without loading it or read its
    /// metrics.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The metrics registry served at `/metrics`, to read the figures without an HTTP request.
    pub fn metrics_registry(&self) -> &Registry {
        &self.registry
    }

    /// The bound address of `/metrics`, if served (port 0 asks for a free one).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The bound address of `/healthz` and `/readyz`, if served (port 0 asks for a free one).
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_addr
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
        // Slots first: no new call starts for them, their calls end (within the drain grace),
        // then the member Lease lists none, so the survivors take them at their next retry.
        if let Some(r) = self.ring {
            r.release().await;
        }
        if let Some(w) = self.watcher {
            let _ = w.await;
        }
        if let Some(s) = self.sources {
            s.stopped().await;
        }
        self.manager.shutdown(self.shutdown_grace).await;
        if let Some(e) = self.elector {
            e.release().await;
        }
        self.factory.shutdown().await;
    }
}
