//! The plugin budget (issue 31, attacks 1 and 10): the attack-fixture guest's `hoard-…` family
//! (tests/fixtures/rust/attack-fixture/src/hoard.rs) against the real host. Host memory held
//! through unsent HTTP bodies and header sets is charged to the plugin and refused past its
//! budget, the guest log's rate is the plugin's whatever its concurrency, and one plugin at high
//! concurrency cannot take the instance pool from another.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kubewasm::host::HostBuilder;
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::{LOG_BURST, LOG_LINES_PER_SECOND, Limits, RuntimeConfig};
use kubewasm_e2e::*;

use super::{LOGGER, install, plugin_dir};

const ATTACK: &str = "rust-attack-fixture.wasm";

/// A ConfigMap naming `attack`, with `params` as further `data` entries.
async fn launch(api: &Api<ConfigMap>, name: &str, attack: &str, params: &[(&str, &str)]) {
    let mut data = serde_json::Map::new();
    data.insert("attack".into(), attack.into());
    for (k, v) in params {
        data.insert((*k).into(), (*v).into());
    }
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": data,
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
}

/// Waits until `cond` holds, checking every 20 ms; panics after [`PATIENCE`].
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Before issue 31 every attack here succeeded: 300 bodies of 1 MiB each (2 MiB of channel per
/// body) grew the host by ~600 MiB, 3,000 header sets by ~91 MiB, and the plugin's budget did
/// not exist. Now each is refused (a trap: `oom`) once the plugin's instances would hold more
/// than its `memory-limit-mib`, and the host's memory stays within about that much.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsent_bodies_and_header_sets_are_charged_to_the_plugin_and_refused() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    let plugin = "budget-hoard";
    install(&guest(ATTACK), dir.path(), &format!("{plugin}.wasm"));
    // No grant at all beyond the watch: the attack needs none.
    std::fs::write(
        dir.path().join(format!("{plugin}.toml")),
        "deadline-ms = 20000\nmemory-limit-mib = 32\n\n[grants]\n\
         watch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n",
    )
    .unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let metrics = t.host.runtime().metrics().clone();
    let budget = 32u64 << 20;
    let before = rss();

    for (i, attack) in [("0", "hoard-bodies"), ("1", "hoard-fields")] {
        let oom_before = metrics.failures(plugin, "oom");
        launch(&api, &format!("hoard-{i}"), attack, &[]).await;
        eventually(&format!("{attack} refused"), || {
            metrics.failures(plugin, "oom") > oom_before
        })
        .await;
        assert!(
            !t.logs
                .of(plugin)
                .iter()
                .any(|l| l.starts_with(&format!("attack: {attack} "))),
            "{attack} ran to its end: {:?}",
            t.logs.of(plugin)
        );
        let status = t.host.manager().status().await;
        let memory = status
            .iter()
            .find(|s| s.name == plugin)
            .and_then(|s| s.memory)
            .expect("/plugins shows the plugin's memory");
        assert_eq!(memory.budget_bytes, budget);
        assert!(memory.used_bytes <= budget, "{memory:?}");
    }
    assert!(metrics.budget_refused(plugin, "host") >= 2);
    let grown = rss().saturating_sub(before);
    eprintln!("host RSS grew {} MiB during both attacks", grown >> 20);
    assert!(
        grown < 3 * budget,
        "host RSS grew {} MiB, more than the plugin's budget allows",
        grown >> 20
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, t.host.metrics_registry()).unwrap();
    assert!(
        text.contains(&format!(
            "kubewasm_runtime_memory_budget_refused_total{{plugin=\"{plugin}\",kind=\"host\"}}"
        )),
        "the refusals are a metric"
    );
}

