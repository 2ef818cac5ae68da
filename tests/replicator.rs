//! The Python `replicator` example end to end: the real host and the embedded API server, the
//! plugin loaded with the manifest it ships. A ConfigMap annotated `kubewasm.io/replicate-to`
//! gets copies (server-side apply) in the namespaces it names; the copies follow its changes, a
//! copy edited by hand is put back, a namespace dropped from the annotation loses its copy,
//! deleting the source deletes the rest, and a copy whose source was deleted while no host ran
//! is removed in `on-synced`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kubewasm_e2e::*;

pub(crate) const PLUGIN: &str = "replicator";
pub(crate) const TARGETS: &str = "kubewasm.io/replicate-to";
const REPLICA_OF: &str = "kubewasm.io/replica-of";

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/python/replicator")
}

/// Copies a built component and a manifest the example ships into `dir` as `replicator.*`.
fn install_as(dir: &Path, component: &str, manifest: &str) -> PathBuf {
    let wasm = dir.join(format!("{PLUGIN}.wasm"));
    std::fs::copy(guest(component), &wasm).unwrap();
    std::fs::copy(
        example_dir().join(manifest),
        dir.join(format!("{PLUGIN}.toml")),
    )
    .unwrap();
    wasm
}

pub(crate) fn install(dir: &Path) -> PathBuf {
    install_as(dir, "python-replicator.wasm", "replicator.toml")
}

async fn create_namespaces(client: &kube::Client, names: &[&str]) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in names {
        let n: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        namespaces.create(&PostParams::default(), &n).await.unwrap();
    }
}

fn data(c: &ConfigMap) -> BTreeMap<String, String> {
    c.data.clone().unwrap_or_default()
}

/// Waits until `ns/name` satisfies `pred` (`None`: absent), the plugin's log in the panic.
async fn await_cm(
    client: &kube::Client,
    t: &TestHost,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&ConfigMap>) -> bool,
) -> Option<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    tokio::time::timeout(PATIENCE, await_condition(api, name, pred))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{ns}/{name}: never {what}; logs:\n{}",
                t.logs.of(PLUGIN).join("\n")
            )
        })
        .unwrap()
}

/// Waits for the copy of `default/<name>` in `ns` holding `k = v`; checks its label and that
/// it carries nothing else of the source.
async fn await_copy(client: &kube::Client, t: &TestHost, ns: &str, name: &str, k: &str, v: &str) {
    await_copy_of(client, t, "default", ns, name, k, v).await
}

/// [`await_copy`] of a source in namespace `from`.
pub(crate) async fn await_copy_of(
    client: &kube::Client,
    t: &TestHost,
    from: &str,
    ns: &str,
    name: &str,
    k: &str,
    v: &str,
) {
    let copy = await_cm(client, t, ns, name, &format!("a copy with {k}={v}"), |c| {
        c.is_some_and(|c| data(c).get(k).map(String::as_str) == Some(v))
    })
    .await
    .unwrap();
    let labels = copy.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get(REPLICA_OF).map(String::as_str),
        Some(format!("{from}.{name}").as_str()),
        "{labels:?}"
    );
    assert!(
        !copy
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(TARGETS),
        "a copy is never a source"
    );
}

pub(crate) async fn await_gone(client: &kube::Client, t: &TestHost, ns: &str, name: &str) {
    await_cm(client, t, ns, name, "deleted", |c| c.is_none()).await;
}

