//! `kubewasm run`: the production mode, against a real cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::default_cache_dir;
use super::logging::LogFormat;
use crate::host::{Host, HostBuilder};
use crate::informer::ReflectorConfig;
use crate::plugins::{DEFAULT_PLUGINS_CONFIGMAP, GrantPolicy, HostPod, OwnObjects};
use crate::runtime::{
    CompileLimits, DEFAULT_COMPILE_MEMORY_BUDGET, DEFAULT_COMPILE_MEMORY_LIMIT, Limits,
    RuntimeConfig,
};

/// Flags shared by every subcommand that runs a host.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct HostArgs {
    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Address of the Prometheus `/metrics` endpoint ("0" disables it).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) metrics_bind_address: String,
    /// Address of `/healthz` and `/readyz` ("0" disables them).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub(crate) health_probe_bind_address: String,
    /// Where compiled plugins are cached (default: `$XDG_CACHE_HOME/kubewasm`).
    #[arg(long)]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Memory one plugin compile may use; a component that needs more is refused (the compile
    /// runs in a child process killed at this limit).
    #[arg(long, default_value_t = DEFAULT_COMPILE_MEMORY_LIMIT >> 20, value_parser = clap::value_parser!(u64).range(16..))]
    pub(crate) compile_memory_limit_mib: u64,
    /// Memory all plugin compiles at once may use: as many compiles run at once as limits fit
    /// in it (at least one).
    #[arg(long, default_value_t = DEFAULT_COMPILE_MEMORY_BUDGET >> 20)]
    pub(crate) compile_memory_budget_mib: u64,
    /// Wall time one plugin compile may take before it is stopped and the component refused.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    pub(crate) compile_timeout: Duration,
    /// Deadline of one handler call, for plugins without a manifest: the call's own running
    /// time (waits on the host and other calls' turns on the plugin's thread not counted).
    #[arg(long, default_value_t = 1000)]
    pub(crate) deadline_ms: u64,
    /// Calls in flight per plugin, for plugins whose manifest sets no `concurrency` (1..=64;
    /// 1 keeps the informer's order across objects).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(crate) default_concurrency: u64,
    /// Linear-memory cap of one plugin, for plugins without a manifest.
    #[arg(long, default_value_t = 64)]
    pub(crate) memory_limit_mib: u64,
    /// Keep `metadata.managedFields` in cached objects and in the JSON handlers receive
    /// (stripped by default to save memory).
    #[arg(long)]
    pub(crate) keep_managed_fields: bool,
    /// Run as one of several replicas: only the holder of a Lease delivers events.
    #[arg(long)]
    pub(crate) leader_elect: bool,
    /// Run active-active: every replica holds a member Lease (`<leader-election-id>-<POD_NAME>`
    /// in the leader election namespace) listing the slots of the hash space it owns, and a
    /// plugin whose manifest sets `shard = "uid"` or `"namespace"` handles only the objects of
    /// those slots. Implies `--leader-elect` for the plugins that do not shard.
    #[arg(long)]
    pub(crate) sharding: bool,
    /// Slots the hash space is cut into (a power of two, at most 64); every replica of a ring
    /// must use the same number.
    #[arg(long, default_value_t = 16)]
    pub(crate) shard_slots: u32,
    /// How long a replica giving up a slot waits for that slot's calls in flight to end before
    /// it lets another replica have it (their side effects fail from then on).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) shard_drain_grace: Duration,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "kubewasm")]
    pub(crate) leader_election_id: String,
    /// Namespace of the Lease (default: the client's namespace; in a pod, the pod's own).
    #[arg(long)]
    pub(crate) leader_election_namespace: Option<String>,
    /// How long a standby waits for a silent leader before taking over.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub(crate) leader_election_lease_duration: Duration,
    /// How long a leader that cannot renew keeps leading (shorter than the lease duration).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) leader_election_renew_deadline: Duration,
    /// Pause between attempts to acquire or renew the Lease.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub(crate) leader_election_retry_period: Duration,
    /// At SIGTERM/SIGINT, how long in-flight handler calls may run on before they are abandoned.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) shutdown_grace_ms: u64,
    /// Grants for plugins whose `NAME.toml` has no `[grants]` table: a TOML file with one
    /// `[grants]` table (default: watch and read anything except Secrets, nothing else).
    #[arg(long, value_name = "FILE")]
    pub(crate) default_grants: Option<PathBuf>,
    /// Send every plugin write with `dryRun=All` (validated by the API server, never stored)
    /// and refuse every outbound HTTP request but GET and HEAD.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Namespace of the host's own objects, which no plugin may write (default: the
    /// client's namespace; in a pod, the pod's own).
    #[arg(long)]
    pub(crate) host_namespace: Option<String>,
    /// ConfigMap (in the host's namespace) the plugins are deployed from; no plugin may write
    /// it, so none can rewrite its own grants.
    #[arg(long, default_value = DEFAULT_PLUGINS_CONFIGMAP)]
    pub(crate) plugins_configmap: String,
    /// Plugins pulled from OCI registries: a TOML file naming each plugin, its reference
    /// (pinned by digest, or following a tag) and its manifest (see `docs/registry.md`). Works
    /// beside `--plugins`; names must differ.
    #[arg(long, value_name = "FILE")]
    pub(crate) plugin_sources: Option<PathBuf>,
    /// Registry credentials for `--plugin-sources`: docker's `config.json` shape (a mounted
    /// `kubernetes.io/dockerconfigjson` Secret works); default `$DOCKER_CONFIG/config.json`
    /// or `~/.docker/config.json` if present.
    #[arg(long, value_name = "FILE", env = "KUBEWASM_REGISTRY_CONFIG")]
    pub(crate) registry_config: Option<PathBuf>,
    /// Whose identity the plugins' `kube` calls carry: `own` impersonates ServiceAccount
    /// `kubewasm-plugin-<plugin>` of the host's namespace (apply what `kubewasm rbac` prints),
    /// `host` sends them as the host; `auto` is `own` in a Pod (`POD_NAME` and
    /// `POD_NAMESPACE` set), `host` elsewhere.
    #[arg(long, value_enum, default_value_t = PluginIdentity::Auto)]
    pub(crate) plugin_identity: PluginIdentity,
}

