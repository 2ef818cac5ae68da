//! Start-up of the five configmap-loggers (Rust, C, Go, JavaScript, Python) over 2,000
//! ConfigMaps, with an empty compile cache and then with the cache that run filled: when each
//! plugin made its first call (it was compiled and described just before) and when it had handled its whole initial list,
//! counted from the start of the host. The goal (issue 24): the Rust logger's list
//! handled within 1 s whatever the others do, and every list within 1 s of the slowest compile.
//!
//! Run with `cargo bench -p kubewasm-e2e --bench startup` after `bash guest-examples/build.sh`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kubewasm::runtime::{CallEnded, CallKind, LoadFailed, Observer, RuntimeConfig};
use kubewasm_e2e::*;
use parking_lot::Mutex;

const OBJECTS: usize = 2_000;
const LANGUAGES: &[&str] = &["rust", "c", "go", "javascript", "python"];

/// A ConfigMap of about 2 KB.
fn configmap(i: usize) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("cm-{i:05}"), "namespace": "default"},
        "data": {"payload": "x".repeat(1800)},
    }))
    .unwrap()
}

/// Per plugin: its first call, and when it had handled its initial list.
type Times = BTreeMap<String, (Duration, Duration)>;

/// One plugin's figures so far: its first call, initial adds handled, when the last came.
struct Seen {
    first: Duration,
    adds: usize,
    listed: Option<Duration>,
}

/// Times every plugin's first call and its `OBJECTS`-th initial add as the worker ends it, and
/// keeps the first load that failed.
struct Clock {
    started: Instant,
    seen: Mutex<BTreeMap<String, Seen>>,
    failed: Mutex<Option<String>>,
    done: tokio::sync::Notify,
}

impl Observer for Clock {
    fn call_ended(&self, plugin: &str, call: &CallEnded<'_>) {
        let at = self.started.elapsed();
        let mut seen = self.seen.lock();
        let entry = seen.entry(plugin.to_string()).or_insert(Seen {
            first: at,
            adds: 0,
            listed: None,
        });
        if call.call == CallKind::Add && call.object.is_some_and(|o| o.flag) {
            entry.adds += 1;
            if entry.adds == OBJECTS {
                entry.listed = Some(at);
                self.done.notify_one();
            }
        }
    }

    fn load_failed(&self, plugin: &str, failed: &LoadFailed<'_>) {
        self.failed
            .lock()
            .get_or_insert_with(|| format!("{plugin}: {}", failed.error));
        self.done.notify_one();
    }
}

async fn start_once(
    server: &apiserver::ApiServer,
    plugins: &std::path::Path,
    cache: &std::path::Path,
) -> Times {
    let clock = Arc::new(Clock {
        started: Instant::now(),
        seen: Mutex::new(BTreeMap::new()),
        failed: Mutex::new(None),
        done: tokio::sync::Notify::new(),
    });
    let loading = tokio::spawn(
        kubewasm::host::HostBuilder::new(client(server))
            .runtime(RuntimeConfig {
                cache_dir: Some(cache.to_path_buf()),
                ..RuntimeConfig::default()
            })
            .observer(clock.clone())
            .plugins_dir(plugins)
            .start(),
    );
    loop {
        let notified = clock.done.notified();
        if let Some(failed) = clock.failed.lock().clone() {
            panic!("{failed}");
        }
        let listed = clock
            .seen
            .lock()
            .values()
            .filter(|v| v.listed.is_some())
            .count();
        if listed == LANGUAGES.len() {
            break;
        }
        tokio::time::timeout(Duration::from_secs(600), notified)
            .await
            .expect("every plugin handles its initial list within 10 minutes");
    }
    loading.await.unwrap().unwrap().shutdown().await;
    let seen = clock.seen.lock();
    seen.iter()
        .map(|(p, v)| (p.clone(), (v.first, v.listed.unwrap())))
        .collect()
}

fn print(title: &str, times: &Times) {
    println!("\n{title}\n\n| plugin | first call after | initial list handled after |");
    println!("| --- | --- | --- |");
    for lang in LANGUAGES {
        let (loaded, listed) = times[*lang];
        println!(
            "| {lang} | {:.2} s | {:.2} s |",
            loaded.as_secs_f64(),
            listed.as_secs_f64()
        );
    }
    let slowest = times.values().map(|t| t.0).max().unwrap();
    let last = times.values().map(|t| t.1).max().unwrap();
    println!(
        "\nlast plugin to start calling: {:.2} s; last list handled {:.2} s after that",
        slowest.as_secs_f64(),
        (last - slowest).as_secs_f64()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &configmap(i))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(32)
        .count()
        .await;
    let plugins = tempfile::tempdir().unwrap();
    for lang in LANGUAGES {
        let src = guest(&format!("{lang}-configmap-logger.wasm"));
        std::fs::copy(&src, plugins.path().join(format!("{lang}.wasm"))).unwrap();
        std::fs::copy(
            src.with_extension("toml"),
            plugins.path().join(format!("{lang}.toml")),
        )
        .unwrap();
    }
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().join("cache");
    print(
        &format!("Cold start, empty compile cache, {OBJECTS} ConfigMaps"),
        &start_once(&server, plugins.path(), &cache).await,
    );
    print(
        &format!("Warm start, the cache that run filled, {OBJECTS} ConfigMaps"),
        &start_once(&server, plugins.path(), &cache).await,
    );
}
