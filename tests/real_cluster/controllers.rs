//! What kube-controller-manager does for a controller under development, on either target: the
//! garbage collector's three propagation policies, a foreground chain through a ReplicaSet to
//! its Pods, namespace termination, and one Event store behind `v1` and `events.k8s.io/v1`. The
//! embedded server's versions (`apiserver/tests/controllers.rs`, `events.rs`) check the same
//! in more detail; these check that it and a real cluster agree.
//!
//! Orders asserted are the ones Kubernetes guarantees, nothing finer: with `Orphan` every
//! dependent loses its reference before the owner goes; with `Foreground` the owner is marked
//! first and goes last. Pods name a scheduler no cluster runs, so they stay unscheduled: no
//! kubelet owns them and their deletion is immediate, as it is for any unscheduled Pod.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Pod};
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent,
    WatchParams,
};
use kube::{Resource, ResourceExt};
use kubewasm_e2e::*;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The bound on anything a controller does here: a failure bound, not a synchronisation.
const PATIENCE: Duration = Duration::from_secs(90);
/// A scheduler no cluster runs.
const NO_SCHEDULER: &str = "kubewasm-e2e-no-such-scheduler";
/// A finalizer nothing but these tests removes: it holds a namespace in `Terminating`.
const HOLD: &str = "kubewasm.dev/e2e-hold";

/// One watch event, reduced to what the orders below are about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Modified {
        name: String,
        owners: usize,
        deleting: bool,
    },
    Deleted(String),
}

/// Watches `api` from now on, until `done` holds of what was seen (or [`PATIENCE`] passes).
struct Watch<K> {
    stream: futures::stream::BoxStream<'static, kube::Result<WatchEvent<K>>>,
    seen: Vec<Seen>,
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    async fn start(api: &Api<K>) -> Self {
        let rv = api
            .list_metadata(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("a list resourceVersion");
        let stream = api
            .watch(&WatchParams::default().timeout(290), &rv)
            .await
            .expect("watch")
            .boxed();
        Watch {
            stream,
            seen: Vec::new(),
        }
    }

    async fn until(&mut self, what: &str, done: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
        let wait = async {
            while !done(&self.seen) {
                let Some(event) = self.stream.try_next().await.expect("watch stream") else {
                    panic!("{what}: the watch ended; seen {:?}", self.seen);
                };
                match event {
                    WatchEvent::Modified(o) => self.seen.push(Seen::Modified {
                        name: o.name_any(),
                        owners: o.meta().owner_references.as_ref().map_or(0, Vec::len),
                        deleting: o.meta().deletion_timestamp.is_some(),
                    }),
                    WatchEvent::Deleted(o) => self.seen.push(Seen::Deleted(o.name_any())),
                    WatchEvent::Error(e) => panic!("{what}: watch error {e:?}"),
                    WatchEvent::Added(_) | WatchEvent::Bookmark(_) => {}
                }
            }
        };
        if tokio::time::timeout(PATIENCE, wait).await.is_err() {
            panic!("{what}: not within {PATIENCE:?}; seen {:?}", self.seen);
        }
        self.seen.clone()
    }
}

fn deleted(seen: &[Seen], name: &str) -> Option<usize> {
    seen.iter().position(|s| *s == Seen::Deleted(name.into()))
}

fn owner_ref<K: Resource<DynamicType = ()>>(owner: &K, block: bool) -> Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "name": owner.meta().name,
        "uid": owner.meta().uid,
        "blockOwnerDeletion": block,
    })
}

async fn create<K>(api: &Api<K>, body: Value) -> K
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body).expect("a valid object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", obj.meta().name))
}

async fn config_map(api: &Api<ConfigMap>, name: &str, owners: Vec<Value>) -> ConfigMap {
    create(
        api,
        json!({"metadata": {"name": name, "ownerReferences": owners}, "data": {"k": "v"}}),
    )
    .await
}

/// A Pod spec no scheduler picks up (so no kubelet ever owns the Pod).
fn pod_spec() -> Value {
    json!({"schedulerName": NO_SCHEDULER,
           "containers": [{"name": "c", "image": "registry.invalid/none:1"}]})
}

fn pod(name: &str, owners: Vec<Value>) -> Value {
    json!({"metadata": {"name": name, "ownerReferences": owners}, "spec": pod_spec()})
}

fn policy(p: PropagationPolicy) -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(p),
        ..DeleteParams::default()
    }
}

/// `Background` (the default): the owner goes at once, its dependents after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_deletion_collects_the_dependents() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-gc-bg").await;
    let cms: Api<ConfigMap> = Api::namespaced(target.client(), &ns.name);
    let owner = config_map(&cms, "owner", vec![]).await;
    for d in ["dep-a", "dep-b"] {
        config_map(&cms, d, vec![owner_ref(&owner, false)]).await;
    }
    let mut watch = Watch::start(&cms).await;
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    let seen = watch
        .until("background: owner and dependents deleted", |s| {
            ["owner", "dep-a", "dep-b"]
                .iter()
                .all(|n| deleted(s, n).is_some())
        })
        .await;
    // No finalizer is involved: the owner is never seen marked.
    assert!(
        !seen
            .iter()
            .any(|s| matches!(s, Seen::Modified { name, .. } if name == "owner")),
        "{seen:?}"
    );
    drop(ns);
    target.shutdown().await;
}