/// Before issue 31 each instance had a bucket of its own: 8 overlapping calls wrote 8 × 2,000
/// lines at once. Now the plugin's instances share one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_log_budget_is_the_plugins_across_concurrent_calls() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    let plugin = "budget-lines";
    install(&guest(ATTACK), dir.path(), &format!("{plugin}.wasm"));
    std::fs::write(
        dir.path().join(format!("{plugin}.toml")),
        "deadline-ms = 20000\nconcurrency = 8\n\n[grants]\n\
         watch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n",
    )
    .unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let started = Instant::now();
    for i in 0..8 {
        launch(
            &api,
            &format!("lines-{i}"),
            "hoard-lines",
            &[("n", &LOG_BURST.to_string()), ("sleep-ms", "500")],
        )
        .await;
    }
    let metrics = t.host.runtime().metrics().clone();
    // Every call has either written its line or had it dropped: 8 × (n + 1) lines in all.
    let total = 8 * (u64::from(LOG_BURST) + 1);
    eventually("every line written or dropped", || {
        t.logs.of(plugin).len() as u64 + metrics.guest_log_dropped(plugin) >= total
    })
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    let written = t.logs.of(plugin).len() as f64;
    let bound = f64::from(LOG_BURST) + f64::from(LOG_LINES_PER_SECOND) * elapsed.ceil();
    eprintln!("{written} of {total} lines written in {elapsed:.2} s (bound {bound})");
    assert!(
        written <= bound,
        "{written} lines from 8 calls in {elapsed:.1} s, over the plugin's bound of {bound}"
    );
    let status = t.host.manager().status().await;
    let s = status.iter().find(|s| s.name == plugin).unwrap();
    assert!(
        s.instances > 1,
        "the calls overlapped on {} instances",
        s.instances
    );
}

