//! Concurrent calls per plugin (issue 21), measured in one run: the `http-fixture` guest sends
//! one GET per ConfigMap to a local server that answers after 50 ms, at `concurrency` 1, 8 and
//! 32, against the ideal N ÷ 50 ms, against kube-runtime's `Controller` at the same
//! concurrency reconciling the same ConfigMaps with the same GET natively, and against N bare
//! tokio workers sending the GETs. Rates are measured at the server, first request to last
//! answer; the ConfigMaps are the plugin's (and the controller's) initial list.
//!
//! Run with `cargo bench -p kubewasm-e2e --bench concurrency`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use kubewasm::plugins::LoadOutcome;
use kubewasm_e2e::*;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the server takes to answer.
const DELAY: Duration = Duration::from_millis(50);

/// First request and last answer the server saw, and how many it answered.
#[derive(Default)]
struct Seen {
    first: Option<Instant>,
    last: Option<Instant>,
    answered: usize,
}

/// A server answering `ok` after [`DELAY`] on a thread and runtime of its own, so the load of
/// what is measured cannot slow it.
struct Peer {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    answered: tokio::sync::watch::Receiver<usize>,
}

fn peer() -> Peer {
    let (tx, rx) = std::sync::mpsc::channel();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (answered_tx, answered) = tokio::sync::watch::channel(0usize);
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
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    continue;
                };
                let (s, answered_tx) = (s.clone(), answered_tx.clone());
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    if conn.read(&mut buf).await.is_err() {
                        return;
                    }
                    s.lock().first.get_or_insert_with(Instant::now);
                    tokio::time::sleep(DELAY).await;
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                    let mut s = s.lock();
                    s.last = Some(Instant::now());
                    s.answered += 1;
                    let n = s.answered;
                    drop(s);
                    answered_tx.send_replace(n);
                });
            }
        });
    });
    Peer {
        addr: rx.recv().unwrap(),
        seen,
        answered,
    }
}

impl Peer {
    /// Waits for `count` answers, then the rate first request → last answer.
    async fn rate(&self, count: usize) -> f64 {
        let mut rx = self.answered.clone();
        tokio::time::timeout(PATIENCE * 5, rx.wait_for(|c| *c >= count))
            .await
            .expect("every request answered")
            .unwrap();
        let s = self.seen.lock();
        count as f64 / (s.last.unwrap() - s.first.unwrap()).as_secs_f64()
    }
}

/// The GET a native worker or reconciler sends, as the guest does (a connection per request).
async fn get(addr: SocketAddr, name: &str) -> std::io::Result<()> {
    let mut conn = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET /k/{name}/0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    conn.read_to_end(&mut out).await?;
    Ok(())
}

/// CPU time this process has used (user + system), so a rate read on a loaded machine comes
/// with what it cost, which load does not change.
fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is handed.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// CPU time the named thread has run and time it was ready but waited for a core (the
/// scheduler's `schedstat`, in nanoseconds): the plugin's own thread, where its calls interleave.
fn thread_times(name: &str) -> Option<(Duration, Duration)> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        let mut f = stat.split_whitespace().map(|v| v.parse::<u64>().ok());
        let (ran, waited) = (f.next()??, f.next()??);
        return Some((Duration::from_nanos(ran), Duration::from_nanos(waited)));
    }
    None
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
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

/// `events` ConfigMaps pointing the http fixture at `addr`.
async fn make_objects(api: &Api<ConfigMap>, addr: SocketAddr, events: usize) {
    let list = api.list(&ListParams::default()).await.unwrap();
    for cm in list.items {
        let _ = api
            .delete(&cm.metadata.name.unwrap(), &DeleteParams::default())
            .await;
    }
    for i in 0..events {
        let name = format!("e{i}");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "data": {"url": format!("http://{addr}/k/{name}/0")},
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

#[derive(Debug)]
struct GetFailed(std::io::Error);

impl std::fmt::Display for GetFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GET failed: {}", self.0)
    }
}

