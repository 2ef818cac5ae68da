//! `kubewasm dev`: the embedded API server and a host in one process — no cluster needed.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

use super::run::{HostArgs, log_endpoints};
use crate::plugins::GrantPolicy;

/// Arguments of `kubewasm dev`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DevArgs {
    /// Directory of handler components (default: `guest-examples/dist` if present, else `plugins`).
    #[arg(long)]
    pub(crate) plugins: Option<PathBuf>,
    /// Port of the embedded API server on 127.0.0.1.
    #[arg(long, default_value_t = 6443)]
    pub(crate) port: u16,
    /// Where to write the kubeconfig for kubectl (default: a file in the temp directory).
    #[arg(long)]
    pub(crate) kubeconfig_out: Option<PathBuf>,
    /// Keep the API server's objects in this directory across restarts.
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Also create and change a few ConfigMaps so the handlers fire without typing anything.
    #[arg(long)]
    pub(crate) demo: bool,
    /// With `--demo`: the cloud stand-in of the lb-controller example
    /// (`guest-examples/rust/lb-controller/cloud.py`, `http://127.0.0.1:PORT`). The demo then also
    /// creates LoadBalancer Services, deletes a load balancer behind the controller's back so
    /// the next resync repairs it, and deletes the Services again.
    #[arg(long, value_name = "URL", requires = "demo")]
    pub(crate) demo_cloud: Option<String>,
    /// Make the embedded API server enforce RBAC on impersonated requests, as a cluster does:
    /// with `--plugin-identity own` and the output of `kubewasm rbac` applied, a plugin call
    /// beyond its printed RBAC is a 403 (the host is taken to be
    /// `system:serviceaccount:kubewasm:kubewasm`, `kubewasm rbac`'s default; see docs/identity.md).
    #[arg(long)]
    pub(crate) authorize: bool,
    /// Write the embedded API server's audit log here, as kube-apiserver's flag of that name
    /// does (`-` is stdout): one `audit.k8s.io/v1` Event per request at level Metadata, naming
    /// the user and the impersonated user (each plugin's account with `--plugin-identity own`).
    #[arg(long, value_name = "PATH")]
    pub(crate) audit_log_path: Option<PathBuf>,
    /// The simulated workloads: on unless `--no-workloads` (Deployments roll, Pods become Ready
    /// on the fake node `kubewasm-node`).
    #[command(flatten)]
    pub(crate) workloads: apiserver::cli::WorkloadArgs,
    /// The host's own settings, shared by `run` and `dev`.
    #[command(flatten)]
    pub(crate) host: HostArgs,
}

/// Starts the embedded API server, then a host against it, until Ctrl-C.
pub(crate) async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let plugins = args.plugins.clone().unwrap_or_else(|| {
        let examples = PathBuf::from("guest-examples/dist");
        if examples.is_dir() {
            examples
        } else {
            PathBuf::from("plugins")
        }
    });
    std::fs::create_dir_all(&plugins).map_err(|e| {
        anyhow::anyhow!("cannot create plugins directory {}: {e}", plugins.display())
    })?;

    let audit = match &args.audit_log_path {
        Some(path) => Some(
            apiserver::AuditSink::open(path)
                .map_err(|e| anyhow::anyhow!("--audit-log-path {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let server = apiserver::ApiServer::start(apiserver::Config {
        bind: ([127, 0, 0, 1], args.port).into(),
        data_dir: args.data_dir.clone(),
        authorization: args.authorize.then(apiserver::Authorization::default),
        audit,
        // Like a real cluster's kube-controller-manager: handlers meet `kube-root-ca.crt` and
        // the `default` ServiceAccount in every namespace.
        namespace_defaults: true,
        workloads: args.workloads.config(),
        ..apiserver::Config::default()
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "cannot start the embedded API server on port {}: {e:#}",
            args.port
        )
    })?;
    let kubeconfig = args
        .kubeconfig_out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("kubewasm-dev.kubeconfig"));
    server.write_kubeconfig(&kubeconfig)?;

    let client = crate::identity::client(kube::Config::new(server.url().parse()?))?;
    let mut builder = args
        .host
        .host_builder(client.clone(), Some(plugins.clone()))?;
    if args.host.default_grants.is_none() {
        // Development: a plugin gets what it asks for, so a new handler runs without a
        // manifest; `--default-grants` makes dev grant like `run`.
        builder = builder.grants(GrantPolicy::EverythingAsked);
        tracing::warn!(
            "kubewasm dev grants every plugin whatever its describe() asks for (writes, Events, \
             HTTP); `kubewasm run` grants only what NAME.toml [grants] or --default-grants allow"
        );
    }
    let host = builder.start().await?;
    println!("kubewasm dev: embedded API server at {}", server.url());
    println!(
        "  plugins directory: {} (drop .wasm files here; they load and hot-swap live)",
        plugins.display()
    );
    println!(
        "  point kubectl at it:  export KUBECONFIG={}",
        kubeconfig.display()
    );
    println!(
        "  then try:             kubectl apply -f - <<< '{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"hello\"}},\"data\":{{\"greeting\":\"hi\"}}}}'"
    );
    log_endpoints(&host);

    let lb_demo = match (&args.demo_cloud, args.demo) {
        (Some(url), true) => Some(tokio::spawn(lb_demo_loop(client.clone(), url.clone()))),
        _ => None,
    };
    let demo = args.demo.then(|| tokio::spawn(demo_loop(client)));
    super::wait_for_signal().await;
    for d in [demo, lb_demo].into_iter().flatten() {
        d.abort();
    }
    super::shutdown_or_second_signal(host.shutdown()).await;
    server.shutdown().await;
    Ok(())
}

