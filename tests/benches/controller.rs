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
use std::sync::atomic::{AtomicUsize, Ordering};
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
/// Owners and owned Secrets per owner in the dedup run.
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

async fn create_primaries(api: &Api<ConfigMap>, prefix: &str, n: usize) -> Vec<String> {
    let mut uids = Vec::with_capacity(n);
    for i in 0..n {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{prefix}{i}"), "labels": {"role": "primary"}},
            "data": {"v": "0"},
        }))
        .unwrap();
        uids.push(
            api.create(&PostParams::default(), &cm)
                .await
                .unwrap()
                .metadata
                .uid
                .unwrap(),
        );
    }
    uids
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = start_server().await;
    let client = client(&server);
    let primaries = install_crd(&client).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let manifest = std::fs::read_to_string(example().join("site-controller.toml")).unwrap();
    let t = start_host(&server, None, kubewasm::runtime::Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let faults = server.shared_faults();

    println!(
        "| concurrency | reconciles | kubewasm reconciles/s | kube-runtime reconciles/s | kubewasm ÷ kube-runtime |"
    );
    println!("|---|---|---|---|---|");
    let names: Vec<String> = (0..PRIMARIES).map(|i| format!("p{i}")).collect();
    create_primaries(&primaries, "p", PRIMARIES).await;
    for n in [1u16, 8] {
        let plugin = format!("ctl{n}");
        std::fs::copy(
            guest("rust-controller-fixture.wasm"),
            dir.path().join(format!("{plugin}.wasm")),
        )
        .unwrap();
        std::fs::write(
            dir.path().join(format!("{plugin}.toml")),
            format!("concurrency = {n}\n[settings]\nnoop = true\n{GRANTS}"),
        )
        .unwrap();
        let out = t
            .host
            .manager()
            .load_file(&dir.path().join(format!("{plugin}.wasm")))
            .await
            .unwrap();
        assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
        let wasm = Count::default();
        {
            // The recorder sees every call end; its count is what the plugin reconciled.
            let (wasm, recorder, plugin) = (wasm.clone(), t.recorder.clone(), plugin.clone());
            tokio::spawn(async move {
                let mut seen = 0;
                loop {
                    let calls = recorder.calls(&plugin);
                    for c in &calls[seen..] {
                        if c.call == CallKind::Reconcile {
                            wasm.push();
                        }
                    }
                    seen = calls.len();
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            });
        }
        let native = Count::default();
        let peer = kube_runtime_controller(client.clone(), n, native.clone());
        // Both have reconciled every primary once (their first pass).
        wasm.reach(PRIMARIES).await;
        native.reach(PRIMARIES).await;
        wasm.settle(Duration::from_millis(500)).await;
        native.settle(Duration::from_millis(500)).await;
        let (w0, n0) = (wasm.len(), native.len());
        faults.pause_watches();
        change_all(
            &primaries,
            names.clone(),
            serde_json::json!({"data": {"v": format!("{n}")}}),
        )
        .await;
        faults.resume_watches();
        wasm.reach(w0 + PRIMARIES).await;
        native.reach(n0 + PRIMARIES).await;
        let (w, k) = (wasm.rate_since(w0), native.rate_since(n0));
        println!("| {n} | {PRIMARIES} | {w:.0} | {k:.0} | {:.2} |", w / k);
        t.host.manager().unload(&plugin).await;
        peer.abort();
    }

    // Dedup: 1,000 owned Secrets of 100 owners change at once.
    let uids = create_primaries(&primaries, "o", OWNERS).await;
    let mut owned = Vec::new();
    for (i, uid) in uids.iter().enumerate() {
        for j in 0..OWNED_PER_OWNER {
            let name = format!("o{i}-s{j}");
            let s: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "name": format!("o{i}"), "uid": uid, "controller": true}]},
                "data": {"v": "MA=="},
            }))
            .unwrap();
            secrets.create(&PostParams::default(), &s).await.unwrap();
            owned.push(name);
        }
    }
    let plugin = "dedup";
    std::fs::copy(
        guest("rust-controller-fixture.wasm"),
        dir.path().join(format!("{plugin}.wasm")),
    )
    .unwrap();
    std::fs::write(
        dir.path().join(format!("{plugin}.toml")),
        format!("[settings]\nnoop = true\n{GRANTS}"),
    )
    .unwrap();
    t.host
        .manager()
        .load_file(&dir.path().join(format!("{plugin}.wasm")))
        .await
        .unwrap();
    let reconciles = |t: &TestHost| {
        t.recorder
            .calls(plugin)
            .iter()
            .filter(|c| c.call == CallKind::Reconcile)
            .count()
    };
    let native = Arc::new(AtomicUsize::new(0));
    {
        let counted = Count::default();
        let _ = kube_runtime_controller(client.clone(), 1, counted.clone());
        let native = native.clone();
        tokio::spawn(async move {
            loop {
                native.store(counted.len(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
    }
    let first_pass = PRIMARIES + OWNERS;
    let started = Instant::now();
    while reconciles(&t) < first_pass || native.load(Ordering::SeqCst) < first_pass {
        assert!(started.elapsed() < PATIENCE, "first pass");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (w0, n0) = (reconciles(&t), native.load(Ordering::SeqCst));
    faults.pause_watches();
    change_all(&configmaps, owned, serde_json::json!({"data": {"v": "1"}})).await;
    faults.resume_watches();
    // Until neither reconciled anything for a second.
    loop {
        let before = (reconciles(&t), native.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_secs(1)).await;
        if (reconciles(&t), native.load(Ordering::SeqCst)) == before {
            break;
        }
    }
    let (w, k) = (reconciles(&t) - w0, native.load(Ordering::SeqCst) - n0);
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
