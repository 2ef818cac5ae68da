//! The DaemonSet controller, for a cluster of one node: one Pod (`<name>-<5 characters>`) with
//! node affinity for [`NODE_NAME`] and the `controller-revision-hash` and
//! `pod-template-generation` labels; a template change replaces it (`RollingUpdate`;
//! `OnDelete` leaves it); the status counts. Node selectors and taints are not evaluated:
//! the one node runs every DaemonSet.

use serde_json::{Value, json};

use super::hash::template_hash;
use super::{
    NODE_NAME, Writer, active, controlled, generation, live, owner_reference, pod_from_template,
    pod_template, ready, resource,
};
use crate::App;
use crate::controllers::Failed;
use crate::ops;

const CONTROLLER: &str = "daemonset controller";
const REVISION: &str = "controller-revision-hash";

/// Reconcile one DaemonSet.
pub fn sync(app: &App, ns: &str, name: &str) -> Result<(), Failed> {
    let Some(ds) = live(app, "apps/daemonsets", ns, name) else {
        return Ok(());
    };
    let v = &ds.value;
    let w = Writer::controller_manager(app, CONTROLLER);
    let pod_rt = resource(app, "", "pods");
    let uid = ops::meta_str(v, "uid").unwrap_or("");
    let template = pod_template(v);
    let hash = template_hash(&template, None);
    let node = app.store.get("/nodes", "", NODE_NAME).is_some();
    let pods: Vec<_> = controlled(app, "/pods", uid)
        .into_iter()
        .filter(|p| active(&p.value))
        .collect();
    let updated = |p: &crate::store::Obj| {
        p.value
            .pointer("/metadata/labels")
            .and_then(|l| l.get(REVISION))
            .and_then(Value::as_str)
            == Some(hash.as_str())
    };
    if node && pods.is_empty() {
        let extra = json!({REVISION: hash, "pod-template-generation": generation(v).to_string()});
        let owner = owner_reference("apps/v1", "DaemonSet", v);
        let mut pod = pod_from_template(&template, &format!("{name}-"), owner, &extra);
        pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                "values": [NODE_NAME]}]}]}}});
        w.create(&pod_rt, ns, pod)?;
        return Ok(());
    }
    // One Pod per node: extras go, and with RollingUpdate an old revision's Pod is replaced.
    let on_delete = v
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        == Some("OnDelete");
    let mut surplus = pods.iter().skip(usize::from(node));
    if let Some(p) = surplus.next() {
        return w.delete(&pod_rt, p);
    }
    if !on_delete && let Some(p) = pods.iter().find(|p| !updated(p)) {
        return w.delete(&pod_rt, p);
    }
    let scheduled = pods.len();
    let ready_count = pods.iter().filter(|p| ready(&p.value)).count();
    let desired = usize::from(node);
    let mut status = json!({
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": scheduled,
        "numberMisscheduled": 0,
        "numberReady": ready_count,
        "observedGeneration": generation(v),
    });
    for (k, n) in [
        (
            "updatedNumberScheduled",
            pods.iter().filter(|p| updated(p)).count(),
        ),
        ("numberAvailable", ready_count),
        ("numberUnavailable", desired.saturating_sub(ready_count)),
    ] {
        if n != 0 {
            status[k] = json!(n);
        }
    }
    w.status(&resource(app, "apps", "daemonsets"), &ds, status)
}
