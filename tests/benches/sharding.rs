//! Active-active sharding's throughput and memory (issue 35), in one run: 1,200 ConfigMaps of
//! 4 KB, a handler that waits 50 ms per object (the `shard-fixture` posting to a stub that holds
//! each request 50 ms), at concurrency 1 per replica, so one replica handles ~20 objects a second.
//! Three runs against one embedded API server: one unsharded replica (`kubewasm run` without
//! `--sharding`), one sharded replica (a ring of one, all 16 slots), three sharded replicas.
//! Each run starts its replicas with a sharded plugin watching an empty namespace, waits for the
//! ring to settle, then installs the plugin under test and times it until every object's initial
//! add ended.
//!
//! Printed: the time per run and the speed-up of three replicas over one, the slot shares from
//! the member Leases and the busiest replica's (issue 35's goal is a speed-up ≥ 0.85 ÷ that
//! share: ≥ 2.27× when the busiest holds 6 of 16), and each replica's resident memory (VmRSS)
//! before and after the plugin, against the unsharded replica's. Ratios only; nothing asserted.
//!
//! Run with `cargo bench -p kubewasm-e2e --bench sharding` after `bash tests/fixtures/build.sh`;
//! `SHARDING_BENCH_OBJECTS=N` changes the object count.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm_e2e::ring::{
    LeaseLog, Plugin, Ring, Stub, Timings, create_configmaps, ensure_namespace, eventually,
};
use kubewasm_e2e::{client, start_server};
use tokio::sync::Notify;

const SLOTS: u32 = 16;
const OBJECTS_NS: &str = "objects";
const EMPTY_NS: &str = "empty";
const LEASES: &str = "default";
/// What the stub holds each request: the handler's wait per object.
const HOLD: Duration = Duration::from_millis(50);
/// Bytes of data per ConfigMap, so the cache's share of memory shows.
const PAYLOAD: usize = 4096;
/// Longest any run may take (1,200 objects at 20 a second are a minute).
const RUN_PATIENCE: Duration = Duration::from_secs(600);

/// What one run measured.
struct Run {
    label: String,
    /// From installing the plugin to the last initial add's end.
    handled_in: Duration,
    /// From the first request's start to the last's end.
    first_to_last: Duration,
    /// Per replica: slots held, objects handled, VmRSS before and after the plugin.
    replicas: BTreeMap<String, (usize, usize, u64, u64)>,
}

