//! `kubewasm dev`: the embedded API server and a host in one process — no cluster needed.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

use super::host::Host;
use super::run::{HostArgs, log_endpoints};
use crate::plugins::GrantPolicy;

/// Arguments of `kubewasm dev`.
#[derive(clap::Args, Debug, Clone)]
pub struct DevArgs {
    /// Directory of handler components (default: `guest-examples/dist` if present, else `plugins`).
    #[arg(long)]
    pub plugins: Option<PathBuf>,
    /// Port of the embedded API server on 127.0.0.1.
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// Where to write the kubeconfig for kubectl (default: a file in the temp directory).
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Keep the API server's objects in this directory across restarts.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Also create and change a few ConfigMaps so the handlers fire without typing anything.
    #[arg(long)]
    pub demo: bool,
    #[command(flatten)]
    pub host: HostArgs,
}

/// Starts the embedded API server, then a host against it, until Ctrl-C.
pub async fn dev(args: DevArgs) -> anyhow::Result<()> {
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

    let server = apiserver::ApiServer::start(apiserver::Config {
        bind: ([127, 0, 0, 1], args.port).into(),
        data_dir: args.data_dir.clone(),
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

    let client = kube::Client::try_from(kube::Config::new(server.url().parse()?))?;
    let mut config = args.host.host_config(client.clone(), plugins.clone())?;
    if args.host.default_grants.is_none() {
        // Development: a plugin gets what it asks for, so a new handler runs without a
        // manifest; `--default-grants` makes dev grant like `run`.
        config.grants = GrantPolicy::EverythingAsked;
        tracing::warn!(
            "kubewasm dev grants every plugin whatever its describe() asks for (writes, Events, \
             HTTP); `kubewasm run` grants only what NAME.toml [grants] or --default-grants allow"
        );
    }
    let host = Host::start_with(config, args.host.informer_config()).await?;
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

    let demo = args.demo.then(|| tokio::spawn(demo_loop(client)));
    super::wait_for_signal().await;
    if let Some(d) = demo {
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
