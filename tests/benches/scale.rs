//! Cache scale (issue 12): what kubewasm holds per cached object and how long its initial sync
//! takes, against a bare kube-runtime reflector on the same embedded API server, in one run.
//!
//! Datasets: 10k and 100k ConfigMaps of ~1 KiB data with 3 labels over 10 namespaces, and 20k
//! Pod-sized objects (~5 KiB served, ~2.5 KiB of it a realistic `managedFields` block).
//! Every system runs in its own child process (this binary re-executed with `SCALE_CHILD` set),
//! so RSS is per system: kubewasm is the real host with one silent plugin
//! (`target/fixtures/rust-test-fixture.wasm`), kube-runtime is `reflector(watcher(..))` over
//! typed `ConfigMap`s, once holding the objects as served and once with `managedFields` dropped
//! before its store (the API server records them on every write; kubewasm strips them by
//! default, so the second is like for like). Runs alternate between systems; the table shows
//! medians.
//!
//! Also printed: the informer's initial sync by LIST and by streaming list (WatchList), where
//! kubewasm's sync time goes (decode, FIFO, indexer, serialisation, guest calls), bytes per
//! object with and without `managedFields`, and write → callback latency at 1,000 writes/s next
//! to the bare watch stream and the create request's own response, in two passes: as is, and
//! with an idle thread keeping the (virtual) CPUs from halting.
//!
//! Run: `cargo bench -p kubewasm-e2e --bench scale`. `SCALE_RUNS` (default 3) sets the runs per
//! system, `SCALE_SIZES` (default `10000,100000`) the ConfigMap counts, `SCALE_PODS` (default
//! 20000) the Pod-sized count.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kubewasm::informer::{
    DeltaFifo, Indexer, InformerFactory, InformerKey, InformerMetrics, KubeObject,
    KubeSourceFactory, ReflectorConfig, ResourceEventHandler, SharedObject, SourceFactory,
    SourceObject, json_serialisations,
};
use kubewasm::runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use kubewasm_e2e::{client, guest};
use parking_lot::Mutex;
use serde_json::{Value, json};

const CHILD: &str = "SCALE_CHILD";
const NAMESPACES: usize = 10;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `(VmRSS, VmHWM)` of this process in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A ConfigMap with ~1 KiB of data (4 keys) and 3 labels, ~1.3 KB served.
fn small(i: usize) -> Value {
    let fill = |k: usize| format!("{k}:{i:06}:").repeat(256 / 9 + 1)[..256].to_string();
    let tier = ["web", "db", "cache"][i % 3];
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:06}"), "namespace": format!("ns-{}", i % NAMESPACES),
            "labels": {"app.kubernetes.io/name": "scale", "app.kubernetes.io/instance": format!("inst-{}", i % 97),
                       "tier": tier}},
        "data": {"app.properties": fill(0), "logging.conf": fill(1), "feature-flags": fill(2), "endpoints": fill(3)}
    })
}

/// The `managedFields` a Deployment-owned Pod carries (kube-controller-manager creates it, the
/// kubelet owns its status), ~2.5 KB of JSON.
fn pod_managed_fields() -> Value {
    let container = json!({
        "f:args": {}, "f:env": {".": {}, "k:{\"name\":\"LOG_LEVEL\"}": {".": {}, "f:name": {}, "f:value": {}},
            "k:{\"name\":\"POD_IP\"}": {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}},
        "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
        "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
        "f:readinessProbe": {".": {}, "f:failureThreshold": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}},
            "f:periodSeconds": {}, "f:successThreshold": {}, "f:timeoutSeconds": {}},
        "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
        "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/etc/config\"}": {".": {}, "f:mountPath": {}, "f:name": {}}}
    });
    let condition = |t: &str| {
        (
            format!("k:{{\"type\":\"{t}\"}}"),
            json!({".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}),
        )
    };
    let conditions: serde_json::Map<String, Value> = [
        "ContainersReady",
        "Initialized",
        "PodReadyToStartContainers",
        "Ready",
    ]
    .iter()
    .map(|t| condition(t))
    .collect();
    json!([
        {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kube-controller-manager",
         "operation": "Update", "time": "2026-11-20T10:00:00Z",
         "fieldsV1": {
            "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                "f:ownerReferences": {".": {}, "k:{\"uid\":\"5b1c9f3e-2d7a-4c1b-9e8f-0a1b2c3d4e5f\"}": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": container}, "f:dnsPolicy": {},
                "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                "f:terminationGracePeriodSeconds": {},
                "f:volumes": {".": {}, "k:{\"name\":\"config\"}": {".": {}, "f:configMap": {".": {}, "f:defaultMode": {}, "f:name": {}}, "f:name": {}}}}}},
        {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet",
         "operation": "Update", "subresource": "status", "time": "2026-11-20T10:00:07Z",
         "fieldsV1": {"f:status": {"f:conditions": conditions, "f:containerStatuses": {}, "f:hostIP": {},
            "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.244.1.23\"}": {".": {}, "f:ip": {}}},
            "f:startTime": {}}}}
    ])
}

