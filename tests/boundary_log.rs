//! Grant-boundary attacks, `log-…` family: the attack-fixture guest (tests/fixtures/rust/attack-fixture) against the real host and API server.
//! Also the visibility of grant changes (a widened or missing manifest) and `kubewasm rbac`
//! derived from the grants.

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kubewasm::runtime::{HOST_LINE_BURST, HOST_LINES_PER_SECOND, Limits};
use kubewasm_e2e::*;

use super::{LOGGER, create, install, plugin_dir};

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
    api.create(&PostParams::default(), &cm).await.expect("create");
}

/// Announcements of the drop rule (`line_budget.rs`) rather than lines it limits.
fn is_announcement(l: &HostLine) -> bool {
    l.target == "kubewasm::runtime"
        && (l.message.contains("lines/s (bursts of") || l.message.contains("within its rate again"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_in_a_loop_cannot_flood_the_host_log() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    // Unique names: host lines are collected process-wide.
    let (flood, good) = ("log-flood", "log-flood-neighbour");
    install(&guest(ATTACK), dir.path(), &format!("{flood}.wasm"));
    std::fs::write(
        dir.path().join(format!("{flood}.toml")),
        "deadline-ms = 20000\n\n[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
         events = true\n",
    )
    .unwrap();
    install(&guest(LOGGER), dir.path(), &format!("{good}.wasm"));
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let lines = host_lines();

    let started = Instant::now();
    let attacks = [
        ("log-denied-kube", 50_000u32),
        ("log-bad-event", 50_000),
        ("log-denied-http", 20_000),
    ];
    for (attack, n) in attacks {
        launch(&api, attack, attack, &[("n", &n.to_string())]).await;
        t.logs
            .wait_line(flood, &format!("attack: {attack} n={n} refused={n}"))
            .await;
        // The neighbour sees the same object while the flood runs.
        t.logs
            .wait_for(good, attack, |l| {
                l.iter().any(|x| x.starts_with(&format!("add default/{attack} ")))
            })
            .await;
    }
    let elapsed = started.elapsed().as_secs_f64();

    let about_flood = lines.of(flood);
    let (announcements, written): (Vec<_>, Vec<_>) =
        about_flood.iter().partition(|l| is_announcement(l));
    let refusals = written
        .iter()
        .filter(|l| {
            l.message.starts_with("plugin delete")
                || l.message.starts_with("event dropped")
                || l.message.starts_with("outbound HTTP request denied")
        })
        .count() as u64;
    // The bucket's burst plus its refill over the whole run, and a few lifecycle lines (loaded,
    // replayed, on-synced) that are not the guest's doing.
    let bound = f64::from(HOST_LINE_BURST) + f64::from(HOST_LINES_PER_SECOND) * elapsed.ceil();
    assert!(
        (written.len() as f64) <= bound + 10.0,
        "{} host lines about {flood} in {elapsed:.1} s, over the bound of {bound}",
        written.len()
    );
    let dropped = t.host.runtime.metrics().host_log_dropped(flood);
    let total: u32 = attacks.iter().map(|(_, n)| n).sum();
    assert_eq!(
        refusals + dropped,
        u64::from(total),
        "every refusal is either one line or one count ({refusals} lines, {dropped} dropped)"
    );
    // One warning per episode: each attack is a steady flood, so at most one per attack
    // however many tokens the refill let through during it.
    let warnings: Vec<_> = announcements.iter().filter(|l| l.level == "WARN").collect();
    assert!(
        (1..=attacks.len()).contains(&warnings.len()),
        "{warnings:#?}"
    );
    assert!(
        warnings[0].message.contains("kubewasm_runtime_host_log_dropped_total"),
        "{warnings:#?}"
    );
    assert!(announcements.len() <= 2 * attacks.len(), "{announcements:#?}");

    // The neighbour lost nothing: none of its lines were dropped, and it still serves.
    assert_eq!(t.host.runtime.metrics().host_log_dropped(good), 0);
    assert_eq!(t.host.runtime.metrics().guest_log_dropped(good), 0);
    create(&api, "after", &[]).await;
    t.logs
        .wait_for(good, "after the floods", |l| {
            l.iter().any(|x| x.starts_with("add default/after "))
        })
        .await;
    t.host.shutdown().await;
}
