//! Throughput figures for the embedded API server over real HTTP (plain `harness = false` bench).
//!
//! Run: `cargo bench -p apiserver`. Sizes can be scaled down with `APISERVER_BENCH_N` (default
//! 100000). Every figure is measured twice, with `Config::workloads` off and on (the workload
//! controllers idle beside ConfigMap traffic: what they cost the rest), then a Deployment of
//! `APISERVER_BENCH_PODS` (default 1000) Pods is created and rolled on the fake node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::{ApiServer, Config, WorkloadConfig};
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn cm(name: String) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"bench": "yes"}}, "data": {"key": "value", "n": "1"}}))
    .unwrap()
}

/// One figure: what, how many, how long.
struct Row {
    what: &'static str,
    count: u64,
    elapsed: Duration,
}

fn row(rows: &mut Vec<Row>, what: &'static str, count: u64, elapsed: Duration) {
    rows.push(Row {
        what,
        count,
        elapsed,
    });
}

fn rate(r: &Row) -> f64 {
    r.count as f64 / r.elapsed.as_secs_f64()
}

/// Count watch lines (events) on a raw stream until `want` arrived.
async fn raw_watch_count(client: Client, from_rv: u64, want: u64) -> u64 {
    let uri = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={from_rv}&timeoutSeconds=600"
    );
    let req = http::Request::get(uri).body(Vec::new()).unwrap();
    let stream = client.request_stream(req).await.unwrap();
    let mut lines = stream.lines();
    let mut n = 0;
    while n < want {
        let line = lines.next().await.expect("stream ended").unwrap();
        if line.starts_with("{\"type\":\"ADDED\"") || line.starts_with("{\"type\":\"MODIFIED\"") {
            n += 1;
        }
    }
    n
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n = env("APISERVER_BENCH_N", 100_000);
    let off = suite(n, None).await;
    let on = suite(n, Some(WorkloadConfig::default())).await;
    println!(
        "| {:<58} | {:>9} | {:>11} | {:>15} | {:>11} | {:>15} |",
        "benchmark", "count", "time", "rate", "time (wl)", "rate (wl)"
    );
    println!(
        "|{:-<60}|{:-<11}|{:-<13}|{:-<17}|{:-<13}|{:-<17}|",
        "", "", "", "", "", ""
    );
    for (a, b) in off.iter().zip(&on) {
        println!(
            "| {:<58} | {:>9} | {:>9.3} s | {:>12.0} /s | {:>9.3} s | {:>12.0} /s |",
            a.what,
            a.count,
            a.elapsed.as_secs_f64(),
            rate(a),
            b.elapsed.as_secs_f64(),
            rate(b)
        );
    }
    let pods = env("APISERVER_BENCH_PODS", 1000);
    for delay in [Duration::ZERO, Duration::from_millis(100)] {
        rollout(pods, delay).await;
    }
}

/// A Deployment of `pods` replicas made Ready, then rolled by a template change (25%/25%).
async fn rollout(pods: u64, delay: Duration) {
    let server = ApiServer::start(Config {
        history_max_events: 100 * pods as usize,
        workloads: Some(WorkloadConfig {
            pod_ready_delay: delay,
        }),
        ..Config::default()
    })
    .await
    .unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let deploys: Api<Deployment> = Api::default_namespaced(client);
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "big"},
        "spec": {"replicas": pods, "selector": {"matchLabels": {"app": "big"}},
            "template": {"metadata": {"labels": {"app": "big"}},
                "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}}))
    .unwrap();
    let writes = server.stats().writes;
    let t = Instant::now();
    deploys.create(&PostParams::default(), &d).await.unwrap();
    server.wait_controllers_idle().await;
    let made = t.elapsed();
    let made_writes = server.stats().writes - writes;
    let t = Instant::now();
    let patch = kube::api::Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "app:2"}]}}}}));
    deploys
        .patch("big", &Default::default(), &patch)
        .await
        .unwrap();
    server.wait_controllers_idle().await;
    let rolled = t.elapsed();
    let status = deploys.get("big").await.unwrap().status.unwrap();
    assert_eq!(status.updated_replicas, Some(pods as i32));
    assert_eq!(status.available_replicas, Some(pods as i32));
    println!(
        "Deployment of {pods} Pods, pod_ready_delay {delay:?}: Ready in {:.3} s ({made_writes} writes), \
         rolled to a new template in {:.3} s ({} writes in all)",
        made.as_secs_f64(),
        rolled.as_secs_f64(),
        server.stats().writes - writes
    );
    server.shutdown().await;
}

