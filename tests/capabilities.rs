//! Handlers that act (`kubewasm:handler@0.2.0`), end to end: a 0.2.0 handler loads beside a
//! 0.1.0 one in the same host and gets the same notifications, and with no grants configured
//! every acting import is refused by the host: a `kube` write never reaches the API server.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;

use super::{LOGGER, create};

const LOGGER_V2: &str = "rust-logger-v2.wasm";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_handler_runs_beside_v1_and_its_ungranted_write_is_refused_by_the_host() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv_pre = create(&api, "pre", &[("kubewasm.io/try", "write")]).await;

    let t = start_host(&server, None, Limits::default()).await;
    for file in [LOGGER, LOGGER_V2] {
        let out = t.host.manager().load_file(&guest(file)).await.expect(file);
        assert!(matches!(out, LoadOutcome::Loaded { .. }), "{file}: {out:?}");
    }
    let (v1, v2) = ("rust-configmap-logger", "rust-logger-v2");
    let add_pre = format!("add default/pre rv={rv_pre} init=true");
    t.logs.wait_line(v1, &add_pre).await;
    // `on-synced` once the replay is handled, after it; a 0.1.0 handler has no such export.
    let lines = t.logs.wait_line(v2, "synced").await;
    let at = |l: &str| lines.iter().position(|x| x == l);
    assert!(at(&add_pre) < at("synced"), "{lines:?}");
    t.logs
        .wait_line(
            v2,
            "try write default/pre: error 403 Forbidden: not granted: plugin rust-logger-v2 \
             has no grant to patch ConfigMap of v1 in namespace default",
        )
        .await;

    let rv_live = create(&api, "live", &[("kubewasm.io/try", "http")]).await;
    t.logs
        .wait_line(v2, &format!("add default/live rv={rv_live} init=false"))
        .await;
    t.logs
        .wait_line(
            v2,
            "try http default/live: error ErrorCode::HttpRequestDenied",
        )
        .await;

    assert_eq!(
        t.logs.of(v2).iter().filter(|l| *l == "synced").count(),
        1,
        "once per replay"
    );

    // The refused patch would have added this annotation and a new resourceVersion.
    let pre = api.get("pre").await.unwrap();
    assert_eq!(pre.metadata.resource_version.as_deref(), Some(&*rv_pre));
    assert!(pre.metadata.annotations.unwrap_or_default().is_empty());
    t.host.shutdown().await;
}

/// The JSON a logger-v2 build logged for `default/shown` (`json …` or `cached …`), the last one
/// whose `data.keep` is `keep`.
fn shown(lines: &[String], what: &str, keep: &str) -> Option<serde_json::Value> {
    let prefix = format!("{what} default/shown ");
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|j| serde_json::from_str::<serde_json::Value>(j).expect("the guest got JSON"))
        .rfind(|v| v["data"]["keep"] == keep || (keep.is_empty() && v.get("data").is_none()))
}

