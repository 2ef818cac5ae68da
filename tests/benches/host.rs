//! Host benchmarks (issue: runtime, plugins, CLI): everything measured in one run and printed
//! as ratios, so the figures compare like with like on whatever machine runs them.
//!
//! - pipeline throughput to a no-op Rust guest (informer listener → plugin queue → worker →
//!   guest) against a raw loop calling the same guest directly;
//! - the cost of the 10th plugin on one informer against the 1st;
//! - hot-swap latency, file replaced → new version receiving, with and without a cached compile;
//! - idle RSS per loaded Rust plugin;
//! - a hot swap while v1 sleeps in a call: how long after v1's deadline v2 starts, and what a
//!   write costs another plugin meanwhile.
//!
//! Run with `cargo bench -p kubewasm-e2e --bench host`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kubewasm::informer::InformerKey;
use kubewasm::runtime::CallOutcome;
use kubewasm::runtime::{Limits, NoCache, Runtime, RuntimeConfig, RuntimeMetrics};
use kubewasm_e2e::*;

const OBJECTS: usize = 20_000;

/// A ConfigMap of about 2 KB, the size the figures assume.
fn configmap(i: usize) -> ConfigMap {
    let filler = "x".repeat(1800);
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("cm-{i:05}"), "namespace": "default",
                     "labels": {"app.kubernetes.io/name": "bench", "index": i.to_string()}},
        "data": {"payload": filler},
    }))
    .unwrap()
}

/// Waits until `plugin` (at a version newer than `after`) has handled `n` calls; returns when.
async fn wait_calls(recorder: &Recorder, plugin: &str, after: u64, n: usize) -> Instant {
    recorder
        .wait_reporting(
            |r| {
                let calls = r.calls(plugin);
                let newer: Vec<_> = calls.iter().filter(|c| c.version > after).collect();
                assert!(
                    newer.iter().all(|c| c.outcome == CallOutcome::Ok),
                    "{newer:?}"
                );
                newer.len() >= n
            },
            || format!("{plugin}: {n} calls of a version after {after}"),
        )
        .await;
    Instant::now()
}

