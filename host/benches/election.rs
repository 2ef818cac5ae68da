//! Takeover time of leader election against the embedded API server, after the leader is lost
//! without releasing (a crash, SIGKILL) and after it releases the Lease (SIGTERM), at two levels:
//! - two electors in this process: from the loss to the standby's leadership;
//! - two `kubewasm run --leader-elect` processes with `rust-configmap-logger` over 100
//!   ConfigMaps: from the signal to the new leader's first handler call (its replay), as read
//!   from its log.
//!
//! Prints the median of several runs and its ratio to the bound the design promises.
//!
//! `cargo bench -p kubewasm --bench election` (needs `bash guest-examples/build.sh rust`).
//! Durations are controller-runtime's divided by 5 (lease 3 s, renew deadline 2 s, retry 400 ms)
//! so a run takes a few minutes; `ELECTION_BENCH_FULL=1` uses the real defaults (15 s / 10 s /
//! 2 s), `ELECTION_BENCH_RUNS=N` changes the number of runs (default 5).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kubewasm::election::{ElectionConfig, ElectionMetrics, LeaderElector};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

fn config(lease_name: &str, identity: &str) -> ElectionConfig {
    let full = std::env::var("ELECTION_BENCH_FULL").is_ok_and(|v| v == "1");
    let scale = if full { 1 } else { 5 };
    let base = ElectionConfig::new(lease_name, "default");
    ElectionConfig {
        identity: identity.into(),
        lease_duration: base.lease_duration / scale,
        renew_deadline: base.renew_deadline / scale,
        retry_period: base.retry_period / scale,
        ..base
    }
}

async fn became_leader(rx: &mut watch::Receiver<bool>) {
    tokio::time::timeout(Duration::from_secs(120), rx.wait_for(|l| *l))
        .await
        .expect("a leader is elected")
        .expect("elector alive");
}

/// One run: elect, let the standby see a few renewals, lose the leader, time the takeover.
async fn run(client: &kube::Client, n: usize, release: bool) -> Duration {
    let lease = format!("bench-{}-{n}", if release { "release" } else { "kill" });
    let start = |id: &str| {
        LeaderElector::start(
            client.clone(),
            config(&lease, id),
            ElectionMetrics::unregistered(),
        )
        .expect("valid config")
    };
    let a = start("a");
    let mut a_rx = a.leadership();
    became_leader(&mut a_rx).await;
    let b = start("b");
    let mut b_rx = b.leadership();
    // Give the standby time to read the live claim (a benchmark may pause; tests may not).
    tokio::time::sleep(config(&lease, "x").retry_period * 3).await;
    assert!(
        !*b_rx.borrow(),
        "the standby must not lead while the leader renews"
    );
    let lost = Instant::now();
    if release {
        a.release().await;
    } else {
        drop(a);
    }
    became_leader(&mut b_rx).await;
    let took = lost.elapsed();
    b.release().await;
    took
}

/// What a replica process logged that the benchmark waits for.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Leader,
    Loaded,
    Call,
}

/// One `kubewasm run --leader-elect` process; its relevant log lines arrive on `seen`.
struct Process {
    child: tokio::process::Child,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl Process {
    fn spawn(kubeconfig: &Path, plugins: &Path, cache: &Path, lease: &str) -> Process {
        let cfg = config(lease, "x");
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .arg("run")
            .arg("--plugins")
            .arg(plugins)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(cache)
            .args([
                "--log-format=json",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--leader-elect",
                "--leader-election-namespace=default",
            ])
            .arg(format!("--leader-election-id={lease}"))
            .arg(format!(
                "--leader-election-lease-duration={}",
                ms(cfg.lease_duration)
            ))
            .arg(format!(
                "--leader-election-renew-deadline={}",
                ms(cfg.renew_deadline)
            ))
            .arg(format!(
                "--leader-election-retry-period={}",
                ms(cfg.retry_period)
            ))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubewasm starts");
        let (tx, seen) = mpsc::unbounded_channel();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                let what = match (v["target"].as_str(), v["message"].as_str()) {
                    (Some("kubewasm::guest"), _) => Seen::Call,
                    (_, Some("became the leader")) => Seen::Leader,
                    (_, Some("plugin loaded")) => Seen::Loaded,
                    _ => continue,
                };
                let _ = tx.send(what);
            }
        });
        Process { child, seen }
    }

    async fn wait_for(&mut self, what: Seen) {
        let found = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(s) = self.seen.recv().await {
                if s == what {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(found, Ok(true), "kubewasm never logged {what:?}");
    }

    async fn signal(&mut self, signal: &str) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {pid}");
    }

    async fn stop(mut self) {
        self.signal("TERM").await;
        let _ = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
    }
}

