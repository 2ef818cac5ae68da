//! The controllers the server runs for its clients, as a cluster's kube-controller-manager does:
//! the garbage collector (background, foreground and orphan propagation, dangling owner
//! references, owner scopes) and the namespace lifecycle, asserted on the exact watch event
//! sequences a cluster gives. No sleeps: `wait_controllers_idle`, then a bookmark asked for,
//! marks the end of what the watches have to say.

use std::time::Duration;

use apiserver::{ApiServer, Config};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const GUARD: Duration = Duration::from_secs(20);

/// A server whose watches send bookmarks only when asked (`bookmark_now`), so a bookmark
/// marks the end of a sequence.
pub(crate) async fn server(namespace_defaults: bool) -> (ApiServer, Client) {
    let server = ApiServer::start(Config {
        bookmark_interval: Duration::from_secs(3600),
        namespace_defaults,
        ..Config::default()
    })
    .await
    .unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    (server, client)
}

pub(crate) type Events =
    std::pin::Pin<Box<dyn Stream<Item = kube::Result<WatchEvent<Value>>> + Send>>;

/// A watch of `api` from now, as `(type, name)` plus the object.
pub(crate) async fn watch<K>(api: &Api<K>) -> Events
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    let rv = api
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = api.watch(&WatchParams::default(), &rv).await.unwrap();
    Box::pin(stream.map(|e| {
        e.map(|e| match e {
            WatchEvent::Added(o) => WatchEvent::Added(serde_json::to_value(o).unwrap()),
            WatchEvent::Modified(o) => WatchEvent::Modified(serde_json::to_value(o).unwrap()),
            WatchEvent::Deleted(o) => WatchEvent::Deleted(serde_json::to_value(o).unwrap()),
            WatchEvent::Bookmark(b) => WatchEvent::Bookmark(b),
            WatchEvent::Error(e) => WatchEvent::Error(e),
        })
    }))
}

/// Waits for the controllers to be idle, then asks every watch for a bookmark: what a watch
/// sends before it is all it has to say ([`read`] it once per `settle`).
pub(crate) async fn settle(server: &ApiServer) {
    server.wait_controllers_idle().await;
    server.faults().bookmark_now();
}

/// What `watch` sent up to the bookmark [`settle`] asked for: `"TYPE name"` and the objects.
pub(crate) async fn read(watch: &mut Events) -> (Vec<String>, Vec<Value>) {
    let (mut seen, mut objects) = (Vec::new(), Vec::new());
    loop {
        let ev = tokio::time::timeout(GUARD, watch.next())
            .await
            .expect("watch event timed out")
            .expect("watch ended")
            .expect("watch error");
        let (ty, o) = match ev {
            WatchEvent::Bookmark(_) => return (seen, objects),
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        seen.push(format!("{ty} {}", o["metadata"]["name"].as_str().unwrap()));
        objects.push(o);
    }
}

/// [`settle`] and [`read`] the one watch open.
pub(crate) async fn drain(server: &ApiServer, watch: &mut Events) -> (Vec<String>, Vec<Value>) {
    settle(server).await;
    read(watch).await
}

fn owner_ref(kind: &str, name: &str, uid: &str, block: bool) -> Value {
    let api_version = if kind == "ClusterRole" {
        "rbac.authorization.k8s.io/v1"
    } else {
        "v1"
    };
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "blockOwnerDeletion": block})
}

async fn cm(
    api: &Api<ConfigMap>,
    name: &str,
    owners: Vec<Value>,
    finalizers: &[&str],
) -> ConfigMap {
    let o: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name,
        "ownerReferences": owners, "finalizers": finalizers}}))
    .unwrap();
    api.create(&PostParams::default(), &o).await.unwrap()
}

fn uid(o: &impl ResourceExt) -> String {
    o.uid().unwrap()
}

/// A raw request through the client; the answer as JSON (errors as `kube::Error::Api`).
pub(crate) async fn raw(c: &Client, method: &str, path: &str, body: Value) -> kube::Result<Value> {
    let body = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    c.request::<Value>(req).await
}