/// Waits until `plugin` has handled its whole initial replay, without waiting on the
/// recorder: a waiter woken per call would add a cross-thread wake-up that production does not
/// pay.
async fn wait_replayed(manager: &kubewasm::plugins::PluginManager, plugin: &str) -> Instant {
    loop {
        if manager.plugin_ready(plugin).await {
            return Instant::now();
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

/// Appends a custom section so the bytes (and hence the compile-cache key) differ while the
/// component stays the same.
fn with_custom_section(wasm: &[u8], tag: &str) -> Vec<u8> {
    let name = b"kubewasm-bench";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    out.push(payload.len() as u8);
    out.extend_from_slice(&payload);
    out
}

fn install_bytes(bytes: &[u8], dir: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// Hot-swap latency and idle RSS, on a server holding a single ConfigMap so that neither figure
/// is dominated by replaying a large cache.
async fn small_informer_figures() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    api.create(&PostParams::default(), &configmap(0))
        .await
        .unwrap();
    let fixture = guest("rust-test-fixture.wasm");
    let logger = guest("rust-configmap-logger.wasm");
    let swap_dir = tempfile::tempdir().unwrap();
    let logger_bytes = std::fs::read(&logger).unwrap();
    install_bytes(&logger_bytes, swap_dir.path(), "swap.wasm");
    let t = start_host(
        &server,
        Some(swap_dir.path().to_path_buf()),
        Limits::default(),
    )
    .await;
    let mut version = t.host.manager().status().await[0].version;
    let mut uncached = Vec::new();
    let mut cached = Vec::new();
    for round in 0..7 {
        let fresh = with_custom_section(&logger_bytes, &format!("round-{round}"));
        for (bytes, sink) in [(&fresh, &mut uncached), (&logger_bytes, &mut cached)] {
            let start = Instant::now();
            install_bytes(bytes, swap_dir.path(), "swap.wasm");
            let done = wait_calls(&t.recorder, "swap", version, 1).await;
            sink.push(done - start);
            version = t.host.manager().status().await[0].version;
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "| hot swap, file replaced → new version receiving, new bytes (goal ≤ 100 ms) | {:.1} ms (median of 7) |",
        median(&mut uncached).as_secs_f64() * 1e3
    );
    println!(
        "| hot swap with a cached compile (goal ≤ 10 ms) | {:.1} ms (median of 7) |",
        median(&mut cached).as_secs_f64() * 1e3
    );
    t.host.manager().unload("swap").await;

    // Idle RSS per loaded Rust plugin: 50 plugins on the synced informer.
    let rss_dir = tempfile::tempdir().unwrap();
    let warm = rss_dir.path().join("warm.wasm");
    std::fs::copy(&fixture, &warm).unwrap();
    t.host.manager().load_file(&warm).await.unwrap();
    wait_calls(&t.recorder, "warm", 0, 1).await;
    let before = rss_kib();
    let n = 50;
    for i in 0..n {
        let p = rss_dir.path().join(format!("idle-{i}.wasm"));
        std::fs::copy(&fixture, &p).unwrap();
        t.host.manager().load_file(&p).await.unwrap();
        wait_calls(&t.recorder, &format!("idle-{i}"), 0, 1).await;
    }
    let after = rss_kib();
    println!(
        "| idle RSS per loaded Rust plugin (goal ≤ 256 KiB) | {} KiB ({n} plugins: {} KiB → {} KiB) |",
        after.saturating_sub(before) / n as u64,
        before,
        after
    );
    t.host.shutdown().await;
    server.shutdown().await;
}

/// A swap whose v1 is asleep in a call (a 600 s sleep, deadline 1 s): v2 may start only once
/// v1's call has ended at its deadline, and nothing else may wait for it.
async fn swap_with_sleeping_v1() {
    const DEADLINE: Duration = Duration::from_millis(1000);
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let mut sleeper = configmap(0);
    sleeper.metadata.name = Some("sleeper".into());
    sleeper.metadata.labels =
        Some([("kubewasm.io/action".to_string(), "sleep".to_string())].into());
    api.create(&PostParams::default(), &sleeper).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let manifest = |generation: u32| {
        // A comment is enough to make a new version; the deadline stays the same.
        format!("deadline-ms = {}\n# {generation}\n", DEADLINE.as_millis())
    };
    install_bytes(manifest(0).as_bytes(), dir.path(), "swap.toml");
    install_bytes(
        &std::fs::read(guest("rust-test-fixture.wasm")).unwrap(),
        dir.path(),
        "swap.wasm",
    );
    install_bytes(
        &std::fs::read(guest("rust-configmap-logger.wasm")).unwrap(),
        dir.path(),
        "other.wasm",
    );
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let begun = |n: usize| {
        move |l: &[String]| {
            l.iter()
                .filter(|x| *x == "sleep begin default/sleeper")
                .count()
                >= n
        }
    };
    t.logs.wait_for("swap", "v1 asleep", begun(1)).await;
    let mut began = Instant::now();
    let mut after_deadline = Vec::new();
    let mut other_latency = Vec::new();
    for round in 1..=5u32 {
        // Swap a while into the sleeping call, so the swap really has to wait for it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        install_bytes(manifest(round).as_bytes(), dir.path(), "swap.toml");
        // Another plugin's events flow while the swap waits for v1.
        let write = Instant::now();
        let mut cm = configmap(round as usize);
        cm.metadata.name = Some(format!("meanwhile-{round}"));
        let rv = api
            .create(&PostParams::default(), &cm)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        t.logs
            .wait_line(
                "other",
                &format!("add default/meanwhile-{round} rv={rv} init=false"),
            )
            .await;
        other_latency.push(write.elapsed());
        // v2's replay reaches the same sleeping object: its first call begins.
        t.logs
            .wait_for("swap", "v2 asleep", begun(round as usize + 1))
            .await;
        let now = Instant::now();
        after_deadline.push((now - began).saturating_sub(DEADLINE));
        began = now;
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    println!(
        "| hot swap while v1 sleeps in a call: v2's first call after v1's deadline | +{:.1} ms (median of 5) |",
        median(&mut after_deadline)
    );
    println!(
        "| another plugin's write → callback during that swap | {:.1} ms (median of 5) |",
        median(&mut other_latency)
    );
    t.host.shutdown().await;
    server.shutdown().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("| measurement | value |");
    println!("| --- | --- |");
    small_informer_figures().await;
    swap_with_sleeping_v1().await;
    let fixture = guest("rust-test-fixture.wasm");
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let started = Instant::now();
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
    println!(
        "setup: created {OBJECTS} ConfigMaps of ~2 KB in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // No recorder or log observer here: they would add per-call work production does not do.
    let host = kubewasm::host::HostBuilder::new(client(&server))
        .start()
        .await
        .unwrap();
    let manager = host.manager().clone();
    let dir = tempfile::tempdir().unwrap();

    // 1. The first plugin: initial LIST through the informer, then its replay to the guest.
    let p0 = dir.path().join("noop-0.wasm");
    std::fs::copy(&fixture, &p0).unwrap();
    let start = Instant::now();
    manager.load_file(&p0).await.unwrap();
    let done = wait_replayed(&manager, "noop-0").await;
    let first_plugin = done - start;

    // 2. Pipeline vs raw: a late joiner's replay goes listener → queue → worker → guest.
    let p1 = dir.path().join("noop-1.wasm");
    std::fs::copy(&fixture, &p1).unwrap();
    let start = Instant::now();
    manager.load_file(&p1).await.unwrap();
    let done = wait_replayed(&manager, "noop-1").await;
    let pipeline = done - start;

    let key = InformerKey {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: None,
        label_selector: None,
        field_selector: None,
        shard: None,
    };
    let objects = host.factory().indexer(&key).unwrap().list();
    let runtime = Runtime::new(RuntimeConfig::default(), RuntimeMetrics::unregistered()).unwrap();
    let compiled = runtime.compile(&std::fs::read(&fixture).unwrap()).unwrap();
    // The raw loop runs the guest the way a plugin worker does: on a thread of its own with a
    // single-threaded runtime.
    let raw = tokio::task::spawn_blocking(move || {
        let exec = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        exec.block_on(async {
            let mut inst = runtime
                .instantiate(&compiled, "raw", Limits::default(), Arc::new(NoCache))
                .await
                .unwrap();
            let start = Instant::now();
            for o in &objects {
                inst.on_add(&**o, true).await.unwrap();
            }
            start.elapsed()
        })
    })
    .await
    .unwrap();
    let per = |d: Duration| d.as_secs_f64() / OBJECTS as f64 * 1e9;
    println!(
        "| first plugin: LIST + initial replay of {OBJECTS} objects | {:.0} ms ({:.0} events/s) |",
        first_plugin.as_secs_f64() * 1e3,
        OBJECTS as f64 / first_plugin.as_secs_f64()
    );
    println!(
        "| pipeline (late-join replay) to a no-op Rust guest | {:.0} events/s ({:.0} ns/event) |",
        OBJECTS as f64 / pipeline.as_secs_f64(),
        per(pipeline)
    );
    println!(
        "| raw call loop on the same guest | {:.0} calls/s ({:.0} ns/call) |",
        OBJECTS as f64 / raw.as_secs_f64(),
        per(raw)
    );
    println!(
        "| **pipeline / raw throughput** (goal ≥ 0.5) | **{:.2}** |",
        raw.as_secs_f64() / pipeline.as_secs_f64()
    );

    // 3. The 10th plugin on one informer vs the 1st: eight more idle plugins, then the tenth.
    for i in 2..9 {
        let p = dir.path().join(format!("noop-{i}.wasm"));
        std::fs::copy(&fixture, &p).unwrap();
        manager.load_file(&p).await.unwrap();
        wait_replayed(&manager, &format!("noop-{i}")).await;
    }
    let p9 = dir.path().join("noop-9.wasm");
    std::fs::copy(&fixture, &p9).unwrap();
    let start = Instant::now();
    manager.load_file(&p9).await.unwrap();
    let done = wait_replayed(&manager, "noop-9").await;
    let tenth = done - start;
    println!(
        "| 10th plugin's replay vs the 2nd's (same informer, {OBJECTS} objects) (goal ≤ 1.2) | **{:.2}** ({:.0} ms vs {:.0} ms) |",
        tenth.as_secs_f64() / pipeline.as_secs_f64(),
        tenth.as_secs_f64() * 1e3,
        pipeline.as_secs_f64() * 1e3
    );
    host.shutdown().await;
    server.shutdown().await;
}
