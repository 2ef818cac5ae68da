//! An embedded, in-process Kubernetes API server speaking the real wire protocol.
//!
//! It exists so kubewasm can run on a laptop with no cluster and so every test has an API server that behaves
//! like the real one under list, watch, relist and faults. The real `kubectl` and kube-rs are its clients.
//! See `README.md` for what is implemented and what is approximated.

#![warn(missing_docs)]

mod audit;
mod authn;
mod authz;
mod builtins;
mod controllers;
mod defaults;
mod deletion;
mod discovery;
mod events;
mod faults;
mod gc;
mod managed;
mod namespaces;
mod openapi;
mod ops;
mod partition;
mod patch;
mod persistence;
mod prepare;
mod protobuf;
mod registry;
mod routes;
mod scale;
mod selectors;
mod status;
mod store;
mod table;
mod validation;
mod watch;
mod workloads;

pub mod cli;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use parking_lot::RwLock;

pub use audit::AuditSink;
pub use authz::Authorization;
pub use builtins::KUBERNETES_VERSION;
pub use faults::{Faults, RECENT_REQUESTS, Stats};
pub use partition::PartitionProxy;
pub use workloads::{NODE_NAME, SIMULATE_ANNOTATION, WorkloadConfig};

use faults::Counters;
use persistence::{Loaded, Persistence};
use registry::Registry;
use store::Store;

/// The kinds the server serves without any CRD: `(apiVersion, kind, namespaced)`.
pub fn builtin_kinds() -> Vec<(String, String, bool)> {
    Registry::with_builtins()
        .all()
        .iter()
        .map(|rt| (rt.api_version(), rt.kind.clone(), rt.namespaced))
        .collect()
}

/// The resources of [`builtin_kinds`] as RBAC names them: `(group, plural, namespaced)`.
pub fn builtin_resources() -> Vec<(String, String, bool)> {
    Registry::with_builtins()
        .all()
        .iter()
        .map(|rt| (rt.group.clone(), rt.plural.clone(), rt.namespaced))
        .collect()
}

/// How to run the server. `Config::default()` is the safe, in-memory, loopback-only setup tests want.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Persist objects and the RV counter here (redb); `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// Retained watch history, in events; older RVs get 410 Expired.
    pub history_max_events: usize,
    /// Retained watch history (and continue-token snapshots), in time.
    pub history_max_age: Duration,
    /// Period of progress BOOKMARK events on watches that asked for them.
    pub bookmark_interval: Duration,
    /// Serve `POST /_kubewasm/faults/*` (off by default: anyone who can reach the port could use it).
    pub enable_fault_endpoints: bool,
    /// Allow binding a non-loopback address (a client without a token is the superuser).
    pub allow_non_loopback: bool,
    /// Hand out uids made from a creation counter (`…-<counter>`, see `ops::deterministic_uid`)
    /// instead of random ones, so a scripted run (`kubewasm test`) sees the same uids every
    /// time; they spread over the shard hash space as random ones do.
    pub deterministic_uids: bool,
    /// Judge requests authenticated by a ServiceAccount token, and requests that impersonate
    /// (`Impersonate-User`), by the RBAC objects stored here, as kube-apiserver does, refusing
    /// with its 403s; `None` (the default) serves every request. A client without a token is
    /// the superuser either way. See `authz.rs` and `authn.rs`.
    pub authorization: Option<Authorization>,
    /// Write one `audit.k8s.io/v1` Event per request here (kube-apiserver's
    /// `--audit-log-path`, level `Metadata`); `None` writes none. See `audit.rs`.
    pub audit: Option<AuditSink>,
    /// Honour KEP-5866's `shardSelector` on list, watch and deletecollection, as a 1.36+
    /// server with the `ShardedListAndWatch` gate on (the default); off, the parameter is
    /// ignored and every object sent, as an older server does.
    pub shard_selector: bool,
    /// Give every namespace the ServiceAccount `default` and the ConfigMap `kube-root-ca.crt`,
    /// as kube-controller-manager does (off by default: tests and `kubewasm test` scenarios
    /// would see two more objects in each namespace). See `namespaces.rs`.
    pub namespace_defaults: bool,
    /// Run the workload controllers (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job) and
    /// one fake Node whose kubelet makes Pods Running and Ready, so workloads roll without a
    /// cluster (kwok's idea, in-process); `None` (the default) runs none, as before: tests and
    /// `kubewasm test` scenarios see only the objects they write. See `workloads/`.
    pub workloads: Option<WorkloadConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            history_max_events: 10_000,
            history_max_age: Duration::from_secs(15 * 60),
            bookmark_interval: Duration::from_secs(10),
            enable_fault_endpoints: false,
            allow_non_loopback: false,
            deterministic_uids: false,
            authorization: None,
            audit: None,
            shard_selector: true,
            namespace_defaults: false,
            workloads: None,
        }
    }
}

/// Shared state of a running server.
pub(crate) struct App {
    pub(crate) store: Arc<Store>,
    pub(crate) registry: RwLock<Registry>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) counters: Counters,
    pub(crate) config: Config,
    /// `host:port` advertised in `/api`.
    pub(crate) host: String,
    /// Objects created so far ([`Config::deterministic_uids`]).
    pub(crate) created: std::sync::atomic::AtomicU64,
    /// Signs and verifies the ServiceAccount tokens this run issues.
    pub(crate) tokens: authn::Tokens,
    /// The garbage collector's graph and the controllers' work queue (`controllers.rs`).
    pub(crate) controllers: Arc<controllers::Controllers>,
}

