//! A guest's `kube.apply` against the same server-side apply made natively with kube-rs, both
//! against the embedded API server over loopback HTTP. The guest figure is a whole `on-add`
//! call of `rust-logger-v2` with `kubewasm.io/try: apply` (the guest builds the applied object,
//! the host checks the grant, takes a write token, sends the request on the host's runtime and
//! hands the served object back into guest memory); the native figure is `Api::patch` with
//! `Patch::Apply` of the same object from the host's runtime. Ratio guest ÷ native, measured in
//! one run, interleaved (goal ≤ 1.3).
//!
//! Run `bash guest-examples/build.sh rust`, then `cargo bench -p kubewasm --bench kube`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kubewasm::plugins::{ClusterContext, GrantPolicy, Manifest, PluginClient, PluginMetrics};
use kubewasm::runtime::{
    GuestLogLevel, GuestObject, HandlerOutcome, Limits, NoCache, ObjectView, Observer, PluginInfo,
    Runtime, RuntimeConfig, RuntimeMetrics,
};

const ROUNDS: usize = 7;
const PER_ROUND: usize = 100;

struct Obj {
    labels: Vec<(String, String)>,
}

impl GuestObject for Obj {
    fn view(&self) -> ObjectView<'_> {
        ObjectView {
            api_version: "v1",
            kind: "ConfigMap",
            namespace: Some("default"),
            name: "bench",
            uid: "0b7c3e1e-5f2a-4c1e-9a43-2d1f0c9e8b11",
            resource_version: "1",
            generation: None,
            labels: &self.labels,
            json: r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench","namespace":"default"}}"#,
        }
    }
}

/// Keeps the guest's last "try apply" line, which says how its apply went.
#[derive(Clone, Default)]
struct LastApplyLine(Arc<parking_lot::Mutex<String>>);

impl LastApplyLine {
    fn lock(&self) -> parking_lot::MutexGuard<'_, String> {
        self.0.lock()
    }
}

impl Observer for LastApplyLine {
    fn log_line(&self, _plugin: &str, _level: GuestLogLevel, message: &str) {
        if message.starts_with("try apply") {
            *self.0.lock() = message.to_string();
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/dist");
    let wasm = std::fs::read(dist.join("rust-logger-v2.wasm")).map_err(|e| {
        anyhow::anyhow!("{e}: build the guests first (bash guest-examples/build.sh rust)")
    })?;
    // The host's runtime: the API server, the kube client and every request of the plugin.
    let host = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let server = host.block_on(apiserver::ApiServer::start(apiserver::Config::default()))?;
    let _entered = host.enter();
    let client = kube::Client::try_from(kube::Config::new(server.url().parse()?))?;
    let manifest = Manifest::parse(
        Path::new("bench.toml"),
        "write-qps = 10000\nwrite-burst = 10000\n[grants]\n\
         watch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
         write = [{ api-version = \"v1\", kind = \"ConfigMap\", verbs = [\"apply\"] }]\n",
    )?;
    let info = PluginInfo {
        name: "bench".into(),
        subscriptions: Vec::new(),
        permissions: Vec::new(),
        http_origins: Vec::new(),
        events: false,
        controller: None,
    };
    let grants =
        Arc::new(manifest.grants_under(&GrantPolicy::default(), Path::new("bench.toml"), &info));
    let ctx = ClusterContext::new(client.clone(), false, PluginMetrics::unregistered(), None);
    let access = Arc::new(PluginClient::new("bench", ctx, grants));

    let last_line = LastApplyLine::default();
    let config = RuntimeConfig {
        observer: Some(Arc::new(last_line.clone())),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new(config, RuntimeMetrics::unregistered())?;
    let compiled = rt.compile(&wasm)?;
    // The plugin's own thread, as the plugins layer runs it.
    let exec = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut h = rt
        .handler_instance(&compiled, "bench", Limits::default(), Arc::new(NoCache))?
        .with_cluster(access);
    exec.block_on(h.start())?;
    let obj = Obj {
        labels: vec![("kubewasm.io/try".into(), "apply".into())],
    };
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let applied: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "default", "name": "bench-applied"},
        "data": {"seen": "true"},
    }))?;
    let params = PatchParams::apply("native").force();
    let native_apply = || -> anyhow::Result<()> {
        host.block_on(api.patch("bench-applied", &params, &Patch::Apply(&applied)))?;
        Ok(())
    };
    for _ in 0..50 {
        anyhow::ensure!(exec.block_on(h.on_add(&obj, false))? == HandlerOutcome::Ok);
        native_apply()?;
    }
    let answer = last_line.lock().clone();
    anyhow::ensure!(
        answer.contains(": ok rv="),
        "the guest's apply failed: {answer}"
    );
    let (mut guest, mut native) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..PER_ROUND {
            let out = exec.block_on(h.on_add(&obj, false))?;
            anyhow::ensure!(out == HandlerOutcome::Ok, "{out:?}");
        }
        guest.push(started.elapsed() / PER_ROUND as u32);
        let started = Instant::now();
        for _ in 0..PER_ROUND {
            native_apply()?;
        }
        native.push(started.elapsed() / PER_ROUND as u32);
    }
    let (g, n) = (median(guest), median(native));
    println!("server-side apply of one ConfigMap, median of {ROUNDS} rounds of {PER_ROUND}:");
    println!(
        "  guest kube.apply (whole on-add call): {:>8.1} µs",
        g.as_secs_f64() * 1e6
    );
    println!(
        "  native kube-rs Api::patch(Apply):     {:>8.1} µs",
        n.as_secs_f64() * 1e6
    );
    println!(
        "  ratio guest / native:                 {:>8.2}  (goal <= 1.30)",
        g.as_secs_f64() / n.as_secs_f64()
    );
    host.block_on(server.shutdown());
    Ok(())
}
