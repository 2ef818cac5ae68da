//! The StatefulSet controller: Pods `<name>-0 … <name>-(n-1)` with the
//! `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and
//! `controller-revision-hash` labels. `OrderedReady` (the default) makes Pod `i` once `0…i-1`
//! are Ready and removes the highest ordinal first; `Parallel` makes and removes them all at
//! once. A template change replaces Pods of the old revision, highest ordinal first, one at a
//! time once every Pod is Ready (`RollingUpdate` without `partition`; `OnDelete` leaves
//! them). No ControllerRevision objects and no PersistentVolumeClaims are made; a `Failed`
//! Pod is left in place.

use serde_json::{Value, json};

use super::hash::template_hash;
use super::{
    BURST, Writer, active, controlled, generation, live, owner_reference, pod_from_template,
    pod_template, ready, resource,
};
use crate::App;
use crate::controllers::Failed;
use crate::ops;

const CONTROLLER: &str = "statefulset controller";
const POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
const REVISION: &str = "controller-revision-hash";

fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// The ordinal of Pod `pod` of set `set` (`<set>-<n>`).
fn ordinal(set: &str, pod: &str) -> Option<usize> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

/// Reconcile one StatefulSet.
pub fn sync(app: &App, ns: &str, name: &str) -> Result<(), Failed> {
    let Some(sts) = live(app, "apps/statefulsets", ns, name) else {
        return Ok(());
    };
    let v = &sts.value;
    let w = Writer::controller_manager(app, CONTROLLER);
    let pod_rt = resource(app, "", "pods");
    let uid = ops::meta_str(v, "uid").unwrap_or("");
    let template = pod_template(v);
    let update_revision = format!("{name}-{}", template_hash(&template, None));
    let want = super::replicas(v) as usize;
    let parallel = v
        .pointer("/spec/podManagementPolicy")
        .and_then(Value::as_str)
        == Some("Parallel");
    let on_delete = v
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        == Some("OnDelete");
    let mut pods: Vec<(usize, std::sync::Arc<crate::store::Obj>)> = controlled(app, "/pods", uid)
        .into_iter()
        .filter_map(|p| Some((ordinal(name, ops::meta_str(&p.value, "name")?)?, p)))
        .collect();
    pods.sort_by_key(|(i, _)| *i);
    let all_ready = pods.iter().all(|(_, p)| ready(&p.value));
    // Create the missing ordinals below `want` (in order, each once the ones before are Ready).
    let owner = owner_reference("apps/v1", "StatefulSet", v);
    let mut created = 0;
    for i in 0..want {
        if pods.iter().any(|(o, _)| *o == i) {
            if !parallel && !pods.iter().any(|(o, p)| *o == i && ready(&p.value)) {
                break;
            }
            continue;
        }
        let pod_name = format!("{name}-{i}");
        let extra = json!({POD_NAME: pod_name, REVISION: update_revision,
            "apps.kubernetes.io/pod-index": i.to_string()});
        let mut pod = pod_from_template(&template, &pod_name, owner.clone(), &extra);
        if let Some(svc) = v.pointer("/spec/serviceName").and_then(Value::as_str) {
            pod["spec"]["hostname"] = json!(pod_name);
            pod["spec"]["subdomain"] = json!(svc);
        }
        w.create(&pod_rt, ns, pod)?;
        created += 1;
        if !parallel || created >= BURST {
            return Ok(());
        }
    }
    if created > 0 {
        return Ok(());
    }
    // Scale down: the highest ordinals beyond `want`.
    let extra: Vec<_> = pods.iter().filter(|(i, _)| *i >= want).rev().collect();
    if let Some((_, first)) = extra.first() {
        if parallel {
            for (_, p) in &extra {
                w.delete(&pod_rt, p)?;
            }
        } else if all_ready {
            w.delete(&pod_rt, first)?;
        }
        return Ok(());
    }
    // Rolling update: the highest ordinal of an old revision, once everything is Ready.
    if !on_delete
        && all_ready
        && pods.len() == want
        && let Some((_, old)) = pods
            .iter()
            .rev()
            .find(|(_, p)| label(&p.value, REVISION) != Some(update_revision.as_str()))
    {
        return w.delete(&pod_rt, old);
    }
    let live: Vec<_> = pods.iter().filter(|(_, p)| active(&p.value)).collect();
    let updated = live
        .iter()
        .filter(|(_, p)| label(&p.value, REVISION) == Some(update_revision.as_str()))
        .count();
    let ready_count = live.iter().filter(|(_, p)| ready(&p.value)).count();
    let old_current = v.pointer("/status/currentRevision").and_then(Value::as_str);
    let current_revision = if updated == want {
        update_revision.clone()
    } else {
        old_current.unwrap_or(&update_revision).to_string()
    };
    let current = live
        .iter()
        .filter(|(_, p)| label(&p.value, REVISION) == Some(current_revision.as_str()))
        .count();
    let mut status = json!({
        "observedGeneration": generation(v),
        "replicas": live.len(),
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
        "availableReplicas": ready_count,
    });
    for (k, n) in [
        ("readyReplicas", ready_count),
        ("currentReplicas", current),
        ("updatedReplicas", updated),
    ] {
        if n != 0 {
            status[k] = json!(n);
        }
    }
    w.status(&resource(app, "apps", "statefulsets"), &sts, status)
}

#[cfg(test)]
mod tests {
    use super::ordinal;

    #[test]
    fn ordinals_are_the_name_suffix() {
        assert_eq!(ordinal("db", "db-0"), Some(0));
        assert_eq!(ordinal("db", "db-12"), Some(12));
        assert_eq!(ordinal("db", "db-x"), None);
        assert_eq!(ordinal("db", "dbx-1"), None);
        assert_eq!(ordinal("db-1", "db-1-2"), Some(2));
    }
}
