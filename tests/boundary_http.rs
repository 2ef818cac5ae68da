//! Grant-boundary attacks, `http-…` family: the attack-fixture guest (tests/fixtures/rust/attack-fixture) against the real host and API server.
//!
//! - held connections (issue 20, attack 1): thousands of forgotten requests to a server that
//!   sends headers and stalls, under a soft fd limit of 1024, in a child process of its own;
//! - internal addresses (attack 6): a granted wildcard name resolving to metadata, private and
//!   API-service addresses;
//! - deadline evasion (attack 8): a non-blocking read on a stalled body, then a long sleep.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kubewasm::host::HostBuilder;
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::{CallOutcome, Limits, Resolver, RuntimeConfig};
use kubewasm_e2e::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::LOGGER;

const ATTACK: &str = "rust-attack-fixture.wasm";
const HTTP: &str = "rust-http-fixture.wasm";

/// A local peer: `/stall` sends response headers announcing a body, then nothing; any other
/// path answers `ok`. Runs on its own thread and runtime, so the host's load cannot slow it.
pub(crate) fn peer() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    // Out of fds for a moment: the host under test is what must cope.
                    tokio::task::yield_now().await;
                    continue;
                };
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    let Ok(n) = conn.read(&mut buf).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..n]);
                    if head.starts_with("GET /stall") {
                        let _ = conn
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                            .await;
                        // Held until the host closes the connection.
                        while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                    } else {
                        let _ = conn
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                            .await;
                    }
                });
            }
        });
    });
    rx.recv().unwrap()
}

/// Copies `wasm` into `dir` as `name.wasm` with `manifest` beside it and loads it.
async fn load(t: &TestHost, dir: &Path, wasm: &str, name: &str, manifest: &str) {
    std::fs::copy(guest(wasm), dir.join(format!("{name}.wasm"))).unwrap();
    std::fs::write(dir.join(format!("{name}.toml")), manifest).unwrap();
    let out = t
        .host
        .manager()
        .load_file(&dir.join(format!("{name}.wasm")))
        .await
        .unwrap_or_else(|e| panic!("{name} loads: {e}"));
    assert!(matches!(out, LoadOutcome::Loaded { .. }), "{name}: {out:?}");
}

async fn create_data(api: &Api<ConfigMap>, name: &str, data: &[(&str, &str)]) {
    let data: HashMap<&str, &str> = data.iter().copied().collect();
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": data,
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .expect("the API server serves");
}

/// A host on `server` whose runtime has `config` (a resolver, API service addresses).
async fn host_with(server: &apiserver::ApiServer, config: RuntimeConfig) -> TestHost {
    let (logs, recorder) = (GuestLogs::default(), Recorder::default());
    let host = HostBuilder::new(client(server))
        .runtime(config)
        .limits(Limits::default())
        .health_addr(Some("127.0.0.1:0".parse().unwrap()))
        .shutdown_grace(Duration::from_secs(2))
        .observer(logs.observer())
        .observer(recorder.observer())
        .start()
        .await
        .expect("host starts");
    TestHost {
        host,
        recorder,
        logs,
    }
}

/// The value of the series `name{labels…}` in the host's metrics (0 if absent).
fn metric(t: &TestHost, name: &str, labels: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, t.host.metrics_registry()).unwrap();
    let series = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// `GET /healthz` on the host's health endpoint: its status line.
async fn healthz(addr: SocketAddr) -> String {
    let ask = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(b"GET /healthz HTTP/1.0\r\nHost: h\r\n\r\n")
            .await?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer.lines().next().unwrap_or_default().to_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .expect("/healthz answers in time")
        .expect("/healthz answers")
}

const CHILD: &str = "KUBEWASM_TEST_FD_CHILD";
const SOFT_FDS: u64 = 1024;

