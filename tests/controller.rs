//! A 0.3.0 controller (tests/fixtures/rust/controller-fixture) in a real host against the
//! embedded API server: its primary's key reconciled, an owned Secret applied with a controller
//! reference and repaired when edited behind its back, a watched Service mapped to its primary,
//! settings read with defaults, changed by a manifest edit (a hot swap with the change logged)
//! and refused at load by `validate-settings`, and a deleted primary reconciled once more.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubewasm::runtime::{CallKind, Limits};
use kubewasm_e2e::*;

use super::{install, plugin_dir};

const CONTROLLER: &str = "rust-controller-fixture.wasm";

/// Grants what the fixture asks for: its three kinds, and applying Secrets.
const GRANTS: &str = "[grants]\n\
    watch = [{ api-version = \"v1\", kind = \"ConfigMap\" }, { api-version = \"v1\", kind = \"Secret\" }, \
             { api-version = \"v1\", kind = \"Service\" }]\n\
    write = [{ api-version = \"v1\", kind = \"Secret\", verbs = [\"apply\"] }]\n";

/// `hello` as a Secret's data holds it.
fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The greeting the owned Secret of `primary` holds, and the uid its controller reference names.
async fn owned(secrets: &Api<Secret>, primary: &str) -> Option<(String, String)> {
    let s = secrets
        .get_opt(&format!("{primary}-owned"))
        .await
        .unwrap()?;
    let data = s.data.unwrap_or_default();
    let greeting = data
        .get("greeting")
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())?;
    let owner = s
        .metadata
        .owner_references?
        .into_iter()
        .find(|r| r.controller == Some(true))?;
    Some((greeting, owner.uid))
}

/// Polls the API server until `pred` holds for the owned Secret of `primary`.
async fn wait_owned(
    secrets: &Api<Secret>,
    primary: &str,
    what: &str,
    pred: impl Fn(&Option<(String, String)>) -> bool,
) {
    for _ in 0..600 {
        if pred(&owned(secrets, primary).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "never: {what}; the Secret is {:?}",
        owned(secrets, primary).await
    );
}

fn reconciles(t: &TestHost, plugin: &str, key: &str) -> usize {
    t.recorder
        .calls(plugin)
        .iter()
        .filter(|c| c.call == CallKind::Reconcile && c.key == key)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_reconciles_its_primary_owned_and_watched_kinds_under_its_settings() {
    let server = start_server().await;
    let client = client(&server);
    let (configmaps, secrets, services): (Api<ConfigMap>, Api<Secret>, Api<Service>) = (
        Api::namespaced(client.clone(), "default"),
        Api::namespaced(client.clone(), "default"),
        Api::namespaced(client, "default"),
    );
    let dir = plugin_dir();
    let plugin = "ctl";
    let manifest = dir.path().join(format!("{plugin}.toml"));
    std::fs::write(
        &manifest,
        format!("[settings]\nmapping = \"label:app\"\n{GRANTS}"),
    )
    .unwrap();
    install(&guest(CONTROLLER), dir.path(), &format!("{plugin}.wasm"));
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    t.logs.wait_line(plugin, "synced").await;

    // A primary: its key is reconciled, and the owned Secret carries the default greeting
    // (no `greeting` setting) and a controller reference to it.
    let web: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "labels": {"role": "primary"}},
    }))
    .unwrap();
    let uid = configmaps
        .create(&PostParams::default(), &web)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    t.logs
        .wait_line(plugin, "reconcile default/web: present")
        .await;
    wait_owned(&secrets, "web", "the owned Secret", |o| {
        o.as_ref() == Some(&("hello".to_string(), uid.clone()))
    })
    .await;

    // Edited behind its back: the owned Secret's event reconciles its owner, which repairs it.
    let before = reconciles(&t, plugin, "default/web");
    let tamper = serde_json::json!({"data": {"greeting": b64("tampered")}});
    secrets
        .patch("web-owned", &PatchParams::default(), &Patch::Merge(&tamper))
        .await
        .unwrap();
    wait_owned(&secrets, "web", "the repair", |o| {
        o.as_ref().is_some_and(|(g, _)| g == "hello")
    })
    .await;
    // The repair is written inside the reconcile, so the call itself ends just after.
    t.recorder
        .wait("the repairing reconcile", |_| {
            reconciles(&t, plugin, "default/web") > before
        })
        .await;
    assert_eq!(
        t.recorder
            .calls(plugin)
            .iter()
            .filter(|c| c.key == "default/web-owned")
            .count(),
        0,
        "the owned object is never reconciled itself"
    );

    // A watched Service names its primary by the label the settings chose.
    let before = reconciles(&t, plugin, "default/web");
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-svc", "labels": {"app": "web"}},
        "spec": {"ports": [{"port": 80}]},
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    t.recorder
        .wait("the Service's reconcile of its primary", |_| {
            reconciles(&t, plugin, "default/web") > before
        })
        .await;

    // New settings are a new version: swapped in hot, the change logged by key, the new
    // greeting applied by the new version's reconciles.
    std::fs::write(
        &manifest,
        format!("[settings]\nmapping = \"label:app\"\ngreeting = \"bonjour\"\n{GRANTS}"),
    )
    .unwrap();
    let changed = host_lines()
        .wait_for(plugin, "the settings change", |l| {
            l.iter().any(|x| x.message.starts_with("settings changed"))
        })
        .await;
    let line = changed
        .iter()
        .find(|x| x.message.starts_with("settings changed"))
        .unwrap();
    assert!(
        line.message
            .contains("added greeting; removed nothing; changed nothing"),
        "{line:?}"
    );
    wait_owned(&secrets, "web", "the new greeting", |o| {
        o.as_ref().is_some_and(|(g, _)| g == "bonjour")
    })
    .await;

    // Settings the controller refuses: not loaded, the running version keeps running, and the
    // error names the setting.
    std::fs::write(
        &manifest,
        format!("[settings]\nmapping = \"label:app\"\nrequeue-ms = \"soon\"\n{GRANTS}"),
    )
    .unwrap();
    t.recorder
        .wait("the refused settings", |r| {
            r.events().iter().any(|e| {
                matches!(e, HostEvent::LoadFailed { plugin: p, error, .. }
                    if p == plugin
                        && error.contains("refused its [settings]")
                        && error.contains("setting \"requeue-ms\": expected an integer"))
            })
        })
        .await;

    // The primary deleted: its key is reconciled once more and finds it gone.
    configmaps
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    t.logs
        .wait_line(plugin, "reconcile default/web: absent")
        .await;
    t.host.shutdown().await;
}
