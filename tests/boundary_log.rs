//! Grant-boundary attacks, `log-…` family: the attack-fixture guest (tests/fixtures/rust/attack-fixture) against the real host and API server.
//! Also the visibility of grant changes (a widened or missing manifest) and `kubewasm rbac`
//! derived from the grants.

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::runtime::{HOST_LINE_BURST, HOST_LINES_PER_SECOND, Limits};
use kubewasm_e2e::*;

use super::{LOGGER, create, install, launch, plugin_dir};

const ATTACK: &str = "rust-attack-fixture.wasm";

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
                l.iter()
                    .any(|x| x.starts_with(&format!("add default/{attack} ")))
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
    let dropped = t.host.runtime().metrics().host_log_dropped(flood);
    let total: u32 = attacks.iter().map(|(_, n)| n).sum();
    eprintln!(
        "{total} refusals in {elapsed:.2} s: {} host lines written ({refusals} refusal lines, {} \
         announcements), {dropped} dropped",
        written.len(),
        announcements.len()
    );
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
        warnings[0]
            .message
            .contains("kubewasm_runtime_host_log_dropped_total"),
        "{warnings:#?}"
    );
    assert!(
        announcements.len() <= 2 * attacks.len(),
        "{announcements:#?}"
    );

    // The neighbour lost nothing: none of its lines were dropped, and it still serves.
    assert_eq!(t.host.runtime().metrics().host_log_dropped(good), 0);
    assert_eq!(t.host.runtime().metrics().guest_log_dropped(good), 0);
    create(&api, "after", &[]).await;
    t.logs
        .wait_for(good, "after the floods", |l| {
            l.iter().any(|x| x.starts_with("add default/after "))
        })
        .await;
    t.host.shutdown().await;
}

/// The grants of the running version of `plugin`, as `/plugins` shows them.
async fn grants_of(t: &TestHost, plugin: &str) -> String {
    let status = t.host.manager().status().await;
    let s = status
        .iter()
        .find(|s| s.name == plugin)
        .expect("plugin known");
    serde_json::to_string(&s.grants).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_changes_are_logged_and_a_removed_manifest_never_falls_back_to_the_default() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    let (plugin, good) = ("log-granted", "log-granted-neighbour");
    let manifest = dir.path().join(format!("{plugin}.toml"));
    // Narrower than the default grants (which read every kind but Secrets): ConfigMaps only.
    let narrow = "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n";
    let wide = format!("{narrow}http = [\"http://127.0.0.1:9\"]\n");
    std::fs::write(&manifest, narrow).unwrap();
    install(&guest(ATTACK), dir.path(), &format!("{plugin}.wasm"));
    install(&guest(LOGGER), dir.path(), &format!("{good}.wasm"));
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let swaps = |t: &TestHost| {
        t.recorder
            .events()
            .iter()
            .filter(|e| matches!(e, HostEvent::Swapped { plugin: p, .. } if p == plugin))
            .count()
    };
    let run_probe = async |name: &str| {
        let params = [
            ("api-version", "v1"),
            ("kind", "Namespace"),
            ("name", "default"),
        ];
        launch(&api, name, "log-read-probe", &params).await;
        let lines = t
            .logs
            .wait_for(plugin, name, |l| {
                l.iter()
                    .filter(|x| x.starts_with("attack: log-read-probe"))
                    .count()
                    >= probe_count(name)
            })
            .await;
        lines
            .iter()
            .rfind(|x| x.starts_with("attack: log-read-probe"))
            .unwrap()
            .clone()
    };
    // The manifest's grants refuse a Namespace read.
    assert_eq!(
        run_probe("probe-1").await,
        "attack: log-read-probe code=403"
    );

    // Widening `http` is a swap that says what was added, naming the plugin.
    std::fs::write(&manifest, &wide).unwrap();
    t.recorder
        .wait("the widened version swapped in", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Swapped { plugin: p, .. } if p == plugin))
        })
        .await;
    let changed = host_lines()
        .wait_for(plugin, "the grant change", |l| {
            l.iter().any(|x| x.message.starts_with("grants changed"))
        })
        .await;
    let line = changed
        .iter()
        .find(|x| x.message.starts_with("grants changed"))
        .unwrap();
    assert_eq!(line.level, "WARN", "a widening is a warning: {line:?}");
    assert!(
        line.message
            .contains("added: http \"http://127.0.0.1:9\"; removed: nothing"),
        "{line:?}"
    );

    // Deleting the manifest keeps the running version and its grants, and says why.
    let granted_before = grants_of(&t, plugin).await;
    std::fs::remove_file(&manifest).unwrap();
    t.recorder
        .wait("the missing manifest reported", |r| {
            r.events().iter().any(|e| {
                matches!(e, HostEvent::LoadFailed { plugin: p, error, .. }
                    if p == plugin && error.contains(&format!("{plugin}.toml"))
                        && error.contains("manifest missing"))
            })
        })
        .await;
    assert_eq!(grants_of(&t, plugin).await, granted_before);
    assert_eq!(swaps(&t), 1, "no version without the manifest");
    // Still delivering, still refused what the default grants would allow.
    assert_eq!(
        run_probe("probe-2").await,
        "attack: log-read-probe code=403"
    );

    // Restoring a manifest loads again; narrowing is said too.
    std::fs::write(&manifest, narrow).unwrap();
    t.recorder
        .wait("the restored manifest swapped in", |r| {
            r.events()
                .iter()
                .filter(|e| matches!(e, HostEvent::Swapped { plugin: p, .. } if p == plugin))
                .count()
                == 2
        })
        .await;
    let narrowed = host_lines()
        .wait_for(plugin, "the narrowing", |l| {
            l.iter().any(|x| x.message.starts_with("grants narrowed"))
        })
        .await;
    assert!(
        narrowed.iter().any(|x| x.level == "INFO"
            && x.message
                .contains("added: nothing; removed: http \"http://127.0.0.1:9\"")),
        "{narrowed:?}"
    );
    assert_eq!(
        run_probe("probe-3").await,
        "attack: log-read-probe code=403"
    );

    // The neighbour saw every probe.
    t.logs
        .wait_for(good, "every probe", |l| {
            (1..=3).all(|i| {
                l.iter()
                    .any(|x| x.starts_with(&format!("add default/probe-{i} ")))
            })
        })
        .await;
    t.host.shutdown().await;
}

/// How many probe reports a probe called `name` (`probe-N`) waits for.
fn probe_count(name: &str) -> usize {
    name.rsplit('-').next().unwrap().parse().unwrap()
}