/// The ConfigMap figures on a fresh server (with `workloads` as given).
async fn suite(n: u64, workloads: Option<WorkloadConfig>) -> Vec<Row> {
    let mut rows = Vec::new();
    let config = Config {
        history_max_events: 4 * n as usize,
        workloads,
        ..Config::default()
    };
    let server = ApiServer::start(config).await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());

    // Creates (32 concurrent clients): fills the store and the history the watch benches replay.
    let rv_before = server.resource_version();
    let t = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (cms, next) = (cms.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                cms.create(&PostParams::default(), &cm(format!("cm-{i:06}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    row(
        &mut rows,
        "create ConfigMaps (32 concurrent kube-rs clients)",
        n,
        t.elapsed(),
    );

    // Paged list of everything at 500 per page (kube-rs, typed).
    let t = Instant::now();
    let mut total = 0u64;
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = cms.list(&lp).await.unwrap();
        total += page.items.len() as u64;
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = ListParams::default().limit(500).continue_token(&c),
            None => break,
        }
    }
    assert_eq!(total, n);
    row(
        &mut rows,
        "list ConfigMaps paged at 500 (kube-rs typed)",
        total,
        t.elapsed(),
    );

    // One watcher replaying n events from history.
    let t = Instant::now();
    let got = raw_watch_count(client.clone(), rv_before, n).await;
    row(
        &mut rows,
        "1 watcher, n events (raw NDJSON lines)",
        got,
        t.elapsed(),
    );
    let t = Instant::now();
    let wp = WatchParams::default().timeout(600);
    let mut s = cms
        .watch(&wp, &rv_before.to_string())
        .await
        .unwrap()
        .boxed();
    let mut got = 0u64;
    while got < n {
        if let WatchEvent::Added(_) = s.try_next().await.unwrap().unwrap() {
            got += 1;
        }
    }
    row(
        &mut rows,
        "1 watcher, n events (kube-rs typed WatchEvent<ConfigMap>)",
        got,
        t.elapsed(),
    );
    drop(s);

    // One live watcher while 16 writers update objects.
    let live_n = n / 5;
    let start_rv = server.resource_version();
    let watcher = tokio::spawn(raw_watch_count(client.clone(), start_rv, live_n));
    let t = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (cms, next) = (cms.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= live_n {
                    break;
                }
                let patch = kube::api::Patch::Merge(json!({"data": {"n": format!("v{i}")}}));
                cms.patch(&format!("cm-{:06}", i % n), &Default::default(), &patch)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = watcher.await.unwrap();
    row(
        &mut rows,
        "1 live watcher during 16 concurrent patchers (end to end)",
        got,
        t.elapsed(),
    );

    // Write → watch latency: one patch at a time, each timed until its event arrives.
    let m = (n / 50).max(100);
    let uri = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={}&timeoutSeconds=600",
        server.resource_version()
    );
    let req = http::Request::get(uri).body(Vec::new()).unwrap();
    let mut lines = client.request_stream(req).await.unwrap().lines();
    let mut latencies = Vec::with_capacity(m as usize);
    let t = Instant::now();
    for i in 0..m {
        let sent = Instant::now();
        let patch = kube::api::Patch::Merge(json!({"data": {"n": format!("l{i}")}}));
        cms.patch(&format!("cm-{:06}", i % n), &Default::default(), &patch)
            .await
            .unwrap();
        loop {
            let line = lines.next().await.expect("stream ended").unwrap();
            if line.starts_with("{\"type\":\"MODIFIED\"") {
                break;
            }
        }
        latencies.push(sent.elapsed());
    }
    let total = t.elapsed();
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    row(
        &mut rows,
        "1 writer at a time, write -> watch event (rate; p99 below)",
        m,
        total,
    );
    row(&mut rows, "  write -> watch event p99 latency", 1, p99);
    drop(lines);

    // 100 concurrent watchers each replaying the last n/10 events.
    let per = n / 10;
    let from = server.resource_version() - per;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        tasks.push(tokio::spawn(raw_watch_count(client.clone(), from, per)));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    row(
        &mut rows,
        "100 concurrent watchers x n/10 events (aggregate, raw)",
        total,
        t.elapsed(),
    );
    server.shutdown().await;
    rows
}