/// A running server. Dropping it (or calling [`ApiServer::shutdown`]) stops it.
pub struct ApiServer {
    app: Arc<App>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The controllers' task (garbage collector, namespace lifecycle).
    controllers: tokio::task::JoinHandle<()>,
}

/// The namespaces every server starts with, as a cluster's do.
pub const PRECREATED_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

impl ApiServer {
    /// Open storage, bind, pre-create the standard namespaces and start serving.
    pub async fn start(config: Config) -> anyhow::Result<ApiServer> {
        if !config.bind.ip().is_loopback() && !config.allow_non_loopback {
            bail!(
                "refusing to bind non-loopback address {} without allow_non_loopback (a client without a token is the superuser)",
                config.bind
            );
        }
        let (persist, loaded) = match &config.data_dir {
            Some(dir) => {
                let (p, l) = Persistence::open(dir)?;
                (Some(p), l)
            }
            None => (
                None,
                Loaded {
                    rv: 1,
                    objects: Vec::new(),
                },
            ),
        };
        let store = Arc::new(Store::new(
            loaded.rv,
            loaded.objects,
            config.history_max_events,
            config.history_max_age,
            persist,
        ));
        let listener = tokio::net::TcpListener::bind(config.bind).await?;
        let addr = listener.local_addr()?;
        let controllers = Arc::new(controllers::Controllers::new(
            config.namespace_defaults,
            config.workloads.is_some(),
        ));
        let app = Arc::new(App {
            store: store.clone(),
            registry: RwLock::new(Registry::with_builtins()),
            faults: Arc::new(Faults::new(store.clone())),
            counters: Counters::default(),
            host: addr.to_string(),
            config,
            created: std::sync::atomic::AtomicU64::new(0),
            tokens: authn::Tokens::generate()?,
            controllers,
        });
        ops::restore_crds(&app);
        store.set_observer(app.controllers.clone());
        let controllers = tokio::spawn(controllers::run(
            Arc::downgrade(&app),
            app.controllers.clone(),
        ));
        let ns_type = app
            .registry
            .read()
            .find("", "v1", "namespaces")
            .expect("built-in namespaces");
        for ns in PRECREATED_NAMESPACES {
            if store.get("/namespaces", "", ns).is_none() {
                let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                ops::create(&app, &ns_type, "", body, &ops::WriteOpts::default())
                    .map_err(|e| anyhow::anyhow!("pre-creating namespace {ns}: {}", e.message))?;
            }
        }
        if app.config.workloads.is_some() {
            workloads::start(&app)
                .map_err(|e| anyhow::anyhow!("creating the simulated node: {e}"))?;
        }
        let router = axum::Router::new()
            .fallback(routes::handle)
            .with_state(app.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // Without TCP_NODELAY, Nagle's algorithm holds a small watch event back while the previous
        // one is unacknowledged, and the client's delayed ACK makes that a stall of tens of
        // milliseconds: watches would deliver in bursts instead of as each write commits.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!("apiserver: cannot set TCP_NODELAY: {e}");
            }
        });
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::error!("apiserver: {e}");
            }
        });
        Ok(ApiServer {
            app,
            addr,
            stop: Some(stop),
            task: Some(task),
            controllers,
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig (cluster/user/context `kubewasm`, namespace `default`) pointing at this server.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubewasm\n  cluster:\n    server: {}\nusers:\n- name: kubewasm\n  user: {{}}\ncontexts:\n- name: kubewasm\n  context:\n    cluster: kubewasm\n    user: kubewasm\n    namespace: default\ncurrent-context: kubewasm\npreferences: {{}}\n",
            self.url()
        )
    }

    /// Write [`ApiServer::kubeconfig_yaml`] to `path` (creating parent directories).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Fault injection handle.
    pub fn faults(&self) -> &Faults {
        &self.app.faults
    }

    /// The fault injection handle, to keep beyond a borrow of the server (a task that pokes
    /// the watches while the server is owned elsewhere).
    pub fn shared_faults(&self) -> Arc<Faults> {
        self.app.faults.clone()
    }

    /// Request counters.
    pub fn stats(&self) -> Stats {
        self.app.counters.snapshot()
    }

    /// The newest resourceVersion (handy in tests).
    pub fn resource_version(&self) -> u64 {
        self.app.store.current_rv()
    }

    /// Whether the controllers the server runs (the garbage collector, namespace lifecycle
    /// and, with [`Config::workloads`], the workload controllers and the simulated kubelet's
    /// pending Pod starts; see `README.md`) have
    /// nothing queued or running: every consequence of the writes answered so far is written.
    pub fn controllers_idle(&self) -> bool {
        self.app.controllers.is_idle()
    }

    /// Wait until [`ApiServer::controllers_idle`]: a test's "the garbage collector is done".
    pub async fn wait_controllers_idle(&self) {
        self.app.controllers.wait_idle().await
    }

    /// Stop serving: open watches end cleanly, pending persistence writes are committed.
    pub async fn shutdown(mut self) {
        self.controllers.abort();
        self.app.faults.end_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        self.app.store.flush();
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.controllers.abort();
        self.app.faults.end_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.app.store.flush();
    }
}
