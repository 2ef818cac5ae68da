//! End-to-end tests: the real host (informers, runtime, plugins, directory watcher) against the
//! embedded API server over real HTTP, with real guest components.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::Limits;
use kubewasm::runtime::{CallKind, CallOutcome};
use kubewasm_e2e::*;

mod authz;
mod bad_input;
mod boundary_budget;
mod boundary_compile;
mod boundary_flood;
mod boundary_http;
mod boundary_identity;
mod boundary_kube;
mod boundary_log;
mod boundary_suite;
mod capabilities;
mod concurrency;
mod controller;
mod convergence;
mod deploy;
mod identity;
mod lb_controller;
mod notifier;
mod observer;
mod real_cluster;
mod registry;
mod registry_hostile;
mod replicator;
mod startup;

const LOGGER: &str = "rust-configmap-logger.wasm";
const FIXTURE: &str = "rust-test-fixture.wasm";

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))
    .unwrap()
}

async fn create(api: &Api<ConfigMap>, name: &str, labels: &[(&str, &str)]) -> String {
    let c = api
        .create(&PostParams::default(), &cm(name, labels))
        .await
        .expect("create");
    c.metadata.resource_version.unwrap()
}

/// A ConfigMap naming `attack` for the hostile fixture (`rust-attack-fixture.wasm`), with `params` as further `data` entries.
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

async fn set_data(api: &Api<ConfigMap>, name: &str, value: &str) -> String {
    let p = serde_json::json!({"data": {"k": value}});
    let c = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .expect("patch");
    c.metadata.resource_version.unwrap()
}

