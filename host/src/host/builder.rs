//! [`HostBuilder`]: every choice a host is made with, set before it starts and fixed after.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::sync::watch;

use super::running::{Host, HostParts};
use crate::election::{
    ElectionConfig, ElectionMetrics, LeaderElector, RingConfig, RingMetrics, ShardRing,
    SlotOwnership,
};
use crate::informer::{InformerFactory, InformerMetrics, KubeSourceFactory, ReflectorConfig};
use crate::plugins::{
    ClusterContext, DeliveryMode, GrantPolicy, HostPod, ManagerConfig, OwnObjects, PluginManager,
    PluginMetrics, SourceMetrics, follow_leadership,
};
use crate::plugins::{GateDrain, ShardGate};
use crate::registry::Registry as ArtifactRegistry;
use crate::runtime::{Limits, Runtime, RuntimeConfig, RuntimeMetrics, SharedObserver, fan_out};

/// How long in-flight handler calls may run on at shutdown before they are abandoned by
/// default (Kubernetes gives a pod 30 s before SIGKILL).
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Builds a [`Host`]; see the module doc of [`crate::host`]. Defaults: no plugins folder, no
/// endpoints, the runtime's and informers' defaults, the operator's grants (the manifest's
/// `[grants]`, else the built-in default), no leader election, worker threads, no observers.
#[must_use = "a builder does nothing until `start`"]
pub struct HostBuilder {
    client: kube::Client,
    plugins_dir: Option<PathBuf>,
    plugin_sources: Option<(PathBuf, ArtifactRegistry)>,
    runtime: RuntimeConfig,
    informers: ReflectorConfig,
    limits: Limits,
    default_concurrency: usize,
    grants: GrantPolicy,
    own_objects: OwnObjects,
    host_pod: Option<HostPod>,
    plugin_accounts: Option<String>,
    dry_run: bool,
    metrics_addr: Option<SocketAddr>,
    health_addr: Option<SocketAddr>,
    shutdown_grace: Duration,
    election: Option<ElectionConfig>,
    leadership: Option<watch::Receiver<bool>>,
    ring: Option<RingConfig>,
    /// Told of everything, in this order.
    observers: Vec<SharedObserver>,
    delivery: DeliveryMode,
}

impl HostBuilder {
    /// A host that reaches the API server (a real cluster or the embedded one) through `client`.
    pub fn new(client: kube::Client) -> Self {
        HostBuilder {
            client,
            plugins_dir: None,
            plugin_sources: None,
            runtime: RuntimeConfig::default(),
            informers: ReflectorConfig::default(),
            limits: Limits::default(),
            default_concurrency: 1,
            grants: GrantPolicy::default(),
            own_objects: OwnObjects::default(),
            host_pod: None,
            plugin_accounts: None,
            dry_run: false,
            metrics_addr: None,
            health_addr: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            election: None,
            leadership: None,
            ring: None,
            observers: Vec::new(),
            delivery: DeliveryMode::Threads,
        }
    }

