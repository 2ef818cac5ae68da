//! Handlers from a registry, against the same handler from a plugins directory, in one run:
//! the 18 MB Python replicator pushed signed to Debian's `docker-registry` on 127.0.0.1, then
//! - pull + verify (`pull_signed`) against a plain pull (`pull`), alternating, median of each;
//! - a host following a sources file (pull, verify, load, first call) against a host watching a
//!   directory holding the same file (load, first call), both with the compile cache warm.
//!
//! Run with `cargo bench -p kubewasm-e2e --bench registry` after `bash guest-examples/build.sh`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::registry::{CredentialStore, Registry, SigningKey};
use kubewasm::runtime::{CallEnded, Observer, RuntimeConfig};
use kubewasm_e2e::*;
use parking_lot::Mutex;

const ROUNDS: usize = 7;
const PLUGIN: &str = "replicator";

/// When the first call of [`PLUGIN`] ended, counted from `started`.
struct FirstCall {
    started: Instant,
    first: Mutex<Option<Duration>>,
    done: tokio::sync::Notify,
}

impl Observer for FirstCall {
    fn call_ended(&self, plugin: &str, _: &CallEnded<'_>) {
        let mut first = self.first.lock();
        if plugin == PLUGIN && first.is_none() {
            *first = Some(self.started.elapsed());
            self.done.notify_one();
        }
    }
}

/// Start of a host to the end of its first call, loading from `sources` or else `dir`.
async fn first_call(
    server: &apiserver::ApiServer,
    cache: &Path,
    sources: Option<(&Path, Registry)>,
    dir: &Path,
) -> Duration {
    let clock = Arc::new(FirstCall {
        started: Instant::now(),
        first: Mutex::new(None),
        done: tokio::sync::Notify::new(),
    });
    let notified = clock.done.notified();
    let host = kubewasm::host::HostBuilder::new(client(server))
        .runtime(RuntimeConfig {
            cache_dir: Some(cache.to_path_buf()),
            ..RuntimeConfig::default()
        })
        .observer(clock.clone());
    let host = match sources {
        Some((file, registry)) => host.plugin_sources(file, registry),
        None => host.plugins_dir(dir),
    }
    .start()
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(600), notified)
        .await
        .expect("a first call within 10 minutes");
    let at = clock.first.lock().unwrap();
    host.shutdown().await;
    at
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = start_server().await;
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client(&server), "default");
    let cm = serde_json::from_value(serde_json::json!({"metadata": {"name": "one"}})).unwrap();
    configmaps
        .create(&kube::api::PostParams::default(), &cm)
        .await
        .unwrap();
    let reg = TestRegistry::start(false).await;
    let registry = Registry::new(CredentialStore::default());
    let wasm = std::fs::read(guest("python-replicator.wasm")).unwrap();
    let bytes = wasm.len();
    let work = tempfile::tempdir().unwrap();
    let (private, public) = SigningKey::generate().unwrap();
    let key = SigningKey::from_pem(&private).unwrap();
    let pinned = registry
        .push(&reg.reference("bench/replicator:1"), wasm.clone(), true)
        .await
        .unwrap();
    registry.sign(&pinned, &key, true).await.unwrap();
    let keys = [public.clone()];

    let (mut plain, mut verified) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Each goes first in every other round, so load drift cancels out.
        for signed in [round % 2 == 0, round % 2 == 1] {
            let started = Instant::now();
            let pulled = if signed {
                registry.pull_signed(&pinned, &keys, true).await.unwrap()
            } else {
                registry.pull(&pinned, true).await.unwrap()
            };
            assert_eq!(pulled.wasm.len(), bytes);
            let took = started.elapsed();
            if signed {
                verified.push(took)
            } else {
                plain.push(took)
            }
        }
    }

    // The same component and manifest, from a directory and from the registry.
    let manifest = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../guest-examples/python/replicator/replicator.toml"),
    )
    .unwrap();
    let dir = work.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{PLUGIN}.wasm")), &wasm).unwrap();
    std::fs::write(dir.join(format!("{PLUGIN}.toml")), &manifest).unwrap();
    std::fs::write(work.path().join("cosign.pub"), public.to_pem()).unwrap();
    std::fs::write(work.path().join("replicator.toml"), &manifest).unwrap();
    let sources = work.path().join("sources.toml");
    std::fs::write(
        &sources,
        format!(
            "[[plugin]]\nname = \"{PLUGIN}\"\nreference = \"{pinned}\"\nplain-http = true\nkeys = [\"cosign.pub\"]\nmanifest-file = \"replicator.toml\"\n"
        ),
    )
    .unwrap();
    let cache = work.path().join("cache");
    let cold = first_call(&server, &cache, None, &dir).await;
    let (mut from_dir, mut from_registry) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for registry_first in [round % 2 == 0, round % 2 == 1] {
            if registry_first {
                from_registry.push(
                    first_call(&server, &cache, Some((&sources, registry.clone())), &dir).await,
                );
            } else {
                from_dir.push(first_call(&server, &cache, None, &dir).await);
            }
        }
    }

    let (plain, verified) = (median(plain), median(verified));
    let (from_dir, from_registry) = (median(from_dir), median(from_registry));
    println!(
        "\nThe Python replicator ({bytes} bytes) from a local registry, medians of {ROUNDS} rounds\n"
    );
    println!("| figure | time | ÷ peer |\n| --- | --- | --- |");
    println!("| pull, digests checked (peer) | {} | 1.00 |", ms(plain));
    println!(
        "| pull + verify the cosign signature | {} | {:.2} |",
        ms(verified),
        verified.as_secs_f64() / plain.as_secs_f64()
    );
    println!(
        "| host start to first call, from a directory, warm cache (peer) | {} | 1.00 |",
        ms(from_dir)
    );
    println!(
        "| host start to first call, from the registry (pull + verify + load), warm cache | {} | {:.2} |",
        ms(from_registry),
        from_registry.as_secs_f64() / from_dir.as_secs_f64()
    );
    println!(
        "| (once) host start to first call from a directory, empty cache | {} | |",
        ms(cold)
    );
}
