//! The host's identity, `ident-…` attacks (tests/fixtures/rust/attack-fixture/src/identity.rs):
//! a plugin granted writes on Pods, ConfigMaps, Secrets, ReplicaSets and PDBs of the host's
//! namespace aims them at what the host's own Pod names, and its calls carry an identity of
//! their own.
//!
//! The host runs in namespace `ops` (not `deploy/`'s `kubewasm`, whose fixed names the host
//! falls back to), as Pod `host-5d4f8b-x7k2p` of ReplicaSet `host-5d4f8b` of Deployment
//! `host`, mounting ConfigMap `host-plugin-sources-h4sh` and Secret `host-registry`: only
//! what the host derives from its Pod protects them. Before the Pod was read (a static list of
//! `deploy/`'s names) every one of these writes was accepted (200).

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Api;
use kubewasm::informer::ReflectorConfig;
use kubewasm::plugins::HostPod;
use kubewasm::runtime::Limits;
use kubewasm_e2e::host_objects::{HostObjects, create_json};
use kubewasm_e2e::*;
use serde_json::json;

use super::install;

const ATTACKER: &str = "rust-attack-fixture.wasm";
/// The host's namespace.
const OPS: &str = "ops";
/// Where the attacks are started from.
const NS: &str = "attack";
const POD: &str = "host-5d4f8b-x7k2p";
const SIBLING: &str = "host-5d4f8b-q9z2w";
const RS: &str = "host-5d4f8b";
const SOURCES: &str = "host-plugin-sources-h4sh";
const SECRET: &str = "host-registry";

const MANIFEST: &str = r#"
[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" },
         { api-version = "v1", kind = "Secret", namespaces = ["ops"] }]
write = [{ api-version = "v1", kind = "Pod", verbs = ["patch"], namespaces = ["ops"] },
         { api-version = "v1", kind = "ConfigMap", verbs = ["apply"], namespaces = ["ops"] },
         { api-version = "v1", kind = "Secret", verbs = ["patch"], namespaces = ["ops"] },
         { api-version = "apps/v1", kind = "ReplicaSet", verbs = ["patch"], namespaces = ["ops"] },
         { api-version = "policy/v1", kind = "PodDisruptionBudget", verbs = ["delete"], namespaces = ["ops"] }]
events = true
"#;

/// The host's Deployment, ReplicaSet, Pod, ServiceAccount, mounted objects and PDB in `ops`.
const HOST: HostObjects<'static> = HostObjects {
    namespace: OPS,
    deployment: "host",
    replica_set: RS,
    pod: POD,
    sources: SOURCES,
    secret: SECRET,
};

/// [`HOST`]'s objects, and the namespace the attacks start from.
async fn host_objects(c: &kube::Client) {
    HOST.create(c).await;
    create_json(
        Api::<Namespace>::all(c.clone()),
        json!({"metadata": {"name": NS}}),
    )
    .await;
}

/// Starts the host as Pod `ops/host-5d4f8b-x7k2p` with the attacker loaded as `attack`, its
/// calls impersonating `kubewasm-plugin-attack` of namespace `accounts` when given.
async fn host(
    server: &apiserver::ApiServer,
    accounts: Option<&str>,
) -> (TestHost, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("attack.toml"), MANIFEST).unwrap();
    install(&guest(ATTACKER), dir.path(), "attack.wasm");
    let t = start_host_built(
        client(server),
        Some(dir.path().to_path_buf()),
        Limits::default(),
        ReflectorConfig::default(),
        |b| {
            b.host_pod(Some(HostPod {
                namespace: OPS.into(),
                name: POD.into(),
            }))
            .plugin_accounts(accounts.map(str::to_string))
        },
    )
    .await;
    assert!(
        t.host.manager().names().await.iter().any(|n| n == "attack"),
        "{:#?}",
        t.recorder.events()
    );
    (t, dir)
}

/// Runs attack `attack` with `data` from a ConfigMap in [`NS`]; the `attack: …` lines once the
/// summary arrived.
async fn run(
    server: &apiserver::ApiServer,
    t: &TestHost,
    attack: &str,
    data: serde_json::Value,
    summary: &str,
) -> Vec<String> {
    let mut data = data;
    data["attack"] = json!(attack);
    create_json(
        Api::<ConfigMap>::namespaced(client(server), NS),
        json!({"metadata": {"name": attack}, "data": data}),
    )
    .await;
    let want = format!("attack: {summary}");
    t.logs
        .wait_for("attack", &want, |l| l.iter().any(|x| x.starts_with(&want)))
        .await
}