fn top_keys(v: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projections_cut_what_the_guest_sees_and_are_made_once_per_version() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let shown_cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shown", "labels": {"kubewasm.io/try": "show"},
                     "annotations": {"a": "b"}},
        "data": {"keep": "k1", "drop": "x".repeat(512)},
    }))
    .unwrap();
    api.create(&Default::default(), &shown_cm).await.unwrap();

    let t = start_host(&server, None, Limits::default()).await;
    // Two plugins with the same `fields` projection (the second a copy under another name),
    // one `metadata-only`, one whole-object 0.2.0 and one 0.1.0 plugin.
    let dir = tempfile::tempdir().unwrap();
    let fields_b = dir.path().join("fields-b.wasm");
    std::fs::copy(guest("rust-logger-v2-fields.wasm"), &fields_b).unwrap();
    for path in [
        guest("rust-logger-v2-fields.wasm"),
        fields_b,
        guest("rust-logger-v2-metadata-only.wasm"),
        guest(LOGGER_V2),
        guest(LOGGER),
    ] {
        let out = t.host.manager().load_file(&path).await.expect("loads");
        assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
    }
    let (fields_a, fields_b, meta, whole) = (
        "rust-logger-v2-fields",
        "fields-b",
        "rust-logger-v2-metadata-only",
        "rust-logger-v2",
    );
    for p in [fields_a, fields_b, meta, whole] {
        t.logs.wait_line(p, "synced").await;
    }
    t.logs
        .wait_for("rust-configmap-logger", "add default/shown", |l| {
            l.iter().any(|x| x.starts_with("add default/shown "))
        })
        .await;

    let check = |keep: &str| {
        for p in [fields_a, fields_b] {
            for what in ["json", "cached"] {
                let v = shown(&t.logs.of(p), what, keep).unwrap_or_else(|| {
                    panic!("{p} logged no {what} with keep={keep}: {:?}", t.logs.of(p))
                });
                assert_eq!(
                    top_keys(&v),
                    ["apiVersion", "data", "kind", "metadata"],
                    "{p} {what}"
                );
                assert_eq!(v["data"], serde_json::json!({"keep": keep}), "{p} {what}");
                assert_eq!(
                    v["metadata"]["annotations"]["a"], "b",
                    "metadata stays whole"
                );
                assert!(v["metadata"].get("managedFields").is_none());
            }
        }
        for what in ["json", "cached"] {
            let v = shown(&t.logs.of(meta), what, "").expect("metadata-only logged");
            assert_eq!(top_keys(&v), ["apiVersion", "kind", "metadata"], "{what}");
            assert_eq!(v["metadata"]["name"], "shown");
        }
        let v = shown(&t.logs.of(whole), "json", keep).expect("the whole object");
        assert_eq!(v["data"]["drop"].as_str().map(str::len), Some(512));
    };
    check("k1");

    // One copy per object version and distinct projection (two here), however many plugins
    // share it; every cached ConfigMap was replayed to each plugin.
    let cached = |t: &TestHost| {
        t.host
            .manager()
            .factory()
            .keys()
            .iter()
            .filter_map(|k| t.host.manager().factory().indexer(k))
            .map(|i| i.list().len() as u64)
            .sum::<u64>()
    };
    let objects = cached(&t);
    let made = || t.host.manager().metrics().projections_made.get();
    assert_eq!(made(), 2 * objects, "{objects} objects");

    let p = serde_json::json!({"data": {"keep": "k2"}});
    api.patch("shown", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    for p in [fields_a, fields_b] {
        t.logs
            .wait_for(p, "json with k2", |l| shown(l, "cached", "k2").is_some())
            .await;
    }
    t.logs
        .wait_for(whole, "json with k2", |l| shown(l, "json", "k2").is_some())
        .await;
    check("k2");
    assert_eq!(
        made(),
        2 * (objects + 1),
        "the new version, once per projection"
    );
    assert!(t.host.manager().metrics().projections_cached.get() >= 2 * objects as i64);
    t.host.shutdown().await;
}

mod grants {
    //! The host's side of the `kube` and `events` imports against the embedded API server, one
    //! `PluginClient` per plugin exactly as the plugins layer builds them: every denial path of
    //! the grants, the writes' options, the per-plugin write limit and Event series.

    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::api::events::v1::Event;
    use kube::Api;
    use kube::runtime::{WatchStreamExt, watcher};
    use kubewasm::plugins::{
        ClusterContext, GrantPolicy, Grants, Manifest, PluginClient, PluginMetrics,
    };
    use kubewasm::runtime::{
        ClusterAccess, EventCall, EventType, KubeCall, ObjectRef, PatchType, PluginInfo, Regarding,
        WriteOptions,
    };
    use kubewasm_e2e::*;

    fn grants(manifest: &str) -> Arc<Grants> {
        let path = Path::new("/plugins/p.toml");
        let m = Manifest::parse(path, manifest).unwrap();
        let info = PluginInfo {
            name: "p".into(),
            subscriptions: Vec::new(),
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: false,
            controller: None,
        };
        Arc::new(m.grants_under(&GrantPolicy::default(), path, &info))
    }

