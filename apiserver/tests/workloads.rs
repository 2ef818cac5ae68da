//! Workloads without nodes (`Config::workloads`): Deployments rolling through ReplicaSets,
//! Pods scheduled to the fake node and made Ready by its kubelet, StatefulSets, DaemonSets
//! and Jobs with their Pods and counts, the simulate annotation, and the garbage collector
//! removing what a deleted workload made. No sleeps: `wait_controllers_idle` (which counts the
//! kubelet's pending Pod starts) or the watch events themselves.

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver::{ApiServer, Config, WorkloadConfig};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use serde_json::{Value, json};

use crate::controllers::watch;

const GUARD: Duration = Duration::from_secs(30);

async fn server(delay_ms: u64) -> (ApiServer, Client) {
    let server = ApiServer::start(Config {
        bookmark_interval: Duration::from_secs(3600),
        workloads: Some(WorkloadConfig {
            pod_ready_delay: Duration::from_millis(delay_ms),
        }),
        ..Config::default()
    })
    .await
    .unwrap();
    let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    (server, client)
}

async fn idle(server: &ApiServer) {
    tokio::time::timeout(GUARD, server.wait_controllers_idle())
        .await
        .expect("the controllers never went idle");
}

fn template(image: &str, annotations: Value) -> Value {
    json!({"metadata": {"labels": {"app": "web"}, "annotations": annotations},
        "spec": {"containers": [{"name": "nginx", "image": image}]}})
}

fn deployment(name: &str, replicas: i32, strategy: Value) -> Deployment {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "strategy": strategy, "template": template("nginx:1", json!({}))}}))
    .unwrap()
}

