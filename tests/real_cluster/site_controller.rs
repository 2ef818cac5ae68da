//! The canonical controller (issue 33), `guest-examples/<lang>/site-controller`, under the RBAC
//! `kubewasm rbac` prints, on either target: a Site gets its ConfigMap, Deployment and Service
//! with controller references, the Deployment's status is reflected into the Site's, an owned
//! object edited or deleted behind its back is put back, and the owned objects go with their
//! Site (the garbage collector, the embedded server's or the cluster's). No call is refused:
//! the printed RBAC covers everything the controller does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Resource};
use kubewasm_e2e::*;
use serde_json::json;

use super::{assert_no_refusal, start_host_as, under_printed_rbac};

const PLUGIN: &str = "site-controller";

fn example(lang: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-examples")
        .join(lang)
        .join("site-controller")
}

/// The example's component and manifest in `dir`, as an operator installs them.
fn install(dir: &Path, lang: &str) -> PathBuf {
    let wasm = dir.join(format!("{PLUGIN}.wasm"));
    std::fs::copy(guest(&format!("{lang}-site-controller.wasm")), &wasm).unwrap();
    std::fs::copy(
        example(lang).join("site-controller.toml"),
        dir.join(format!("{PLUGIN}.toml")),
    )
    .unwrap();
    wasm
}

/// Polls until `check` answers `Some`, or fails naming `what` with the controller's log.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    t: &TestHost,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "never: {what}; the controller's log:\n{}",
            t.logs.of(PLUGIN).join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `obj` names the Site with `uid` as its controller.
fn controlled_by<K: Resource>(obj: &K, uid: &str) -> bool {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.kind == "Site" && r.uid == uid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_controller_under_printed_rbac() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-site").await;
    let admin = target.client();
    let crd = std::fs::read_to_string(example("python").join("crd.yaml")).unwrap();
    ns.apply_all(&admin, &crd).await;
    let plugins = tempfile::tempdir().unwrap();
    let wasm = install(plugins.path(), "python");
    let identity = under_printed_rbac(&target, &ns, plugins.path()).await;
    let sites_resource = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Site"));
    let sites: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns.name, &sites_resource);
    // The CRD is served once it is established; the plugin loads only then.
    let started = std::time::Instant::now();
    while sites.list(&Default::default()).await.is_err() {
        assert!(started.elapsed() < PATIENCE, "the Site CRD is never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = start_host_as(&identity, &ns, &wasm).await;

    let site: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Site",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "image": "nginx:1.27", "message": "hello"},
    }))
    .unwrap();
    let uid = sites
        .create(&PostParams::default(), &site)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let (configmaps, deployments, services): (Api<ConfigMap>, Api<Deployment>, Api<Service>) = (
        Api::namespaced(admin.clone(), &ns.name),
        Api::namespaced(admin.clone(), &ns.name),
        Api::namespaced(admin.clone(), &ns.name),
    );
    // The three owned objects, each with the Site as its controller.
    let content = eventually(&t, "the owned ConfigMap", || async {
        let list = configmaps.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|c| controlled_by(c, &uid))
    })
    .await;
    let content_name = content.metadata.name.clone().unwrap();
    eventually(&t, "the owned Deployment", || async {
        let d = deployments.get_opt("web").await.ok()??;
        controlled_by(&d, &uid).then_some(())
    })
    .await;
    eventually(&t, "the owned Service", || async {
        let s = services.get_opt("web").await.ok()??;
        controlled_by(&s, &uid).then_some(())
    })
    .await;

    // The Deployment's status (no kubelet runs Pods here: written as its controller would) is
    // reflected into the Site's.
    let status = json!({"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2,
        "observedGeneration": 1}});
    deployments
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually(&t, "the Site's status", || async {
        let s = sites.get("web").await.ok()?;
        (s.data["status"]["availableReplicas"] == 2).then_some(())
    })
    .await;

    // Edited and deleted behind its back: put back.
    let edit = json!({"data": {"message": "tampered"}});
    configmaps
        .patch(&content_name, &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(&t, "the repaired ConfigMap", || async {
        let c = configmaps.get(&content_name).await.ok()?;
        (c.data?.get("message")? == "hello").then_some(())
    })
    .await;
    eventually(&t, "the Service put back", || async {
        let s = services.get_opt("web").await.ok()??;
        controlled_by(&s, &uid).then_some(())
    })
    .await;

    // The Site deleted (in the foreground, so the garbage collector removes what it owned
    // first): its owned objects go with it.
    sites
        .delete("web", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually(&t, "the owned objects gone", || async {
        let gone = deployments.get_opt("web").await.ok()?.is_none()
            && services.get_opt("web").await.ok()?.is_none()
            && configmaps.get_opt(&content_name).await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
    assert_no_refusal(&target, &ns, &t, PLUGIN);
    t.host.shutdown().await;
}
