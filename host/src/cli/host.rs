//! Assembles one running host: informers, runtime, plugins, directory watcher, endpoints and,
//! with `--leader-elect`, the leader elector whose leadership the plugins follow.
//! `kubewasm run`, `kubewasm dev` and the end-to-end tests all start the host through here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::election::{ElectionConfig, ElectionMetrics, LeaderElector};
use crate::informer::{InformerFactory, InformerMetrics, KubeSourceFactory, ReflectorConfig};
use crate::plugins::{ClusterContext, DirectoryWatcher, GrantPolicy, PluginManager, PluginMetrics};
use crate::runtime::{Limits, Runtime, RuntimeConfig, RuntimeMetrics};

/// Everything a host needs to start.
pub struct HostConfig {
    /// Access to the API server (real cluster or the embedded one).
    pub client: kube::Client,
    /// Directory to watch for plugins; `None` means plugins are loaded through the manager only.
    pub plugins_dir: Option<PathBuf>,
    /// Runtime settings (compile cache, log observer).
    pub runtime: RuntimeConfig,
    /// Limits for plugins without a manifest.
    pub limits: Limits,
    /// What plugins are granted (`GrantPolicy::default()`: the manifest's `[grants]`, else the
    /// built-in default).
    pub grants: GrantPolicy,
    /// Send every plugin write with `dryRun=All` and refuse non-GET outbound HTTP (`--dry-run`).
    pub dry_run: bool,
    /// Where `/metrics` is served; `None` disables it.
    pub metrics_addr: Option<SocketAddr>,
    /// Where `/healthz`, `/readyz` and `/plugins` are served; `None` disables them.
    pub health_addr: Option<SocketAddr>,
    /// How long in-flight handler calls may run on at shutdown before they are abandoned.
    pub shutdown_grace: Duration,
    /// Compete for this Lease and deliver only while holding it; `None` always delivers.
    pub election: Option<ElectionConfig>,
}

/// Default [`HostConfig::shutdown_grace`] (Kubernetes gives a pod 30 s before SIGKILL).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A running host; [`Host::shutdown`] stops it in order (watcher, plugins, informers, endpoints).
pub struct Host {
    /// The plugin manager, for loading files directly and subscribing to events.
    pub manager: PluginManager,
    /// The shared informers.
    pub factory: InformerFactory,
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

/// The per-user compile cache directory (`$XDG_CACHE_HOME/kubewasm` or `~/.cache/kubewasm`).
pub fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("kubewasm"))
}

impl Host {
    /// Starts the host; plugin files already in the directory are loaded before this returns.
    pub async fn start(config: HostConfig) -> anyhow::Result<Host> {
        Self::start_with(config, ReflectorConfig::default()).await
    }

    /// Like [`start`](Self::start), with informer settings other than the defaults (keeping
    /// `managedFields`; tests shorten the relist backoff).
    pub async fn start_with(
        config: HostConfig,
        informers: ReflectorConfig,
    ) -> anyhow::Result<Host> {
        let mut registry = Registry::default();
        let informer_metrics = InformerMetrics::new(&mut registry);
        let runtime_metrics = RuntimeMetrics::new(&mut registry);
        let plugin_metrics = PluginMetrics::new(&mut registry);
        let election_metrics = config
            .election
            .as_ref()
            .map(|_| ElectionMetrics::new(&mut registry));
        let registry = Arc::new(registry);

        let runtime = Runtime::new(config.runtime, runtime_metrics)?;
        let factory = InformerFactory::with_config(
            Arc::new(KubeSourceFactory::new(config.client.clone())),
            informer_metrics,
            informers,
        );
        let (manager, elector) = match (config.election, election_metrics) {
            (Some(election), Some(metrics)) => {
                let lease = format!("{}/{}", election.namespace, election.lease_name);
                let identity = election.identity.clone();
                let elector = LeaderElector::start(config.client.clone(), election, metrics)?;
                tracing::info!(lease = %lease, identity = %identity, "leader election: standing by until this replica holds the Lease");
                let manager = PluginManager::following(
                    runtime,
                    factory.clone(),
                    plugin_metrics,
                    config.limits,
                    config.grants,
                    elector.leadership(),
                );
                (manager, Some(elector))
            }
            _ => (
                PluginManager::new(
                    runtime,
                    factory.clone(),
                    plugin_metrics,
                    config.limits,
                    config.grants,
                ),
                None,
            ),
        };
        manager.connect_cluster(ClusterContext::new(
            config.client.clone(),
            config.dry_run,
            manager.metrics().clone(),
        ));
        if config.dry_run {
            tracing::warn!(
                "dry run: every plugin write is sent with dryRun=All and only GET/HEAD HTTP requests leave the host"
            );
        }
        let stop = CancellationToken::new();
        let starting = Arc::new(AtomicBool::new(config.plugins_dir.is_some()));

        let (metrics_addr, health_addr) = super::endpoints::serve(
            config.metrics_addr,
            config.health_addr,
            registry.clone(),
            manager.clone(),
            starting.clone(),
            stop.clone(),
        )
        .await?;

        let host = Host {
            manager,
            factory,
            registry,
            metrics_addr,
            health_addr,
            stop,
            watcher: None,
            starting,
            shutdown_grace: config.shutdown_grace,
            elector,
        };
        match config.plugins_dir {
            Some(dir) => host.watch_directory(dir).await,
            None => Ok(host),
        }
    }

    /// Starts watching `dir` (after loading what it holds), for hosts started without one.
    ///
    /// The plugins already there are all attached before their informers list, so they share
    /// one initial LIST and each receives it as `is-in-initial-list` adds in list order.
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
        self.factory.hold_starts();
        w.rescan().await;
        self.factory.release_starts();
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