async fn list<K>(api: &Api<K>) -> Vec<Value>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut items: Vec<Value> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    items.sort_by_key(|o| o["metadata"]["name"].as_str().unwrap().to_string());
    items
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn condition<'a>(o: &'a Value, ty: &str) -> &'a Value {
    o["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_gets_a_replicaset_and_ready_pods_on_the_node() {
    let (server, c) = server(5).await;
    idle(&server).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let node = serde_json::to_value(nodes.get(apiserver::NODE_NAME).await.unwrap()).unwrap();
    assert_eq!(node["metadata"]["labels"]["type"], "kwok");
    assert_eq!(condition(&node, "Ready")["status"], "True");
    assert!(node["status"]["allocatable"]["cpu"].is_string());

    let deploys: Api<Deployment> = Api::default_namespaced(c.clone());
    deploys
        .create(&PostParams::default(), &deployment("web", 3, json!(null)))
        .await
        .unwrap();
    idle(&server).await;
    let d = serde_json::to_value(deploys.get("web").await.unwrap()).unwrap();
    let rss = list(&Api::<ReplicaSet>::default_namespaced(c.clone())).await;
    assert_eq!(rss.len(), 1, "{rss:#?}");
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap();
    assert!(
        hash.chars()
            .all(|ch| "bcdfghjklmnpqrstvwxz2456789".contains(ch)),
        "{hash}"
    );
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    let owner = &rs["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["name"].as_str(),
            &owner["uid"]
        ),
        (Some("Deployment"), Some("web"), &d["metadata"]["uid"])
    );
    assert_eq!(
        (
            owner["controller"].as_bool(),
            owner["blockOwnerDeletion"].as_bool()
        ),
        (Some(true), Some(true))
    );
    let a = &rs["metadata"]["annotations"];
    assert_eq!(a["deployment.kubernetes.io/revision"], "1");
    assert_eq!(a["deployment.kubernetes.io/desired-replicas"], "3");
    assert_eq!(a["deployment.kubernetes.io/max-replicas"], "4");
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(rs["status"]["replicas"], 3);
    assert_eq!(rs["status"]["readyReplicas"], 3);
    assert_eq!(rs["status"]["availableReplicas"], 3);
    assert_eq!(rs["status"]["fullyLabeledReplicas"], 3);
    assert_eq!(rs["status"]["observedGeneration"], 1);

    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    assert_eq!(pods.len(), 3);
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        let suffix = name.strip_prefix(&format!("web-{hash}-")).unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(p["spec"]["nodeName"], apiserver::NODE_NAME);
        assert_eq!(p["status"]["phase"], "Running");
        for ty in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            assert_eq!(condition(p, ty)["status"], "True", "{ty}: {p:#}");
        }
        let cs = &p["status"]["containerStatuses"][0];
        assert_eq!(
            (cs["ready"].as_bool(), cs["started"].as_bool()),
            (Some(true), Some(true))
        );
        assert!(cs["state"]["running"]["startedAt"].is_string());
        assert!(
            p["status"]["podIP"]
                .as_str()
                .unwrap()
                .starts_with("10.244.")
        );
        assert!(p["status"]["hostIP"].is_string() && p["status"]["startTime"].is_string());
    }

    let s = &d["status"];
    assert_eq!(s["observedGeneration"], 1);
    for k in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        assert_eq!(s[k], 3, "{k}: {s:#}");
    }
    assert!(s.get("unavailableReplicas").is_none(), "{s:#}");
    let available = condition(&d, "Available");
    assert_eq!(
        (available["status"].as_str(), available["reason"].as_str()),
        (Some("True"), Some("MinimumReplicasAvailable"))
    );
    let progressing = condition(&d, "Progressing");
    assert_eq!(
        (
            progressing["status"].as_str(),
            progressing["reason"].as_str()
        ),
        (Some("True"), Some("NewReplicaSetAvailable"))
    );
    assert_eq!(
        progressing["message"],
        format!("ReplicaSet \"web-{hash}\" has successfully progressed.")
    );

    // Scale: the Pod count follows, both ways.
    for n in [5, 2] {
        deploys
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": n}})),
            )
            .await
            .unwrap();
        idle(&server).await;
        let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
        assert_eq!(pods.len(), n, "{pods:#?}");
        assert!(pods.iter().all(is_ready));
        let d = serde_json::to_value(deploys.get("web").await.unwrap()).unwrap();
        assert_eq!(d["status"]["availableReplicas"], n);
    }

    // Deleting the Deployment: the collector takes its ReplicaSet and Pods.
    deploys
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    idle(&server).await;
    assert!(
        list(&Api::<ReplicaSet>::default_namespaced(c.clone()))
            .await
            .is_empty()
    );
    assert!(
        list(&Api::<Pod>::default_namespaced(c.clone()))
            .await
            .is_empty()
    );
}