/// `Orphan`: every dependent loses its owner reference before the owner is gone, and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_deletion_keeps_the_dependents_without_the_reference() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-gc-orphan").await;
    let cms: Api<ConfigMap> = Api::namespaced(target.client(), &ns.name);
    let owner = config_map(&cms, "owner", vec![]).await;
    let other = config_map(&cms, "other-owner", vec![]).await;
    config_map(&cms, "dep-a", vec![owner_ref(&owner, true)]).await;
    config_map(
        &cms,
        "dep-b",
        vec![owner_ref(&owner, false), owner_ref(&other, false)],
    )
    .await;
    let mut watch = Watch::start(&cms).await;
    cms.delete("owner", &policy(PropagationPolicy::Orphan))
        .await
        .unwrap();
    let seen = watch
        .until("orphan: owner deleted", |s| deleted(s, "owner").is_some())
        .await;
    let gone = deleted(&seen, "owner").unwrap();
    for (dep, left) in [("dep-a", 0), ("dep-b", 1)] {
        let released = seen.iter().position(
            |s| matches!(s, Seen::Modified { name, owners, .. } if name == dep && *owners == left),
        );
        assert!(
            released.is_some_and(|at| at < gone),
            "{dep} released before the owner went: {seen:?}"
        );
        let refs = cms
            .get(dep)
            .await
            .expect("the dependent stays")
            .owner_references()
            .to_vec();
        assert_eq!(refs.len(), left, "{dep}: {refs:?}");
        assert!(
            refs.iter().all(|r| r.uid != owner.uid().unwrap()),
            "{refs:?}"
        );
    }
    drop(ns);
    target.shutdown().await;
}

/// `Foreground` through a chain: owner (a ConfigMap) → ReplicaSet → Pods. The owner is marked
/// first (`deletionTimestamp`, finalizer `foregroundDeletion`), the ReplicaSet goes only after
/// its Pods, and the owner goes last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_of_a_chain_removes_the_owner_last() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-gc-fg").await;
    let client = target.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let owner = config_map(&cms, "owner", vec![]).await;
    // Zero replicas and Pods that are not its controller's: a real ReplicaSet controller
    // leaves them alone, so only the garbage collector acts on them.
    let rs: ReplicaSet = create(
        &rss,
        json!({
            "metadata": {"name": "rs", "ownerReferences": [owner_ref(&owner, true)]},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "chain"}},
                     "template": {"metadata": {"labels": {"app": "chain"}},
                                  "spec": pod_spec()}},
        }),
    )
    .await;
    for p in ["pod-a", "pod-b"] {
        create(&pods, pod(p, vec![owner_ref(&rs, true)])).await;
    }
    let mut cm_watch = Watch::start(&cms).await;
    let mut rs_watch = Watch::start(&rss).await;
    let mut pod_watch = Watch::start(&pods).await;
    cms.delete("owner", &policy(PropagationPolicy::Foreground))
        .await
        .unwrap();
    let pod_seen = pod_watch
        .until("foreground: the Pods deleted", |s| {
            ["pod-a", "pod-b"].iter().all(|n| deleted(s, n).is_some())
        })
        .await;
    let rs_seen = rs_watch
        .until("foreground: the ReplicaSet deleted", |s| {
            deleted(s, "rs").is_some()
        })
        .await;
    let cm_seen = cm_watch
        .until("foreground: the owner deleted", |s| {
            deleted(s, "owner").is_some()
        })
        .await;
    assert!(
        matches!(cm_seen.first(), Some(Seen::Modified { name, deleting: true, .. }) if name == "owner"),
        "the owner is marked first: {cm_seen:?}"
    );
    assert!(
        rs_seen
            .iter()
            .any(|s| matches!(s, Seen::Modified { name, deleting: true, .. } if name == "rs")),
        "the ReplicaSet is deleted in the foreground too: {rs_seen:?}"
    );
    // The three streams are separate watches, so order across them shows in what each saw
    // last: when the owner went, nothing of the chain was left.
    assert!(cms.get_opt("owner").await.unwrap().is_none());
    assert!(rss.get_opt("rs").await.unwrap().is_none());
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "{pod_seen:?}"
    );
    drop(ns);
    target.shutdown().await;
}

