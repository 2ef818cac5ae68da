//! The fake node, its scheduler and kubelet (kwok's idea): one Node [`NODE_NAME`], Ready, that
//! every Pod without `spec.nodeName` is bound to; a bound Pod gets the kubelet's `Pending`
//! status (PodScheduled, Initialized; containers `ContainerCreating`), and after
//! `WorkloadConfig::pod_ready_delay` is `Running` with Ready containers, a `podIP` and
//! `startTime`. A Pod owned by a Job (or annotated `succeed`) runs as long again and
//! `Succeeded`.
//!
//! The [`SIMULATE_ANNOTATION`] on a Pod (from its template) makes it misbehave instead:
//! `fail` → phase `Failed` (container terminated, exit code 1, reason `Error`); `crash-loop`
//! → `Running` with the container waiting in `CrashLoopBackOff`, Ready `False`, and
//! `restartCount` going up once per delay, [`CRASH_LOOP_RESTARTS`] times (then it stays so:
//! an endless loop would keep the controllers from ever being idle); `succeed` → `Succeeded`
//! after running. Pods bound to another node are left alone (there is no kubelet for them).

use serde_json::{Value, json};

use super::hash::fnv32a;
use super::{Work, WorkloadConfig, Writer, controller_ref, phase, resource};
use crate::App;
use crate::controllers::{self, Failed};
use crate::ops::{self, now_rfc3339};

/// The one node's name.
pub const NODE_NAME: &str = "kubewasm-node";
/// The annotation asking the simulated kubelet for `fail`, `crash-loop` or `succeed`.
pub const SIMULATE_ANNOTATION: &str = "kubewasm.dev/simulate";
/// How many restarts a `crash-loop` Pod shows.
pub const CRASH_LOOP_RESTARTS: i64 = 5;
const NODE_IP: &str = "10.0.0.2";
const KUBELET: &str = "kubelet";

/// The Node object: Ready, with capacity, the labels a kwok node has.
fn node() -> Value {
    let resources =
        json!({"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"});
    let now = now_rfc3339();
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": NODE_NAME}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux", "osImage": "kubewasm simulated node",
                "kernelVersion": "", "kubeletVersion": format!("v{}", crate::KUBERNETES_VERSION),
                "kubeProxyVersion": "", "containerRuntimeVersion": "kubewasm://simulated",
                "machineID": "", "systemUUID": "", "bootID": "",
            },
            "phase": "Running",
        },
    })
}

/// Create the Node unless it exists.
pub fn ensure_node(app: &App) -> Result<(), Failed> {
    if app.store.get("/nodes", "", NODE_NAME).is_some() {
        return Ok(());
    }
    let w = Writer {
        app,
        manager: KUBELET,
        controller: "kubelet",
    };
    w.create(&resource(app, "", "nodes"), "", node())?;
    Ok(())
}

/// The Pod's IP, from its uid (stable, so deterministic uids give deterministic IPs).
fn pod_ip(pod: &Value) -> String {
    let h = fnv32a(ops::meta_str(pod, "uid").unwrap_or("").as_bytes());
    format!("10.244.{}.{}", (h >> 8) % 256, h % 254 + 1)
}

