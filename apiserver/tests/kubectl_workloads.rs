//! The real `kubectl` driving workloads on a server with `Config::workloads`: `create
//! deployment`, `rollout status|history|undo`, `set image`, `scale`, `delete`, waiting with
//! kubectl's own `--timeout` (no sleeps).

use std::time::Duration;

use apiserver::{Config, WorkloadConfig};
use serde_json::Value;

use crate::kubectl::{Kubectl, start_with};

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// `(revision, spec.replicas)` of each ReplicaSet, by revision.
async fn sets(k: &Kubectl) -> Vec<(i64, i64)> {
    let rss = json_of(&k.ok(&["get", "rs", "-o", "json"]).await);
    let mut out: Vec<(i64, i64)> = rss["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap(),
                r["spec"]["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn pod_count(k: &Kubectl) -> usize {
    json_of(&k.ok(&["get", "pods", "-o", "json"]).await)["items"]
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rolls_deployments_out_and_back() {
    let Some((server, k, _tmp)) = start_with(Config {
        workloads: Some(WorkloadConfig {
            pod_ready_delay: Duration::from_millis(20),
        }),
        ..Config::default()
    })
    .await
    else {
        return;
    };
    let status = ["rollout", "status", "deployment/web", "--timeout=30s"];
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=3",
    ])
    .await;
    let out = k.ok(&status).await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let out = k.ok(&["get", "deployment", "web"]).await;
    assert!(out.contains("3/3"), "{out}");
    let out = k.ok(&["get", "pods"]).await;
    assert_eq!(out.matches("Running").count(), 3, "{out}");
    assert_eq!(out.matches("1/1").count(), 3, "{out}");

    k.ok(&["set", "image", "deployment/web", "nginx=nginx:1.27"])
        .await;
    let out = k.ok(&status).await;
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(sets(&k).await, [(1, 0), (2, 3)]);
    let out = k.ok(&["rollout", "history", "deployment/web"]).await;
    let revisions: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{out}");

    // Undo: the set of revision 1 is scaled up again and becomes revision 3.
    k.ok(&["rollout", "undo", "deployment/web"]).await;
    let out = k.ok(&status).await;
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(sets(&k).await, [(2, 0), (3, 3)]);
    let d = json_of(&k.ok(&["get", "deployment", "web", "-o", "json"]).await);
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx"
    );

    k.ok(&["scale", "deployment/web", "--replicas=5"]).await;
    k.ok(&status).await;
    server.wait_controllers_idle().await;
    assert_eq!(pod_count(&k).await, 5);
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "pods",
        "--all",
        "--timeout=30s",
    ])
    .await;

    k.ok(&["delete", "deployment", "web"]).await;
    server.wait_controllers_idle().await;
    assert_eq!(pod_count(&k).await, 0);
    assert!(sets(&k).await.is_empty());
}
