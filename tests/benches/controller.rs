//! A controller's reconciles (issue 33), measured in one run against kube-runtime's
//! `Controller::new_with(..).owns(..)` over the same objects on the embedded API server: the
//! Rust site-controller example built with `bench-noop` (its `reconcile` answers `done` once
//! the SDK has read the Site from the cache) against a kube-runtime controller of the same Sites
//! owning the same kinds (Deployment, Service, ConfigMap) with a no-op reconcile.
//!
//! - **Rate**: with the watches paused, every Site is changed once; when they resume, the time
//!   from the resume to each side's last reconcile gives reconciles/s (both sides watch the
//!   same server and receive the same burst), at concurrency 1 and 8. The kubewasm count is
//!   read off the host's observer every 200 µs, so its last reconcile is seen up to that late:
//!   the ratio errs against kubewasm.
//! - **Dedup**: with the watches paused, 1,000 owned ConfigMaps of 100 Sites are changed; when
//!   the watches resume the burst reaches both controllers at once, and each counts its
//!   reconciles until nothing happened for a second: the goal is ≤ 1.1 × 100.
//!
//! Run with `cargo bench -p kubewasm-e2e --bench controller` (after
//! `bash tests/fixtures/build.sh`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::CallKind;
use kubewasm_e2e::*;
use parking_lot::Mutex;

/// Primaries in the rate runs.
const PRIMARIES: usize = 1000;
/// Bursts per concurrency in the rate runs.
const ROUNDS: usize = 3;

/// The median of `v`.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Owners and owned ConfigMaps per owner in the dedup run.
const OWNERS: usize = 100;
const OWNED_PER_OWNER: usize = 10;

/// The example's folder (its CRD and manifest).
fn example() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-examples/rust/site-controller")
}

fn sites_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Site"))
}

/// Reconciles one side counted, with when each happened.
#[derive(Clone, Default)]
struct Count(Arc<Mutex<Vec<Instant>>>);

impl Count {
    fn push(&self) {
        self.0.lock().push(Instant::now());
    }
    fn len(&self) -> usize {
        self.0.lock().len()
    }
    /// Reconciles per second from `start` to the last one counted, of those after the
    /// `from`-th.
    fn rate_since(&self, from: usize, start: Instant) -> f64 {
        let at = self.0.lock();
        let n = at.len() - from;
        n as f64 / (at[at.len() - 1] - start).as_secs_f64().max(1e-9)
    }
    /// Waits until `n` reconciles were counted.
    async fn reach(&self, n: usize) {
        let started = Instant::now();
        while self.len() < n {
            assert!(
                started.elapsed() < PATIENCE,
                "only {} of {n} reconciles",
                self.len()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    /// Waits until no reconcile was counted for `quiet`.
    async fn settle(&self, quiet: Duration) {
        loop {
            let before = self.len();
            tokio::time::sleep(quiet).await;
            if self.len() == before {
                return;
            }
        }
    }
}

/// A kube-runtime `Controller` of the Sites owning what the example owns, counting its no-op
/// reconciles.
fn kube_runtime_controller(
    client: kube::Client,
    concurrency: u16,
    count: Count,
) -> tokio::task::JoinHandle<()> {
    let sites: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &sites_resource());
    let run = Controller::new_with(sites, watcher::Config::default(), sites_resource())
        .owns(
            Api::<Deployment>::namespaced(client.clone(), "default"),
            watcher::Config::default(),
        )
        .owns(
            Api::<Service>::namespaced(client.clone(), "default"),
            watcher::Config::default(),
        )
        .owns(
            Api::<ConfigMap>::namespaced(client, "default"),
            watcher::Config::default(),
        )
        .with_config(Config::default().concurrency(concurrency))
        .run(
            move |_: Arc<DynamicObject>, count: Arc<Count>| async move {
                count.push();
                Ok::<_, kube::Error>(Action::await_change())
            },
            |_, _, _| Action::requeue(Duration::from_secs(1)),
            Arc::new(count),
        )
        .for_each(|_| async {});
    tokio::spawn(run)
}

async fn create_primaries(api: &Api<DynamicObject>, prefix: &str, n: usize) -> Vec<String> {
    let mut uids = Vec::with_capacity(n);
    for i in 0..n {
        let site: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "Site",
            "metadata": {"name": format!("{prefix}{i}")},
            "spec": {"replicas": 1, "image": "nginx:1.27", "message": "0"},
        }))
        .unwrap();
        let created = api.create(&PostParams::default(), &site).await.unwrap();
        uids.push(created.metadata.uid.unwrap());
    }
    uids
}

/// Creates the example's CRD and waits until its Sites are served.
async fn install_crd(client: &kube::Client) -> Api<DynamicObject> {
    let text = std::fs::read_to_string(example().join("crd.yaml")).unwrap();
    let crd: DynamicObject = serde_yaml::from_str(&text).unwrap();
    let crds = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
    ));
    Api::<DynamicObject>::all_with(client.clone(), &crds)
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let sites: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &sites_resource());
    let started = Instant::now();
    while sites.list(&Default::default()).await.is_err() {
        assert!(started.elapsed() < PATIENCE, "the Site CRD is never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sites
}

/// Changes every object `names` lists once, concurrently, while the watches are paused.
async fn change_all<K>(api: &Api<K>, names: Vec<String>, patch: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    futures::stream::iter(names)
        .for_each_concurrent(32, |name| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
            }
        })
        .await;
}