/// Before issue 31 a plugin at concurrency 64 took every slot of the pool while its calls
/// waited, and the next plugin could not even be described ("no free instance slot"). Now a
/// plugin reserves at most half of the pool's reservable slots and runs that many calls at
/// once; the neighbour loads and is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_at_high_concurrency_cannot_take_the_pool_from_another() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let logs = GuestLogs::default();
    let host = HostBuilder::new(client(&server))
        .runtime(RuntimeConfig {
            max_instances: 8,
            ..RuntimeConfig::default()
        })
        .limits(Limits::default())
        .observer(logs.observer())
        .shutdown_grace(Duration::from_secs(2))
        .start()
        .await
        .expect("host starts");
    let dir = plugin_dir();
    let greedy = "budget-greedy";
    install(&guest(ATTACK), dir.path(), &format!("{greedy}.wasm"));
    std::fs::write(
        dir.path().join(format!("{greedy}.toml")),
        "deadline-ms = 60000\nconcurrency = 64\n\n[grants]\n\
         watch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n",
    )
    .unwrap();
    let out = host
        .manager()
        .load_file(&dir.path().join(format!("{greedy}.wasm")))
        .await
        .expect("greedy loads");
    assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
    for i in 0..16 {
        launch(
            &api,
            &format!("slow-{i}"),
            "hoard-lines",
            &[("n", "1"), ("sleep-ms", "20000")],
        )
        .await;
    }
    let status = |name: &'static str| {
        let manager = host.manager().clone();
        async move {
            manager
                .status()
                .await
                .into_iter()
                .find(|s| s.name == name)
                .unwrap()
        }
    };
    let deadline = Instant::now() + PATIENCE;
    loop {
        let s = status(greedy).await;
        if s.calls_in_flight >= s.concurrency && s.concurrency > 0 {
            // 8 slots, 7 reservable, half of them each at most.
            assert_eq!(s.concurrency, 3, "{s:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "greedy never filled its share: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let neighbour = "budget-neighbour";
    install(&guest(LOGGER), dir.path(), &format!("{neighbour}.wasm"));
    let out = host
        .manager()
        .load_file(&dir.path().join(format!("{neighbour}.wasm")))
        .await
        .expect("the neighbour loads while the greedy plugin is busy");
    assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
    logs.wait_for(neighbour, "the neighbour is served", |l| {
        l.iter().any(|x| x.starts_with("add default/slow-0 "))
    })
    .await;
    // And swaps: a new version of the neighbour finds its slots.
    std::fs::write(
        dir.path().join(format!("{neighbour}.toml")),
        "deadline-ms = 999\n",
    )
    .unwrap();
    let out = host
        .manager()
        .load_file(&dir.path().join(format!("{neighbour}.wasm")))
        .await
        .expect("the neighbour swaps");
    assert!(matches!(out, LoadOutcome::Swapped { .. }), "{out:?}");
    host.shutdown().await;
}

/// Host RSS growth allowed for a plugin of `budget` bytes: its budget (linear memory and what
/// the host holds for it together), the informer's copies of what the test created, and the
/// allocator's slack.
fn rss_bound(budget: u64, created: u64) -> u64 {
    2 * budget + 2 * created + (32 << 20)
}

/// Before this change a `kube` call's body, the observer's copy of it and the API server's
/// answer (read, kept, copied for the guest), and a `cache.list`'s copies of every object it
/// returns, were held by the host outside the plugin's budget: 8 calls at once could each hold
/// ~12 MiB of a 3 MiB body next to a budget that counted none of it, and
/// `kubewasm_runtime_memory_budget_refused_total{kind="call"}` did not exist (this test failed
/// at its first assertion on that metric). Now every copy is charged before it is made, the
/// calls of one plugin share its one budget, and a call that does not fit gets a `429` (a
/// `cache` read an error) naming the budget; a neighbour is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_bodies_and_cache_reads_at_concurrency_8_are_charged_to_the_plugin_and_refused() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    let plugin = "budget-reads";
    install(&guest(ATTACK), dir.path(), &format!("{plugin}.wasm"));
    std::fs::write(
        dir.path().join(format!("{plugin}.toml")),
        "deadline-ms = 20000\nconcurrency = 8\nmemory-limit-mib = 16\n\n[grants]\n\
         watch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
         write = [{ api-version = \"v1\", kind = \"ConfigMap\", verbs = [\"create\"], \
         namespaces = [\"default\"] }]\n",
    )
    .unwrap();
    let neighbour = "budget-neighbour";
    install(&guest(LOGGER), dir.path(), &format!("{neighbour}.wasm"));
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let metrics = t.host.runtime().metrics().clone();
    let budget = 16u64 << 20;
    let before = rss();

    // Bodies: 8 calls at once, 4 creates of 3 MiB each, waiting for write tokens and answers.
    for i in 0..8 {
        launch(&api, &format!("kube-{i}"), "hoard-kube", &[("n", "4")]).await;
    }
    eventually("a kube body refused for the plugin's budget", || {
        metrics.budget_refused(plugin, "call") > 0
    })
    .await;
    let after_kube = metrics.budget_refused(plugin, "call");

    // Reads: eight ConfigMaps of 900 KiB each (the API server's limit is 1 MiB), then 8 calls
    // listing them all 20 times each.
    let payload = "y".repeat(900 << 10);
    for i in 0..8 {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("large-{i}")},
            "data": {"payload": payload},
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    for i in 0..8 {
        launch(&api, &format!("cache-{i}"), "hoard-cache", &[("n", "20")]).await;
    }
    eventually("a cache list refused for the plugin's budget", || {
        metrics.budget_refused(plugin, "call") > after_kube
    })
    .await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, t.host.metrics_registry()).unwrap();
    assert!(
        text.contains(&format!(
            "kubewasm_runtime_memory_budget_refused_total{{plugin=\"{plugin}\",kind=\"call\"}}"
        )),
        "the refusals are a metric"
    );

    // The neighbour is served while the attacker's calls run or retry.
    let rv = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "after"}})).unwrap(),
        )
        .await
        .unwrap();
    assert!(rv.metadata.name.is_some());
    eventually(
        "the neighbour saw the ConfigMap created after the attacks",
        || {
            t.logs
                .of(neighbour)
                .iter()
                .any(|l| l.starts_with("add default/after "))
        },
    )
    .await;

    let status = t.host.manager().status().await;
    let memory = status
        .iter()
        .find(|s| s.name == plugin)
        .and_then(|s| s.memory)
        .expect("/plugins shows the plugin's memory");
    assert!(memory.used_bytes <= budget, "{memory:?}");
    let grown = rss().saturating_sub(before);
    let created = 8 * (900 << 10);
    eprintln!(
        "host RSS grew {} MiB; refused for the budget: {} (kube), {} (cache); reports: {:?}",
        grown >> 20,
        after_kube,
        metrics.budget_refused(plugin, "call") - after_kube,
        t.logs
            .of(plugin)
            .iter()
            .filter(|l| l.starts_with("attack: "))
            .collect::<Vec<_>>()
    );
    assert!(
        grown < rss_bound(budget, created),
        "host RSS grew {} MiB, more than the plugin's budget allows",
        grown >> 20
    );
}