async fn run(
    server: &apiserver::ApiServer,
    label: &str,
    pods: &[&str],
    sharding: bool,
    objects: usize,
) -> Run {
    let changed = Arc::new(Notify::new());
    let stub = Stub::start(HOLD, changed.clone());
    let ring_id = format!("bench-{}", label.replace(' ', "-"));
    let leases = LeaseLog::start(client(server), LEASES, &ring_id, SLOTS, changed.clone());
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let ring = Ring {
        binary: env!("CARGO_BIN_EXE_kubewasm-replica").into(),
        kubeconfig,
        namespace: LEASES.into(),
        id: ring_id,
        slots: SLOTS,
        timings: Timings::default(),
        sharding,
        dir: tmp.path().into(),
        stub: stub.url("").trim_end_matches('/').to_string(),
        changed: changed.clone(),
    };
    let shard = if sharding {
        Some("uid".to_string())
    } else {
        None
    };
    let plugin = |name: &str, ns: &str| Plugin {
        name: name.into(),
        namespace: ns.into(),
        concurrency: 1,
        shard: shard.clone(),
    };
    let mut replicas: Vec<_> = pods
        .iter()
        .map(|p| ring.spawn(p, &[plugin("warm", EMPTY_NS)]))
        .collect();
    let report = || {
        let logs: Vec<String> = replicas
            .iter()
            .map(|r| format!("--- {}:\n{}", r.name, r.dump()))
            .collect();
        format!(
            "{}\n{}\n{}",
            stub.summary("shard"),
            leases.report(),
            logs.join("\n")
        )
    };
    eventually(
        &changed,
        RUN_PATIENCE,
        "the replicas load the warm plugin",
        || {
            assert!(
                replicas.iter().all(|r| !r.exited()),
                "a replica exited\n{}",
                report()
            );
            replicas.iter().all(|r| r.loaded("warm"))
        },
        report,
    )
    .await;
    if sharding {
        eventually(
            &changed,
            RUN_PATIENCE,
            "the ring settles",
            || leases.settled(pods).is_ok(),
            report,
        )
        .await;
    }
    let before: BTreeMap<String, u64> = replicas
        .iter()
        .map(|r| (r.name.clone(), r.rss_bytes()))
        .collect();
    let started = Instant::now();
    for r in &replicas {
        ring.install(&r.plugins, &r.name, &plugin("shard", OBJECTS_NS));
    }
    eventually(
        &changed,
        RUN_PATIENCE,
        "every object's initial add ends",
        || {
            let done: BTreeSet<String> = stub
                .records_of("shard")
                .into_iter()
                .filter(|r| r.op == "add" && r.end.is_some())
                .map(|r| r.uid)
                .collect();
            done.len() >= objects
        },
        report,
    )
    .await;
    let handled_in = started.elapsed();
    eprintln!("{label}: {objects} objects handled in {handled_in:.1?}");
    let records = stub.records_of("shard");
    let adds: Vec<_> = records.iter().filter(|r| r.op == "add").collect();
    let first = adds.iter().map(|r| r.start).min().unwrap();
    let last = adds.iter().map(|r| r.end_or_max()).max().unwrap();
    let held = leases.held();
    let mut out = BTreeMap::new();
    for r in &replicas {
        let slots = if sharding {
            held.get(&r.name).map_or(0, BTreeSet::len)
        } else {
            SLOTS as usize
        };
        let handled = adds.iter().filter(|a| a.replica == r.name).count();
        out.insert(
            r.name.clone(),
            (slots, handled, before[&r.name], r.rss_bytes()),
        );
    }
    stub.assert_no_overlap();
    for r in &mut replicas {
        r.signal_and_wait(libc::SIGTERM).await;
    }
    Run {
        label: label.to_string(),
        handled_in,
        first_to_last: (last - first).to_std().unwrap_or_default(),
        replicas: out,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; nothing here takes arguments.
    let objects: usize = std::env::var("SHARDING_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_200);
    let server = start_server().await;
    let c = client(&server);
    for ns in [OBJECTS_NS, EMPTY_NS] {
        ensure_namespace(&c, ns).await;
    }
    let api: Api<ConfigMap> = Api::namespaced(c, OBJECTS_NS);
    create_configmaps(&api, objects, PAYLOAD).await;

    let runs = vec![
        run(&server, "unsharded", &["u1"], false, objects).await,
        run(&server, "sharded 1", &["s1"], true, objects).await,
        run(&server, "sharded 3", &["t1", "t2", "t3"], true, objects).await,
    ];

    println!(
        "\nsharding: {objects} ConfigMaps of {} KB, handler waiting {} ms per object, \
         concurrency 1 per replica, {SLOTS} slots\n",
        PAYLOAD / 1024,
        HOLD.as_millis()
    );
    println!(
        "{:<12} {:>8} {:>12} {:>12} {:>12}",
        "run", "replicas", "handled in", "first→last", "objects/s"
    );
    for r in &runs {
        println!(
            "{:<12} {:>8} {:>11.1}s {:>11.1}s {:>12.1}",
            r.label,
            r.replicas.len(),
            r.handled_in.as_secs_f64(),
            r.first_to_last.as_secs_f64(),
            objects as f64 / r.first_to_last.as_secs_f64()
        );
    }
    let (unsharded, one, three) = (&runs[0], &runs[1], &runs[2]);
    let busiest = three
        .replicas
        .values()
        .map(|v| v.0)
        .max()
        .unwrap_or(SLOTS as usize);
    let busiest_share = busiest as f64 / f64::from(SLOTS);
    let speedup = one.handled_in.as_secs_f64() / three.handled_in.as_secs_f64();
    let speedup_calls = one.first_to_last.as_secs_f64() / three.first_to_last.as_secs_f64();
    let over_unsharded = unsharded.handled_in.as_secs_f64() / three.handled_in.as_secs_f64();
    println!(
        "\nspeed-up of 3 sharded replicas over 1: {speedup:.2}× (install to done), \
         {speedup_calls:.2}× (first to last call); over the unsharded replica {over_unsharded:.2}×"
    );
    println!(
        "goal 0.85 ÷ busiest share = 0.85 ÷ {busiest}/{SLOTS} = {:.2}×",
        0.85 / busiest_share
    );
    let shares: Vec<String> = three
        .replicas
        .iter()
        .map(|(p, v)| {
            format!(
                "{p} {}/{SLOTS} slots, {} objects ({:.1}%)",
                v.0,
                v.1,
                100.0 * v.1 as f64 / objects as f64
            )
        })
        .collect();
    println!("slot shares (3 replicas): {}", shares.join("; "));

    let (_, _, base_before, base_after) = unsharded.replicas.values().next().copied().unwrap();
    let base_delta = base_after.saturating_sub(base_before);
    println!(
        "\nmemory (VmRSS): unsharded {:.1} MiB ({:.1} MiB before the plugin, +{:.1} MiB with it)",
        mib(base_after),
        mib(base_before),
        mib(base_delta)
    );
    for r in [one, three] {
        for (p, (slots, _, before, after)) in &r.replicas {
            let delta = after.saturating_sub(*before);
            println!(
                "  {:<10} {p}: {:.1} MiB = {:.2} of unsharded; +{:.1} MiB with the plugin = \
                 {:.2} of unsharded's +; slot share {:.2}",
                r.label,
                mib(*after),
                *after as f64 / base_after as f64,
                mib(delta),
                delta as f64 / base_delta.max(1) as f64,
                *slots as f64 / f64::from(SLOTS)
            );
        }
    }
    server.shutdown().await;
}