/// A Pod-sized object: ~2.5 KB of data standing in for spec and status, 5 labels, an owner,
/// and the `managedFields` of a real Pod; ~5.4 KB served.
fn pod_sized(i: usize) -> Value {
    let fill = |k: usize| format!("{k}-{i:06}-").repeat(320 / 9 + 1)[..320].to_string();
    let data: serde_json::Map<String, Value> = (0..8)
        .map(|k| (format!("section-{k}"), Value::String(fill(k))))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("web-7d9c6b5f4-{i:06}"), "namespace": format!("ns-{}", i % NAMESPACES),
            "generateName": "web-7d9c6b5f4-",
            "labels": {"app": "web", "pod-template-hash": "7d9c6b5f4", "app.kubernetes.io/name": "scale",
                       "app.kubernetes.io/instance": format!("inst-{}", i % 97), "tier": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c6b5f4",
                "uid": "5b1c9f3e-2d7a-4c1b-9e8f-0a1b2c3d4e5f", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": pod_managed_fields()},
        "data": data
    })
}

/// What one child measured.
#[derive(Clone, Debug, Default)]
struct Sample {
    /// Seconds from start to synced (kubewasm: plugin has handled its initial replay).
    synced: f64,
    /// kubewasm: seconds until the informer alone had synced.
    informer_synced: f64,
    /// kubewasm: seconds spent inside guest calls.
    guest: f64,
    base_kib: u64,
    peak_kib: u64,
    steady_kib: u64,
    /// Heap bytes of the cached objects as counted by the cache itself (kubewasm).
    heap_per_object: f64,
    extra: HashMap<String, f64>,
}

impl Sample {
    fn per_object(&self, n: usize) -> f64 {
        (self.steady_kib.saturating_sub(self.base_kib)) as f64 * 1024.0 / n as f64
    }

    fn encode(&self) -> String {
        let mut m = serde_json::Map::new();
        m.insert("synced".into(), json!(self.synced));
        m.insert("informer_synced".into(), json!(self.informer_synced));
        m.insert("guest".into(), json!(self.guest));
        m.insert("base".into(), json!(self.base_kib));
        m.insert("peak".into(), json!(self.peak_kib));
        m.insert("steady".into(), json!(self.steady_kib));
        m.insert("heap".into(), json!(self.heap_per_object));
        m.insert("extra".into(), json!(self.extra));
        Value::Object(m).to_string()
    }

    fn decode(line: &str) -> Sample {
        let v: Value = serde_json::from_str(line).expect("child result");
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        Sample {
            synced: f("synced"),
            informer_synced: f("informer_synced"),
            guest: f("guest"),
            base_kib: f("base") as u64,
            peak_kib: f("peak") as u64,
            steady_kib: f("steady") as u64,
            heap_per_object: f("heap"),
            extra: serde_json::from_value(v["extra"].clone()).unwrap_or_default(),
        }
    }
}

fn configmap_key() -> InformerKey {
    InformerKey::new("v1", "ConfigMap")
}