/// Whose identity the plugins' `kube` calls carry (`--plugin-identity`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PluginIdentity {
    /// `own` in a Pod, `host` elsewhere.
    Auto,
    /// Each plugin's own ServiceAccount, impersonated.
    Own,
    /// The host's.
    Host,
}

impl HostArgs {
    /// A host as these flags describe it, watching `plugins_dir` and following
    /// `--plugin-sources`.
    pub(crate) fn host_builder(
        &self,
        client: kube::Client,
        plugins_dir: Option<PathBuf>,
    ) -> anyhow::Result<HostBuilder> {
        let election = self.election_config(&client)?;
        let own_objects = self.own_objects(&client, election.as_ref())?;
        let host_pod = HostPod::from_env();
        let own_identity = match self.plugin_identity {
            PluginIdentity::Auto => host_pod.is_some(),
            PluginIdentity::Own => true,
            PluginIdentity::Host => false,
        };
        let plugin_accounts = own_identity.then(|| own_objects.namespace().to_string());
        let grants = GrantPolicy::operator(self.default_grants.as_deref())
            .map_err(|e| anyhow::anyhow!("--default-grants: {e}"))?;
        let mut builder = HostBuilder::new(client);
        if let Some(dir) = plugins_dir {
            builder = builder.plugins_dir(dir);
        }
        if let Some(file) = &self.plugin_sources {
            let registry = super::registry::RegistryArgs {
                registry_config: self.registry_config.clone(),
                plain_http: false,
            }
            .registry()?;
            builder = builder.plugin_sources(file, registry);
        }
        Ok(builder
            .runtime(RuntimeConfig {
                cache_dir: self.cache_dir.clone().or_else(default_cache_dir),
                compile: self.compile_limits(),
                ..RuntimeConfig::default()
            })
            .informers(ReflectorConfig {
                keep_managed_fields: self.keep_managed_fields,
                ..ReflectorConfig::default()
            })
            .limits(Limits {
                deadline: Duration::from_millis(self.deadline_ms.max(1)),
                memory_bytes: self.memory_limit_mib.max(1) * 1024 * 1024,
                ..Limits::default()
            })
            .default_concurrency(self.default_concurrency as usize)
            .grants(grants)
            .own_objects(own_objects)
            .host_pod(host_pod)
            .plugin_accounts(plugin_accounts)
            .dry_run(self.dry_run)
            .metrics_addr(parse_addr(
                "--metrics-bind-address",
                &self.metrics_bind_address,
            )?)
            .health_addr(parse_addr(
                "--health-probe-bind-address",
                &self.health_probe_bind_address,
            )?)
            .shutdown_grace(Duration::from_millis(self.shutdown_grace_ms))
            .sharding(self.ring_config(election.as_ref())?)
            .election(election))
    }
}

impl HostArgs {
    /// How this host's compiles are bounded: in a child process (this executable re-run), with
    /// the flags' limits.
    pub(crate) fn compile_limits(&self) -> CompileLimits {
        CompileLimits {
            worker: super::compile_worker_binary(),
            memory_limit_bytes: self.compile_memory_limit_mib << 20,
            memory_budget_bytes: self.compile_memory_budget_mib << 20,
            time_limit: self.compile_timeout,
            ..CompileLimits::default()
        }
    }

