//! The ReplicaSet controller: Pods `<name>-<5 characters>` (the server's `generateName`) from
//! the template until `spec.replicas` are active, the least ready deleted first when there are
//! too many, and the status counts. `minReadySeconds` is taken as 0: a Pod is available as soon
//! as it is Ready. Pods matching the selector but not controlled by the set are not adopted.

use std::cmp::Reverse;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    BURST, Writer, active, controlled, generation, live, owner_reference, phase, pod_from_template,
    pod_template, ready, resource,
};
use crate::App;
use crate::controllers::Failed;
use crate::ops;
use crate::store::Obj;

const CONTROLLER: &str = "replicaset controller";

/// Which of `pods` to delete to leave `keep`: unscheduled before scheduled, Pending before
/// Running, not ready before ready, newer before older (the real `ActivePods` ranking).
pub fn to_delete(pods: &[Arc<Obj>], keep: usize) -> Vec<Arc<Obj>> {
    let mut ranked: Vec<&Arc<Obj>> = pods.iter().collect();
    ranked.sort_by_key(|p| {
        let v = &p.value;
        let scheduled = v
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let running = phase(v) == "Running";
        let created = ops::meta_str(v, "creationTimestamp")
            .unwrap_or("")
            .to_string();
        (
            scheduled,
            running,
            ready(v),
            Reverse(created),
            Reverse(p.rv),
        )
    });
    ranked
        .into_iter()
        .take(pods.len().saturating_sub(keep))
        .cloned()
        .collect()
}

/// Whether a Pod's labels include every label of `template`'s (`fullyLabeledReplicas`).
fn fully_labeled(pod: &Value, template: &Value) -> bool {
    let Some(want) = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
    else {
        return true;
    };
    let have = pod.pointer("/metadata/labels");
    want.iter()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

/// Reconcile one ReplicaSet.
pub fn sync(app: &App, ns: &str, name: &str) -> Result<(), Failed> {
    let Some(rs) = live(app, "apps/replicasets", ns, name) else {
        return Ok(());
    };
    let w = Writer::controller_manager(app, CONTROLLER);
    let uid = ops::meta_str(&rs.value, "uid").unwrap_or("");
    let pods: Vec<Arc<Obj>> = controlled(app, "/pods", uid)
        .into_iter()
        .filter(|p| active(&p.value))
        .collect();
    let want = super::replicas(&rs.value) as usize;
    let pod_rt = resource(app, "", "pods");
    let template = pod_template(&rs.value);
    if pods.len() < want {
        let owner = owner_reference("apps/v1", "ReplicaSet", &rs.value);
        let failed = controlled(app, "/pods", uid)
            .iter()
            .filter(|p| phase(&p.value) == "Failed")
            .count();
        // Failed Pods are replaced until the set holds as many as its replicas (a real one
        // keeps replacing them under a rate limit; this one has none, so it stops).
        if failed < want.max(1) {
            let n = (want - pods.len()).min(BURST);
            for _ in 0..n {
                let pod =
                    pod_from_template(&template, &format!("{name}-"), owner.clone(), &json!({}));
                w.create(&pod_rt, ns, pod)?;
            }
            return Ok(());
        }
    } else if pods.len() > want {
        for pod in to_delete(&pods, want).into_iter().take(BURST) {
            w.delete(&pod_rt, &pod)?;
        }
        return Ok(());
    }
    let ready_count = pods.iter().filter(|p| ready(&p.value)).count();
    let mut status = json!({
        "replicas": pods.len(),
        "observedGeneration": generation(&rs.value),
    });
    for (k, v) in [
        (
            "fullyLabeledReplicas",
            pods.iter()
                .filter(|p| fully_labeled(&p.value, &template))
                .count(),
        ),
        ("readyReplicas", ready_count),
        ("availableReplicas", ready_count),
    ] {
        if v != 0 {
            status[k] = json!(v);
        }
    }
    let rt = resource(app, "apps", "replicasets");
    w.status(&rt, &rs, status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Obj;

    fn pod(name: &str, node: bool, phase: &str, ready: bool, created: &str) -> Arc<Obj> {
        let mut v = json!({"metadata": {"name": name, "creationTimestamp": created},
            "spec": {}, "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if node {
            v["spec"]["nodeName"] = json!("n");
        }
        Obj::new(v, 1)
    }

    #[test]
    fn the_least_ready_and_newest_pods_go_first() {
        let pods = vec![
            pod("ready-old", true, "Running", true, "2026-01-01T00:00:00Z"),
            pod("ready-new", true, "Running", true, "2026-01-02T00:00:00Z"),
            pod("pending", true, "Pending", false, "2026-01-01T00:00:00Z"),
            pod(
                "unscheduled",
                false,
                "Pending",
                false,
                "2026-01-01T00:00:00Z",
            ),
            pod(
                "running-unready",
                true,
                "Running",
                false,
                "2026-01-01T00:00:00Z",
            ),
        ];
        let names = |n: usize| -> Vec<String> {
            to_delete(&pods, n)
                .iter()
                .map(|p| p.value["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(5), Vec::<String>::new());
        assert_eq!(
            names(1),
            ["unscheduled", "pending", "running-unready", "ready-new"]
        );
        assert_eq!(names(4), ["unscheduled"]);
    }
}
