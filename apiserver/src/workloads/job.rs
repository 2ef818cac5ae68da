//! The Job controller: Pods (`<name>-<5 characters>`, the `batch.kubernetes.io/job-name` and
//! `controller-uid` labels) up to `parallelism` while fewer than `completions` have
//! succeeded; `status.active`/`ready`/`succeeded`/`failed`, `startTime`, and once
//! `completions` Pods succeeded `completionTime` with the `SuccessCriteriaMet` and `Complete`
//! conditions; more failures than `backoffLimit` (default 6) end it `Failed`
//! (`FailureTarget`, `Failed`, reason `BackoffLimitExceeded`) and delete its active Pods.
//! Not modelled: `completionMode: Indexed`, pod failure and success policies, `suspend`,
//! `activeDeadlineSeconds`, the Pods' tracking finalizer; unset `completions` is taken as 1.

use serde_json::{Value, json};

use super::{
    BURST, Writer, active, controlled, live, owner_reference, phase, pod_from_template,
    pod_template, ready, resource,
};
use crate::App;
use crate::controllers::Failed;
use crate::ops::{self, now_rfc3339};

const CONTROLLER: &str = "job controller";

fn condition(ty: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": ty, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now})
}

fn int(v: &Value, pointer: &str, default: i64) -> i64 {
    v.pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or(default)
        .max(0)
}

/// Reconcile one Job.
pub fn sync(app: &App, ns: &str, name: &str) -> Result<(), Failed> {
    let Some(job) = live(app, "batch/jobs", ns, name) else {
        return Ok(());
    };
    let v = &job.value;
    let finished = v
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                matches!(
                    c.get("type").and_then(Value::as_str),
                    Some("Complete" | "Failed")
                ) && c.get("status") == Some(&json!("True"))
            })
        });
    if finished {
        return Ok(());
    }
    let w = Writer::controller_manager(app, CONTROLLER);
    let pod_rt = resource(app, "", "pods");
    let uid = ops::meta_str(v, "uid").unwrap_or("");
    let pods = controlled(app, "/pods", uid);
    let running: Vec<_> = pods.iter().filter(|p| active(&p.value)).collect();
    let succeeded = pods
        .iter()
        .filter(|p| phase(&p.value) == "Succeeded")
        .count() as i64;
    let failed = pods.iter().filter(|p| phase(&p.value) == "Failed").count() as i64;
    let completions = int(v, "/spec/completions", 1);
    let parallelism = int(v, "/spec/parallelism", 1);
    let backoff_limit = int(v, "/spec/backoffLimit", 6);
    let now = now_rfc3339();
    let old = v.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut status = json!({
        "startTime": old.get("startTime").cloned().unwrap_or(json!(now)),
        "ready": running.iter().filter(|p| ready(&p.value)).count(),
        "terminating": 0,
        "uncountedTerminatedPods": {},
    });
    if failed > backoff_limit {
        for p in &running {
            w.delete(&pod_rt, p)?;
        }
        let message = "Job has reached the specified backoff limit";
        status["conditions"] = json!([
            condition("FailureTarget", "BackoffLimitExceeded", message, &now),
            condition("Failed", "BackoffLimitExceeded", message, &now),
        ]);
    } else if succeeded >= completions {
        let message = "Reached expected number of succeeded pods";
        status["conditions"] = json!([
            condition("SuccessCriteriaMet", "CompletionsReached", message, &now),
            condition("Complete", "CompletionsReached", message, &now),
        ]);
        status["completionTime"] = json!(now);
    } else {
        let want = parallelism.min(completions - succeeded) as usize;
        if running.len() < want {
            let owner = owner_reference("batch/v1", "Job", v);
            let extra = json!({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                "controller-uid": uid, "job-name": name});
            let template = pod_template(v);
            for _ in 0..(want - running.len()).min(BURST) {
                let pod = pod_from_template(&template, &format!("{name}-"), owner.clone(), &extra);
                w.create(&pod_rt, ns, pod)?;
            }
            return Ok(());
        }
        if let Some(c) = old.get("conditions") {
            status["conditions"] = c.clone();
        }
    }
    let finishing = status.get("conditions").is_some() && running.is_empty();
    for (k, n) in [
        ("active", if finishing { 0 } else { running.len() as i64 }),
        ("succeeded", succeeded),
        ("failed", failed),
    ] {
        if n != 0 {
            status[k] = json!(n);
        }
    }
    w.status(&resource(app, "batch", "jobs"), &job, status)
}