/// A namespace is deleted in steps: `Terminating`, creates refused 403 with kube-apiserver's
/// words, every object deleted (watchers see each DELETED), then the namespace itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_namespace_refuses_creates_and_empties() {
    let target = Target::from_env().await;
    let test_ns = target.namespace("e2e-ns-life").await;
    let client = target.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // A namespace of its own to delete; the test namespace only holds nothing.
    let name = format!("{}-gone", test_ns.name);
    create(&namespaces, json!({"metadata": {"name": name}})).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &name);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &name);
    for c in ["cm-a", "cm-b"] {
        config_map(&cms, c, vec![]).await;
    }
    // The one that holds the namespace in Terminating until the test lets it go.
    create(
        &cms,
        json!({"metadata": {"name": "held", "finalizers": [HOLD]}}),
    )
    .await;
    create(
        &deployments,
        json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": pod_spec()}},
        }),
    )
    .await;
    let dep = deployments.get("web").await.unwrap();
    for p in ["web-pod-a", "web-pod-b"] {
        create(&pods, pod(p, vec![owner_ref(&dep, false)])).await;
    }
    let mut cm_watch = Watch::start(&cms).await;
    let mut pod_watch = Watch::start(&pods).await;
    let mut deployment_watch = Watch::start(&deployments).await;
    namespaces
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();

    let phase = |n: &Namespace| n.status.as_ref().and_then(|s| s.phase.clone());
    let ns_now = namespaces
        .get(&name)
        .await
        .expect("still there: a ConfigMap holds it");
    assert_eq!(phase(&ns_now).as_deref(), Some("Terminating"));
    // NamespaceLifecycle admission reads namespaces from an informer on a real cluster, so a
    // create just after the delete may still be admitted (and is then deleted with the rest).
    let refused = tokio::time::timeout(PATIENCE, async {
        for n in 0.. {
            let late: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": format!("late-{n}")}})).unwrap();
            if let Err(e) = cms.create(&PostParams::default(), &late).await {
                return e;
            }
        }
        unreachable!()
    })
    .await
    .expect("creates are refused in a terminating namespace");
    match refused {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status.message.contains(&format!(
                    "unable to create new content in namespace {name} because it is being terminated"
                )),
                "{status:?}"
            );
        }
        other => panic!("a 403, not {other}"),
    }
    cm_watch
        .until("the namespace's ConfigMaps deleted", |s| {
            ["cm-a", "cm-b"].iter().all(|n| deleted(s, n).is_some())
                && s.iter().any(
                    |s| matches!(s, Seen::Modified { name, deleting: true, .. } if name == "held"),
                )
        })
        .await;
    pod_watch
        .until("the namespace's Pods deleted", |s| {
            ["web-pod-a", "web-pod-b"]
                .iter()
                .all(|n| deleted(s, n).is_some())
        })
        .await;
    deployment_watch
        .until("the namespace's Deployment deleted", |s| {
            deleted(s, "web").is_some()
        })
        .await;

    // Let go of the last object: the namespace then goes.
    let mut ns_watch = Watch::start(&namespaces).await;
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    cm_watch
        .until("the held ConfigMap deleted", |s| {
            deleted(s, "held").is_some()
        })
        .await;
    ns_watch
        .until("the namespace deleted", |s| deleted(s, &name).is_some())
        .await;
    drop(test_ns);
    target.shutdown().await;
}

/// One Event store: written through `events.k8s.io/v1`, read through core `v1` (what
/// `kubectl get events` and `kubectl describe` list), and the other way round, with the
/// fields mapped as kube-apiserver maps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_one_store_behind_both_apis() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-events").await;
    let client = target.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm = config_map(&cms, "about", vec![]).await;
    let regarding = json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name,
                           "name": "about", "uid": cm.uid()});
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let new_api: Api<NewEvent> = Api::namespaced(client.clone(), &ns.name);
    let core_api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns.name);
    create(
        &new_api,
        json!({
            "metadata": {"name": "about.new"},
            "eventTime": now, "reportingController": "kubewasm.dev/e2e",
            "reportingInstance": "e2e-1", "action": "Checked", "reason": "NewApi",
            "type": "Normal", "note": "written through events.k8s.io", "regarding": regarding,
        }),
    )
    .await;
    create(
        &core_api,
        json!({
            "metadata": {"name": "about.core"},
            "involvedObject": regarding, "reason": "CoreApi", "message": "written through v1",
            "type": "Warning", "source": {"component": "e2e"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }),
    )
    .await;

    let core = core_api.get("about.new").await.expect("visible through v1");
    assert_eq!(
        core.message.as_deref(),
        Some("written through events.k8s.io")
    );
    assert_eq!(core.reason.as_deref(), Some("NewApi"));
    assert_eq!(core.involved_object.name.as_deref(), Some("about"));
    assert_eq!(
        core.reporting_component.as_deref(),
        Some("kubewasm.dev/e2e")
    );
    // What `kubectl describe` asks for: the object's Events by field selector.
    let selected = core_api
        .list(&ListParams::default().fields(&format!(
            "involvedObject.name=about,involvedObject.uid={}",
            cm.uid().unwrap()
        )))
        .await
        .unwrap();
    let names: BTreeSet<String> = selected.items.iter().map(|e| e.name_any()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["about.core".to_string(), "about.new".to_string()])
    );

    let new = new_api
        .get("about.core")
        .await
        .expect("visible through events.k8s.io");
    assert_eq!(new.note.as_deref(), Some("written through v1"));
    assert_eq!(new.reason.as_deref(), Some("CoreApi"));
    assert_eq!(new.type_.as_deref(), Some("Warning"));
    assert_eq!(
        new.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("about")
    );
    assert_eq!(new.deprecated_count, Some(1));
    drop(ns);
    target.shutdown().await;
}
