//! Grant-boundary attacks, `kube-…` family: the attack-fixture guest (tests/fixtures/rust/attack-fixture) against the real host and API server.
//!
//! Each test loads the attacker as plugin `attack` from a plugins directory with a manifest,
//! beside the configmap-logger as plugin `good`, runs one attack by creating a ConfigMap that
//! names it in namespace `attack`, asserts the host refused it (the answer the guest got, the
//! API server's view, the metric) and that `good` still receives events afterwards.

use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kubewasm::plugins::{EventDropLabels, RateLimitLabels};
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;
use serde::de::DeserializeOwned;

use super::{LOGGER, create, install};

const ATTACKER: &str = "rust-attack-fixture.wasm";
/// The only namespace the attacker's manifests grant writes in.
const NS: &str = "attack";
/// The host's namespace under the default own objects (`deploy/`'s).
const HOST_NS: &str = "kubewasm";

/// A host with `attack` (the fixture, under `manifest`) and `good` (the logger) loaded.
struct Arena {
    server: apiserver::ApiServer,
    t: TestHost,
    _dir: tempfile::TempDir,
}

async fn create_json<K>(api: &Api<K>, json: serde_json::Value) -> K
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(json).expect("a valid object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create")
}

async fn arena(manifest: &str, extra: &[(&str, &str)]) -> Arena {
    let server = start_server().await;
    let namespaces: Api<Namespace> = Api::all(client(&server));
    for ns in [NS, HOST_NS] {
        create_json(&namespaces, serde_json::json!({"metadata": {"name": ns}})).await;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("attack.toml"), manifest).unwrap();
    install(&guest(ATTACKER), dir.path(), "attack.wasm");
    for (name, manifest) in extra {
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
        install(&guest(ATTACKER), dir.path(), &format!("{name}.wasm"));
    }
    install(&guest(LOGGER), dir.path(), "good.wasm");
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let loaded = t.host.manager().names().await;
    assert!(
        loaded.iter().any(|n| n == "attack") && loaded.iter().any(|n| n == "good"),
        "{loaded:?}: {:#?}",
        t.recorder.events()
    );
    Arena {
        server,
        t,
        _dir: dir,
    }
}

impl Arena {
    /// Runs `attack` (a ConfigMap in [`NS`] named after it and the values of `data`, with
    /// `data`) and returns `plugin`'s `attack: …` lines once its summary (a line starting
    /// `attack: {summary}`) arrived. A plugin that saw the ConfigMap created for another
    /// already ran it.
    async fn attack(
        &self,
        plugin: &str,
        attack: &str,
        data: &[(&str, &str)],
        summary: &str,
    ) -> Vec<String> {
        let api: Api<ConfigMap> = Api::namespaced(client(&self.server), NS);
        let mut all: serde_json::Map<String, serde_json::Value> = data
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        all.insert("attack".into(), serde_json::json!(attack));
        let name = std::iter::once(attack)
            .chain(data.iter().map(|(_, v)| *v))
            .collect::<Vec<_>>()
            .join("-");
        if api.get_opt(&name).await.unwrap().is_none() {
            create_json(
                &api,
                serde_json::json!({"metadata": {"name": name}, "data": all}),
            )
            .await;
        }
        let want = format!("attack: {summary}");
        self.t
            .logs
            .wait_for(plugin, &want, |l| l.iter().any(|x| x.starts_with(&want)))
            .await
    }

    /// `good` still receives: a ConfigMap created now reaches it.
    async fn good_plugin_works(&self, name: &str) {
        let api: Api<ConfigMap> = Api::namespaced(client(&self.server), "default");
        let rv = create(&api, name, &[]).await;
        self.t
            .logs
            .wait_line("good", &format!("add default/{name} rv={rv} init=false"))
            .await;
    }
}