    /// Loads every plugin in `dir` before `start` returns, then keeps the set of plugins equal
    /// to its files (hot load, swap and unload). Without one, plugins are loaded through
    /// [`Host::manager`] only.
    pub fn plugins_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.plugins_dir = Some(dir.into());
        self
    }

    /// Loads every plugin the sources file names from its registry (through `registry`, which
    /// holds the credentials) before `start` returns, then follows them: a followed tag is
    /// polled, failures retried. Works beside [`HostBuilder::plugins_dir`]; names must differ.
    pub fn plugin_sources(mut self, file: impl Into<PathBuf>, registry: ArtifactRegistry) -> Self {
        self.plugin_sources = Some((file.into(), registry));
        self
    }

    /// Runtime settings (compile cache, pool size, memory ceiling, HTTP stand-in). Its
    /// `observer`, if any, is told everything too, after those of [`HostBuilder::observer`].
    pub fn runtime(mut self, config: RuntimeConfig) -> Self {
        self.runtime = config;
        self
    }

    /// Addresses of the API server the host talks to: plugins reach them only through a grant
    /// that names them (call it after [`HostBuilder::runtime`], which replaces them).
    pub fn cluster_api_addresses(mut self, addrs: Vec<std::net::IpAddr>) -> Self {
        self.runtime.cluster_api_addresses.extend(addrs);
        self
    }

    /// Informer settings (keeping `managedFields`, relist backoff).
    pub fn informers(mut self, config: ReflectorConfig) -> Self {
        self.informers = config;
        self
    }

    /// Calls in flight per plugin whose manifest sets no `concurrency` (default 1, the
    /// informer's order; clamped to the manifest's bound).
    pub fn default_concurrency(mut self, n: usize) -> Self {
        self.default_concurrency = n;
        self
    }

    /// Limits of plugins whose manifest sets none.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How each plugin's grants are decided.
    pub fn grants(mut self, grants: GrantPolicy) -> Self {
        self.grants = grants;
        self
    }

    /// The host's own objects, which no plugin may write (default: `deploy/`'s names).
    pub fn own_objects(mut self, own_objects: OwnObjects) -> Self {
        self.own_objects = own_objects;
        self
    }

    /// The host's own Pod: at start the host reads it and adds what it names (its siblings,
    /// ReplicaSet, Deployment, mounted ConfigMaps and Secrets, ServiceAccount, bindings, PDB)
    /// to the own objects; `kubewasm run` passes the downward API's (`POD_NAME`,
    /// `POD_NAMESPACE`). Without one, the own objects are the static ones.
    pub fn host_pod(mut self, pod: Option<HostPod>) -> Self {
        self.host_pod = pod;
        self
    }

    /// Makes every plugin's `kube` calls impersonate its own ServiceAccount
    /// (`kubewasm-plugin-<name>`) in `namespace` (`None`, the default: they act as the host).
    /// The host then needs the `impersonate` permission `kubewasm rbac` prints.
    pub fn plugin_accounts(mut self, namespace: Option<String>) -> Self {
        self.plugin_accounts = namespace;
        self
    }

    /// Sends every plugin write with `dryRun=All` and refuses outbound HTTP but GET and HEAD.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Serves `/metrics` here (port 0 picks one; see [`Host::metrics_addr`]).
    pub fn metrics_addr(mut self, addr: Option<SocketAddr>) -> Self {
        self.metrics_addr = addr;
        self
    }

    /// Serves `/healthz`, `/readyz`, `/plugins` and `/leader` here.
    pub fn health_addr(mut self, addr: Option<SocketAddr>) -> Self {
        self.health_addr = addr;
        self
    }

    /// How long in-flight calls may run on at shutdown before they are abandoned.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Competes for this Lease and delivers only while holding it.
    pub fn election(mut self, election: Option<ElectionConfig>) -> Self {
        self.election = election;
        self
    }

    /// Runs active-active with the other replicas of `ring`: each holds a member Lease listing
    /// the slots of the hash space it owns, and a plugin whose manifest says `shard` handles
    /// only the objects of those slots. Plugins that do not shard follow the leader election
    /// of [`HostBuilder::election`], which a sharded host should also be given.
    pub fn sharding(mut self, ring: Option<RingConfig>) -> Self {
        self.ring = ring;
        self
    }

    /// Delivers only while `leadership` reads `true`, decided outside the host (the scenario
    /// runner's leadership steps); not together with [`HostBuilder::election`].
    pub fn follow(mut self, leadership: watch::Receiver<bool>) -> Self {
        self.leadership = Some(leadership);
        self
    }

    /// Lets `observer` see what happens to every plugin (loaded, swapped, refused, quarantined,
    /// unloaded) and every call, `kube` request, Event, guest log line and HTTP request. Call it
    /// once per observer (metrics, logs, CLI output, a test's recorder): each is told
    /// everything, in the order they were added. Given before `start`, an observer sees the
    /// plugins folder's first loads too.
    pub fn observer(mut self, observer: SharedObserver) -> Self {
        self.observers.push(observer);
        self
    }

    /// Where plugin calls run (worker threads unless the caller owns the only clock).
    pub fn delivery(mut self, mode: DeliveryMode) -> Self {
        self.delivery = mode;
        self
    }

    /// Starts the host; plugin files already in the folder are loaded before this returns.
    pub async fn start(self) -> anyhow::Result<Host> {
        anyhow::ensure!(
            self.election.is_none() || self.leadership.is_none(),
            "a host either competes for a Lease or follows leadership given to it, not both"
        );
        let mut registry = Registry::default();
        let informer_metrics = InformerMetrics::new(&mut registry);
        let runtime_metrics = RuntimeMetrics::new(&mut registry);
        let plugin_metrics = PluginMetrics::new(&mut registry);
        let source_metrics = self
            .plugin_sources
            .as_ref()
            .map(|_| SourceMetrics::new(&mut registry));
        let election_metrics = self
            .election
            .as_ref()
            .map(|_| ElectionMetrics::new(&mut registry));
        let ring_metrics = self.ring.as_ref().map(|_| RingMetrics::new(&mut registry));
        let registry = Arc::new(registry);

        let mut runtime_config = self.runtime;
        let mut observers = self.observers;
        observers.extend(runtime_config.observer.take());
        runtime_config.observer = fan_out(observers);
        let runtime = Runtime::new(runtime_config, runtime_metrics)?;
        let factory = InformerFactory::with_config(
            Arc::new(KubeSourceFactory::new(self.client.clone())),
            informer_metrics,
            self.informers,
        );
        let (elector, leadership) = match (self.election, election_metrics) {
            (Some(election), Some(metrics)) => {
                let lease = format!("{}/{}", election.namespace, election.lease_name);
                let identity = election.identity.clone();
                let elector = LeaderElector::start(self.client.clone(), election, metrics)?;
                tracing::info!(lease = %lease, identity = %identity, "leader election: standing by until this replica holds the Lease");
                let leadership = elector.leadership();
                (Some(elector), Some(leadership))
            }
            _ => (None, self.leadership),
        };
        // The gate exists before the ring so the ring can drain through it; it admits nothing
        // until the ring has confirmed a slot.
        let (ring, shard_gate) = match (self.ring, ring_metrics) {
            (Some(config), Some(metrics)) => {
                let gate = ShardGate::new();
                let ring = ShardRing::start(
                    self.client.clone(),
                    config,
                    Arc::new(GateDrain(gate.clone())),
                    metrics,
                )?;
                tracing::info!(lease = %ring.lease_name(), identity = %ring.identity(), "sharding: this replica claims slots of the ring through its member Lease");
                gate.follow(ring.ownership());
                factory.set_shard_scope(held_ranges(ring.ownership()));
                (Some(ring), Some(gate))
            }
            _ => (None, None),
        };
        let own_objects = match &self.host_pod {
            Some(pod) => super::host_pod::with_host_pod(&self.client, pod, self.own_objects).await,
            None => self.own_objects,
        };
        if let Some(ns) = &self.plugin_accounts {
            tracing::info!(
                namespace = %ns,
                "plugins act under identities of their own: each kube call impersonates ServiceAccount kubewasm-plugin-<plugin>"
            );
        }
        let cluster = ClusterContext::with_identity(
            self.client.clone(),
            self.dry_run,
            plugin_metrics.clone(),
            runtime.observer().cloned(),
            own_objects,
            self.plugin_accounts,
        );
        if self.dry_run {
            tracing::warn!(
                "dry run: every plugin write is sent with dryRun=All and only GET/HEAD HTTP requests leave the host"
            );
        }
        let manager = PluginManager::new(ManagerConfig {
            runtime: runtime.clone(),
            factory: factory.clone(),
            metrics: plugin_metrics,
            defaults: self.limits,
            default_concurrency: self.default_concurrency,
            grants: self.grants,
            cluster: Some(cluster),
            leadership: leadership.clone(),
            delivery: self.delivery,
            shard_gate,
        });
        if let Some(leadership) = leadership {
            follow_leadership(&manager, leadership);
        }
        let host = Host::serve(HostParts {
            manager,
            factory,
            runtime,
            registry,
            metrics_addr: self.metrics_addr,
            health_addr: self.health_addr,
            shutdown_grace: self.shutdown_grace,
            elector,
            ring,
            starting: self.plugins_dir.is_some() || self.plugin_sources.is_some(),
        })
        .await?;
        let sources = self
            .plugin_sources
            .zip(source_metrics)
            .map(|((file, registry), metrics)| (file, registry, metrics));
        if self.plugins_dir.is_none() && sources.is_none() {
            return Ok(host);
        }
        host.load_initial(self.plugins_dir, sources).await
    }
}

/// The ranges the sharded informers are to hold, following the ring's ownership: empty while
/// none is held or the replica is fenced (its cache then empties; a re-claim replays).
fn held_ranges(mut ownership: watch::Receiver<SlotOwnership>) -> watch::Receiver<Vec<(u64, u128)>> {
    let ranges = |o: &SlotOwnership| o.ranges();
    let (tx, rx) = watch::channel(ranges(&ownership.borrow_and_update()));
    tokio::spawn(async move {
        while ownership.changed().await.is_ok() {
            let next = ranges(&ownership.borrow_and_update());
            tx.send_if_modified(|held| {
                let changed = *held != next;
                *held = next;
                changed
            });
        }
    });
    rx
}
