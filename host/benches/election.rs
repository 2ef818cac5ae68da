//! Takeover time of leader election against the embedded API server, two electors per run:
//! after the leader is lost without releasing (a crash, SIGKILL) and after it releases the Lease
//! (SIGTERM). Prints the median of several runs and its ratio to the bound the design promises.
//!
//! `cargo bench -p kubewasm --bench election`. Durations are controller-runtime's divided by 5
//! (lease 3 s, renew deadline 2 s, retry 400 ms) so a run takes about a minute;
//! `ELECTION_BENCH_FULL=1` uses the real defaults (15 s / 10 s / 2 s), `ELECTION_BENCH_RUNS=N`
//! changes the number of runs (default 5).

use std::time::Duration;

use kubewasm::election::{ElectionConfig, ElectionMetrics, LeaderElector};
use tokio::sync::watch;
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
            "{:<34} {:>10} {:>10} {:>10} {:>18}",
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
            let (min, max) = (
                *times.iter().min().unwrap(),
                *times.iter().max().unwrap(),
            );
            let med = median(times);
            println!(
                "{label:<34} {:>9.0}ms {:>9.0}ms {:>9.0}ms {:>11.2} of {:?}",
                med.as_secs_f64() * 1e3,
                min.as_secs_f64() * 1e3,
                max.as_secs_f64() * 1e3,
                med.as_secs_f64() / bound.as_secs_f64(),
                bound
            );
        }
        server.shutdown().await;
    });
}