/// Copies a guest into `dir` as `name` with an atomic rename, as deployment tools do.
fn install(src: &Path, dir: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

fn plugin_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_list_then_watch_events_reach_the_handler() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv_pre = create(&api, "pre", &[]).await;

    let t = start_host(&server, None, Limits::default()).await;
    let out = t
        .host
        .manager()
        .load_file(&guest(LOGGER))
        .await
        .expect("logger loads");
    assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
    let p = "rust-configmap-logger";
    t.logs
        .wait_line(p, &format!("add default/pre rv={rv_pre} init=true"))
        .await;

    let rv1 = create(&api, "live", &[]).await;
    t.logs
        .wait_line(p, &format!("add default/live rv={rv1} init=false"))
        .await;
    let rv2 = set_data(&api, "live", "changed").await;
    t.logs
        .wait_line(
            p,
            &format!("update default/live rv={rv1}->{rv2} sync=false"),
        )
        .await;
    api.delete("live", &DeleteParams::default()).await.unwrap();
    // A DELETED watch event carries the resourceVersion of the deletion itself.
    let lines = t
        .logs
        .wait_for(p, "delete", |l| {
            l.iter().any(|x| {
                x.strip_prefix("delete default/live rv=")
                    .and_then(|r| r.strip_suffix(" final-state-unknown=false"))
                    .and_then(|r| r.parse::<u64>().ok())
                    .is_some_and(|rv| rv > rv2.parse::<u64>().unwrap())
            })
        })
        .await;
    // Nothing but these four calls (the resync period of the example is 0).
    assert_eq!(lines.len(), 4, "{lines:#?}");
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_relist_delivers_sync_updates_and_tombstones() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv_same = create(&api, "same", &[]).await;
    let rv_gone = create(&api, "gone", &[]).await;
    let rv_changed = create(&api, "changed", &[]).await;

    let t = start_host(&server, None, Limits::default()).await;
    t.host.manager().load_file(&guest(LOGGER)).await.unwrap();
    let p = "rust-configmap-logger";
    t.logs.wait_for(p, "initial list", |l| l.len() == 3).await;
    let lists_before = server.stats().lists_of("configmaps");

    // The informer must miss the changes: hold watch streams, change, compact, then release.
    server.faults().pause_watches();
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    let rv_changed2 = set_data(&api, "changed", "new").await;
    server.faults().compact();
    server.faults().end_watches();
    server.faults().resume_watches();

    t.logs
        .wait_line(
            p,
            &format!("delete default/gone rv={rv_gone} final-state-unknown=true"),
        )
        .await;
    t.logs
        .wait_line(
            p,
            &format!("update default/changed rv={rv_changed}->{rv_changed2} sync=false"),
        )
        .await;
    t.logs
        .wait_line(
            p,
            &format!("update default/same rv={rv_same}->{rv_same} sync=true"),
        )
        .await;
    assert!(
        server.stats().lists_of("configmaps") > lists_before,
        "the 410 must cause a relist"
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_plugin_resync_replays_the_cache() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv = create(&api, "steady", &[]).await;

    let dir = plugin_dir();
    install(&guest(LOGGER), dir.path(), "resyncing.wasm");
    std::fs::write(
        dir.path().join("resyncing.toml"),
        "resync-period-ms = 1000\n",
    )
    .unwrap();
    install(&guest(LOGGER), dir.path(), "quiet.wasm");
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    // The informers start listing once both plugins are attached: count from after the list.
    t.logs
        .wait_line(
            "resyncing",
            &format!("add default/steady rv={rv} init=true"),
        )
        .await;
    let lists = server.stats().lists_of("configmaps");
    let sync_line = format!("update default/steady rv={rv}->{rv} sync=true");
    t.logs
        .wait_for("resyncing", "two resyncs", |l| {
            l.iter().filter(|x| **x == sync_line).count() >= 2
        })
        .await;
    assert!(
        !t.logs.of("quiet").iter().any(|l| l.contains("sync=true")),
        "a plugin without a resync period gets no sync updates: {:?}",
        t.logs.of("quiet")
    );
    assert_eq!(
        server.stats().lists_of("configmaps"),
        lists,
        "resync replays the cache, it never re-lists"
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_plugin_gets_a_replay_without_a_new_list() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv = create(&api, "a", &[]).await;
    let dir = plugin_dir();
    install(&guest(LOGGER), dir.path(), "first.wasm");
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    t.logs
        .wait_line("first", &format!("add default/a rv={rv} init=true"))
        .await;
    // A watched change proves the informer's watch is open before the counts are taken (the
    // initial add can reach the plugin before the watch request reaches the server).
    let rv_b = create(&api, "b", &[]).await;
    t.logs
        .wait_line("first", &format!("add default/b rv={rv_b} init=false"))
        .await;
    let (lists, watches) = (
        server.stats().lists_of("configmaps"),
        server.stats().watches_of("configmaps"),
    );

    install(&guest(LOGGER), dir.path(), "second.wasm");
    t.logs
        .wait_line("second", &format!("add default/a rv={rv} init=true"))
        .await;
    assert_eq!(
        server.stats().lists_of("configmaps"),
        lists,
        "late join must replay from the cache"
    );
    assert_eq!(
        server.stats().watches_of("configmaps"),
        watches,
        "both plugins share one watch"
    );
    assert_eq!(
        t.host.factory().keys().len(),
        1,
        "one informer for equal subscriptions"
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_swap_loses_nothing_and_a_bad_version_keeps_the_old_one() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    install(&guest(LOGGER), dir.path(), "swap.wasm");
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    create(&api, "before", &[]).await;
    t.recorder
        .wait_call("swap", "v1 sees 'before'", |c| c.key == "default/before")
        .await;
    let v1 = t.recorder.calls("swap")[0].version;

    // Replace the file while objects are being written.
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut names = Vec::new();
            for i in 0..20 {
                let n = format!("during-{i}");
                create(&api, &n, &[]).await;
                names.push(n);
            }
            names
        })
    };
    install(&guest(FIXTURE), dir.path(), "swap.wasm");
    let names = writer.await.unwrap();
    t.recorder
        .wait("swap to v2", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Swapped { plugin, from, .. } if plugin == "swap" && *from == v1))
        })
        .await;
    for n in &names {
        let key = format!("default/{n}");
        t.recorder
            .wait_call("swap", &format!("{key} seen by v1 or v2"), |c| c.key == key)
            .await;
    }
    create(&api, "after", &[]).await;
    t.recorder
        .wait_call("swap", "v2 sees 'after'", |c| {
            c.key == "default/after" && c.version > v1
        })
        .await;
    let v2 = t.recorder.calls_for("swap", "default/after")[0].version;

    // A broken v3: not a component. v2 keeps running and the error names the file.
    std::fs::write(
        dir.path().join(".swap.tmp"),
        b"\0asm definitely not a component",
    )
    .unwrap();
    std::fs::rename(dir.path().join(".swap.tmp"), dir.path().join("swap.wasm")).unwrap();
    t.recorder
        .wait("load failure reported", |r| {
            r.events().iter().any(|e| {
                matches!(e, HostEvent::LoadFailed { plugin, error, .. }
                    if plugin == "swap" && error.contains("swap.wasm"))
            })
        })
        .await;
    create(&api, "still-served", &[]).await;
    t.recorder
        .wait_call("swap", "v2 still serving", |c| {
            c.key == "default/still-served" && c.version == v2
        })
        .await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_plugins_are_contained() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    install(&guest(FIXTURE), dir.path(), "bad.wasm");
    std::fs::write(
        dir.path().join("bad.toml"),
        "deadline-ms = 200\nmemory-limit-mib = 16\n",
    )
    .unwrap();
    install(&guest(LOGGER), dir.path(), "good.wasm");
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    // The good plugin past its initial list before the misbehaving objects come: one created
    // earlier would be part of that list (init=true, as in client-go), and the test would race
    // the replay.
    create(&api, "first", &[]).await;
    t.logs
        .wait_for("good", "its initial list", |l| {
            l.iter().any(|x| x.starts_with("add default/first "))
        })
        .await;

    for action in ["trap", "loop", "oom"] {
        let rv = create(&api, action, &[("kubewasm.io/action", action)]).await;
        let key = format!("default/{action}");
        t.recorder
            .wait_call("bad", &format!("{action} contained"), |c| {
                c.key == key && matches!(c.outcome, CallOutcome::Failed(_))
            })
            .await;
        t.logs
            .wait_line("good", &format!("add default/{action} rv={rv} init=false"))
            .await;
    }
    let failures: Vec<_> = t
        .recorder
        .calls("bad")
        .into_iter()
        .filter_map(|c| match c.outcome {
            CallOutcome::Failed(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 3, "{failures:?}");
    // A fresh instance serves the next call.
    create(&api, "fine", &[("kubewasm.io/action", "hello")]).await;
    t.logs.wait_line("bad", "ok default/fine").await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_have_no_ambient_capabilities_and_a_scoped_cache() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let t = start_host(&server, None, Limits::default()).await;
    t.host.manager().load_file(&guest(FIXTURE)).await.unwrap();
    let p = "rust-test-fixture";
    for action in [
        "read-file",
        "env",
        "net",
        "stdin",
        "cache-get-secret",
        "cache-list-configmaps",
    ] {
        create(&api, action, &[("kubewasm.io/action", action)]).await;
    }
    let lines = t
        .logs
        .wait_for(p, "all probes", |l| {
            [
                "read-file:",
                "env:",
                "net:",
                "stdin:",
                "cache-get-secret:",
                "cache-list-configmaps:",
            ]
            .iter()
            .all(|prefix| l.iter().any(|x| x.starts_with(prefix)))
        })
        .await;
    let line = |prefix: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap()
            .clone()
    };
    assert!(line("read-file:").contains("denied"), "{lines:#?}");
    assert!(line("env:").contains("none"), "{lines:#?}");
    assert!(line("net:").contains("denied"), "{lines:#?}");
    // stdin is empty, so reading it ends at once instead of blocking the call.
    assert_eq!(line("stdin:"), "stdin: empty", "{lines:#?}");
    assert!(
        line("cache-get-secret:").contains("does not subscribe"),
        "{lines:#?}"
    );
    assert!(line("cache-list-configmaps:").contains('6'), "{lines:#?}");
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_redelivers_until_a_newer_notification_supersedes_it() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let t = start_host(&server, None, Limits::default()).await;
    t.host.manager().load_file(&guest(LOGGER)).await.unwrap();
    let p = "rust-configmap-logger";
    create(&api, "flaky", &[("kubewasm.io/fail", "retry")]).await;
    t.recorder
        .wait("three attempts", |r| {
            r.calls_for(p, "default/flaky")
                .iter()
                .filter(|c| matches!(c.outcome, CallOutcome::Retry(_)))
                .count()
                >= 3
        })
        .await;
    let p2 = serde_json::json!({"metadata": {"labels": {"kubewasm.io/fail": null}}});
    api.patch("flaky", &PatchParams::default(), &Patch::Merge(&p2))
        .await
        .unwrap();
    t.recorder
        .wait_call(p, "the update succeeds", |c| {
            c.key == "default/flaky" && c.call == CallKind::Update && c.outcome == CallOutcome::Ok
        })
        .await;
    create(&api, "doomed", &[("kubewasm.io/fail", "fatal")]).await;
    t.recorder
        .wait_call(p, "fatal reported", |c| {
            c.key == "default/doomed" && matches!(c.outcome, CallOutcome::Fatal(_))
        })
        .await;
    // A fatal error is never retried; the retry of the superseded add is dropped.
    create(&api, "marker", &[]).await;
    t.recorder
        .wait_call(p, "marker", |c| c.key == "default/marker")
        .await;
    assert_eq!(t.recorder.calls_for(p, "default/doomed").len(), 1);
    let after_ok = t
        .recorder
        .calls_for(p, "default/flaky")
        .into_iter()
        .skip_while(|c| c.outcome != CallOutcome::Ok)
        .count();
    assert_eq!(
        after_ok, 1,
        "nothing redelivered after the newer notification succeeded"
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_last_plugin_stops_the_informer_and_configmap_volume_swaps_hot_reload() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    // The layout kubelet gives a ConfigMap volume: NAME -> ..data/NAME, ..data -> ..TIMESTAMP.
    let v1 = dir.path().join("..2026_11_21_v1");
    std::fs::create_dir(&v1).unwrap();
    std::fs::copy(guest(LOGGER), v1.join("vol.wasm")).unwrap();
    std::os::unix::fs::symlink("..2026_11_21_v1", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/vol.wasm", dir.path().join("vol.wasm")).unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    create(&api, "x", &[]).await;
    t.recorder
        .wait_call("vol", "v1 serving", |c| c.key == "default/x")
        .await;

    let v2 = dir.path().join("..2026_11_21_v2");
    std::fs::create_dir(&v2).unwrap();
    std::fs::copy(guest(FIXTURE), v2.join("vol.wasm")).unwrap();
    std::os::unix::fs::symlink("..2026_11_21_v2", dir.path().join("..data_tmp")).unwrap();
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
    t.recorder
        .wait("swap through the ..data symlink", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Swapped { plugin, .. } if plugin == "vol"))
        })
        .await;

    std::fs::remove_file(dir.path().join("vol.wasm")).unwrap();
    t.recorder
        .wait("unloaded", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Unloaded { plugin, .. } if plugin == "vol"))
        })
        .await;
    assert!(
        t.host.factory().keys().is_empty(),
        "the informer stops with its last handler"
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_manifest_is_reported_and_others_keep_running() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = plugin_dir();
    install(&guest(LOGGER), dir.path(), "typo.wasm");
    std::fs::write(dir.path().join("typo.toml"), "deadline_ms = 5\n").unwrap();
    install(&guest(LOGGER), dir.path(), "fine.wasm");
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let names = t.host.manager().names().await;
    assert_eq!(names, vec!["fine".to_string()]);
    create(&api, "y", &[]).await;
    t.recorder
        .wait_call("fine", "fine serves", |c| c.key == "default/y")
        .await;
    let _ = Duration::ZERO;
    t.host.shutdown().await;
}

