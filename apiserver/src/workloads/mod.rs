//! Workloads that roll without nodes, kwok's idea in-process: the Deployment, ReplicaSet,
//! StatefulSet, DaemonSet and Job controllers of kube-controller-manager, plus one fake Node
//! whose scheduler and kubelet make Pods `Running` and `Ready` after
//! [`WorkloadConfig::pod_ready_delay`], so `kubectl rollout status` returns and handlers that
//! watch Pods see what a cluster shows them.
//!
//! Everything runs as controller work on the `controllers.rs` task: the store's observer hook
//! ([`Tracker::observe`]) queues the object a write concerns (and its controller owner), and
//! [`process`] reconciles it level-triggered, writing through the API semantics clients get
//! (`ops::create`/`ops::patch`/`deletion::delete`, status through `/status`), so watchers see
//! real ADDED/MODIFIED/DELETED sequences. What each controller decides is a pure function of the
//! objects it reads (`rolling.rs` for Deployments), unit-tested without a server.
//!
//! Off (`Config::workloads: None`, the default) nothing here runs and nothing is queued.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::App;
use crate::controllers::Failed;
use crate::deletion::{self, DeleteOpts, Propagation};
use crate::ops::{self, WriteOpts};
use crate::patch::{Patch, PatchKind};
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::store::{Obj, ObjKey};

mod daemonset;
mod deployment;
mod hash;
mod job;
mod pods;
mod replicaset;
mod rolling;
mod statefulset;

pub use pods::{NODE_NAME, SIMULATE_ANNOTATION};

/// How the simulated workloads behave (`Config::workloads`).
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// How long a scheduled Pod stays `Pending` (ContainerCreating) before it is `Running` and
    /// `Ready`; a Job's Pod runs as long again before it `Succeeded`. Small by default so
    /// rollouts are quick; zero makes every step follow the previous write at once.
    pub pod_ready_delay: Duration,
}

impl Default for WorkloadConfig {
    fn default() -> WorkloadConfig {
        WorkloadConfig {
            pod_ready_delay: Duration::from_millis(100),
        }
    }
}

/// One object to reconcile, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Work {
    /// Deployment → ReplicaSets, rollout, status.
    Deployment(String, String),
    /// ReplicaSet → Pods, status.
    ReplicaSet(String, String),
    /// StatefulSet → ordinal Pods, status.
    StatefulSet(String, String),
    /// DaemonSet → one Pod on the node, status.
    DaemonSet(String, String),
    /// Job → Pods until completions, status and conditions.
    Job(String, String),
    /// The scheduler and kubelet: bind a Pod to the node, start it.
    Pod(String, String),
    /// The kubelet's next step for a Pod whose delay has passed (running, succeeded, a
    /// crash-loop restart).
    PodTimer(String, String),
    /// The fake Node exists.
    Node,
}

/// Which collection of the controlled kinds a storage key is.
fn kind_work(res: &str, ns: &str, name: &str) -> Option<Work> {
    let (ns, name) = (ns.to_string(), name.to_string());
    Some(match res {
        "apps/deployments" => Work::Deployment(ns, name),
        "apps/replicasets" => Work::ReplicaSet(ns, name),
        "apps/statefulsets" => Work::StatefulSet(ns, name),
        "apps/daemonsets" => Work::DaemonSet(ns, name),
        "batch/jobs" => Work::Job(ns, name),
        _ => return None,
    })
}

/// The work of the controller owning an object through a `controller: true` reference.
fn owner_work(ns: &str, v: &Value) -> Option<Work> {
    let r = controller_ref(v)?;
    let name = r.get("name").and_then(Value::as_str)?;
    let res = match (
        r.get("apiVersion").and_then(Value::as_str)?,
        r.get("kind").and_then(Value::as_str)?,
    ) {
        ("apps/v1", "Deployment") => "apps/deployments",
        ("apps/v1", "ReplicaSet") => "apps/replicasets",
        ("apps/v1", "StatefulSet") => "apps/statefulsets",
        ("apps/v1", "DaemonSet") => "apps/daemonsets",
        ("batch/v1", "Job") => "batch/jobs",
        _ => return None,
    };
    kind_work(res, ns, name)
}