fn simulate(pod: &Value) -> &str {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(SIMULATE_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Whether the Pod runs to completion: a Job's, or one asked to `succeed`.
fn completes(pod: &Value) -> bool {
    simulate(pod) == "succeed"
        || controller_ref(pod)
            .and_then(|r| r.get("kind"))
            .and_then(Value::as_str)
            == Some("Job")
}

fn condition(ty: &str, status: &str, reason: Option<&str>, now: &str) -> Value {
    let mut c =
        json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    c
}

/// A container's status in `state` (`{"waiting": …}` etc.).
fn container(
    c: &Value,
    ready: bool,
    started: bool,
    restarts: i64,
    state: Value,
    last: Value,
) -> Value {
    json!({
        "name": c.get("name").cloned().unwrap_or(json!("")),
        "image": c.get("image").cloned().unwrap_or(json!("")),
        "imageID": "",
        "containerID": "",
        "ready": ready,
        "started": started,
        "restartCount": restarts,
        "state": state,
        "lastState": last,
    })
}

fn containers(pod: &Value) -> Vec<Value> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The kubelet's status for a Pod in one of the simulated states.
enum State {
    Creating,
    Running,
    CrashLoop(i64),
    Succeeded,
    Failed,
}

fn status(pod: &Value, state: State) -> Value {
    let now = now_rfc3339();
    let old = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    let start = old.get("startTime").cloned().unwrap_or(json!(now));
    let started_at = json!(now);
    let (phase, ready, reason) = match state {
        State::Creating => ("Pending", false, Some("ContainersNotReady")),
        State::Running => ("Running", true, None),
        State::CrashLoop(_) => ("Running", false, Some("ContainersNotReady")),
        State::Succeeded => ("Succeeded", false, Some("PodCompleted")),
        State::Failed => ("Failed", false, Some("PodFailed")),
    };
    let statuses: Vec<Value> = containers(pod)
        .iter()
        .map(|c| match state {
            State::Creating => container(c, false, false, 0,
                json!({"waiting": {"reason": "ContainerCreating"}}), json!({})),
            State::Running => container(c, true, true, 0,
                json!({"running": {"startedAt": started_at}}), json!({})),
            State::CrashLoop(n) => {
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                let pod_name = ops::meta_str(pod, "name").unwrap_or("");
                let ns = ops::meta_str(pod, "namespace").unwrap_or("");
                container(c, false, false, n,
                    json!({"waiting": {"reason": "CrashLoopBackOff", "message":
                        format!("back-off 10s restarting failed container={name} pod={pod_name}_{ns}")}}),
                    json!({"terminated": {"exitCode": 1, "reason": "Error",
                        "startedAt": started_at, "finishedAt": started_at}}))
            }
            State::Succeeded => container(c, false, false, 0,
                json!({"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": start, "finishedAt": started_at}}), json!({})),
            State::Failed => container(c, false, false, 0,
                json!({"terminated": {"exitCode": 1, "reason": "Error",
                    "startedAt": start, "finishedAt": started_at}}), json!({})),
        })
        .collect();
    let flag = |b: bool| if b { "True" } else { "False" };
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            flag(!matches!(state, State::Creating)),
            None,
            &now,
        ),
        condition("Initialized", "True", None, &now),
        condition("Ready", flag(ready), reason, &now),
        condition("ContainersReady", flag(ready), reason, &now),
        condition("PodScheduled", "True", None, &now),
    ];
    // A condition whose status did not change keeps its transition time.
    let before = old
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in &mut conditions {
        if let Some(o) = before.iter().find(|o| o.get("type") == c.get("type"))
            && o.get("status") == c.get("status")
        {
            c["lastTransitionTime"] = o.get("lastTransitionTime").cloned().unwrap_or(json!(now));
        }
    }
    let mut s = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": NODE_IP,
        "hostIPs": [{"ip": NODE_IP}],
        "startTime": start,
        "containerStatuses": statuses,
    });
    if let Some(q) = old.get("qosClass") {
        s["qosClass"] = q.clone();
    }
    if !matches!(state, State::Creating) {
        let ip = pod_ip(pod);
        s["podIP"] = json!(ip);
        s["podIPs"] = json!([{"ip": ip}]);
    }
    s
}

fn bound_here(pod: &Value) -> Option<bool> {
    match pod.pointer("/spec/nodeName").and_then(Value::as_str) {
        None | Some("") => None,
        Some(n) => Some(n == NODE_NAME),
    }
}

/// The scheduler and the kubelet's first step: bind the Pod, then report it `Pending`
/// (containers being created) and start its timer.
pub fn sync(app: &App, config: &WorkloadConfig, ns: &str, name: &str) -> Result<(), Failed> {
    let Some(pod) = app.store.get("/pods", ns, name) else {
        return Ok(());
    };
    let v = &pod.value;
    if v.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    let rt = resource(app, "", "pods");
    match bound_here(v) {
        None => {
            let scheduler = Writer {
                app,
                manager: "kube-scheduler",
                controller: "scheduler",
            };
            scheduler.patch(
                &rt,
                &pod,
                json!({"metadata": {}, "spec": {"nodeName": NODE_NAME}}),
            )
        }
        Some(false) => Ok(()),
        Some(true) => {
            if phase(v) != "Pending" || v.pointer("/status/startTime").is_some() {
                return Ok(());
            }
            kubelet(app).status(&rt, &pod, status(v, State::Creating))?;
            later(app, config, ns, name);
            Ok(())
        }
    }
}

fn kubelet(app: &App) -> Writer<'_> {
    Writer {
        app,
        manager: KUBELET,
        controller: "kubelet",
    }
}

fn later(app: &App, config: &WorkloadConfig, ns: &str, name: &str) {
    app.controllers.enqueue_after(
        controllers::Work::Workload(Work::PodTimer(ns.into(), name.into())),
        config.pod_ready_delay,
    );
}

/// The kubelet's next step once a Pod's delay has passed.
pub fn timer(app: &App, config: &WorkloadConfig, ns: &str, name: &str) -> Result<(), Failed> {
    let Some(pod) = app.store.get("/pods", ns, name) else {
        return Ok(());
    };
    let v = &pod.value;
    if v.pointer("/metadata/deletionTimestamp").is_some() || bound_here(v) != Some(true) {
        return Ok(());
    }
    let rt = resource(app, "", "pods");
    let restarts = v
        .pointer("/status/containerStatuses/0/restartCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let next = match (phase(v), simulate(v)) {
        ("Pending", "fail") => State::Failed,
        ("Pending", "crash-loop") => State::CrashLoop(1),
        ("Pending", _) => State::Running,
        ("Running", "crash-loop") if restarts < CRASH_LOOP_RESTARTS => {
            State::CrashLoop(restarts + 1)
        }
        ("Running", _) if completes(v) && simulate(v) != "crash-loop" => State::Succeeded,
        _ => return Ok(()),
    };
    let again = match &next {
        State::CrashLoop(n) => *n < CRASH_LOOP_RESTARTS,
        State::Running => completes(v),
        _ => false,
    };
    kubelet(app).status(&rt, &pod, status(v, next))?;
    if again {
        later(app, config, ns, name);
    }
    Ok(())
}