mod informer_against_the_embedded_server {
    //! The informer core alone (no WASM) through a real kube `Client`.
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::DeleteParams;
    use kubewasm::informer::{
        InformerFactory, InformerKey, InformerMetrics, ResourceEventHandler, SharedObject,
    };
    use parking_lot::Mutex;
    use tokio::sync::Notify;

    use super::{create, set_data};
    use kubewasm_e2e::*;

    #[derive(Default)]
    struct Rec {
        lines: Mutex<Vec<String>>,
        changed: Notify,
    }

    impl Rec {
        fn push(&self, s: String) {
            self.lines.lock().push(s);
            self.changed.notify_waiters();
        }
        async fn wait(&self, line: &str) {
            let deadline = tokio::time::Instant::now() + PATIENCE;
            loop {
                let n = self.changed.notified();
                if self.lines.lock().iter().any(|l| l == line) {
                    return;
                }
                if tokio::time::timeout_at(deadline, n).await.is_err() {
                    panic!("timed out waiting for {line}; got {:#?}", self.lines.lock());
                }
            }
        }
    }

    struct Handler(Arc<Rec>);

    impl ResourceEventHandler for Handler {
        fn on_add(&self, obj: &SharedObject, init: bool) {
            self.0.push(format!(
                "add {} {} init={init}",
                obj.key(),
                obj.meta().resource_version
            ));
        }
        fn on_update(&self, old: &SharedObject, new: &SharedObject, sync: bool) {
            self.0.push(format!(
                "update {} {}->{} sync={sync}",
                new.key(),
                old.meta().resource_version,
                new.meta().resource_version
            ));
        }
        fn on_delete(&self, obj: &SharedObject, fsu: bool) {
            self.0.push(format!(
                "delete {} {} fsu={fsu}",
                obj.key(),
                obj.meta().resource_version
            ));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reflector_lists_watches_relists_with_tombstones_and_resumes_without_list() {
        let server = start_server().await;
        let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
        let rv_a = create(&api, "a", &[]).await;
        let rv_b = create(&api, "b", &[]).await;

        let factory = InformerFactory::new(client(&server), InformerMetrics::unregistered());
        let key = InformerKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            label_selector: None,
            field_selector: None,
            shard: None,
        };
        let rec = Arc::new(Rec::default());
        let reg = factory
            .add_handler(&key, Arc::new(Handler(rec.clone())), None)
            .await
            .unwrap();
        reg.wait_synced().await;
        rec.wait(&format!("add default/a {rv_a} init=true")).await;
        rec.wait(&format!("add default/b {rv_b} init=true")).await;
        assert_eq!(server.stats().lists_of("configmaps"), 1);

        // Live events.
        let rv_c = create(&api, "c", &[]).await;
        rec.wait(&format!("add default/c {rv_c} init=false")).await;

        // A normal watch close resumes from the last RV without a LIST.
        let watches = server.stats().watches_of("configmaps");
        server.faults().end_watches();
        let rv_a2 = set_data(&api, "a", "2").await;
        rec.wait(&format!("update default/a {rv_a}->{rv_a2} sync=false"))
            .await;
        assert_eq!(
            server.stats().lists_of("configmaps"),
            1,
            "resume must not list"
        );
        assert!(
            server.stats().watches_of("configmaps") > watches,
            "a new watch was opened"
        );

        // Compaction while the informer is not watching: 410 → relist → tombstone.
        server.faults().pause_watches();
        api.delete("b", &DeleteParams::default()).await.unwrap();
        server.faults().compact();
        server.faults().end_watches();
        server.faults().resume_watches();
        rec.wait(&format!("delete default/b {rv_b} fsu=true")).await;
        rec.wait(&format!("update default/c {rv_c}->{rv_c} sync=true"))
            .await;
        assert_eq!(
            server.stats().lists_of("configmaps"),
            2,
            "exactly one relist"
        );
        assert_eq!(factory.indexer(&key).unwrap().list().len(), 2);

        reg.remove().await;
        assert!(
            factory.keys().is_empty(),
            "last handler gone, informer stopped"
        );
    }
}

mod guest_languages {
    //! The Rust, Python, JavaScript, C and Go loggers loaded together behave identically.
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams};
    use kubewasm::runtime::Limits;
    use kubewasm::runtime::{CallKind, CallOutcome};
    use kubewasm_e2e::*;