/// Runs in a child process of its own (the soft fd limit is the whole process's, and the
/// other tests of this binary run beside it in threads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_connections_are_bounded_and_die_with_their_call_under_a_low_fd_limit() {
    if std::env::var_os(CHILD).is_none() {
        let name = "boundary_http::held_connections_are_bounded_and_die_with_their_call_under_a_low_fd_limit";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .expect("the child test runs");
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child failed:\n{text}");
        assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
        // libtest prints the test's name before its output, on the same line.
        for line in text
            .lines()
            .filter_map(|l| l.find("fds: ").map(|i| &l[i..]))
        {
            println!("{line}");
        }
        return;
    }
    let limit = libc::rlimit {
        rlim_cur: SOFT_FDS,
        rlim_max: SOFT_FDS.max(unsafe_hard_limit()),
    };
    // SAFETY: setrlimit reads the struct; this process runs this one test.
    assert_eq!(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) },
        0,
        "soft fd limit lowered"
    );

    let peer = peer();
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let t = host_with(&server, RuntimeConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let grants = "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
                  http = [\"http://127.0.0.1:*\"]\n";
    load(&t, dir.path(), ATTACK, "attack", grants).await;
    load(&t, dir.path(), HTTP, "httpok", grants).await;
    load(&t, dir.path(), LOGGER, "logger", "").await;

    let before = open_fds();
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(2));
            loop {
                tick.tick().await;
                peak.fetch_max(open_fds(), std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let target = format!("http://127.0.0.1:{}/stall", peer.port());
    let started = Instant::now();
    create_data(
        &api,
        "hold",
        &[
            ("attack", "http-hold"),
            ("target", &target),
            ("count", "3000"),
        ],
    )
    .await;
    let lines = t
        .logs
        .wait_for("attack", "the hold attack's report", |l| {
            l.iter().any(|x| x.starts_with("attack: http-hold"))
        })
        .await;
    let report = lines
        .iter()
        .find(|x| x.starts_with("attack: http-hold"))
        .unwrap();
    assert!(
        report.contains("sent 3000")
            && report
                .contains("connection limit reached: http-max-inflight (32) requests already open"),
        "{report}"
    );
    let took = started.elapsed();
    // The call is over: every connection it opened is closed, and the gauge says so.
    let deadline = Instant::now() + PATIENCE;
    while metric(
        &t,
        "kubewasm_plugin_http_open_connections",
        "plugin=\"attack\"",
    ) != 0.0
    {
        assert!(Instant::now() < deadline, "connections still open");
        tokio::task::yield_now().await;
    }
    let refused = metric(
        &t,
        "kubewasm_plugin_http_connections_refused_total",
        "plugin=\"attack\",bound=\"plugin\"",
    );
    assert!(refused >= 2900.0, "refusals counted: {refused}");

    // The rest of the process keeps working: the API server, /healthz, another plugin's
    // events and another plugin's granted HTTP.
    create_data(&api, "after", &[("k", "v")]).await;
    t.logs
        .wait_for("logger", "the logger sees the next object", |l| {
            l.iter().any(|x| x.starts_with("add default/after"))
        })
        .await;
    let health = t.host.health_addr().expect("health endpoint");
    assert!(healthz(health).await.contains("200"), "healthz");
    let ok = format!("http://127.0.0.1:{}/ok", peer.port());
    create_data(&api, "fetch", &[("url", &ok)]).await;
    t.logs.wait_line("httpok", "status=200 bytes=2").await;

    sampler.abort();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    let after = open_fds();
    println!(
        "fds: {before} before, peak {peak}, {after} after; attack call took {took:?}; {refused} refused"
    );
    // 32 connections are two fds each here (the peer runs in this process too).
    assert!(peak < before + 200, "fds stayed bounded: {before} → {peak}");
    assert!(after < before + 40, "fds dropped back: {before} → {after}");
    t.host.shutdown().await;
}

fn unsafe_hard_limit() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    l.rlim_max
}

/// Names of the test zone and the addresses they resolve to.
struct Zone(HashMap<String, Vec<IpAddr>>);

impl Resolver for Zone {
    fn resolve(&self, host: &str) -> Option<Vec<IpAddr>> {
        self.0.get(host).cloned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_name_reaches_internal_addresses_only_when_the_grant_names_them() {
    let peer = peer();
    let names: [(&str, &str, &str); 8] = [
        ("aws6", "fd00:ec2::254", "refused"),
        ("alibaba", "100.100.100.200", "refused"),
        ("azure", "168.63.129.16", "refused"),
        ("apiservice", "10.96.0.1", "refused"),
        ("ula", "fc00::1", "refused"),
        ("nat64", "64:ff9b:1::a9fe:a9fe", "refused"),
        ("cgnat", "100.64.0.1", "refused"),
        // Loopback, granted by the CIDR `http://127.0.0.0/8:*`.
        ("loop", "127.0.0.1", "reached"),
    ];
    let mut zone: HashMap<String, Vec<IpAddr>> = names
        .iter()
        .map(|(n, a, _)| (format!("{n}.attack.test"), vec![a.parse().unwrap()]))
        .collect();
    zone.insert(
        "svc.private.test".into(),
        vec!["127.0.0.1".parse().unwrap()],
    );
    zone.insert("svc.public.test".into(), vec!["127.0.0.1".parse().unwrap()]);
    let config = RuntimeConfig {
        resolver: Some(Arc::new(Zone(zone))),
        cluster_api_addresses: vec!["10.96.0.1".parse().unwrap()],
        ..RuntimeConfig::default()
    };
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let t = host_with(&server, config).await;
    let dir = tempfile::tempdir().unwrap();
    let watch = "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n";
    load(
        &t,
        dir.path(),
        ATTACK,
        "wild",
        &format!("{watch}http = [\"http://*.attack.test:*\", \"http://127.0.0.0/8:*\"]\n"),
    )
    .await;
    // The same guest granted one name marked private and one not.
    load(
        &t,
        dir.path(),
        ATTACK,
        "named",
        &format!(
            "{watch}http = [{{ origin = \"http://svc.private.test:*\", private = true }}, \
             \"http://svc.public.test:*\"]\n"
        ),
    )
    .await;
    load(&t, dir.path(), LOGGER, "logger", "").await;

    let port = peer.port();
    for (name, _, _) in &names {
        let target = format!("http://{name}.attack.test:{port}/ok");
        create_data(
            &api,
            &format!("to-{name}"),
            &[("attack", "http-internal"), ("target", &target)],
        )
        .await;
    }
    for (name, addr, expect) in &names {
        let target = format!("http://{name}.attack.test:{port}/ok");
        let line = format!("attack: http-internal {target}: ");
        let lines = t
            .logs
            .wait_for("wild", &line, |l| l.iter().any(|x| x.starts_with(&line)))
            .await;
        let got = lines.iter().find(|x| x.starts_with(&line)).unwrap();
        let want = match *expect {
            "reached" => "reached status=200",
            _ => "error ErrorCode::DestinationIpProhibited",
        };
        assert!(got.ends_with(want), "{name} ({addr}): {got}");
        if *expect == "refused" {
            let origin = format!("http://{name}.attack.test:{port}");
            let denied = metric(
                &t,
                "kubewasm_plugin_http_requests_total",
                &format!("plugin=\"wild\",origin=\"{origin}\",code=\"ip_denied\""),
            );
            assert_eq!(
                denied, 1.0,
                "{name}: counted as ip_denied for the plugin and origin"
            );
        }
    }

    for (host, want) in [
        ("svc.private.test", "reached status=200"),
        (
            "svc.public.test",
            "error ErrorCode::DestinationIpProhibited",
        ),
    ] {
        let target = format!("http://{host}:{port}/ok");
        create_data(
            &api,
            host,
            &[("attack", "http-internal"), ("target", &target)],
        )
        .await;
        let line = format!("attack: http-internal {target}: {want}");
        t.logs.wait_line("named", &line).await;
    }

    create_data(&api, "after", &[("k", "v")]).await;
    t.logs
        .wait_for("logger", "the logger sees the next object", |l| {
            l.iter().any(|x| x.starts_with("add default/after"))
        })
        .await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_blocking_read_on_a_stalled_body_does_not_stop_the_deadline() {
    let peer = peer();
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let t = host_with(&server, RuntimeConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    load(
        &t,
        dir.path(),
        ATTACK,
        "evade",
        "deadline-ms = 1000\n[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
         http = [\"http://127.0.0.1:*\"]\n",
    )
    .await;
    load(&t, dir.path(), LOGGER, "logger", "").await;

    let target = format!("http://127.0.0.1:{}/stall", peer.port());
    let started = Instant::now();
    create_data(
        &api,
        "evade",
        &[
            ("attack", "http-evade"),
            ("target", &target),
            ("sleep-ms", "8000"),
        ],
    )
    .await;
    t.recorder
        .wait_call("evade", "the evading call fails", |c| {
            c.key == "default/evade" && matches!(c.outcome, CallOutcome::Failed(_))
        })
        .await;
    let took = started.elapsed();
    let failed = t.recorder.calls_for("evade", "default/evade");
    assert!(
        matches!(&failed[0].outcome, CallOutcome::Failed(m) if m.contains("deadline")),
        "{failed:?}"
    );
    assert!(
        took < Duration::from_secs(4),
        "stopped at its 1 s deadline, not after the 8 s sleep: {took:?}"
    );
    assert!(
        !t.logs.of("evade").iter().any(|l| l.contains("slept")),
        "the sleep never finished"
    );

    create_data(&api, "after", &[("k", "v")]).await;
    t.logs
        .wait_for("logger", "the logger sees the next object", |l| {
            l.iter().any(|x| x.starts_with("add default/after"))
        })
        .await;
    t.host.shutdown().await;
}