/// Creates, changes and deletes a few ConfigMaps in namespace `demo`, forever, slowly enough to
/// read the handlers' logs.
async fn demo_loop(client: kube::Client) {
    if let Err(e) = demo_round_robin(client).await {
        tracing::warn!(error = %e, "demo stopped");
    }
}

async fn demo_round_robin(client: kube::Client) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "demo"}}))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    let pause = Duration::from_secs(3);
    for round in 0u64.. {
        let name = format!("greeting-{}", round % 3);
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "demo"}},
            "data": {"greeting": "hello", "round": round.to_string()},
        }))?;
        let _ = cms.delete(&name, &DeleteParams::default()).await;
        cms.create(&PostParams::default(), &cm).await?;
        tokio::time::sleep(pause).await;
        let patch = serde_json::json!({"data": {"greeting": "hello again"}});
        cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tokio::time::sleep(pause).await;
        if round % 3 == 2 {
            // A ConfigMap that asks the example handlers to fail with `retry`, then recovers.
            let patch = serde_json::json!({"metadata": {"labels": {"kubewasm.io/fail": "retry"}}});
            cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            tokio::time::sleep(pause).await;
            let patch = serde_json::json!({"metadata": {"labels": {"kubewasm.io/fail": null}}});
            cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            tokio::time::sleep(pause).await;
            cms.delete(&name, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

/// The lb-controller's part of the demo: a LoadBalancer Service gets its load balancer, loses it
/// in the cloud behind the controller's back (repaired at the next resync), and is deleted (its
/// load balancer goes first, then the finalizer lets the Service go).
async fn lb_demo_loop(client: kube::Client, cloud: String) {
    if let Err(e) = lb_demo(client, &cloud).await {
        tracing::warn!(error = %e, "lb-controller demo stopped");
    }
}

async fn lb_demo(client: kube::Client, cloud: &str) -> anyhow::Result<()> {
    let authority = cloud
        .strip_prefix("http://")
        .map(|a| a.trim_end_matches('/'))
        .filter(|a| a.parse::<std::net::SocketAddr>().is_ok())
        .ok_or_else(|| anyhow::anyhow!("--demo-cloud must be http://IP:PORT, got {cloud:?}"))?
        .to_string();
    let config: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let endpoint = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "lb-controller"}, "data": {"endpoint": cloud},
    });
    config
        .patch(
            "lb-controller",
            &PatchParams::apply("kubewasm-demo").force(),
            &Patch::Apply(&endpoint),
        )
        .await?;
    let services: Api<Service> = Api::namespaced(client, "default");
    let pause = Duration::from_secs(15);
    for round in 0u64.. {
        let name = format!("web-{}", round % 2);
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        }))?;
        services.create(&PostParams::default(), &svc).await?;
        tracing::info!(service = %name, "demo: created a LoadBalancer Service");
        tokio::time::sleep(pause).await;
        let uid = services.get(&name).await?.metadata.uid.unwrap_or_default();
        cloud_delete(&authority, &uid).await?;
        tracing::info!(service = %name, "demo: deleted its load balancer in the cloud behind the controller's back; the next resync re-creates it");
        tokio::time::sleep(pause * 2).await;
        services.delete(&name, &DeleteParams::default()).await?;
        tracing::info!(service = %name, "demo: deleted the Service; the controller removes its load balancer, then its finalizer");
        tokio::time::sleep(pause).await;
    }
    Ok(())
}

/// `DELETE /lbs/{uid}` on the cloud stand-in: one HTTP/1.0 exchange, the answer ignored.
async fn cloud_delete(authority: &str, uid: &str) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(authority).await?;
    let request = format!("DELETE /lbs/{uid} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await?;
    Ok(())
}