/// The answer the guest reported for try `label` (`ok` or `code reason: message`).
fn answer<'a>(lines: &'a [String], label: &str) -> &'a str {
    let prefix = format!("attack: {label} -> ");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no answer for {label}: {lines:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresources_outside_the_grant_and_proxy_names_never_reach_the_api_server() {
    let a = arena(
        r#"
[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" }]
write = [
  { api-version = "v1", kind = "Pod", verbs = ["patch", "update"], namespaces = ["attack"] },
  { api-version = "v1", kind = "ConfigMap", verbs = ["patch"], namespaces = ["attack"] },
]
"#,
        &[],
    )
    .await;
    let lines = a
        .attack("attack", "kube-subresource", &[], "kube-subresource done")
        .await;
    for (label, verb, kind, sub) in [
        (
            "pod ephemeralcontainers",
            "patch",
            "Pod",
            "ephemeralcontainers",
        ),
        ("pod resize", "patch", "Pod", "resize"),
        (
            "pod replace ephemeralcontainers",
            "update",
            "Pod",
            "ephemeralcontainers",
        ),
    ] {
        assert_eq!(
            answer(&lines, label),
            format!(
                "403 Forbidden: not granted: plugin attack has no grant to {verb} {kind} of v1 \
                 in namespace attack (subresource {sub})"
            ),
            "{lines:#?}"
        );
    }
    for (label, kind, sub) in [
        ("pod proxy", "Pod", "proxy"),
        ("pod exec", "Pod", "exec"),
        ("configmap proxy", "ConfigMap", "proxy"),
    ] {
        assert_eq!(
            answer(&lines, label),
            format!(
                "403 Forbidden: refused: plugin attack may never patch subresource {sub} of \
                 {kind}: exec, attach, portforward and proxy are never granted"
            ),
            "{lines:#?}"
        );
    }
    for label in ["pod name http:web:80", "configmap name http:web:80"] {
        let got = answer(&lines, label);
        assert!(
            got.starts_with("400 BadRequest: invalid name: must be a lowercase RFC 1123 subdomain"),
            "{label}: {got}"
        );
    }
    assert_eq!(
        lines.last().map(String::as_str),
        Some("attack: kube-subresource done: 0 accepted")
    );
    let recent = a.server.stats().recent;
    let leaked: Vec<&String> = recent
        .iter()
        .filter(|r| {
            [
                "ephemeralcontainers",
                "/resize",
                "/proxy",
                "/exec",
                "http:web",
            ]
            .iter()
            .any(|s| r.contains(s))
        })
        .collect();
    assert!(leaked.is_empty(), "reached the API server: {leaked:#?}");
    assert!(
        recent
            .iter()
            .any(|r| r.contains("/namespaces/attack/configmaps")),
        "the request log sees this test's requests: {recent:#?}"
    );
    a.good_plugin_works("after-subresources").await;
    a.t.host.shutdown().await;
}

/// Waits until an Event about ConfigMap `attack/name` exists and returns every Event then.
async fn events_after_lawful_one(a: &Arena, name: &str) -> Vec<Event> {
    let all: Api<Event> = Api::all(client(&a.server));
    let stream = watcher(all.clone(), watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    tokio::time::timeout(PATIENCE, async {
        while let Some(e) = stream.try_next().await.unwrap() {
            if e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name) {
                return;
            }
        }
    })
    .await
    .expect("the lawful Event is recorded");
    all.list(&Default::default()).await.unwrap().items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_about_objects_or_in_namespaces_outside_the_grants_are_refused() {
    let a = arena(
        r#"
[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" }]
write = [{ api-version = "v1", kind = "ConfigMap", verbs = ["patch"], namespaces = ["attack"] }]
events = true
"#,
        &[],
    )
    .await;
    let dropped = || {
        a.t.host
            .manager()
            .metrics()
            .events_dropped
            .get_or_create(&EventDropLabels {
                plugin: "attack".into(),
                reason: "outside_grants",
            })
            .get()
    };
    let mut refused = 0;
    for attack in ["event-elsewhere", "event-madeup-node"] {
        a.attack("attack", attack, &[], &format!("{attack} emitted"))
            .await;
        refused += 1;
        assert_eq!(
            dropped(),
            refused,
            "{attack}: refused when emitted, counted"
        );
        // Events are written in order: once the lawful one about the attacking ConfigMap is
        // there, a refused one would have been written before it.
        let events = events_after_lawful_one(&a, attack).await;
        let from_attacker: Vec<(Option<String>, Option<String>, Option<String>)> = events
            .iter()
            .filter(|e| e.reporting_controller.as_deref() == Some("kubewasm/attack"))
            .map(|e| {
                let r = e.regarding.clone().unwrap_or_default();
                (e.metadata.namespace.clone(), r.kind, r.name)
            })
            .collect();
        assert!(
            from_attacker
                .iter()
                .all(|(ns, kind, _)| ns.as_deref() == Some(NS)
                    && kind.as_deref() == Some("ConfigMap")),
            "only Events about the granted ConfigMaps in {NS}: {from_attacker:#?}"
        );
    }
    let kube_system: Api<Event> = Api::namespaced(client(&a.server), "kube-system");
    assert!(
        kube_system
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    a.good_plugin_works("after-events").await;
    a.t.host.shutdown().await;
}

/// `key=value` of a `kube-read-flood` summary.
fn figure(summary: &str, key: &str) -> u64 {
    summary
        .split(' ')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} in {summary}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_get_floods_meet_the_plugins_read_limit_and_cache_reads_stay_free() {
    let grants = "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n";
    // `attack` may read 5 at once, then one per 10 s: a token is further away than half the
    // call's timeout, so calls past the burst are refused at once. `steady` (20/s, burst 2)
    // waits for each token instead: the same loop succeeds, at its rate.
    let a = arena(
        &format!("read-qps = 0.1\nread-burst = 5\n{grants}"),
        &[(
            "steady",
            &format!("read-qps = 20\nread-burst = 2\n{grants}"),
        )],
    )
    .await;
    let n = 30;
    let data = [("n", "30")];
    let summary = |lines: &[String]| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix("attack: kube-read-flood ok="))
            .map(|s| format!("ok={s}"))
            .unwrap()
    };
    let lines = a
        .attack("attack", "kube-read-flood", &data, "kube-read-flood ok=")
        .await;
    let s = summary(&lines);
    eprintln!("attack (read-qps 0.1, burst 5): {s}");
    let (ok, throttled, elapsed_ms) = (
        figure(&s, "ok"),
        figure(&s, "throttled"),
        figure(&s, "elapsed_ms"),
    );
    assert!(
        ok >= 5 && ok <= 5 + elapsed_ms / 10_000,
        "at most burst + qps × elapsed: {s}"
    );
    assert_eq!(ok + throttled, n, "{s}");
    assert_eq!(figure(&s, "other"), 0, "{s}");
    assert_eq!(
        figure(&s, "cache_ok"),
        n,
        "cache reads are not limited: {s}"
    );
    assert!(
        lines.iter().any(|l| l
            == "attack: kube-read-flood throttled: client-side rate limit: plugin attack reads \
                more than 0.1 per second (burst 5)"),
        "{lines:#?}"
    );
    let limited = |plugin: &str, outcome: &'static str| {
        a.t.host
            .manager()
            .metrics()
            .kube_rate_limited
            .get_or_create(&RateLimitLabels {
                plugin: plugin.into(),
                class: "read",
                outcome,
            })
            .get()
    };
    assert_eq!(limited("attack", "refused"), throttled);

    let lines = a
        .attack("steady", "kube-read-flood", &data, "kube-read-flood ok=")
        .await;
    let s = summary(&lines);
    eprintln!("steady (read-qps 20, burst 2): {s}");
    assert_eq!((figure(&s, "ok"), figure(&s, "throttled")), (n, 0), "{s}");
    // 28 calls past the burst at 20/s: a token bucket can only make this slower.
    assert!(figure(&s, "elapsed_ms") >= 1_350, "{s}");
    assert!(limited("steady", "delayed") >= n - 2);
    assert_eq!(limited("steady", "refused"), 0);
    a.good_plugin_works("after-reads").await;
    a.t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_own_objects_are_never_written_whatever_the_grants() {
    // Every kind but Secrets, every verb, every namespace: only the own-objects rule stands.
    let a = arena(
        r#"
[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" }]
write = [{ api-version = "*", kind = "*", verbs = ["create", "update", "patch", "delete", "apply"] }]
"#,
        &[],
    )
    .await;
    let c = client(&a.server);
    create_json(
        &Api::<ConfigMap>::namespaced(c.clone(), HOST_NS),
        serde_json::json!({"metadata": {"name": "kubewasm-plugins"}, "data": {"attack.toml": "[grants]\n"}}),
    )
    .await;
    create_json(
        &Api::<Lease>::namespaced(c.clone(), HOST_NS),
        serde_json::json!({"metadata": {"name": "kubewasm"}, "spec": {"holderIdentity": "replica-a"}}),
    )
    .await;
    create_json(
        &Api::<ServiceAccount>::namespaced(c.clone(), HOST_NS),
        serde_json::json!({"metadata": {"name": "kubewasm"}}),
    )
    .await;
    create_json(
        &Api::<Role>::namespaced(c.clone(), HOST_NS),
        serde_json::json!({"metadata": {"name": "kubewasm-leader-election"}, "rules": []}),
    )
    .await;
    let role_ref = serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kubewasm-leader-election"});
    create_json(
        &Api::<RoleBinding>::namespaced(c.clone(), HOST_NS),
        serde_json::json!({"metadata": {"name": "kubewasm-leader-election"}, "roleRef": role_ref}),
    )
    .await;
    create_json(
        &Api::<ClusterRole>::all(c.clone()),
        serde_json::json!({"metadata": {"name": "kubewasm-plugins"}, "rules": []}),
    )
    .await;
    create_json(
        &Api::<ClusterRoleBinding>::all(c.clone()),
        serde_json::json!({"metadata": {"name": "kubewasm-plugins"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubewasm-plugins"}}),
    )
    .await;
    let versions = || async {
        let rv = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.resource_version.clone().unwrap()
        };
        vec![
            rv(&Api::<ConfigMap>::namespaced(c.clone(), HOST_NS)
                .get("kubewasm-plugins")
                .await
                .unwrap()
                .metadata),
            rv(&Api::<Lease>::namespaced(c.clone(), HOST_NS)
                .get("kubewasm")
                .await
                .unwrap()
                .metadata),
            rv(&Api::<ServiceAccount>::namespaced(c.clone(), HOST_NS)
                .get("kubewasm")
                .await
                .unwrap()
                .metadata),
            rv(&Api::<Role>::namespaced(c.clone(), HOST_NS)
                .get("kubewasm-leader-election")
                .await
                .unwrap()
                .metadata),
            rv(&Api::<RoleBinding>::namespaced(c.clone(), HOST_NS)
                .get("kubewasm-leader-election")
                .await
                .unwrap()
                .metadata),
            rv(&Api::<ClusterRole>::all(c.clone())
                .get("kubewasm-plugins")
                .await
                .unwrap()
                .metadata),
            rv(&Api::<ClusterRoleBinding>::all(c.clone())
                .get("kubewasm-plugins")
                .await
                .unwrap()
                .metadata),
        ]
    };
    let before = versions().await;

    let lines = a
        .attack(
            "attack",
            "kube-own-objects",
            &[("namespace", HOST_NS)],
            "kube-own-objects done in kubewasm",
        )
        .await;
    for (label, verb, what) in [
        (
            "apply plugins configmap",
            "apply",
            "ConfigMap kubewasm/kubewasm-plugins",
        ),
        (
            "create plugins configmap",
            "create",
            "ConfigMap kubewasm/kubewasm-plugins",
        ),
        (
            "delete plugins configmap",
            "delete",
            "ConfigMap kubewasm/kubewasm-plugins",
        ),
        (
            "patch plugins configmap",
            "patch",
            "ConfigMap kubewasm/kubewasm-plugins",
        ),
        ("patch lease", "patch", "Lease kubewasm/kubewasm"),
        (
            "patch serviceaccount",
            "patch",
            "ServiceAccount kubewasm/kubewasm",
        ),
        (
            "patch role",
            "patch",
            "Role kubewasm/kubewasm-leader-election",
        ),
        (
            "patch rolebinding",
            "patch",
            "RoleBinding kubewasm/kubewasm-leader-election",
        ),
        ("apply clusterrole", "apply", "ClusterRole kubewasm-plugins"),
        (
            "patch clusterrolebinding",
            "patch",
            "ClusterRoleBinding kubewasm-plugins",
        ),
    ] {
        assert_eq!(
            answer(&lines, label),
            format!(
                "403 Forbidden: refused: plugin attack may not {verb} {what}: it is one of the \
                 host's own objects, which no grant covers"
            ),
            "{lines:#?}"
        );
    }
    assert_eq!(
        lines.last().map(String::as_str),
        Some("attack: kube-own-objects done in kubewasm: 0 accepted")
    );
    assert_eq!(versions().await, before, "every own object unchanged");
    // The same grant still writes the same names elsewhere: the rule is about the host's
    // objects only.
    let lines = a
        .attack(
            "attack",
            "kube-own-objects",
            &[("namespace", NS)],
            "kube-own-objects done in attack",
        )
        .await;
    assert_eq!(
        answer(&lines[lines.len() - 11..], "apply plugins configmap"),
        "ok"
    );
    a.good_plugin_works("after-own-objects").await;
    a.t.host.shutdown().await;
}