    const CONFIGMAP_WRITER: &str = r#"
[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" }]
write = [{ api-version = "v1", kind = "ConfigMap", verbs = ["create", "patch", "apply", "delete"], namespaces = ["default"] }]
"#;

    fn cm(ns: &str, name: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"namespace":"{ns}","name":"{name}"}},"data":{{"a":"1"}}}}"#
        )
    }

    fn at(kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    fn count(metrics: &PluginMetrics, plugin: &str, verb: &str, code: u16) -> u64 {
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("k", "", metrics.kube_requests.clone());
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let want = format!("plugin=\"{plugin}\",verb=\"{verb}\",code=\"{code}\"");
        text.lines()
            .find(|l| l.contains(&want))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_call_outside_the_grants_is_refused_before_the_api_server() {
        let server = start_server().await;
        let client = client(&server);
        let metrics = PluginMetrics::unregistered();
        let ctx = ClusterContext::new(client.clone(), false, metrics.clone(), None);
        let p = PluginClient::new("p", ctx, grants(CONFIGMAP_WRITER));
        let opts = WriteOptions::default();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

        let created = p
            .call(KubeCall::Create {
                json: cm("default", "a"),
                opts,
            })
            .await
            .unwrap();
        assert_eq!(created.code, 201, "a create is answered 201");
        let created = created.object.expect("the created object");
        assert_eq!(created.view().name, "a");
        let uid = created.view().uid.to_string();

        let refused = [
            // A namespace the write grant does not name.
            KubeCall::Create {
                json: cm("other", "a"),
                opts,
            },
            // A verb not granted (`update` is `kube.replace`).
            KubeCall::Replace {
                json: cm("default", "a"),
                subresource: None,
                opts,
            },
            // A kind not granted, for writing and for reading.
            KubeCall::Create {
                json: r#"{"apiVersion":"v1","kind":"Secret","metadata":{"namespace":"default","name":"s"}}"#.into(),
                opts,
            },
            KubeCall::Get(at("Secret", "default", "s")),
        ];
        for call in refused {
            let what = format!("{call:?}");
            let e = p.call(call).await.expect_err(&what);
            assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{what}");
            assert!(e.message.starts_with("not granted: plugin p"), "{e:?}");
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
        assert!(secrets.get_opt("s").await.unwrap().is_none());
        assert_eq!(count(&metrics, "p", "create", 403), 2);
        assert_eq!(count(&metrics, "p", "update", 403), 1);

        // Strings that could escape a path are refused before any grant lookup.
        let e = p
            .call(KubeCall::Get(at("ConfigMap", "default", "../secrets")))
            .await
            .unwrap_err();
        assert_eq!(e.code, 400, "{e:?}");

        // Apply writes under the plugin's field manager, and says whether it created the
        // object (201, what `apply-outcome` hands the guest) or changed it (200).
        let apply_b = || KubeCall::Apply {
            json: cm("default", "b"),
            opts: WriteOptions {
                dry_run: false,
                force: true,
            },
        };
        assert_eq!(p.call(apply_b()).await.unwrap().code, 201);
        assert_eq!(p.call(apply_b()).await.unwrap().code, 200);
        assert_eq!(count(&metrics, "p", "apply", 201), 1);
        assert_eq!(count(&metrics, "p", "apply", 200), 1);
        assert_eq!(count(&metrics, "p", "create", 201), 1);
        let b = api.get("b").await.unwrap();
        let managers: Vec<_> = b
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        assert!(managers.iter().any(|m| m == "kubewasm:p"), "{managers:?}");

        // A dry run is answered with the result and stores nothing.
        let dry = p
            .call(KubeCall::Patch {
                target: at("ConfigMap", "default", "a"),
                patch_type: PatchType::Merge,
                patch: r#"{"data":{"a":"2"}}"#.into(),
                subresource: None,
                opts: WriteOptions {
                    dry_run: true,
                    force: false,
                },
            })
            .await
            .unwrap()
            .object
            .unwrap();
        assert!(dry.view().json.contains(r#""a":"2""#));
        assert_eq!(api.get("a").await.unwrap().data.unwrap()["a"], "1");

        // Reads: a missing object is `None`, not an error.
        let missing = p
            .call(KubeCall::Get(at("ConfigMap", "default", "nope")))
            .await
            .unwrap();
        assert!(missing.object.is_none());

        // Deletes honour the uid precondition.
        let e = p
            .call(KubeCall::Delete {
                target: at("ConfigMap", "default", "a"),
                uid_precondition: Some("another-uid".into()),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code, 409, "{e:?}");
        p.call(KubeCall::Delete {
            target: at("ConfigMap", "default", "a"),
            uid_precondition: Some(uid),
        })
        .await
        .unwrap();
        assert!(api.get_opt("a").await.unwrap().is_none());
        server.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_flood_meets_its_own_limit_while_another_plugin_writes_normally() {
        let server = start_server().await;
        let client = client(&server);
        let metrics = PluginMetrics::unregistered();
        let ctx = ClusterContext::new(client.clone(), false, metrics.clone(), None);
        let limited = format!("write-qps = 1\nwrite-burst = 2\n{CONFIGMAP_WRITER}");
        let flood = Arc::new(PluginClient::new("flood", ctx.clone(), grants(&limited)));
        let calm = PluginClient::new("calm", ctx, grants(CONFIGMAP_WRITER));

        let finished = Arc::new(AtomicUsize::new(0));
        let flooding: Vec<_> = (0..12)
            .map(|i| {
                let (flood, finished) = (flood.clone(), finished.clone());
                tokio::spawn(async move {
                    let r = flood
                        .call(KubeCall::Create {
                            json: cm("default", &format!("flood-{i}")),
                            opts: WriteOptions::default(),
                        })
                        .await;
                    finished.fetch_add(1, Ordering::AcqRel);
                    r.map(drop).map_err(|e| e.code)
                })
            })
            .collect();
        for i in 0..5 {
            calm.call(KubeCall::Create {
                json: cm("default", &format!("calm-{i}")),
                opts: WriteOptions::default(),
            })
            .await
            .expect("the other plugin's writes go through");
        }
        assert!(
            finished.load(Ordering::Acquire) < 12,
            "the calm plugin finished while the flood still waits for its own tokens"
        );
        let mut codes = Vec::new();
        for f in flooding {
            codes.push(f.await.unwrap());
        }
        let limited = codes.iter().filter(|c| **c == Err(429)).count();
        let written = codes.iter().filter(|c| c.is_ok()).count();
        assert!(limited >= 3, "{codes:?}");
        assert_eq!(limited + written, 12, "{codes:?}");
        assert_eq!(count(&metrics, "flood", "create", 429) as usize, limited);
        assert_eq!(count(&metrics, "calm", "create", 201), 5, "creates are 201");
        server.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn repeated_events_count_up_one_series_and_ungranted_ones_are_dropped() {
        let server = start_server().await;
        let client = client(&server);
        let metrics = PluginMetrics::unregistered();
        let ctx = ClusterContext::new(client.clone(), false, metrics.clone(), None);
        let granted = PluginClient::new(
            "p",
            ctx.clone(),
            grants(&format!("{CONFIGMAP_WRITER}events = true\n")),
        );
        let silent = PluginClient::new("silent", ctx, grants(CONFIGMAP_WRITER));
        let event = || EventCall {
            regarding: Regarding {
                object: at("ConfigMap", "default", "web"),
                uid: String::new(),
                resource_version: String::new(),
            },
            event_type: EventType::Warning,
            reason: "Unreachable".into(),
            action: "Probe".into(),
            note: "the backend did not answer".into(),
        };
        silent.emit(event());
        for _ in 0..3 {
            granted.emit(event());
        }
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        let stream = watcher(events.clone(), watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        tokio::time::timeout(PATIENCE, async {
            while let Some(e) = stream.try_next().await.unwrap() {
                if e.series.as_ref().is_some_and(|s| s.count == 3) {
                    return;
                }
            }
        })
        .await
        .expect("one Event whose series counts three occurrences");
        let all = events.list(&Default::default()).await.unwrap().items;
        assert_eq!(all.len(), 1, "repeats joined one Event");
        let e = &all[0];
        assert_eq!(e.reporting_controller.as_deref(), Some("kubewasm/p"));
        // The host's own write: its field manager on the create and on each series patch, and
        // this replica's name, so replicas' Events can be told apart.
        let managers: Vec<_> = e
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.as_deref())
            .collect();
        assert_eq!(
            managers,
            [kubewasm::identity::FIELD_MANAGER],
            "{managers:?}"
        );
        assert_eq!(
            e.reporting_instance.as_deref(),
            Some(kubewasm::identity::replica_name().as_str())
        );
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.regarding.as_ref().unwrap().name.as_deref(), Some("web"));
        let dropped = metrics
            .events_dropped
            .get_or_create(&kubewasm::plugins::EventDropLabels {
                plugin: "silent".into(),
                reason: "not_granted",
            })
            .get();
        assert_eq!(dropped, 1, "the ungranted Event was dropped by the host");
        server.shutdown().await;
    }
}
