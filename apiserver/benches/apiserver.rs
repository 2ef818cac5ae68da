//! Throughput figures for the embedded API server over real HTTP (plain `harness = false` bench).
//!
//! Run: `cargo bench -p apiserver`. Sizes can be scaled down with `APISERVER_BENCH_N` (default 100000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::{ApiServer, Config};
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn cm(name: String) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"bench": "yes"}}, "data": {"key": "value", "n": "1"}}))
    .unwrap()
}

fn row(what: &str, count: u64, elapsed: Duration) {
    let rate = count as f64 / elapsed.as_secs_f64();
    println!(
        "| {what:<58} | {count:>9} | {:>9.3} s | {rate:>12.0} /s |",
        elapsed.as_secs_f64()
    );
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

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: u64 = std::env::var("APISERVER_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let config = Config {
        history_max_events: 4 * n as usize,
        ..Config::default()
    };
    let server = ApiServer::start(config).await.unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    println!(
        "| {:<58} | {:>9} | {:>11} | {:>15} |",
        "benchmark", "count", "time", "rate"
    );
    println!("|{:-<60}|{:-<11}|{:-<13}|{:-<17}|", "", "", "", "");

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
        "list ConfigMaps paged at 500 (kube-rs typed)",
        total,
        t.elapsed(),
    );

    // One watcher replaying n events from history.
    let t = Instant::now();
    let got = raw_watch_count(client.clone(), rv_before, n).await;
    row("1 watcher, n events (raw NDJSON lines)", got, t.elapsed());
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
        "1 live watcher during 16 concurrent patchers (end to end)",
        got,
        t.elapsed(),
    );

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
        "100 concurrent watchers x n/10 events (aggregate, raw)",
        total,
        t.elapsed(),
    );
    server.shutdown().await;
}