/// Loads the no-op site-controller as `plugin` with the example's manifest (and `concurrency`).
async fn load(t: &TestHost, dir: &std::path::Path, plugin: &str, concurrency: u16) {
    let manifest = std::fs::read_to_string(example().join("site-controller.toml")).unwrap();
    let wasm = dir.join(format!("{plugin}.wasm"));
    std::fs::copy(guest("rust-site-controller-noop.wasm"), &wasm).unwrap();
    std::fs::write(
        dir.join(format!("{plugin}.toml")),
        format!("concurrency = {concurrency}\n{manifest}"),
    )
    .unwrap();
    let out = t.host.manager().load_file(&wasm).await.unwrap();
    assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
}

/// Counts `plugin`'s reconciles as the host's observer records them (polled every 200 µs).
fn count_reconciles(t: &TestHost, plugin: &str) -> Count {
    let count = Count::default();
    let (c, recorder, plugin) = (count.clone(), t.recorder.clone(), plugin.to_string());
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            let calls = recorder.calls(&plugin);
            for call in &calls[seen..] {
                if call.call == CallKind::Reconcile {
                    c.push();
                }
            }
            seen = calls.len();
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    count
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = start_server().await;
    let client = client(&server);
    let sites = install_crd(&client).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let t = start_host(&server, None, kubewasm::runtime::Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let faults = server.shared_faults();

    println!(
        "| concurrency | reconciles | kubewasm reconciles/s | kube-runtime reconciles/s | kubewasm ÷ kube-runtime |"
    );
    println!("|---|---|---|---|---|");
    let names: Vec<String> = (0..PRIMARIES).map(|i| format!("p{i}")).collect();
    create_primaries(&sites, "p", PRIMARIES).await;
    for n in [1u16, 8] {
        let plugin = format!("rate{n}");
        load(&t, dir.path(), &plugin, n).await;
        let wasm = count_reconciles(&t, &plugin);
        let native = Count::default();
        let peer = kube_runtime_controller(client.clone(), n, native.clone());
        // Both have reconciled every Site once (their first pass).
        wasm.reach(PRIMARIES).await;
        native.reach(PRIMARIES).await;
        wasm.settle(Duration::from_millis(500)).await;
        native.settle(Duration::from_millis(500)).await;
        // Three bursts; the median of each side's rate (a burst lasts milliseconds).
        let (mut ws, mut ks) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let (w0, n0) = (wasm.len(), native.len());
            faults.pause_watches();
            let patch = serde_json::json!({"spec": {"message": format!("{n}-{round}")}});
            change_all(&sites, names.clone(), patch).await;
            let resumed = Instant::now();
            faults.resume_watches();
            wasm.reach(w0 + PRIMARIES).await;
            native.reach(n0 + PRIMARIES).await;
            ws.push(wasm.rate_since(w0, resumed));
            ks.push(native.rate_since(n0, resumed));
            wasm.settle(Duration::from_millis(300)).await;
            native.settle(Duration::from_millis(300)).await;
        }
        let (w, k) = (median(&mut ws), median(&mut ks));
        println!(
            "| {n} | {PRIMARIES} × {ROUNDS} | {w:.0} | {k:.0} | {:.2} |",
            w / k
        );
        t.host.manager().unload(&plugin).await;
        peer.abort();
    }

    // Dedup: 1,000 owned ConfigMaps of 100 Sites change at once.
    let uids = create_primaries(&sites, "o", OWNERS).await;
    let mut owned = Vec::new();
    for (i, uid) in uids.iter().enumerate() {
        for j in 0..OWNED_PER_OWNER {
            let name = format!("o{i}-c{j}");
            let c: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "ownerReferences": [{"apiVersion": "example.com/v1",
                    "kind": "Site", "name": format!("o{i}"), "uid": uid, "controller": true}]},
                "data": {"v": "0"},
            }))
            .unwrap();
            configmaps.create(&PostParams::default(), &c).await.unwrap();
            owned.push(name);
        }
    }
    load(&t, dir.path(), "dedup", 1).await;
    let wasm = count_reconciles(&t, "dedup");
    let native = Count::default();
    let _peer = kube_runtime_controller(client.clone(), 1, native.clone());
    let first_pass = PRIMARIES + OWNERS;
    wasm.reach(first_pass).await;
    native.reach(first_pass).await;
    wasm.settle(Duration::from_secs(1)).await;
    native.settle(Duration::from_secs(1)).await;
    let (w0, n0) = (wasm.len(), native.len());
    faults.pause_watches();
    change_all(&configmaps, owned, serde_json::json!({"data": {"v": "1"}})).await;
    faults.resume_watches();
    // Until neither reconciled anything for a second.
    loop {
        let before = (wasm.len(), native.len());
        tokio::time::sleep(Duration::from_secs(1)).await;
        if (wasm.len(), native.len()) == before {
            break;
        }
    }
    let (w, k) = (wasm.len() - w0, native.len() - n0);
    println!();
    println!(
        "| owned changes | owners | kubewasm reconciles | ÷ owners | kube-runtime reconciles | ÷ owners |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {OWNERS} | {w} | {:.2} | {k} | {:.2} |",
        OWNERS * OWNED_PER_OWNER,
        w as f64 / OWNERS as f64,
        k as f64 / OWNERS as f64
    );
    t.host.shutdown().await;
}