/// Waits until `cond` holds, polling every millisecond (a 1 ms granularity is far below the
/// figures measured).
async fn until(mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while !cond().await {
        assert!(Instant::now() < deadline, "child timed out");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn settle(sample: &mut Sample) {
    // Let transient buffers be freed and background tasks go idle before the steady reading.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss, hwm) = rss_kib();
    sample.steady_kib = rss;
    sample.peak_kib = hwm;
}

/// kube-runtime's reflector over typed ConfigMaps; `streaming` selects streaming lists, `strip`
/// drops `managedFields` before the store (`WatchStreamExt::modify`, as kube-rs documents), so
/// it holds what kubewasm holds by default.
async fn child_kube_runtime(kube: kube::Client, streaming: bool, strip: bool) -> Sample {
    let api: Api<ConfigMap> = Api::all(kube);
    let (reader, writer) = reflector::store::<ConfigMap>();
    let config = if streaming {
        watcher::Config::default().streaming_lists()
    } else {
        watcher::Config::default()
    };
    let mut sample = Sample {
        base_kib: rss_kib().0,
        ..Sample::default()
    };
    let start = Instant::now();
    let events = watcher(api, config).modify(move |cm: &mut ConfigMap| {
        if strip {
            cm.metadata.managed_fields = None;
        }
    });
    tokio::spawn(reflector(writer, events).for_each(|_| async {}));
    reader.wait_until_ready().await.expect("reflector ready");
    sample.synced = start.elapsed().as_secs_f64();
    settle(&mut sample).await;
    std::hint::black_box(reader.len());
    sample
}

/// The kubewasm host with one silent plugin.
async fn child_kubewasm(kube: kube::Client, cache: PathBuf, keep_managed_fields: bool) -> Sample {
    let fixture = PathBuf::from(std::env::var("SCALE_FIXTURE").expect("fixture path"));
    let host = kubewasm::host::HostBuilder::new(kube)
        .runtime(RuntimeConfig {
            cache_dir: Some(cache),
            ..RuntimeConfig::default()
        })
        .informers(ReflectorConfig {
            keep_managed_fields,
            ..ReflectorConfig::default()
        })
        .start()
        .await
        .expect("host starts");
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("fixture.wasm");
    std::fs::copy(&fixture, &plugin).unwrap();
    let mut sample = Sample {
        base_kib: rss_kib().0,
        ..Sample::default()
    };
    let manager = host.manager().clone();
    let start = Instant::now();
    manager.load_file(&plugin).await.expect("plugin loads");
    let factory = host.factory().clone();
    let mut informer_synced = None;
    until(async || {
        if informer_synced.is_none() && factory.has_synced(&configmap_key()) {
            informer_synced = Some(start.elapsed());
        }
        manager.plugin_ready("fixture").await
    })
    .await;
    sample.synced = start.elapsed().as_secs_f64();
    sample.informer_synced = informer_synced.unwrap_or_default().as_secs_f64();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, host.metrics_registry()).unwrap();
    sample.guest = text
        .lines()
        .filter(|l| l.starts_with("kubewasm_plugin_call_duration_seconds_sum"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    settle(&mut sample).await;
    let objects = host.factory().indexer(&configmap_key()).unwrap().list();
    sample.heap_per_object =
        objects.iter().map(|o| o.heap_bytes()).sum::<usize>() as f64 / objects.len().max(1) as f64;
    sample.extra.insert(
        "json_len".into(),
        avg(objects.iter().map(|o| o.json().len())),
    );
    host.shutdown().await;
    sample
}

fn avg(it: impl Iterator<Item = usize>) -> f64 {
    let (n, sum) = it.fold((0usize, 0usize), |(n, s), x| (n + 1, s + x));
    sum as f64 / n.max(1) as f64
}

struct Silent;

impl ResourceEventHandler for Silent {
    fn on_add(&self, _: &SharedObject, _: bool) {}
    fn on_update(&self, _: &SharedObject, _: &SharedObject, _: bool) {}
    fn on_delete(&self, _: &SharedObject, _: bool) {}
}

/// The informer alone (no runtime, no plugin), by LIST or by streaming list.
async fn child_informer(kube: kube::Client, watch_list: bool) -> Sample {
    let factory = InformerFactory::with_config(
        Arc::new(KubeSourceFactory::new(kube)),
        InformerMetrics::unregistered(),
        ReflectorConfig {
            use_watch_list: watch_list,
            ..ReflectorConfig::default()
        },
    );
    let mut sample = Sample {
        base_kib: rss_kib().0,
        ..Sample::default()
    };
    let start = Instant::now();
    let reg = factory
        .add_handler(&configmap_key(), Arc::new(Silent), None)
        .await
        .expect("informer starts");
    until(async || reg.has_synced()).await;
    sample.synced = start.elapsed().as_secs_f64();
    settle(&mut sample).await;
    reg.remove().await;
    factory.shutdown().await;
    sample
}

/// Where the informer's sync time goes, phase by phase over the same objects.
async fn child_breakdown(kube: kube::Client) -> Sample {
    let lw = KubeSourceFactory::new(kube)
        .lister_watcher(&configmap_key())
        .await
        .unwrap();
    let mut sample = Sample::default();
    let mut phase = |name: &str, d: Duration| {
        sample.extra.insert(name.into(), d.as_secs_f64());
    };
    // Transfer and page parsing: every page fetched, items left as served text.
    let start = Instant::now();
    let mut items: Vec<SourceObject> = Vec::new();
    let mut opts = kubewasm::informer::ListOptions {
        resource_version: "0".into(),
        limit: Some(500),
        continue_token: None,
        shard_selector: None,
    };
    loop {
        let page = lw.list_objects(&opts).await.unwrap();
        items.extend(page.items);
        match page.continue_token {
            Some(c) => {
                opts = kubewasm::informer::ListOptions {
                    resource_version: String::new(),
                    limit: Some(500),
                    continue_token: Some(c),
                    shard_selector: None,
                }
            }
            None => break,
        }
    }
    phase("fetch", start.elapsed());
    let start = Instant::now();
    let objs: Vec<SharedObject> = items
        .into_iter()
        .map(|o| {
            Arc::new(
                KubeObject::from_source(o, "v1", "ConfigMap", false, None)
                    .map_err(|(e, _)| e)
                    .unwrap(),
            )
        })
        .collect();
    phase("decode", start.elapsed());
    let indexer = Indexer::new();
    let fifo = DeltaFifo::new(Some(indexer.clone()), true);
    let start = Instant::now();
    fifo.replace(objs.clone());
    while fifo.try_pop(|deltas, _| deltas.len()).is_some() {}
    phase("fifo", start.elapsed());
    let start = Instant::now();
    for o in &objs {
        indexer.add(o.clone());
    }
    phase("indexer", start.elapsed());
    let before = json_serialisations();
    let start = Instant::now();
    let bytes: usize = objs.iter().map(|o| o.json().len()).sum();
    std::hint::black_box(bytes);
    phase("serialise", start.elapsed());
    sample.extra.insert(
        "serialisations".into(),
        (json_serialisations() - before) as f64,
    );
    sample
}

fn child_main(role: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url: String = std::env::var("SCALE_URL").expect("server url");
    let sample = rt.block_on(async {
        let kube =
            kube::Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client");
        let cache = PathBuf::from(std::env::var("SCALE_CACHE").unwrap_or_default());
        match role {
            "kube-runtime" => child_kube_runtime(kube, false, false).await,
            "kube-runtime-stripped" => child_kube_runtime(kube, false, true).await,
            "kube-runtime-streaming" => child_kube_runtime(kube, true, false).await,
            "kubewasm" => child_kubewasm(kube, cache, false).await,
            "kubewasm-keep-mf" => child_kubewasm(kube, cache, true).await,
            "informer-list" => child_informer(kube, false).await,
            "informer-watchlist" => child_informer(kube, true).await,
            "breakdown" => child_breakdown(kube).await,
            other => panic!("unknown child role {other}"),
        }
    });
    println!("RESULT {}", sample.encode());
}

/// Runs this binary as a child in `role` against `url`.
fn run_child(role: &str, url: &str, cache: &Path, fixture: &Path) -> Sample {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, role)
        .env("SCALE_URL", url)
        .env("SCALE_CACHE", cache)
        .env("SCALE_FIXTURE", fixture)
        .output()
        .expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
        panic!(
            "child {role} failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    Sample::decode(line)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Medians of the samples' fields.
fn med(samples: &[Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    median(samples.iter().map(f).collect())
}

async fn populate(server: &apiserver::ApiServer, n: usize, make: fn(usize) -> Value) {
    let kube = client(server);
    for ns in 0..NAMESPACES {
        let api: Api<Namespace> = Api::all(kube.clone());
        let body: Namespace =
            serde_json::from_value(json!({"metadata": {"name": format!("ns-{ns}")}})).unwrap();
        api.create(&PostParams::default(), &body).await.unwrap();
    }
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let kube = kube.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(make(i)).unwrap();
                let ns = cm.metadata.namespace.clone().unwrap();
                Api::<ConfigMap>::namespaced(kube, &ns)
                    .create(&PostParams::default(), &cm)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .count()
        .await;
    eprintln!(
        "setup: {n} objects created in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

fn mb(kib: f64) -> String {
    format!("{:.0} MB", kib * 1024.0 / 1e6)
}

/// One dataset: alternate the systems, then print the rows and ratios.
fn dataset(label: &str, n: usize, url: &str, cache: &Path, fixture: &Path, extras: bool) {
    let runs: usize = env_or("SCALE_RUNS", 3);
    let (mut kw, mut kr, mut krs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        kr.push(run_child("kube-runtime", url, cache, fixture));
        kw.push(run_child("kubewasm", url, cache, fixture));
        krs.push(run_child("kube-runtime-stripped", url, cache, fixture));
    }
    let row = |system: &str, s: &[Sample], with_guest: bool| {
        let time = if with_guest {
            format!(
                "{:.2} s (informer {:.2} s, guest calls {:.2} s)",
                med(s, |x| x.synced),
                med(s, |x| x.informer_synced),
                med(s, |x| x.guest)
            )
        } else {
            format!("{:.2} s", med(s, |x| x.synced))
        };
        println!(
            "| {label} | {system} | {time} | {} | {} | {:.0} B |",
            mb(med(s, |x| x.peak_kib as f64)),
            mb(med(s, |x| x.steady_kib as f64)),
            med(s, |x| x.per_object(n)),
        );
    };
    row("kubewasm", &kw, true);
    row("kube-runtime reflector", &kr, false);
    row("kube-runtime reflector, managedFields dropped", &krs, false);
    let kw_obj = med(&kw, |x| x.per_object(n));
    let kr_obj = med(&kr, |x| x.per_object(n));
    let kw_time = med(&kw, |x| x.synced);
    let kw_guest = med(&kw, |x| x.guest);
    let kr_time = med(&kr, |x| x.synced);
    println!(
        "| {label} | **ratio kubewasm ÷ kube-runtime** | **{:.2}** (goal ≤ 1.2 after subtracting guest calls: {:.2}) | {:.2} | {:.2} | **{:.2}** (goal ≤ 0.8) |",
        kw_time / kr_time,
        (kw_time - kw_guest) / kr_time,
        med(&kw, |x| x.peak_kib as f64) / med(&kr, |x| x.peak_kib as f64),
        med(&kw, |x| x.steady_kib as f64) / med(&kr, |x| x.steady_kib as f64),
        kw_obj / kr_obj
    );
    // Like for like: both sides without managedFields (the API server records them on writes).
    let krs_time = med(&krs, |x| x.synced);
    println!(
        "| {label} | **ratio kubewasm ÷ kube-runtime, both without managedFields** | **{:.2}** (after subtracting guest calls: {:.2}) | {:.2} | {:.2} | **{:.2}** |",
        kw_time / krs_time,
        (kw_time - kw_guest) / krs_time,
        med(&kw, |x| x.peak_kib as f64) / med(&krs, |x| x.peak_kib as f64),
        med(&kw, |x| x.steady_kib as f64) / med(&krs, |x| x.steady_kib as f64),
        kw_obj / med(&krs, |x| x.per_object(n))
    );
    eprintln!(
        "{label}: kubewasm cache heap {:.0} B/object, served JSON as held {:.0} B",
        med(&kw, |x| x.heap_per_object),
        med(&kw, |x| x.extra.get("json_len").copied().unwrap_or(0.0))
    );
    if !extras {
        return;
    }
    let list = run_child("informer-list", url, cache, fixture);
    let stream = run_child("informer-watchlist", url, cache, fixture);
    let kr_stream = run_child("kube-runtime-streaming", url, cache, fixture);
    println!(
        "| {label} | informer alone, LIST (paged 500) vs streaming list | {:.2} s vs {:.2} s | {} vs {} | | {:.0} B vs {:.0} B |",
        list.synced,
        stream.synced,
        mb(list.peak_kib as f64),
        mb(stream.peak_kib as f64),
        list.per_object(n),
        stream.per_object(n),
    );
    println!(
        "| {label} | kube-runtime, streaming list | {:.2} s | {} | {} | {:.0} B |",
        kr_stream.synced,
        mb(kr_stream.peak_kib as f64),
        mb(kr_stream.steady_kib as f64),
        kr_stream.per_object(n),
    );
    let b = run_child("breakdown", url, cache, fixture);
    let p = |k: &str| b.extra.get(k).copied().unwrap_or(0.0);
    println!(
        "| {label} | sync breakdown (one pass each) | fetch+page parse {:.2} s, decode to cache objects {:.2} s, FIFO {:.2} s, indexer {:.2} s, serialisation {:.3} s ({} serialisations), guest calls {:.2} s | | | |",
        p("fetch"),
        p("decode"),
        p("fifo"),
        p("indexer"),
        p("serialise"),
        p("serialisations"),
        kw_guest,
    );
}

/// Pod-sized objects: the ratio rows plus kubewasm keeping `managedFields`.
fn pods(n: usize, url: &str, cache: &Path, fixture: &Path) {
    dataset(
        &format!("{}k Pod-sized", n / 1000),
        n,
        url,
        cache,
        fixture,
        false,
    );
    let keep = run_child("kubewasm-keep-mf", url, cache, fixture);
    let strip = run_child("kubewasm", url, cache, fixture);
    println!(
        "| {}k Pod-sized | kubewasm, per object: managedFields stripped (default) vs kept | {:.2} s vs {:.2} s | {} vs {} | {} vs {} | {:.0} B vs {:.0} B (cache heap {:.0} B vs {:.0} B; JSON held {:.0} B vs {:.0} B) |",
        n / 1000,
        strip.synced,
        keep.synced,
        mb(strip.peak_kib as f64),
        mb(keep.peak_kib as f64),
        mb(strip.steady_kib as f64),
        mb(keep.steady_kib as f64),
        strip.per_object(n),
        keep.per_object(n),
        strip.heap_per_object,
        keep.heap_per_object,
        strip.extra.get("json_len").copied().unwrap_or(0.0),
        keep.extra.get("json_len").copied().unwrap_or(0.0),
    );
}

/// Records when each object first reached the informer's handler.
struct Arrivals(Mutex<HashMap<String, Instant>>);

impl ResourceEventHandler for Arrivals {
    fn on_add(&self, obj: &SharedObject, _: bool) {
        self.0
            .lock()
            .entry(obj.key().to_string())
            .or_insert_with(Instant::now);
    }
    fn on_update(&self, _: &SharedObject, _: &SharedObject, _: bool) {}
    fn on_delete(&self, _: &SharedObject, _: bool) {}
}

/// Write → callback latency at 1,000 creates/s: through kubewasm's informer, on a bare watch
/// stream (the server's own delivery), and the create request's own response; `keep_awake` runs
/// the pass with an idle thread that keeps the machine's vCPUs from halting; `as_dev` runs it on
/// the server `kubewasm dev` runs (namespace defaults, the workload controllers and fake node)
/// holding 10k ConfigMaps, with a 100-replica Deployment rolling out meanwhile.
async fn latency(keep_awake: bool, as_dev: bool) {
    let pass = match (keep_awake, as_dev) {
        (_, true) => ", vCPUs kept awake, kubewasm dev's server with 10k objects and a rollout",
        (true, false) => ", vCPUs kept awake",
        (false, false) => "",
    };
    let config = if as_dev {
        apiserver::Config {
            namespace_defaults: true,
            workloads: Some(apiserver::WorkloadConfig::default()),
            ..apiserver::Config::default()
        }
    } else {
        apiserver::Config::default()
    };
    let server = apiserver::ApiServer::start(config).await.unwrap();
    let kube = client(&server);
    if as_dev {
        populate(&server, 10_000, small).await;
        let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns-0"},
            "spec": {"replicas": 100, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        }))
        .unwrap();
        Api::namespaced(kube.clone(), "ns-0")
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "lat"}})).unwrap();
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let factory = InformerFactory::new(kube.clone(), InformerMetrics::unregistered());
    let arrivals = Arc::new(Arrivals(Mutex::new(HashMap::new())));
    let reg = factory
        .add_handler(&configmap_key(), arrivals.clone(), None)
        .await
        .unwrap();
    until(async || reg.has_synced()).await;
    // A bare watch: line arrival times straight off the socket.
    let raw: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    {
        let raw = raw.clone();
        let uri = format!(
            "/api/v1/namespaces/lat/configmaps?watch=true&resourceVersion={}&timeoutSeconds=600",
            server.resource_version()
        );
        let req = http::Request::get(uri).body(Vec::new()).unwrap();
        let stream = kube.request_stream(req).await.unwrap();
        tokio::spawn(async move {
            let mut lines = stream.lines();
            while let Some(Ok(line)) = lines.next().await {
                let now = Instant::now();
                if let Some(i) = line.find("\"name\":\"lat-") {
                    let name: String = line[i + 8..].chars().take_while(|c| *c != '"').collect();
                    raw.lock().entry(name).or_insert(now);
                }
            }
        });
    }
    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), "lat");
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    // This machine is a microVM whose idle vCPUs halt at once (no guest halt-polling); waking a
    // halted vCPU waits for the hypervisor to run it again, milliseconds on a busy host. A thread
    // that merely sleeps 1 ms in a loop keeps the vCPUs from halting for long; it touches nothing
    // in the process, so the difference between the two passes is that wake-up cost alone.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let awake = keep_awake.then(|| {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    });
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let writes = 4000;
    let mut tasks = Vec::new();
    for i in 0..writes {
        tick.tick().await;
        let (api, sent, answered) = (api.clone(), sent.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let name = format!("lat-{i:05}");
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": name}, "data": {"v": "x".repeat(512)}}),
            )
            .unwrap();
            sent.lock().insert(name.clone(), Instant::now());
            api.create(&PostParams::default(), &cm).await.unwrap();
            answered.lock().insert(name, Instant::now());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    until(async || arrivals.0.lock().len() >= writes && raw.lock().len() >= writes).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(t) = awake {
        t.join().unwrap();
    }
    let lat = |seen: &HashMap<String, Instant>| {
        let sent = sent.lock();
        let mut v: Vec<f64> = sent
            .iter()
            .filter_map(|(k, t)| {
                let at = seen.get(&format!("lat/{k}")).or(seen.get(k))?;
                Some(at.duration_since(*t).as_secs_f64() * 1e3)
            })
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
        (q(0.5), q(0.99), q(1.0))
    };
    let (k50, k99, kmax) = lat(&arrivals.0.lock());
    let (r50, r99, rmax) = lat(&raw.lock());
    let (a50, a99, amax) = lat(&answered.lock());
    println!(
        "| write → callback at 1,000 writes/s ({writes} creates{pass}) | kubewasm informer handler | p50 {k50:.2} ms, p99 {k99:.2} ms (max {kmax:.1} ms) (goal p99 ≤ 2 ms) |"
    );
    println!(
        "| write → watch line at 1,000 writes/s{pass} | bare watch stream | p50 {r50:.2} ms, p99 {r99:.2} ms (max {rmax:.1} ms) |"
    );
    println!(
        "| write → create response at 1,000 writes/s{pass} | the writer's own request | p50 {a50:.2} ms, p99 {a99:.2} ms (max {amax:.1} ms) |"
    );
    reg.remove().await;
    factory.shutdown().await;
    server.shutdown().await;
}

fn main() {
    if let Ok(role) = std::env::var(CHILD) {
        child_main(&role);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fixture = guest("rust-test-fixture.wasm");
    // Compile once into a shared cache so no child's sync includes compiling the guest.
    let cache = tempfile::tempdir().unwrap();
    Runtime::new(
        RuntimeConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            ..RuntimeConfig::default()
        },
        RuntimeMetrics::unregistered(),
    )
    .unwrap()
    .compile(&std::fs::read(&fixture).unwrap())
    .unwrap();
    let sizes: Vec<usize> = std::env::var("SCALE_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let pod_count: usize = env_or("SCALE_PODS", 20_000);
    println!("| objects | system | time to synced | peak RSS | steady RSS | RSS per object |");
    println!("| --- | --- | --- | --- | --- | --- |");
    rt.block_on(latency(false, false));
    rt.block_on(latency(true, false));
    rt.block_on(latency(true, true));
    for &n in &sizes {
        let server = rt.block_on(async {
            let s = apiserver::ApiServer::start(apiserver::Config::default())
                .await
                .unwrap();
            populate(&s, n, small).await;
            s
        });
        dataset(
            &format!("{}k ConfigMaps", n / 1000),
            n,
            &server.url(),
            cache.path(),
            &fixture,
            true,
        );
        rt.block_on(server.shutdown());
    }
    if pod_count > 0 {
        let server = rt.block_on(async {
            let s = apiserver::ApiServer::start(apiserver::Config::default())
                .await
                .unwrap();
            populate(&s, pod_count, pod_sized).await;
            s
        });
        pods(pod_count, &server.url(), cache.path(), &fixture);
        rt.block_on(server.shutdown());
    }
}
