//! Grant-boundary attacks, `flood-…` and `cpu-…` families: the attack-fixture guest
//! (tests/fixtures/rust/attack-fixture, `flood.rs`) against the real host and API server.
//!
//! - Refused writes of large bodies in a loop, at concurrency 8, must cost the host nothing
//!   outside the plugin's own thread: `/healthz` and a neighbour's deliveries keep their quiet
//!   latency (within 100 ms).
//! - The deadline is each call's own running time: calls that share the plugin's thread do not
//!   use up each other's deadline.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::runtime::{CallOutcome, Limits};
use kubewasm_e2e::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{LOGGER, create, install, launch, plugin_dir};

const ATTACK: &str = "rust-attack-fixture.wasm";
/// How much later than in a quiet host a figure may be during an attack.
const SLACK: Duration = Duration::from_millis(100);
/// Samples per figure; the median is compared.
const SAMPLES: usize = 5;

/// How long `GET /healthz` takes to answer 200.
async fn healthz_time(addr: SocketAddr) -> Duration {
    let started = Instant::now();
    let ask = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(b"GET /healthz HTTP/1.0\r\nHost: h\r\n\r\n")
            .await?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(PATIENCE, ask)
        .await
        .expect("/healthz answers in time")
        .expect("/healthz answers");
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    started.elapsed()
}

/// How long from creating ConfigMap `name` until plugin `good` logged its add.
async fn delivery_time(api: &Api<ConfigMap>, logs: &GuestLogs, good: &str, name: &str) -> Duration {
    let started = Instant::now();
    create(api, name, &[]).await;
    let line = format!("add default/{name} ");
    logs.wait_for(good, name, |l| l.iter().any(|x| x.starts_with(&line)))
        .await;
    started.elapsed()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median `/healthz` and delivery latencies over [`SAMPLES`] rounds; `tag` keeps the
/// ConfigMap names apart.
async fn figures(
    api: &Api<ConfigMap>,
    t: &TestHost,
    good: &str,
    tag: &str,
) -> (Duration, Duration) {
    let health = t.host.health_addr().expect("health endpoint");
    let (mut healthz, mut delivery) = (Vec::new(), Vec::new());
    for i in 0..SAMPLES {
        healthz.push(healthz_time(health).await);
        delivery.push(delivery_time(api, &t.logs, good, &format!("{tag}-{i}")).await);
    }
    (median(healthz), median(delivery))
}

/// Attack 4 of issue 31. Before, each refused `kube.create` had its 3 MiB body parsed into a
/// tree on the host's shared runtime before the grant check (tens of ms each, eight at a time),
/// which stalled `/healthz` and every other plugin's deliveries by seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_large_writes_at_concurrency_8_leave_healthz_and_a_neighbour_on_time() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    let (flood, good) = ("flood-watcher", "flood-neighbour");
    install(&guest(ATTACK), dir.path(), &format!("{flood}.wasm"));
    std::fs::write(
        dir.path().join(format!("{flood}.toml")),
        "concurrency = 8\ndeadline-ms = 60000\n\n\
         [grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n",
    )
    .unwrap();
    install(&guest(LOGGER), dir.path(), &format!("{good}.wasm"));
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    // Both plugins serve before anything is measured.
    delivery_time(&api, &t.logs, good, "flood-warm-up").await;

    let (quiet_healthz, quiet_delivery) = figures(&api, &t, good, "flood-quiet").await;

    for i in 0..8 {
        launch(
            &api,
            &format!("flood-{i}"),
            "flood-create",
            &[("n", "1000000")],
        )
        .await;
    }
    // The flood is under way once a good number of refusals were logged.
    host_lines()
        .wait_for(flood, "refused creates", |l| {
            l.iter()
                .filter(|x| x.message.starts_with("plugin create"))
                .count()
                >= 40
        })
        .await;
    let (flood_healthz, flood_delivery) = figures(&api, &t, good, "flood-during").await;
    eprintln!(
        "/healthz {quiet_healthz:?} quiet, {flood_healthz:?} during the flood; delivery \
         {quiet_delivery:?} quiet, {flood_delivery:?} during the flood"
    );
    // Still flooding: no flood call has finished its million creates.
    assert!(
        !t.logs
            .of(flood)
            .iter()
            .any(|l| l.starts_with("attack: flood-create")),
        "the flood ended before the measurement did"
    );
    assert!(
        flood_healthz <= quiet_healthz + SLACK,
        "/healthz took {flood_healthz:?} during the flood, {quiet_healthz:?} quiet"
    );
    assert!(
        flood_delivery <= quiet_delivery + SLACK,
        "the neighbour's delivery took {flood_delivery:?} during the flood, {quiet_delivery:?} quiet"
    );
    t.host.shutdown().await;
}