pub(crate) fn source(name: &str, targets: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "annotations": {TARGETS: targets}},
        "data": {"k": value},
        "binaryData": {"blob": "AAEC"},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicator_copies_follows_and_removes_configmaps() {
    let server = start_server().await;
    let client = client(&server);
    create_namespaces(&client, &["team-a", "team-b"]).await;
    let plugins = tempfile::tempdir().unwrap();
    let wasm = install(plugins.path());
    let t = start_host_with_plugin(&server, &wasm).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // Created: a copy in each valid namespace named, with data and binaryData; the invalid
    // name is reported and skipped.
    api.create(
        &PostParams::default(),
        &source("settings", "team-a, team-b,Bad_NS", "1"),
    )
    .await
    .unwrap();
    for ns in ["team-a", "team-b"] {
        await_copy(&client, &t, ns, "settings", "k", "1").await;
        t.logs
            .wait_line(
                PLUGIN,
                &format!("applied ConfigMap default/settings -> {ns} (created)"),
            )
            .await;
    }
    let copy = Api::<ConfigMap>::namespaced(client.clone(), "team-a")
        .get("settings")
        .await
        .unwrap();
    assert_eq!(
        copy.binary_data.unwrap()["blob"].0,
        vec![0u8, 1, 2],
        "binaryData is copied"
    );
    t.logs
        .wait_for(PLUGIN, "the invalid namespace reported", |l| {
            l.iter().any(|x| {
                x.contains("ignored namespace 'Bad_NS'") && x.contains("not a DNS-1123 label")
            })
        })
        .await;

    // The source changes: both copies follow.
    let p = serde_json::json!({"data": {"k": "2"}});
    api.patch("settings", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    for ns in ["team-a", "team-b"] {
        await_copy(&client, &t, ns, "settings", "k", "2").await;
    }

    // A copy edited by hand is put back.
    let team_a: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let p = serde_json::json!({"data": {"k": "edited"}});
    team_a
        .patch("settings", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    await_copy(&client, &t, "team-a", "settings", "k", "2").await;

    // team-b dropped from the annotation: its copy goes, team-a's stays.
    let p = serde_json::json!({"metadata": {"annotations": {TARGETS: "team-a"}}});
    api.patch("settings", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    await_gone(&client, &t, "team-b", "settings").await;
    t.logs
        .wait_line(
            PLUGIN,
            "deleted ConfigMap team-b/settings (team-b not in kubewasm.io/replicate-to of default/settings)",
        )
        .await;
    assert!(team_a.get_opt("settings").await.unwrap().is_some());

    // The source goes: so does the rest.
    api.delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    await_gone(&client, &t, "team-a", "settings").await;

    // Deleted while no host runs: on-synced after the next start finds the copy's source gone.
    api.create(&PostParams::default(), &source("kept", "team-b", "x"))
        .await
        .unwrap();
    await_copy(&client, &t, "team-b", "kept", "k", "x").await;
    t.host.shutdown().await;
    api.delete("kept", &DeleteParams::default()).await.unwrap();
    let team_b: Api<ConfigMap> = Api::namespaced(client.clone(), "team-b");
    assert!(
        team_b.get_opt("kept").await.unwrap().is_some(),
        "nobody removed it yet; the replicator logged:\n{}",
        t.logs.of(PLUGIN).join("\n")
    );
    let t = start_host_with_plugin(&server, &wasm).await;
    await_gone(&client, &t, "team-b", "kept").await;
    t.logs
        .wait_line(
            PLUGIN,
            "deleted ConfigMap team-b/kept (source default.kept gone)",
        )
        .await;
    t.host.shutdown().await;
}

/// The Secret-replicating build with the manifest that grants Secrets: a Secret is copied with
/// its data and type, no log line carries its content, and its copy goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicator_variant_copies_secrets_when_granted() {
    let server = start_server().await;
    let client = client(&server);
    create_namespaces(&client, &["team-a"]).await;
    let plugins = tempfile::tempdir().unwrap();
    let wasm = install_as(
        plugins.path(),
        "variants/python-replicator-secrets.wasm",
        "replicator-secrets.toml",
    );
    let t = start_host_with_plugin(&server, &wasm).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let token: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "token", "annotations": {TARGETS: "team-a"}},
        "type": "example.com/token",
        // base64 of "hunter2-top-secret".
        "data": {"password": "aHVudGVyMi10b3Atc2VjcmV0"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &token)
        .await
        .unwrap();
    let team_a: Api<Secret> = Api::namespaced(client.clone(), "team-a");
    let copy = tokio::time::timeout(
        PATIENCE,
        await_condition(team_a.clone(), "token", |s: Option<&Secret>| s.is_some()),
    )
    .await
    .unwrap_or_else(|_| panic!("no copy; logs:\n{}", t.logs.of(PLUGIN).join("\n")))
    .unwrap()
    .unwrap();
    assert_eq!(copy.type_.as_deref(), Some("example.com/token"));
    assert_eq!(
        copy.data.unwrap()["password"].0,
        b"hunter2-top-secret".to_vec()
    );
    assert_eq!(
        copy.metadata.labels.unwrap()[REPLICA_OF],
        "default.token",
        "labelled as a copy"
    );
    t.logs
        .wait_line(PLUGIN, "applied Secret default/token -> team-a (created)")
        .await;

    secrets
        .delete("token", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::timeout(
        PATIENCE,
        await_condition(team_a, "token", |s: Option<&Secret>| s.is_none()),
    )
    .await
    .unwrap_or_else(|_| panic!("copy kept; logs:\n{}", t.logs.of(PLUGIN).join("\n")))
    .unwrap();
    let lines = t.logs.of(PLUGIN);
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("hunter2") || l.contains("aHVudGVyMi")),
        "a log line carries the Secret's content: {lines:?}"
    );
    t.host.shutdown().await;
}