impl std::error::Error for GetFailed {}

/// kube-runtime's `Controller` at `concurrency`, reconciling every ConfigMap with the GET:
/// events/s and the process's CPU per event.
async fn controller_rate(
    server: &apiserver::ApiServer,
    n: usize,
    events: usize,
) -> (f64, Duration) {
    let cpu = process_cpu();
    let p = peer();
    let api: Api<ConfigMap> = Api::namespaced(client(server), "default");
    let addr = p.addr;
    let run = Controller::new(api, watcher::Config::default())
        .with_config(Config::default().concurrency(n as u16))
        .run(
            move |cm: Arc<ConfigMap>, _: Arc<()>| async move {
                let name = cm.metadata.name.clone().unwrap_or_default();
                get(addr, &name).await.map_err(GetFailed)?;
                Ok::<_, GetFailed>(Action::await_change())
            },
            |_, _, _| Action::requeue(Duration::from_secs(1)),
            Arc::new(()),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(run);
    let rate = p.rate(events).await;
    let cpu = (process_cpu() - cpu) / events as u32;
    task.abort();
    (rate, cpu)
}

/// `n` bare tokio workers sending the GETs from a shared counter.
async fn workers_rate(n: usize, events: usize) -> f64 {
    let p = peer();
    let next = Arc::new(AtomicUsize::new(0));
    for _ in 0..n {
        let (next, addr) = (next.clone(), p.addr);
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= events {
                    return;
                }
                get(addr, &format!("e{i}")).await.unwrap();
            }
        });
    }
    p.rate(events).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = start_server().await;
    let t = start_host(&server, None, kubewasm::runtime::Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    println!(
        "| concurrency | events | wasm events/s | ideal | wasm ÷ ideal | Controller events/s | wasm ÷ Controller | workers events/s | wasm ÷ workers | instances | RSS MiB | wasm CPU µs/event | Controller CPU µs/event | plugin thread CPU µs/event | plugin thread waited for a core ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for n in [1usize, 8, 32] {
        let events = (n * 20).max(40);
        let p = peer();
        make_objects(&api, p.addr, events).await;
        let name = format!("c{n}");
        std::fs::copy(
            guest("rust-http-fixture.wasm"),
            dir.path().join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(
            dir.path().join(format!("{name}.toml")),
            format!(
                "concurrency = {n}\n[grants]\n\
                 watch = [{{ api-version = \"v1\", kind = \"ConfigMap\" }}]\n\
                 http = [\"http://127.0.0.1:*\"]\n"
            ),
        )
        .unwrap();
        let out = t
            .host
            .manager()
            .load_file(&dir.path().join(format!("{name}.wasm")))
            .await
            .unwrap();
        assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
        // From here: the calls, not the compile (the plugin thread's figures are its own).
        let cpu = process_cpu();
        let wasm = p.rate(events).await;
        let wasm_cpu = (process_cpu() - cpu) / events as u32;
        let (thread_cpu, thread_wait) = thread_times(&format!("plugin-{name}")).unwrap_or_default();
        let status = t.host.manager().status().await;
        let instances = status.iter().find(|s| s.name == name).unwrap().instances;
        let rss = rss_mib();
        t.host.manager().unload(&name).await;
        let (controller, controller_cpu) = controller_rate(&server, n, events).await;
        let workers = workers_rate(n, events).await;
        let ideal = n as f64 / DELAY.as_secs_f64();
        println!(
            "| {n} | {events} | {wasm:.1} | {ideal:.0} | {:.2} | {controller:.1} | {:.2} | {workers:.1} | {:.2} | {instances} | {rss:.1} | {:.0} | {:.0} | {:.0} | {:.0} |",
            wasm / ideal,
            wasm / controller,
            wasm / workers,
            micros(wasm_cpu),
            micros(controller_cpu),
            micros(thread_cpu / events as u32),
            thread_wait.as_secs_f64() * 1e3,
        );
    }
    t.host.shutdown().await;
}