fn answer<'a>(lines: &'a [String], label: &str) -> &'a str {
    let prefix = format!("attack: {label} -> ");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no answer for {label}: {lines:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_hosts_pod_names_is_never_written_whatever_the_grants() {
    let server = start_server().await;
    let c = client(&server);
    host_objects(&c).await;
    let (t, _dir) = host(&server, None).await;
    // A replica created after the host started is protected as well.
    let rs_uid = Api::<ReplicaSet>::namespaced(c.clone(), OPS)
        .get(RS)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    create_json(
        Api::<Pod>::namespaced(c.clone(), OPS),
        HOST.pod_json(SIBLING, &rs_uid),
    )
    .await;

    let lines = run(
        &server,
        &t,
        "ident-host",
        json!({"namespace": OPS, "pod": POD, "sibling": SIBLING, "configmap": SOURCES,
            "secret": SECRET, "replicaset": RS, "pdb": "host"}),
        "ident-host done",
    )
    .await;
    for (label, object) in [
        (
            "patch host pod",
            format!("Pod {OPS}/{POD} (the host's Pod)"),
        ),
        (
            "patch sibling pod",
            format!("Pod {OPS}/host-5d4f8b-* (a replica of the host)"),
        ),
        (
            "apply sources configmap",
            format!("ConfigMap {OPS}/{SOURCES} (mounted or read by the host's Pod)"),
        ),
        (
            "patch mounted secret",
            format!("Secret {OPS}/{SECRET} (mounted or read by the host's Pod)"),
        ),
        (
            "get mounted secret",
            format!("Secret {OPS}/{SECRET} (mounted or read by the host's Pod)"),
        ),
        (
            "patch replicaset",
            format!("ReplicaSet {OPS}/{RS} (controls the host's Pod)"),
        ),
        (
            "delete pdb",
            format!("PodDisruptionBudget {OPS}/host (selects the host's Pod)"),
        ),
    ] {
        let a = answer(&lines, label);
        assert!(
            a.starts_with("403 Forbidden: refused: plugin attack may not") && a.contains(&object),
            "{label}: {a}"
        );
        assert!(a.contains("one of the host's own objects"), "{label}: {a}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l == "attack: ident-host done: 0 accepted"),
        "{lines:#?}"
    );
    // Refused at the call: nothing reached the server, and the Pod still runs the host's image.
    let reached: Vec<String> = server
        .stats()
        .recent
        .into_iter()
        .filter(|r| {
            r.contains(&format!("/namespaces/{OPS}/"))
                && (!r.starts_with("GET ") || r.contains("/secrets/"))
                && !r.starts_with("POST ")
        })
        .collect();
    assert!(reached.is_empty(), "reached the server: {reached:#?}");
    let p = Api::<Pod>::namespaced(c.clone(), OPS)
        .get(POD)
        .await
        .unwrap();
    assert_eq!(
        p.spec.unwrap().containers[0].image.as_deref(),
        Some("kubewasm:0.1.0")
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_calls_reach_the_server_as_its_own_service_account() {
    let server = start_server().await;
    host_objects(&client(&server)).await;
    let (t, _dir) = host(&server, Some(OPS)).await;
    let lines = run(&server, &t, "ident-whoami", json!({}), "ident-whoami done").await;
    assert_eq!(answer(&lines, "ident-whoami"), "ok");
    let seen = server.stats().impersonated;
    assert!(
        seen.contains(&format!(
            "system:serviceaccount:{OPS}:kubewasm-plugin-attack GET /api/v1/namespaces/{NS}/configmaps/ident-whoami"
        )),
        "{seen:#?}"
    );
    // Only the plugin's own calls: the host's informers and reads stay the host's.
    assert!(
        seen.iter().all(|r| r.contains("/configmaps/ident-whoami")),
        "{seen:#?}"
    );
    t.host.shutdown().await;
}

/// The plugin's Events are written as its own account too, not as the host: before, the
/// recorder sent them with the host's identity (and `kubewasm rbac` gave the host, not the
/// plugin, the Events permission), so the API server's RBAC and audit log saw the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_events_reach_the_server_as_its_own_service_account() {
    let server = start_server().await;
    let c = client(&server);
    host_objects(&c).await;
    let (t, _dir) = host(&server, Some(OPS)).await;
    // An Event outside the grants (dropped), then a lawful one about the attacking ConfigMap.
    run(
        &server,
        &t,
        "event-elsewhere",
        json!({}),
        "event-elsewhere emitted",
    )
    .await;
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(c.clone(), NS);
    tokio::time::timeout(PATIENCE, async {
        while events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the lawful Event is recorded");
    let seen = server.stats().impersonated;
    assert!(
        seen.contains(&format!(
            "system:serviceaccount:{OPS}:kubewasm-plugin-attack POST /apis/events.k8s.io/v1/namespaces/{NS}/events"
        )),
        "{seen:#?}"
    );
    // Every Event write carried the plugin's identity: none reached the server as the host.
    let all_posts = server
        .stats()
        .recent
        .iter()
        .filter(|r| r.starts_with("POST /apis/events.k8s.io/"))
        .count();
    let as_plugin = seen
        .iter()
        .filter(|r| r.contains(" POST /apis/events.k8s.io/"))
        .count();
    assert_eq!(all_posts, as_plugin, "{seen:#?}");
    t.host.shutdown().await;
}

/// An account name that cannot be sent as a header (here a namespace with a control
/// character) refuses the plugin's calls. Before, the header was silently left off and the
/// `get` went out under the host's identity (`ok`, with nothing impersonated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_identity_cannot_be_sent_is_refused_not_run_as_the_host() {
    let server = start_server().await;
    host_objects(&client(&server)).await;
    let (t, _dir) = host(&server, Some("ops\u{7f}")).await;
    let lines = run(&server, &t, "ident-whoami", json!({}), "ident-whoami done").await;
    let a = answer(&lines, "ident-whoami");
    assert!(
        a.starts_with("500 InternalError: refused: the plugin's identity"),
        "{a}"
    );
    let reached: Vec<String> = server
        .stats()
        .recent
        .into_iter()
        .filter(|r| r.contains("/configmaps/ident-whoami"))
        .collect();
    assert!(reached.is_empty(), "reached the server: {reached:#?}");
    assert!(server.stats().impersonated.is_empty());
    t.host.shutdown().await;
}