/// The `controller: true` owner reference of an object.
pub(crate) fn controller_ref(v: &Value) -> Option<&Value> {
    v.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// Whether `v` is controlled by the object with uid `uid`.
pub(crate) fn controlled_by(v: &Value, uid: &str) -> bool {
    controller_ref(v)
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
        == Some(uid)
}

/// Queues the work writes cause, under the store lock (see `controllers.rs`).
#[derive(Debug)]
pub struct Tracker {
    enabled: bool,
}

impl Tracker {
    /// A tracker; `enabled` is whether `Config::workloads` is on (off, it queues nothing).
    pub fn new(enabled: bool) -> Tracker {
        Tracker { enabled }
    }

    /// Take in one committed change and push the work it causes onto `out`.
    pub fn observe(
        &self,
        res: &str,
        key: &ObjKey,
        prev: Option<&Obj>,
        next: Option<&Obj>,
        out: &mut Vec<Work>,
    ) {
        if !self.enabled {
            return;
        }
        let (ns, name) = (&key.0, &key.1);
        if res == "/nodes" {
            if next.is_none() && name == NODE_NAME {
                out.push(Work::Node);
            }
            return;
        }
        if let Some(w) = kind_work(res, ns, name) {
            if next.is_some() {
                out.push(w);
            }
        } else if res == "/pods" {
            if next.is_some() {
                out.push(Work::Pod(ns.clone(), name.clone()));
            }
        } else {
            return;
        }
        // The owner hears of its dependents' changes (a ReplicaSet's Deployment, a Pod's set).
        let owners = [next, prev]
            .into_iter()
            .flatten()
            .filter_map(|o| owner_work(ns, &o.value));
        for w in owners {
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
}

/// Do one piece of work.
pub fn process(app: &App, work: &Work) -> Result<(), Failed> {
    let Some(config) = app.config.workloads.as_ref() else {
        return Ok(());
    };
    match work {
        Work::Deployment(ns, name) => deployment::sync(app, ns, name),
        Work::ReplicaSet(ns, name) => replicaset::sync(app, ns, name),
        Work::StatefulSet(ns, name) => statefulset::sync(app, ns, name),
        Work::DaemonSet(ns, name) => daemonset::sync(app, ns, name),
        Work::Job(ns, name) => job::sync(app, ns, name),
        Work::Pod(ns, name) => pods::sync(app, config, ns, name),
        Work::PodTimer(ns, name) => pods::timer(app, config, ns, name),
        Work::Node => pods::ensure_node(app),
    }
}

/// At start-up with workloads on: the Node, and a sync of every stored workload and Pod (a
/// restart from `data_dir` carries on where it was).
pub fn start(app: &App) -> Result<(), Failed> {
    pods::ensure_node(app)?;
    for res in [
        "apps/deployments",
        "apps/replicasets",
        "apps/statefulsets",
        "apps/daemonsets",
        "batch/jobs",
        "/pods",
    ] {
        for obj in app.store.list(res, None).1 {
            let ns = ops::meta_str(&obj.value, "namespace").unwrap_or("");
            let name = ops::meta_str(&obj.value, "name").unwrap_or("");
            let work = match kind_work(res, ns, name) {
                Some(w) => w,
                None => Work::PodTimer(ns.into(), name.into()),
            };
            app.controllers
                .enqueue(crate::controllers::Work::Workload(work));
            if res == "/pods" {
                app.controllers
                    .enqueue(crate::controllers::Work::Workload(Work::Pod(
                        ns.into(),
                        name.into(),
                    )));
            }
        }
    }
    Ok(())
}

/// The built-in type of `(group, plural)`.
fn resource(app: &App, group: &str, plural: &str) -> Arc<ResourceType> {
    let version = if group == "batch" || group == "apps" || group.is_empty() {
        "v1"
    } else {
        unreachable!("workload kinds are core, apps and batch")
    };
    app.registry
        .read()
        .find(group, version, plural)
        .expect("built-in workload kinds are registered")
}

/// How a controller's failed write is reported; names are escaped for the log.
fn failed(
    controller: &'static str,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    e: ApiError,
) -> Failed {
    Failed::Write {
        controller,
        what: format!(
            "{} {}/{}",
            rt.plural,
            ns.escape_debug(),
            name.escape_debug()
        ),
        error: Box::new(e),
    }
}

/// Decode a stored object as its k8s-openapi type.
fn decode<T: serde::de::DeserializeOwned>(
    controller: &'static str,
    obj: &Obj,
) -> Result<T, Failed> {
    serde_json::from_value(obj.value.clone()).map_err(|error| Failed::Decode {
        controller,
        what: format!(
            "{}",
            ops::meta_str(&obj.value, "name")
                .unwrap_or("")
                .escape_debug()
        ),
        error,
    })
}

/// The workload `name` a controller reconciles, unless it is gone or being deleted: what it
/// owns is then the garbage collector's to remove, not the controller's to replace.
fn live(app: &App, res: &str, ns: &str, name: &str) -> Option<Arc<Obj>> {
    app.store
        .get(res, ns, name)
        .filter(|o| o.value.pointer("/metadata/deletionTimestamp").is_none())
}

/// A workload's Pod template (`{}` when it has none, which validation would have refused).
fn pod_template(v: &Value) -> Value {
    v.pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// Writes as one component, through the same API semantics as a client's.
#[derive(Clone, Copy)]
struct Writer<'a> {
    app: &'a App,
    /// The component (field manager), e.g. `kube-controller-manager`, `kubelet`.
    manager: &'static str,
    /// Which controller, for errors.
    controller: &'static str,
}

impl<'a> Writer<'a> {
    /// kube-controller-manager's writer, as `controller`.
    fn controller_manager(app: &'a App, controller: &'static str) -> Writer<'a> {
        Writer {
            app,
            manager: crate::gc::MANAGER,
            controller,
        }
    }

    fn opts(&self) -> WriteOpts {
        WriteOpts {
            default_manager: self.manager.into(),
            ..WriteOpts::default()
        }
    }

    /// POST `body` (a 409 AlreadyExists is `Ok(None)`).
    fn create(&self, rt: &ResourceType, ns: &str, body: Value) -> Result<Option<Arc<Obj>>, Failed> {
        let name = ops::meta_str(&body, "name").unwrap_or("").to_string();
        match ops::create(self.app, rt, ns, body, &self.opts()) {
            Ok(o) => Ok(Some(o)),
            Err(e) if e.code == 409 && e.reason == "AlreadyExists" => Ok(None),
            // The namespace is going: nothing more to make in it.
            Err(e) if e.code == 403 || e.code == 404 => Ok(None),
            Err(e) => Err(failed(self.controller, rt, ns, &name, e)),
        }
    }

    /// Merge-patch the main resource of `obj` (preconditioned on its resourceVersion).
    fn patch(&self, rt: &ResourceType, obj: &Obj, mut change: Value) -> Result<(), Failed> {
        change["metadata"]["resourceVersion"] = json!(obj.rv.to_string());
        self.send(rt, obj, PatchKind::Merge, change, false)
    }

    /// Replace the status of `obj` through `/status` (unless it is unchanged), preconditioned
    /// on the state read.
    fn status(&self, rt: &ResourceType, obj: &Obj, status: Value) -> Result<(), Failed> {
        if obj.value.get("status") == Some(&status) {
            return Ok(());
        }
        let change = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": obj.rv.to_string()},
            {"op": "add", "path": "/status", "value": status},
        ]);
        self.send(rt, obj, PatchKind::Json, change, true)
    }

    fn send(
        &self,
        rt: &ResourceType,
        obj: &Obj,
        kind: PatchKind,
        body: Value,
        status_only: bool,
    ) -> Result<(), Failed> {
        let ns = ops::meta_str(&obj.value, "namespace").unwrap_or("");
        let name = ops::meta_str(&obj.value, "name").unwrap_or("");
        match ops::patch(
            self.app,
            rt,
            ns,
            name,
            Patch { kind, body },
            status_only,
            &self.opts(),
        ) {
            Ok(_) => Ok(()),
            Err(e) if e.code == 404 => Ok(()),
            // A failed `test` of the resourceVersion: changed meanwhile, run again.
            Err(e) if e.code == 422 && kind == PatchKind::Json => Err(failed(
                self.controller,
                rt,
                ns,
                name,
                ApiError::conflict(rt, name),
            )),
            Err(e) => Err(failed(self.controller, rt, ns, name, e)),
        }
    }

    /// DELETE `obj` in the background, preconditioned on its uid (a 404 is done).
    fn delete(&self, rt: &ResourceType, obj: &Obj) -> Result<(), Failed> {
        let ns = ops::meta_str(&obj.value, "namespace").unwrap_or("");
        let name = ops::meta_str(&obj.value, "name").unwrap_or("");
        let uid = ops::meta_str(&obj.value, "uid").unwrap_or("");
        let opts = DeleteOpts::controller(uid, Propagation::Background);
        match deletion::delete(self.app, rt, ns, name, &opts) {
            Ok(_) => Ok(()),
            Err(e) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(failed(self.controller, rt, ns, name, e)),
        }
    }
}

