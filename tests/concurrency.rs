//! Concurrent calls per plugin (issue 21): the http-fixture guest sends one GET per
//! notification to a local server that answers after a delay and notices two requests for one
//! object at once; the server's log is what the plugin did, in the order it did it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HTTP: &str = "rust-http-fixture.wasm";

/// What the server saw.
#[derive(Default)]
struct Seen {
    /// Requests in flight per object.
    in_flight: HashMap<String, u32>,
    /// Requests that arrived while another for the same object was in flight.
    overlaps: usize,
    /// Requests in flight now, and at most.
    now: usize,
    peak: usize,
    /// `(object, n)` in arrival order.
    log: Vec<(String, u32)>,
    /// When the first request arrived and the last answer went out.
    first: Option<Instant>,
    last: Option<Instant>,
}

/// A server for `GET /k/NAME/N`: answers `ok` after `delay` (`slow` objects: `slow_delay`);
/// its thread and runtime are its own, so the host's load cannot slow it.
struct Peer {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    answered: tokio::sync::watch::Receiver<usize>,
    arrived: tokio::sync::watch::Receiver<usize>,
}

fn peer(delay: Duration, slow_delay: Duration) -> Peer {
    let (tx, rx) = std::sync::mpsc::channel();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (answered_tx, answered) = tokio::sync::watch::channel(0usize);
    let (arrived_tx, arrived) = tokio::sync::watch::channel(0usize);
    let s = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let answered_tx = Arc::new(answered_tx);
            let arrived_tx = Arc::new(arrived_tx);
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    continue;
                };
                let (s, answered_tx, arrived_tx) =
                    (s.clone(), answered_tx.clone(), arrived_tx.clone());
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    let Ok(n) = conn.read(&mut buf).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..n]).to_string();
                    let path = head.split(' ').nth(1).unwrap_or_default().to_string();
                    let mut parts = path.trim_start_matches("/k/").split('/');
                    let name = parts.next().unwrap_or_default().to_string();
                    let n: u32 = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                    {
                        let mut s = s.lock();
                        let c = s.in_flight.entry(name.clone()).or_default();
                        *c += 1;
                        if *c > 1 {
                            s.overlaps += 1;
                        }
                        s.now += 1;
                        s.peak = s.peak.max(s.now);
                        s.log.push((name.clone(), n));
                        s.first.get_or_insert_with(Instant::now);
                    }
                    arrived_tx.send_modify(|c| *c += 1);
                    let wait = if name.starts_with("slow") {
                        slow_delay
                    } else {
                        delay
                    };
                    tokio::time::sleep(wait).await;
                    {
                        let mut s = s.lock();
                        *s.in_flight.get_mut(&name).unwrap() -= 1;
                        s.now -= 1;
                        s.last = Some(Instant::now());
                    }
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                    answered_tx.send_modify(|c| *c += 1);
                });
            }
        });
    });
    Peer {
        addr: rx.recv().unwrap(),
        seen,
        answered,
        arrived,
    }
}

impl Peer {
    /// Waits until `count` requests have arrived; panics after [`PATIENCE`].
    async fn wait_arrived(&self, count: usize) {
        let mut rx = self.arrived.clone();
        tokio::time::timeout(PATIENCE, rx.wait_for(|c| *c >= count))
            .await
            .expect("requests arrive")
            .unwrap();
    }

    /// Waits until `count` requests have been answered; panics after [`PATIENCE`].
    async fn wait_answered(&self, count: usize) {
        let mut rx = self.answered.clone();
        tokio::time::timeout(PATIENCE, rx.wait_for(|c| *c >= count))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "waiting for {count} answers, got {}",
                    *self.answered.borrow()
                )
            })
            .unwrap();
    }
}

/// Copies the http fixture into `dir` as `name.wasm` with a manifest of `concurrency` and loads it.
async fn load(t: &TestHost, dir: &Path, name: &str, concurrency: usize) {
    std::fs::copy(guest(HTTP), dir.join(format!("{name}.wasm"))).unwrap();
    let manifest = format!(
        "concurrency = {concurrency}\ndeadline-ms = 1000\n[grants]\n\
         watch = [{{ api-version = \"v1\", kind = \"ConfigMap\" }}]\n\
         http = [\"http://127.0.0.1:*\"]\n"
    );
    std::fs::write(dir.join(format!("{name}.toml")), manifest).unwrap();
    let out = t
        .host
        .manager
        .load_file(&dir.join(format!("{name}.wasm")))
        .await
        .unwrap_or_else(|e| panic!("{name} loads: {e}"));
    assert!(matches!(out, LoadOutcome::Loaded { .. }), "{name}: {out:?}");
}

fn data(addr: SocketAddr, name: &str, n: u32) -> serde_json::Value {
    serde_json::json!({
        "url": format!("http://{addr}/k/{name}/{n}"),
        "on-update": "send",
    })
}