/// A copy the API server refuses with 422 (here: the copy in team-a already holds another
/// manager's key, and with the source's data it would pass the ConfigMap size limit) does not
/// keep the namespaces after it from their copies; the failure is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_copy_does_not_stop_the_other_namespaces() {
    let server = start_server().await;
    let client = client(&server);
    create_namespaces(&client, &["team-a", "team-b"]).await;
    // team-a's copy exists (labelled as the replicator's) with 1,000,000 bytes of someone
    // else's data: applying the source's 100,000 more passes 1 MiB, which the server refuses.
    let team_a: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let big: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "labels": {REPLICA_OF: "default.cfg"}},
        "data": {"other": "x".repeat(1_000_000)},
    }))
    .unwrap();
    team_a
        .patch(
            "cfg",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&big),
        )
        .await
        .unwrap();
    // The source exists before the host starts: on-synced reconciles it, then an update does.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let src: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cfg", "annotations": {TARGETS: "team-a,team-b"}},
        "data": {"k": "y".repeat(100_000)},
    }))
    .unwrap();
    api.create(&PostParams::default(), &src).await.unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let wasm = install(plugins.path());
    let t = start_host_with_plugin(&server, &wasm).await;
    // team-b comes after the refused team-a, and still gets its copy, at start and on a change.
    for v in ["y", "z"] {
        if v == "z" {
            let patch = serde_json::json!({"data": {"k": v.repeat(100_000)}});
            api.patch("cfg", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
        await_cm(&client, &t, "team-b", "cfg", "copied", |c| {
            c.is_some_and(|c| data(c).get("k").is_some_and(|k| k.starts_with(v)))
        })
        .await;
    }
    // The source's call reports the refusal (fatal: a 422 does not heal by itself).
    t.recorder
        .wait_call(PLUGIN, "the refused copy reported", |c| {
            c.key == "default/cfg"
                && matches!(&c.outcome, kubewasm::runtime::CallOutcome::Fatal(m)
                    if m.contains("1 copy failed, the others were written") && m.contains("422"))
        })
        .await;
    let lines = t.logs.of(PLUGIN);
    assert!(
        lines
            .iter()
            .any(|m| m.contains("apply ConfigMap team-a/cfg: 422")),
        "{lines:#?}"
    );
    t.host.shutdown().await;
    server.shutdown().await;
}