    use super::{create, install, plugin_dir, set_data};

    pub(super) const LANGS: [&str; 5] = ["rust", "python", "javascript", "c", "go"];

    /// Per object key, the lines a plugin logged about it, consecutive repeats folded (the number
    /// of retry attempts depends on timing, the sequence of distinct calls does not).
    fn by_key(lines: &[String]) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in lines {
            let key = l.split(' ').nth(1).unwrap_or_default().to_string();
            let v = out.entry(key).or_default();
            if v.last() != Some(l) {
                v.push(l.clone());
            }
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn all_languages_produce_the_same_calls_with_the_same_flags() {
        let server = start_server().await;
        let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
        create(&api, "same", &[]).await;
        create(&api, "gone", &[]).await;
        create(&api, "changed", &[]).await;

        let dir = plugin_dir();
        for lang in LANGS {
            install(
                &guest(&format!("{lang}-configmap-logger.wasm")),
                dir.path(),
                &format!("{lang}.wasm"),
            );
        }
        let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
        assert_eq!(
            t.host.manager().names().await.len(),
            LANGS.len(),
            "every language loads"
        );
        for lang in LANGS {
            t.logs
                .wait_for(lang, "initial list", |l| l.len() >= 3)
                .await;
        }

        // Watch events, including the error paths.
        create(&api, "live", &[]).await;
        set_data(&api, "live", "2").await;
        api.delete("live", &DeleteParams::default()).await.unwrap();
        create(&api, "doomed", &[("kubewasm.io/fail", "fatal")]).await;
        create(&api, "flaky", &[("kubewasm.io/fail", "retry")]).await;
        for lang in LANGS {
            t.recorder
                .wait(&format!("{lang} retried flaky twice"), |r| {
                    r.calls_for(lang, "default/flaky")
                        .iter()
                        .filter(|c| matches!(c.outcome, CallOutcome::Retry(_)))
                        .count()
                        >= 2
                })
                .await;
            t.recorder
                .wait_call(lang, "fatal", |c| {
                    c.key == "default/doomed" && matches!(c.outcome, CallOutcome::Fatal(_))
                })
                .await;
        }
        let unlabel = serde_json::json!({"metadata": {"labels": {"kubewasm.io/fail": null}}});
        api.patch("flaky", &PatchParams::default(), &Patch::Merge(&unlabel))
            .await
            .unwrap();

        // Forced relist with a tombstone, an unchanged object and a changed one.
        server.faults().pause_watches();
        api.delete("gone", &DeleteParams::default()).await.unwrap();
        set_data(&api, "changed", "2").await;
        server.faults().compact();
        server.faults().end_watches();
        server.faults().resume_watches();
        for lang in LANGS {
            t.logs
                .wait_for(lang, "the tombstone", |l| {
                    l.iter().any(|x| {
                        x.starts_with("delete default/gone ")
                            && x.ends_with("final-state-unknown=true")
                    })
                })
                .await;
        }
        // Written after the relist, so it arrives after everything the relist delivered.
        create(&api, "end", &[]).await;
        for lang in LANGS {
            t.logs
                .wait_for(lang, "end marker", |l| {
                    l.iter().any(|x| x.starts_with("add default/end "))
                })
                .await;
            // The call is recorded when it returns, a moment after the guest logged it.
            t.recorder
                .wait_call(lang, "end marker recorded", |c| c.key == "default/end")
                .await;
        }

        let reference = by_key(&t.logs.of("rust"));
        assert!(
            reference["default/gone"]
                .iter()
                .any(|l| l.ends_with("final-state-unknown=true")),
            "{reference:#?}"
        );
        assert!(
            reference["default/same"]
                .iter()
                .any(|l| l.ends_with("sync=true")),
            "{reference:#?}"
        );
        for lang in ["python", "javascript", "c", "go"] {
            assert_eq!(
                by_key(&t.logs.of(lang)),
                reference,
                "{lang} differs from the Rust reference"
            );
            // Per object, the calls in order with repeats (retry attempts) folded.
            let per_key = |plugin: &str| {
                let mut out: BTreeMap<String, Vec<(CallKind, bool)>> = BTreeMap::new();
                for c in t.recorder.calls(plugin) {
                    let v = out.entry(c.key.clone()).or_default();
                    if v.last() != Some(&(c.call, c.flag)) {
                        v.push((c.call, c.flag));
                    }
                }
                out
            };
            assert_eq!(
                per_key(lang),
                per_key("rust"),
                "{lang}: same calls with the same flags"
            );
        }

        // An uncaught exception / trap takes down only that call of that plugin.
        create(&api, "boom", &[("kubewasm.io/fail", "trap")]).await;
        for lang in LANGS {
            t.recorder
                .wait_call(lang, "trap contained", |c| {
                    c.key == "default/boom" && matches!(c.outcome, CallOutcome::Failed(_))
                })
                .await;
        }
        create(&api, "after-boom", &[]).await;
        for lang in LANGS {
            t.logs
                .wait_for(lang, "still serving", |l| {
                    l.iter().any(|x| x.starts_with("add default/after-boom "))
                })
                .await;
        }

        // Resync: every language replays the cache as sync updates with identical lines.
        let rv = api
            .get("same")
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let line = format!("update default/same rv={rv}->{rv} sync=true");
        let count = |lang: &str| t.logs.of(lang).iter().filter(|x| **x == line).count();
        let before: Vec<usize> = LANGS.iter().map(|l| count(l)).collect();
        for lang in LANGS {
            std::fs::write(
                dir.path().join(format!("{lang}.toml")),
                "resync-period-ms = 1000\n",
            )
            .unwrap();
        }
        for (lang, before) in LANGS.iter().zip(before) {
            t.logs
                .wait_for(lang, "two resyncs after the manifest change", |l| {
                    l.iter().filter(|x| **x == line).count() >= before + 2
                })
                .await;
        }
        t.host.shutdown().await;
    }
}

mod soak {
    //! Every logger stays sound over 100,000 calls on one instance (the Go runtime's GC inside
    //! `cabi_realloc` used to trap after about 1,000 calls; a per-call leak hits the memory cap).
    use std::sync::Arc;