async fn create(api: &Api<ConfigMap>, addr: SocketAddr, name: &str) {
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": data(addr, name, 0),
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

async fn bump(api: &Api<ConfigMap>, addr: SocketAddr, name: &str, n: u32) {
    let patch = serde_json::json!({"data": data(addr, name, n)});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn delete_all(api: &Api<ConfigMap>) {
    let list = api.list(&ListParams::default()).await.unwrap();
    for cm in list.items {
        let name = cm.metadata.name.unwrap();
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_never_overlap_for_one_object_and_keep_its_order() {
    let server = start_server().await;
    let p = peer(Duration::from_millis(5), Duration::from_millis(5));
    let t = start_host(&server, None, Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    load(&t, dir.path(), "conc", 16).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let names: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for name in &names {
        create(&api, p.addr, name).await;
    }
    const UPDATES: u32 = 150;
    for n in 1..=UPDATES {
        for name in &names {
            bump(&api, p.addr, name, n).await;
        }
    }
    p.wait_answered(names.len() * (UPDATES as usize + 1)).await;
    {
        let s = p.seen.lock();
        assert_eq!(s.overlaps, 0, "two calls in flight for one object");
        assert!(
            s.peak > 1,
            "calls waiting on HTTP overlap (peak {} in flight)",
            s.peak
        );
        assert!(s.peak <= 16, "at most the concurrency: {}", s.peak);
        for name in &names {
            let order: Vec<u32> = s
                .log
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, n)| *n)
                .collect();
            assert_eq!(
                order,
                (0..=UPDATES).collect::<Vec<_>>(),
                "per-object order of {name}"
            );
        }
    }
    let status = t.host.manager.status().await;
    let conc = status.iter().find(|p| p.name == "conc").unwrap();
    assert_eq!(conc.concurrency, 16);
    assert!(
        conc.instances >= 1 && conc.instances <= 16,
        "{}",
        conc.instances
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_concurrency_one_the_plugin_sees_the_informers_order_across_objects() {
    let server = start_server().await;
    let p = peer(Duration::from_millis(1), Duration::from_millis(500));
    let t = start_host(&server, None, Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    load(&t, dir.path(), "one", 1).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    // A slow call is in flight while a burst over several objects arrives.
    create(&api, p.addr, "slow").await;
    let mut written = vec![("slow".to_string(), 0u32)];
    for name in ["a", "b", "c"] {
        create(&api, p.addr, name).await;
        written.push((name.to_string(), 0));
    }
    for n in 1..=5u32 {
        for name in ["b", "slow", "a", "c"] {
            bump(&api, p.addr, name, n).await;
            written.push((name.to_string(), n));
        }
    }
    p.wait_answered(written.len()).await;
    {
        let s = p.seen.lock();
        assert_eq!(s.peak, 1, "one call at a time");
        assert_eq!(s.log, written, "the informer's order, across objects");
    }
    t.host.shutdown().await;
}

/// Events/s of the http fixture at concurrency 1, 8 and 32 against a server answering after
/// 50 ms, beside the ideal N ÷ 50 ms and native workers doing the same GETs; prints a table
/// (`cargo test --release -p kubewasm-e2e --test e2e concurrency_figures -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures for docs/benchmarks.md"]
async fn concurrency_figures() {
    let server = start_server().await;
    let t = start_host(&server, None, Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    println!(
        "| concurrency | events | wasm events/s | ideal | wasm/ideal | native events/s | wasm/native | instances | RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for n in [1usize, 8, 32] {
        let events = (n * 20).max(40);
        let p = peer(Duration::from_millis(50), Duration::from_millis(50));
        delete_all(&api).await;
        for i in 0..events {
            create(&api, p.addr, &format!("e{i}")).await;
        }
        let name = format!("c{n}");
        load(&t, dir.path(), &name, n).await;
        p.wait_answered(events).await;
        let wasm = {
            let s = p.seen.lock();
            let span = s.last.unwrap() - s.first.unwrap();
            events as f64 / span.as_secs_f64()
        };
        let status = t.host.manager.status().await;
        let instances = status.iter().find(|p| p.name == name).unwrap().instances;
        let rss = rss_mib();
        t.host.manager.unload(&name).await;
        let native = native_rate(n, events).await;
        let ideal = n as f64 / 0.05;
        println!(
            "| {n} | {events} | {wasm:.1} | {ideal:.0} | {:.2} | {native:.1} | {:.2} | {instances} | {rss:.1} |",
            wasm / ideal,
            wasm / native
        );
    }
    t.host.shutdown().await;
}

/// `n` native workers (tasks) sending the same GETs to a fresh 50 ms server: events/s.
async fn native_rate(n: usize, events: usize) -> f64 {
    let p = peer(Duration::from_millis(50), Duration::from_millis(50));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..n)
        .map(|_| {
            let (next, addr) = (next.clone(), p.addr);
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= events {
                        return;
                    }
                    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
                    let req =
                        format!("GET /k/e{i}/0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                    conn.write_all(req.as_bytes()).await.unwrap();
                    let mut out = Vec::new();
                    conn.read_to_end(&mut out).await.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let s = p.seen.lock();
    events as f64 / (s.last.unwrap() - s.first.unwrap()).as_secs_f64()
}

/// This process's resident memory.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "seen with 3 calls in flight after 4 arrivals on a fresh-clone CI run; under investigation"]
async fn shutdown_abandons_every_call_in_flight_within_the_grace_period() {
    let server = start_server().await;
    // `slow` objects are answered after an hour: their calls wait until abandoned.
    let p = peer(Duration::from_millis(1), Duration::from_secs(3600));
    let t = start_host(&server, None, Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    load(&t, dir.path(), "stuck", 4).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    for i in 0..4 {
        create(&api, p.addr, &format!("slow{i}")).await;
    }
    let mut arrivals = p.arrived.clone();
    p.wait_arrived(4).await;
    // On a loaded machine a call may time out and be retried; every call that starts sends a
    // request, so each arrival is the moment to look again.
    loop {
        let status = t.host.manager.status().await;
        let stuck = status.iter().find(|p| p.name == "stuck").unwrap();
        if (stuck.calls_in_flight, stuck.instances) == (4, 4) {
            break;
        }
        tokio::time::timeout(PATIENCE, arrivals.changed())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "four calls never in flight at once: {} in flight, {} instances",
                    stuck.calls_in_flight, stuck.instances
                )
            })
            .unwrap();
    }
    assert!(p.seen.lock().now >= 4, "four calls wait at once");
    // The test host's grace period is 2 s.
    let started = Instant::now();
    t.host.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "every call abandoned within the grace period: {took:?}"
    );
}