    /// The host's own objects: the plugins ConfigMap and the RBAC in its namespace
    /// (`--host-namespace`, else `POD_NAMESPACE`, else the client's), and the Lease it elects
    /// with (or would, with `--leader-elect`).
    pub(crate) fn own_objects(
        &self,
        client: &kube::Client,
        election: Option<&crate::election::ElectionConfig>,
    ) -> anyhow::Result<OwnObjects> {
        // The Pod's namespace (downward API) before the client's: a kubeconfig may point
        // elsewhere, and the static names must be protected where the host runs.
        let namespace = self
            .host_namespace
            .clone()
            .or_else(|| HostPod::from_env().map(|p| p.namespace))
            .unwrap_or_else(|| client.default_namespace().to_string());
        for (flag, value) in [
            ("--host-namespace", &namespace),
            ("--plugins-configmap", &self.plugins_configmap),
        ] {
            if kubewasm_apimachinery::validation::validate_dns1123_subdomain(value).is_err() {
                anyhow::bail!("{flag} {value:?} is not a valid object name");
            }
        }
        let lease_namespace = self
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let lease = match election {
            Some(e) => (e.namespace.clone(), e.lease_name.clone()),
            None => (lease_namespace, self.leader_election_id.clone()),
        };
        Ok(OwnObjects::new(
            &namespace,
            &self.plugins_configmap,
            (&lease.0, &lease.1),
        ))
    }

    /// The shard ring these flags ask for (`None` without `--sharding`), validated: its
    /// name, namespace and timings are the leader election's, the member is this replica.
    pub(crate) fn ring_config(
        &self,
        election: Option<&crate::election::ElectionConfig>,
    ) -> anyhow::Result<Option<crate::election::RingConfig>> {
        let Some(election) = election.filter(|_| self.sharding) else {
            return Ok(None);
        };
        let member = crate::identity::replica_name();
        let mut election = election.clone();
        // `<pod>/<boot>`: which replica holds the slots, and which run of it.
        election.identity = format!("{member}/{:016x}", rand::random::<u64>());
        let config = crate::election::RingConfig {
            election,
            member,
            slots: self.shard_slots,
            drain_grace: self.shard_drain_grace,
        };
        config.validate()?;
        Ok(Some(config))
    }

    /// The leader election these flags ask for (`None` without `--leader-elect`), validated.
    pub(crate) fn election_config(
        &self,
        client: &kube::Client,
    ) -> anyhow::Result<Option<crate::election::ElectionConfig>> {
        if !self.leader_elect && !self.sharding {
            return Ok(None);
        }
        let namespace = self
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let config = crate::election::ElectionConfig {
            lease_duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_election_renew_deadline,
            retry_period: self.leader_election_retry_period,
            ..crate::election::ElectionConfig::new(&self.leader_election_id, namespace)
        };
        config.validate()?;
        Ok(Some(config))
    }
}

/// Parses an endpoint address; "0" (like controller-runtime) or "" disables the endpoint, and a
/// bare ":8080" means all interfaces.
pub(crate) fn parse_addr(flag: &str, s: &str) -> anyhow::Result<Option<SocketAddr>> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    full.parse()
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{flag}: invalid address {s:?}: {e}"))
}

/// Arguments of `kubewasm run`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RunArgs {
    /// Directory of handler components (`*.wasm`, with optional `NAME.toml` manifests);
    /// optional with `--plugin-sources`.
    #[arg(long, required_unless_present = "plugin_sources")]
    pub(crate) plugins: Option<PathBuf>,
    /// Kubeconfig file (default: like kubectl — KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long)]
    pub(crate) context: Option<String>,
    /// The host's own settings, shared by `run` and `dev`.
    #[command(flatten)]
    pub(crate) host: HostArgs,
}

/// Resolves cluster access the way kubectl does.
pub(crate) async fn client_config(
    kubeconfig: Option<&PathBuf>,
    context: Option<&String>,
) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions {
        context: context.cloned(),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("cannot read kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(config)
}

/// Runs the host until Ctrl-C / SIGTERM.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = client_config(args.kubeconfig.as_ref(), args.context.as_ref()).await?;
    tracing::info!(server = %config.cluster_url, "connecting to the API server");
    let api_addresses = api_server_addresses(&config.cluster_url).await;
    let client = crate::identity::client(config)?;
    let host = args
        .host
        .host_builder(client, args.plugins)?
        .cluster_api_addresses(api_addresses)
        .start()
        .await?;
    log_endpoints(&host);
    super::wait_for_signal().await;
    super::shutdown_or_second_signal(host.shutdown()).await;
    Ok(())
}

/// The addresses of the API server at `url`, which plugins may reach only through a grant that
/// names them (empty if its name does not resolve now).
async fn api_server_addresses(url: &http::Uri) -> Vec<std::net::IpAddr> {
    let Some(host) = url.host() else {
        return Vec::new();
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse() {
        return vec![ip];
    }
    let port = url.port_u16().unwrap_or(443);
    match tokio::net::lookup_host((host, port)).await {
        Ok(found) => found.map(|a| a.ip()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Says where the endpoints are, once.
pub(crate) fn log_endpoints(host: &Host) {
    if let Some(a) = host.metrics_addr() {
        tracing::info!(address = %a, "serving /metrics");
    }
    if let Some(a) = host.health_addr() {
        tracing::info!(address = %a, "serving /healthz and /readyz");
    }
}