/// One process-level run: A leads, B stands by warm, A is signalled; time to B's first call.
async fn run_processes(dir: &Path, kubeconfig: &Path, n: usize, release: bool) -> Duration {
    let lease = format!("proc-{}-{n}", if release { "term" } else { "kill" });
    let plugins = dir.join("plugins");
    let mut a = Process::spawn(kubeconfig, &plugins, &dir.join("cache-a"), &lease);
    a.wait_for(Seen::Leader).await;
    a.wait_for(Seen::Call).await;
    let mut b = Process::spawn(kubeconfig, &plugins, &dir.join("cache-b"), &lease);
    b.wait_for(Seen::Loaded).await;
    // Let the standby's informer sync and read a few renewals (a benchmark may pause).
    tokio::time::sleep(config(&lease, "x").retry_period * 3).await;
    let lost = Instant::now();
    a.signal(if release { "TERM" } else { "KILL" }).await;
    b.wait_for(Seen::Call).await;
    let took = lost.elapsed();
    let _ = a.child.wait().await;
    b.stop().await;
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("ELECTION_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = apiserver::ApiServer::start(apiserver::Config::default())
            .await
            .expect("embedded API server");
        let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap()))
            .expect("client");
        let cfg = config("x", "x");
        println!(
            "leader election takeover, {runs} runs each (lease {:?}, renew deadline {:?}, retry {:?})",
            cfg.lease_duration, cfg.renew_deadline, cfg.retry_period
        );
        println!(
            "{:<45} {:>10} {:>10} {:>10} {:>18}",
            "case", "median", "min", "max", "median / bound"
        );
        for (release, label, bound) in [
            (
                false,
                "leader lost unreleased (SIGKILL)",
                cfg.lease_duration + cfg.retry_period,
            ),
            (true, "leader released (SIGTERM)", cfg.retry_period),
        ] {
            let mut times = Vec::new();
            for n in 0..runs {
                times.push(run(&client, n, release).await);
            }
            report(&format!("electors: {label}"), times, bound);
        }

        let dir = tempfile::tempdir().expect("tempdir");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        let wasm = guest_examples().join("rust-configmap-logger.wasm");
        assert!(
            wasm.is_file(),
            "{} is missing: bash guest-examples/build.sh rust",
            wasm.display()
        );
        std::fs::copy(&wasm, plugins.join("rust-configmap-logger.wasm")).unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client.clone(), "default");
        for i in 0..100 {
            let cm = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("cm-{i}")}, "data": {"k": "v"}}))
            .unwrap();
            cms.create(&Default::default(), &cm).await.unwrap();
        }
        for (release, label, bound) in [
            (
                false,
                "leader lost unreleased (SIGKILL)",
                cfg.lease_duration + cfg.retry_period,
            ),
            (true, "leader released (SIGTERM)", cfg.retry_period),
        ] {
            let mut times = Vec::new();
            for n in 0..runs {
                times.push(run_processes(dir.path(), &kubeconfig, n, release).await);
            }
            report(&format!("processes: {label}"), times, bound);
        }
        server.shutdown().await;
    });
}

fn report(label: &str, times: Vec<Duration>, bound: Duration) {
    let (min, max) = (*times.iter().min().unwrap(), *times.iter().max().unwrap());
    let med = median(times);
    println!(
        "{label:<45} {:>9.0}ms {:>9.0}ms {:>9.0}ms {:>11.2} of {:?}",
        med.as_secs_f64() * 1e3,
        min.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        med.as_secs_f64() / bound.as_secs_f64(),
        bound
    );
}

fn guest_examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/dist")
}