async fn release(api: &Api<ConfigMap>, name: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_deletion_collects_dependents_and_dangling_references() {
    let (server, c) = server(false).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let owner = cm(&cms, "owner", vec![], &[]).await;
    let keeper = cm(&cms, "keeper", vec![], &[]).await;
    let o = owner_ref("ConfigMap", "owner", &uid(&owner), false);
    let k = owner_ref("ConfigMap", "keeper", &uid(&keeper), false);
    let only = cm(&cms, "only-owned", vec![o.clone()], &[]).await;
    cm(
        &cms,
        "grandchild",
        vec![owner_ref("ConfigMap", "only-owned", &uid(&only), false)],
        &[],
    )
    .await;
    cm(&cms, "co-owned", vec![o.clone(), k.clone()], &[]).await;
    // A uid the server never issued is left alone (fixtures own objects by imaginary owners).
    let imaginary = owner_ref(
        "ConfigMap",
        "owner",
        "5b1c9f3e-2d7a-4c1b-9e8f-0a1b2c3d4e5f",
        false,
    );
    cm(&cms, "imaginary", vec![imaginary], &[]).await;
    // A cluster-scoped owner of a namespaced object; a namespaced kind owning a cluster-scoped one.
    let roles: Api<ClusterRole> = Api::all(c.clone());
    let role: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": "role-owner"}})).unwrap();
    let role = roles.create(&PostParams::default(), &role).await.unwrap();
    cm(
        &cms,
        "role-owned",
        vec![owner_ref("ClusterRole", "role-owner", &uid(&role), false)],
        &[],
    )
    .await;
    let invalid: ClusterRole = serde_json::from_value(
        json!({"metadata": {"name": "owned-by-a-configmap", "ownerReferences": [o.clone()]}}),
    )
    .unwrap();
    roles
        .create(&PostParams::default(), &invalid)
        .await
        .unwrap();
    server.wait_controllers_idle().await;

    let mut w = watch(&cms).await;
    // The request deletes the owner at once (Background is the default); the collector follows.
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    let (seen, objects) = drain(&server, &mut w).await;
    // The collector takes the owner's dependents in key order.
    assert_eq!(
        seen,
        [
            "DELETED owner",
            "MODIFIED co-owned",
            "DELETED only-owned",
            "DELETED grandchild"
        ]
    );
    assert_eq!(objects[1]["metadata"]["ownerReferences"], json!([k]));
    assert!(cms.get_opt("imaginary").await.unwrap().is_some());
    // A cluster-scoped object cannot be owned by a namespaced kind: never collected.
    assert!(
        roles
            .get_opt("owned-by-a-configmap")
            .await
            .unwrap()
            .is_some()
    );

    // An object created naming a deleted owner is collected at once; one naming a deleted
    // and a live owner only loses the dead reference.
    cm(&cms, "late", vec![o.clone()], &[]).await;
    let (seen, _) = drain(&server, &mut w).await;
    assert_eq!(seen, ["ADDED late", "DELETED late"]);
    cm(&cms, "late-co-owned", vec![o.clone(), k.clone()], &[]).await;
    let (seen, objects) = drain(&server, &mut w).await;
    assert_eq!(seen, ["ADDED late-co-owned", "MODIFIED late-co-owned"]);
    assert_eq!(objects[1]["metadata"]["ownerReferences"], json!([k]));
    // The creator no longer owns the reference that went.
    let managed = objects[1]["metadata"]["managedFields"].to_string();
    assert!(!managed.contains(&uid(&owner)), "{managed}");

    // A namespaced owner resolves in its dependent's namespace only.
    let nss: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "elsewhere"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let elsewhere: Api<ConfigMap> = Api::namespaced(c.clone(), "elsewhere");
    cm(&elsewhere, "cross", vec![k.clone()], &[]).await;
    server.wait_controllers_idle().await;
    assert!(elsewhere.get_opt("cross").await.unwrap().is_none());

    // The cluster-scoped owner goes: its namespaced dependent follows.
    roles
        .delete("role-owner", &DeleteParams::default())
        .await
        .unwrap();
    let (seen, _) = drain(&server, &mut w).await;
    assert_eq!(seen, ["DELETED role-owned"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let (server, c) = server(false).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let owner = cm(&cms, "owner", vec![], &[]).await;
    let o = |block| owner_ref("ConfigMap", "owner", &uid(&owner), block);
    let first = cm(&cms, "dep-1", vec![o(true)], &[]).await;
    cm(
        &cms,
        "dep-1-child",
        vec![owner_ref("ConfigMap", "dep-1", &uid(&first), true)],
        &[],
    )
    .await;
    cm(&cms, "dep-2", vec![o(true)], &["example.com/hold"]).await;
    cm(&cms, "dep-3", vec![o(false)], &[]).await;
    server.wait_controllers_idle().await;
    let mut w = watch(&cms).await;

    // The query form of the policy: the owner is marked and returned.
    let marked = raw(
        &c,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/owner?propagationPolicy=Foreground",
        Value::Null,
    )
    .await
    .unwrap();
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    let (seen, objects) = drain(&server, &mut w).await;
    // dep-1 has a dependent of its own: deleted in the foreground too, its child first.
    assert_eq!(
        seen,
        [
            "MODIFIED owner",
            "MODIFIED dep-1",
            "MODIFIED dep-2",
            "DELETED dep-3",
            "DELETED dep-1-child",
            "DELETED dep-1",
        ]
    );
    assert_eq!(
        objects[1]["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert_eq!(
        objects[2]["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    // dep-2 blocks its owner while its own finalizer holds it.
    let waiting = cms.get("owner").await.unwrap();
    assert_eq!(waiting.finalizers(), ["foregroundDeletion"]);

    release(&cms, "dep-2").await;
    let (seen, objects) = drain(&server, &mut w).await;
    assert_eq!(seen, ["DELETED dep-2", "DELETED owner"]);
    assert_eq!(
        objects[1]["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(cms.get_opt("owner").await.unwrap().is_none());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_deletion_keeps_dependents_and_bad_options_are_refused() {
    let (server, c) = server(false).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let owner = cm(&cms, "owner", vec![], &[]).await;
    let keeper = cm(&cms, "keeper", vec![], &[]).await;
    let o = owner_ref("ConfigMap", "owner", &uid(&owner), true);
    let k = owner_ref("ConfigMap", "keeper", &uid(&keeper), false);
    cm(&cms, "alone", vec![o.clone()], &[]).await;
    cm(&cms, "shared", vec![o.clone(), k.clone()], &[]).await;
    server.wait_controllers_idle().await;
    let mut w = watch(&cms).await;

    for (body, why) in [
        (
            json!({"propagationPolicy": "Sideways"}),
            "Unsupported value: \"Sideways\"",
        ),
        (
            json!({"propagationPolicy": "Orphan", "orphanDependents": true}),
            "orphanDependents and deletionPropagation cannot be both set",
        ),
    ] {
        match raw(
            &c,
            "DELETE",
            "/api/v1/namespaces/default/configmaps/owner",
            body,
        )
        .await
        {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422);
                assert!(s.message.contains(why), "{}", s.message);
            }
            other => panic!("expected 422, got {other:?}"),
        }
    }
    let marked = cms.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert_eq!(marked.left().unwrap().finalizers(), ["orphan"]);
    let (seen, objects) = drain(&server, &mut w).await;
    assert_eq!(
        seen,
        [
            "MODIFIED owner",
            "MODIFIED alone",
            "MODIFIED shared",
            "DELETED owner"
        ]
    );
    assert!(
        objects[1]["metadata"].get("ownerReferences").is_none(),
        "{}",
        objects[1]
    );
    assert_eq!(objects[2]["metadata"]["ownerReferences"], json!([k]));
    assert!(cms.get_opt("alone").await.unwrap().is_some());

    // The deprecated form, in a body: orphanDependents=false is Background.
    let again = cm(&cms, "owner-2", vec![], &[]).await;
    cm(
        &cms,
        "child-2",
        vec![owner_ref("ConfigMap", "owner-2", &uid(&again), false)],
        &[],
    )
    .await;
    raw(
        &c,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/owner-2",
        json!({"orphanDependents": false}),
    )
    .await
    .unwrap();
    let (seen, _) = drain(&server, &mut w).await;
    assert_eq!(
        seen,
        [
            "ADDED owner-2",
            "ADDED child-2",
            "DELETED owner-2",
            "DELETED child-2"
        ]
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_namespace_terminates_until_its_contents_are_gone() {
    let (server, c) = server(false).await;
    let nss: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    let created = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(
        created.spec.unwrap().finalizers,
        Some(vec!["kubernetes".to_string()])
    );
    let team: Api<ConfigMap> = Api::namespaced(c.clone(), "team");
    cm(&team, "plain", vec![], &[]).await;
    cm(&team, "held", vec![], &["example.com/hold"]).await;
    let mut ns_watch = watch(&nss).await;
    let mut cm_watch = watch(&team).await;

    let answer = nss
        .delete("team", &DeleteParams::background())
        .await
        .unwrap();
    let terminating = answer.left().unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(
        terminating.spec.unwrap().finalizers,
        Some(vec!["kubernetes".to_string()])
    );
    // Nothing new may be created in it.
    match team
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "new"}})).unwrap(),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "configmaps \"new\" is forbidden: unable to create new content in namespace team because it is being terminated"
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }

    settle(&server).await;
    let (seen, _) = read(&mut cm_watch).await;
    // The controller goes through the namespace's objects in key order.
    assert_eq!(seen, ["MODIFIED held", "DELETED plain"]);
    let (seen, objects) = read(&mut ns_watch).await;
    assert_eq!(seen, ["MODIFIED team", "MODIFIED team"]);
    let conditions = &objects[1]["status"]["conditions"];
    let condition = |ty: &str| {
        conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == ty)
            .unwrap()
            .clone()
    };
    assert_eq!(
        condition("NamespaceContentRemaining")["message"],
        "Some resources are remaining: configmaps. has 1 resource instances"
    );
    assert_eq!(
        condition("NamespaceFinalizersRemaining")["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    assert_eq!(
        condition("NamespaceDeletionContentFailure")["status"],
        "False"
    );

    release(&team, "held").await;
    settle(&server).await;
    let (seen, _) = read(&mut cm_watch).await;
    assert_eq!(seen, ["DELETED held"]);
    let (seen, objects) = read(&mut ns_watch).await;
    assert_eq!(seen, ["MODIFIED team", "DELETED team"]);
    assert_eq!(
        objects[0]["status"]["conditions"][3]["reason"],
        "ContentRemoved"
    );
    assert!(nss.get_opt("team").await.unwrap().is_none());
    // The name is free again.
    nss.create(&PostParams::default(), &ns).await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_get_their_default_objects_when_asked() {
    let (server, c) = server(true).await;
    server.wait_controllers_idle().await;
    let names = |v: Vec<ConfigMap>| v.into_iter().map(|o| o.name_any()).collect::<Vec<_>>();
    for ns in ["default", "kube-system"] {
        let cms: Api<ConfigMap> = Api::namespaced(c.clone(), ns);
        assert_eq!(
            names(cms.list(&Default::default()).await.unwrap().items),
            ["kube-root-ca.crt"]
        );
        let sas: Api<ServiceAccount> = Api::namespaced(c.clone(), ns);
        assert!(sas.get_opt("default").await.unwrap().is_some());
    }
    let nss: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap();
    let fresh: Api<ConfigMap> = Api::namespaced(c.clone(), "fresh");
    let mut w = watch(&fresh).await;
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let (seen, objects) = drain(&server, &mut w).await;
    assert_eq!(seen, ["ADDED kube-root-ca.crt"]);
    assert!(
        objects[0]["data"]["ca.crt"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    // Deleted, it comes back.
    fresh
        .delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .unwrap();
    let (seen, _) = drain(&server, &mut w).await;
    assert_eq!(seen, ["DELETED kube-root-ca.crt", "ADDED kube-root-ca.crt"]);
    server.shutdown().await;

    // Off (the default), namespaces hold only what clients put there.
    let (server, c) = server_default().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c);
    assert!(
        cms.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    server.shutdown().await;
}

async fn server_default() -> (ApiServer, Client) {
    let (server, c) = server(false).await;
    server.wait_controllers_idle().await;
    (server, c)
}

/// The real `kubectl` against `server`, with a kubeconfig and home in `dir`: `(success, stdout,
/// stderr)`, or `None` (with a notice) when kubectl is not installed.
pub(crate) async fn kubectl(
    server: &ApiServer,
    dir: &std::path::Path,
    args: &[&str],
) -> Option<(bool, String, String)> {
    let present = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        eprintln!("notice: kubectl not found; skipping kubectl {args:?}");
        return None;
    }
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let run = tokio::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("kubectl timed out")
        .expect("kubectl runs");
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_cascades_through_the_collector() {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::Pod;
    let (server, c) = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let pp = PostParams::default();
    let deployments: Api<Deployment> = Api::default_namespaced(c.clone());
    let sets: Api<ReplicaSet> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let labels = json!({"app": "web"});
    let template = json!({"metadata": {"labels": labels},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    let controlled = |kind: &str, name: &str, uid: String| {
        json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true}])
    };
    let make = |round: &'static str| {
        let (deployments, sets, pods) = (deployments.clone(), sets.clone(), pods.clone());
        let (labels, template, pp) = (labels.clone(), template.clone(), pp.clone());
        async move {
            let d = deployments
                .create(
                    &pp,
                    &serde_json::from_value(json!({"metadata": {"name": "web"},
                    "spec": {"selector": {"matchLabels": labels}, "template": template}}))
                    .unwrap(),
                )
                .await
                .unwrap();
            let rs = sets
                .create(
                    &pp,
                    &serde_json::from_value(json!({"metadata": {"name": "web-1",
                    "ownerReferences": controlled("Deployment", "web", uid(&d))},
                    "spec": {"selector": {"matchLabels": labels}, "template": template}}))
                    .unwrap(),
                )
                .await
                .unwrap();
            pods.create(&pp, &serde_json::from_value(json!({"metadata": {"name": format!("web-1-{round}"),
                    "labels": labels, "ownerReferences": controlled("ReplicaSet", "web-1", uid(&rs))},
                    "spec": template["spec"]})).unwrap())
                .await
                .unwrap();
        }
    };
    make("a").await;
    // kubectl asks for foreground deletion and waits until the Deployment is gone: the Pod,
    // then the ReplicaSet, then the Deployment go.
    let Some((ok, out, err)) = kubectl(
        &server,
        dir.path(),
        &[
            "delete",
            "deployment",
            "web",
            "--cascade=foreground",
            "--wait=true",
        ],
    )
    .await
    else {
        return;
    };
    assert!(ok, "{out}{err}");
    assert!(deployments.get_opt("web").await.unwrap().is_none());
    assert!(sets.get_opt("web-1").await.unwrap().is_none());
    assert!(pods.get_opt("web-1-a").await.unwrap().is_none());

    // --cascade=orphan: the ReplicaSet stays, no longer owned.
    make("b").await;
    let (ok, out, err) = kubectl(
        &server,
        dir.path(),
        &["delete", "deployment", "web", "--cascade=orphan"],
    )
    .await
    .unwrap();
    assert!(ok, "{out}{err}");
    server.wait_controllers_idle().await;
    assert!(deployments.get_opt("web").await.unwrap().is_none());
    let kept = sets.get("web-1").await.unwrap();
    assert_eq!(kept.metadata.owner_references, None);
    assert!(pods.get_opt("web-1-b").await.unwrap().is_some());
    server.shutdown().await;
}