/// The controller reference a workload's dependents carry.
fn owner_reference(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": ops::meta_str(owner, "name").unwrap_or(""),
        "uid": ops::meta_str(owner, "uid").unwrap_or(""),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The objects of collection `res` the object with `uid` controls, not being deleted, by name.
fn controlled(app: &App, res: &str, uid: &str) -> Vec<Arc<Obj>> {
    let mut out: Vec<Arc<Obj>> = app
        .controllers
        .with_graph(|g| g.dependents_of(uid))
        .into_iter()
        .filter(|n| &*n.res == res)
        .filter_map(|n| app.store.get(&n.res, &n.ns, &n.name))
        .filter(|o| {
            controlled_by(&o.value, uid) && o.value.pointer("/metadata/deletionTimestamp").is_none()
        })
        .collect();
    out.sort_by(|a, b| ops::meta_str(&a.value, "name").cmp(&ops::meta_str(&b.value, "name")));
    out
}

/// A new Pod from a workload's template: its labels and annotations, `extra_labels`, the
/// owner's controller reference, and `name` (or `generateName` when it ends in `-`).
fn pod_from_template(
    template: &Value,
    name: &str,
    owner_ref: Value,
    extra_labels: &Value,
) -> Value {
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let (Some(l), Some(extra)) = (labels.as_object_mut(), extra_labels.as_object()) {
        for (k, v) in extra {
            l.insert(k.clone(), v.clone());
        }
    }
    let mut metadata = json!({"labels": labels, "ownerReferences": [owner_ref]});
    if let Some(a) = template.pointer("/metadata/annotations") {
        metadata["annotations"] = a.clone();
    }
    if name.ends_with('-') {
        metadata["generateName"] = json!(name);
    } else {
        metadata["name"] = json!(name);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A Pod's phase.
fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Whether a Pod counts for its controller: not `Succeeded` or `Failed` (being deleted ones
/// are filtered out by [`controlled`]).
fn active(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed")
}

/// Whether a Pod's `Ready` condition is `True`.
fn ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True"))
            })
        })
}

/// `metadata.generation` (1 for objects stored without one).
fn generation(v: &Value) -> i64 {
    v.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// `spec.replicas`, default 1.
fn replicas(v: &Value) -> i64 {
    v.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0)
}

/// The most Pods one sync creates or deletes (kube-controller-manager's `burstReplicas`); the
/// rest follow in the next run of the work.
const BURST: usize = 500;