/// What a Pod watch shows over a rollout: the most Pods and the fewest Ready ones at any event.
async fn watch_rollout(server: &ApiServer, c: &Client, image: &str) -> (usize, usize) {
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let mut state: BTreeMap<String, bool> = list(&pods)
        .await
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                is_ready(p),
            )
        })
        .collect();
    let mut w = watch(&pods).await;
    let deploys: Api<Deployment> = Api::default_namespaced(c.clone());
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {
            "spec": {"containers": [{"name": "nginx", "image": image}]}}}})),
        )
        .await
        .unwrap();
    let (mut most, mut fewest_ready) = (state.len(), state.values().filter(|r| **r).count());
    // Until the controllers are idle (the rollout written), then up to a bookmark asked for
    // then: everything the watch has to say about the rollout.
    let settled = server.wait_controllers_idle();
    tokio::pin!(settled);
    let mut asked = false;
    loop {
        tokio::select! {
            _ = &mut settled, if !asked => {
                asked = true;
                server.faults().bookmark_now();
            }
            ev = w.next() => {
                let (name, obj, gone) = match ev.expect("watch ended").expect("watch error") {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => (o["metadata"]["name"].as_str().unwrap().to_string(), o, false),
                    WatchEvent::Deleted(o) => (o["metadata"]["name"].as_str().unwrap().to_string(), o, true),
                    WatchEvent::Bookmark(_) if asked => break,
                    WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(e) => panic!("{e:?}"),
                };
                if gone { state.remove(&name); } else { state.insert(name, is_ready(&obj)); }
                most = most.max(state.len());
                fewest_ready = fewest_ready.min(state.values().filter(|r| **r).count());
            }
        }
    }
    let d = serde_json::to_value(deploys.get("web").await.unwrap()).unwrap();
    let want = &d["spec"]["replicas"];
    let s = &d["status"];
    assert_eq!(d["metadata"]["generation"], s["observedGeneration"]);
    for k in ["replicas", "updatedReplicas", "availableReplicas"] {
        assert_eq!(&s[k], want, "{k}: {s:#}");
    }
    (most, fewest_ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_change_rolls_within_surge_and_unavailability() {
    let (server, c) = server(5).await;
    let deploys: Api<Deployment> = Api::default_namespaced(c.clone());
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}});
    deploys
        .create(&PostParams::default(), &deployment("web", 4, strategy))
        .await
        .unwrap();
    idle(&server).await;
    let (most, fewest_ready) =
        tokio::time::timeout(GUARD, watch_rollout(&server, &c, "nginx:1.27"))
            .await
            .expect("the rollout never finished");
    assert!(most <= 5, "{most} Pods at once (replicas 4 + maxSurge 1)");
    assert!(
        fewest_ready >= 3,
        "{fewest_ready} Ready (replicas 4 - maxUnavailable 1)"
    );
    idle(&server).await;
    let rss = list(&Api::<ReplicaSet>::default_namespaced(c.clone())).await;
    assert_eq!(rss.len(), 2);
    let by_rev: BTreeMap<String, i64> = rss
        .iter()
        .map(|r| {
            (
                r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                r["spec"]["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(by_rev, BTreeMap::from([("1".into(), 0), ("2".into(), 4)]));
    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    assert_eq!(pods.len(), 4);
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.27" && is_ready(p))
    );
    let d = serde_json::to_value(deploys.get("web").await.unwrap()).unwrap();
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );

    // Recreate: every old Pod goes before a new one is made; the watch never sees both.
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}}),
            ),
        )
        .await
        .unwrap();
    idle(&server).await;
    let (most, _) = tokio::time::timeout(GUARD, watch_rollout(&server, &c, "nginx:1.28"))
        .await
        .expect("the recreate never finished");
    assert!(most <= 4, "{most} Pods at once under Recreate");
    idle(&server).await;
    let rss = list(&Api::<ReplicaSet>::default_namespaced(c.clone())).await;
    assert_eq!(rss.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_pruned_and_a_paused_deployment_does_not_roll() {
    let (server, c) = server(0).await;
    let deploys: Api<Deployment> = Api::default_namespaced(c.clone());
    let mut d = deployment("web", 1, json!(null));
    d.spec.revision_history_limit = Some(1);
    deploys.create(&PostParams::default(), &d).await.unwrap();
    for tag in ["2", "3", "4"] {
        idle(&server).await;
        deploys
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"template": {
                "spec": {"containers": [{"name": "nginx", "image": format!("nginx:{tag}")}]}}}})),
            )
            .await
            .unwrap();
    }
    idle(&server).await;
    let revisions: Vec<String> = list(&Api::<ReplicaSet>::default_namespaced(c.clone()))
        .await
        .iter()
        .map(|r| {
            r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(revisions, ["3", "4"], "one old set kept beside the new one");

    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {
            "spec": {"containers": [{"name": "nginx", "image": "nginx:5"}]}}}})),
        )
        .await
        .unwrap();
    idle(&server).await;
    // Paused: no new set, the old Pod stays; the history is still pruned (revision 3 goes).
    let rss = list(&Api::<ReplicaSet>::default_namespaced(c.clone())).await;
    assert_eq!(rss.len(), 1, "{rss:#?}");
    assert_eq!(
        rss[0]["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "4"
    );
    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    assert_eq!(pods[0]["spec"]["containers"][0]["image"], "nginx:4");
    let d = serde_json::to_value(deploys.get("web").await.unwrap()).unwrap();
    assert_eq!(condition(&d, "Progressing")["reason"], "DeploymentPaused");
    assert_eq!(
        d["status"]["observedGeneration"],
        d["metadata"]["generation"]
    );
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    idle(&server).await;
    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["spec"]["containers"][0]["image"], "nginx:5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulsets_daemonsets_and_jobs_get_their_pods_and_counts() {
    let (server, c) = server(5).await;
    let sts: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "web"}},
            "template": template("postgres:17", json!({}))}}))
    .unwrap();
    let stss: Api<StatefulSet> = Api::default_namespaced(c.clone());
    stss.create(&PostParams::default(), &sts).await.unwrap();
    let ds: DaemonSet = serde_json::from_value(json!({"metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template("agent:1", json!({}))}}))
    .unwrap();
    let dss: Api<DaemonSet> = Api::default_namespaced(c.clone());
    dss.create(&PostParams::default(), &ds).await.unwrap();
    let mut job_template = template("busybox", json!({}));
    job_template["spec"]["restartPolicy"] = json!("Never");
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "batch"},
        "spec": {"completions": 3, "parallelism": 2, "template": job_template}}))
    .unwrap();
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    jobs.create(&PostParams::default(), &job).await.unwrap();
    idle(&server).await;

    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    let named = |prefix: &str| -> Vec<&Value> {
        pods.iter()
            .filter(|p| p["metadata"]["name"].as_str().unwrap().starts_with(prefix))
            .collect()
    };
    let db = named("db-");
    assert_eq!(
        db.iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["db-0", "db-1", "db-2"]
    );
    let s = serde_json::to_value(stss.get("db").await.unwrap()).unwrap();
    for p in &db {
        assert_eq!(
            p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            p["metadata"]["name"]
        );
        assert_eq!(
            p["metadata"]["labels"]["controller-revision-hash"],
            s["status"]["updateRevision"]
        );
        assert!(is_ready(p));
    }
    for k in [
        "replicas",
        "readyReplicas",
        "currentReplicas",
        "updatedReplicas",
        "availableReplicas",
    ] {
        assert_eq!(s["status"][k], 3, "{k}: {:#}", s["status"]);
    }
    assert_eq!(s["status"]["observedGeneration"], 1);
    assert_eq!(
        s["status"]["currentRevision"],
        s["status"]["updateRevision"]
    );

    let agent = named("agent-");
    assert_eq!(agent.len(), 1);
    assert_eq!(agent[0]["spec"]["nodeName"], apiserver::NODE_NAME);
    let d = serde_json::to_value(dss.get("agent").await.unwrap()).unwrap();
    for k in [
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberReady",
        "numberAvailable",
        "updatedNumberScheduled",
        "observedGeneration",
    ] {
        assert_eq!(d["status"][k], 1, "{k}: {:#}", d["status"]);
    }

    let batch = named("batch-");
    assert_eq!(batch.len(), 3, "3 completions, 2 at a time");
    assert!(batch.iter().all(|p| p["status"]["phase"] == "Succeeded"));
    assert!(
        batch
            .iter()
            .all(|p| p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "batch")
    );
    let j = serde_json::to_value(jobs.get("batch").await.unwrap()).unwrap();
    assert_eq!(j["status"]["succeeded"], 3);
    assert!(j["status"].get("active").is_none(), "{:#}", j["status"]);
    assert!(j["status"]["startTime"].is_string() && j["status"]["completionTime"].is_string());
    assert_eq!(condition(&j, "Complete")["status"], "True");
    assert_eq!(condition(&j, "SuccessCriteriaMet")["status"], "True");

    // A StatefulSet template change replaces each Pod, keeping the names.
    stss.patch(
        "db",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {
        "spec": {"containers": [{"name": "nginx", "image": "postgres:18"}]}}}})),
    )
    .await
    .unwrap();
    idle(&server).await;
    let s = serde_json::to_value(stss.get("db").await.unwrap()).unwrap();
    assert_eq!(s["status"]["updatedReplicas"], 3);
    assert_eq!(
        s["status"]["currentRevision"],
        s["status"]["updateRevision"]
    );
    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    let images: Vec<&str> = pods
        .iter()
        .filter(|p| p["metadata"]["name"].as_str().unwrap().starts_with("db-"))
        .map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap())
        .collect();
    assert_eq!(images, ["postgres:18"; 3]);

    // Owned by their workloads: deleting them deletes the Pods.
    stss.delete("db", &DeleteParams::default()).await.unwrap();
    dss.delete("agent", &DeleteParams::default()).await.unwrap();
    jobs.delete("batch", &DeleteParams::background())
        .await
        .unwrap();
    idle(&server).await;
    assert!(
        list(&Api::<Pod>::default_namespaced(c.clone()))
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulate_annotation_fails_or_crash_loops_a_pod() {
    let (server, c) = server(2).await;
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    for (name, how) in [("fails", "fail"), ("loops", "crash-loop")] {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name,
            "annotations": {apiserver::SIMULATE_ANNOTATION: how}},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    idle(&server).await;
    let fails = serde_json::to_value(pods.get("fails").await.unwrap()).unwrap();
    assert_eq!(fails["status"]["phase"], "Failed");
    assert_eq!(
        fails["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        1
    );
    let loops = serde_json::to_value(pods.get("loops").await.unwrap()).unwrap();
    assert_eq!(loops["status"]["phase"], "Running");
    assert!(!is_ready(&loops));
    let cs = &loops["status"]["containerStatuses"][0];
    assert_eq!(cs["state"]["waiting"]["reason"], "CrashLoopBackOff");
    assert_eq!(cs["restartCount"], 5);
    assert_eq!(cs["ready"], false);

    // A Job whose Pods fail gives up after backoffLimit.
    let mut t = template("busybox", json!({apiserver::SIMULATE_ANNOTATION: "fail"}));
    t["spec"]["restartPolicy"] = json!("Never");
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "doomed"},
        "spec": {"backoffLimit": 1, "template": t}}))
    .unwrap();
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    jobs.create(&PostParams::default(), &job).await.unwrap();
    idle(&server).await;
    let j = serde_json::to_value(jobs.get("doomed").await.unwrap()).unwrap();
    assert_eq!(j["status"]["failed"], 2);
    assert_eq!(condition(&j, "Failed")["reason"], "BackoffLimitExceeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_workloads_nothing_runs() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let deploys: Api<Deployment> = Api::default_namespaced(c.clone());
    deploys
        .create(&PostParams::default(), &deployment("web", 3, json!(null)))
        .await
        .unwrap();
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}}))
    .unwrap();
    Api::<Pod>::default_namespaced(c.clone())
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    idle(&server).await;
    assert!(list(&Api::<Node>::all(c.clone())).await.is_empty());
    assert!(
        list(&Api::<ReplicaSet>::default_namespaced(c.clone()))
            .await
            .is_empty()
    );
    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["status"]["phase"], "Pending");
    assert!(pods[0]["spec"].get("nodeName").is_none());
}

/// On tokio's paused clock (as `kubewasm test` runs), the delay passes as soon as nothing
/// else can run, and `wait_controllers_idle` waits for the Pods' timers.
#[tokio::test(start_paused = true)]
async fn pod_starts_follow_the_paused_clock() {
    let server = ApiServer::start(Config {
        workloads: Some(WorkloadConfig::default()),
        ..Config::default()
    })
    .await
    .unwrap();
    let c = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let deploys: Api<Deployment> = Api::default_namespaced(c.clone());
    let start = tokio::time::Instant::now();
    deploys
        .create(&PostParams::default(), &deployment("web", 2, json!(null)))
        .await
        .unwrap();
    server.wait_controllers_idle().await;
    assert!(start.elapsed() >= WorkloadConfig::default().pod_ready_delay);
    let pods = list(&Api::<Pod>::default_namespaced(c.clone())).await;
    assert_eq!(pods.len(), 2);
    assert!(pods.iter().all(is_ready), "{pods:#?}");
    let d = serde_json::to_value(deploys.get("web").await.unwrap()).unwrap();
    assert_eq!(d["status"]["availableReplicas"], 2);
}