    use kubewasm::runtime::{
        GuestObject, HandlerOutcome, Limits, NoCache, ObjectView, Runtime, RuntimeConfig,
        RuntimeMetrics,
    };
    use kubewasm_e2e::guest;

    struct Obj {
        rv: String,
        labels: Vec<(String, String)>,
        json: String,
    }

    impl GuestObject for Obj {
        fn view(&self) -> ObjectView<'_> {
            ObjectView {
                api_version: "v1",
                kind: "ConfigMap",
                namespace: Some("default"),
                name: "soak",
                uid: "0b7a6c1e-soak",
                resource_version: &self.rv,
                generation: None,
                labels: &self.labels,
                json: &self.json,
            }
        }
    }

    fn obj(rv: u64) -> Obj {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "soak", "namespace": "default", "resourceVersion": rv.to_string()},
            "data": {"payload": "x".repeat(1800)},
        });
        Obj {
            rv: rv.to_string(),
            labels: vec![("app.kubernetes.io/name".into(), "soak".into())],
            json: json.to_string(),
        }
    }

    #[test]
    fn every_logger_survives_100k_calls_on_one_instance() {
        let config = RuntimeConfig {
            cache_dir: Some(kubewasm_e2e::shared_compile_cache()),
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::new(config, RuntimeMetrics::unregistered()).unwrap();
        let (old, new) = (obj(1), obj(2));
        for lang in super::guest_languages::LANGS {
            let wasm = std::fs::read(guest(&format!("{lang}-configmap-logger.wasm"))).unwrap();
            let compiled = runtime.compile(&wasm).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut inst = runtime
                    .instantiate(&compiled, lang, Limits::default(), Arc::new(NoCache))
                    .await
                    .unwrap();
                for i in 0..100_000 {
                    match inst.on_update(&old, &new, false).await {
                        Ok(HandlerOutcome::Ok) => {}
                        Ok(other) => panic!("{lang}: call {i} returned {other:?}"),
                        Err(e) => panic!("{lang}: call {i} failed: {e}"),
                    }
                }
            });
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_delays_loading_until_it_is_up() {
    // An address where nothing listens yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let unreachable =
        kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap()))
            .unwrap();
    let dir = plugin_dir();
    install(&guest(LOGGER), dir.path(), "patient.wasm");
    let (logs, recorder) = (GuestLogs::default(), Recorder::default());
    let host = kubewasm::host::HostBuilder::new(unreachable)
        .observer(logs.observer())
        .observer(recorder.observer())
        .plugins_dir(dir.path())
        .start()
        .await
        .unwrap();
    recorder
        .wait("both initial scans fail, saying they will retry", |r| {
            r.events()
                .iter()
                .filter(|e| {
                    matches!(e, HostEvent::LoadFailed { plugin, error, .. }
                        if plugin == "patient" && error.contains("will retry"))
                })
                .count()
                >= 2
        })
        .await;
    assert!(host.manager().names().await.is_empty());

    // Only the watcher's retry timer can load it now: nothing in the directory changes.
    let server = apiserver::ApiServer::start(apiserver::Config {
        bind: addr,
        ..apiserver::Config::default()
    })
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv = create(&api, "hello", &[]).await;
    // Seen in the initial list or as a watch event, depending on which came first.
    let prefix = format!("add default/hello rv={rv} ");
    logs.wait_for("patient", "the object", |l| {
        l.iter().any(|x| x.starts_with(&prefix))
    })
    .await;
    host.shutdown().await;
}