/// The number in `line` after `key=`.
fn number_after(line: &str, key: &str) -> u64 {
    let at = line.find(&format!("{key}=")).expect(key) + key.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Attack 9 of issue 31. Before, the deadline was wall-clock time minus host waits: three calls
/// of ~400 ms of CPU each, taking turns on the plugin's one thread, each took ~1.2 s and all
/// failed a 1 s deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_counts_each_calls_own_running_time_at_concurrency_8() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    let cpu = "cpu-burner";
    install(&guest(ATTACK), dir.path(), &format!("{cpu}.wasm"));
    std::fs::write(
        dir.path().join(format!("{cpu}.toml")),
        "concurrency = 8\ndeadline-ms = 1000\n\n\
         [grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n",
    )
    .unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;

    // Rounds of work per millisecond of this machine, measured by the guest alone.
    launch(&api, "cpu-calibrate", "cpu-calibrate", &[("ms", "200")]).await;
    let lines = t
        .logs
        .wait_for(cpu, "calibration", |l| {
            l.iter().any(|x| x.starts_with("attack: cpu-calibrate"))
        })
        .await;
    let calibration = lines
        .iter()
        .find(|x| x.starts_with("attack: cpu-calibrate"))
        .unwrap();
    let per_ms = (number_after(calibration, "rounds") / 200).max(1);

    // Calibration reads the clock every round, a burn does not: a burn is at most this long.
    let rounds = (per_ms * 400).to_string();
    for name in ["cpu-a", "cpu-b", "cpu-c"] {
        launch(&api, name, "cpu-burn", &[("rounds", &rounds)]).await;
    }
    let lines = t
        .logs
        .wait_for(cpu, "three calls of 400 ms", |l| {
            l.iter()
                .filter(|x| x.starts_with("attack: cpu-burn"))
                .count()
                >= 3
        })
        .await;
    let elapsed: Vec<u64> = lines
        .iter()
        .filter(|x| x.starts_with("attack: cpu-burn"))
        .map(|x| number_after(x, "elapsed_ms"))
        .collect();
    eprintln!("{per_ms} rounds/ms; three 400 ms calls took {elapsed:?} ms of wall-clock time");
    for name in ["cpu-a", "cpu-b", "cpu-c"] {
        let calls = t.recorder.calls_for(cpu, &format!("default/{name}"));
        assert!(
            calls.iter().all(|c| c.outcome == CallOutcome::Ok),
            "{name}: {calls:#?}"
        );
    }
    // They did take turns: each took well over its own time in wall-clock time.
    assert!(
        elapsed.iter().all(|&ms| ms > 600),
        "the calls did not overlap: {elapsed:?}"
    );

    // A call of ~1.6 s of its own still fails its 1 s deadline.
    let long = (per_ms * 2000).to_string();
    launch(&api, "cpu-long", "cpu-burn", &[("rounds", &long)]).await;
    t.recorder
        .wait_call(cpu, "the long call fails", |c| {
            c.key == "default/cpu-long"
                && matches!(&c.outcome, CallOutcome::Failed(m) if m.contains("deadline"))
        })
        .await;
    assert!(
        !t.logs
            .of(cpu)
            .iter()
            .any(|x| x.starts_with(&format!("attack: cpu-burn rounds={long} "))),
        "the 1.6 s call completed"
    );
    t.host.shutdown().await;
}
