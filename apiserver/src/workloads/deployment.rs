//! The Deployment controller: a ReplicaSet per pod template (`<name>-<pod-template-hash>`),
//! rolling updates within `maxSurge`/`maxUnavailable` or `Recreate`, revision annotations,
//! `revisionHistoryLimit`, `paused`, and the status `kubectl rollout status` reads. What to do
//! is decided by `rolling.rs`; this file reads the objects and writes the decisions.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{Map, Value, json};

use super::hash::{self, template_hash, without_hash};
use super::rolling::{self, Counts, Rs};
use super::{
    Writer, controlled, decode, generation, live, owner_reference, pod_template, resource,
};
use crate::App;
use crate::controllers::Failed;
use crate::ops::{self, now_rfc3339};
use crate::store::Obj;

const CONTROLLER: &str = "deployment controller";
/// The label a Deployment's ReplicaSets and Pods carry to tell templates apart.
pub const HASH_LABEL: &str = "pod-template-hash";
/// The revision of a ReplicaSet (and of its Deployment: its newest ReplicaSet's).
pub const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";
/// Annotations of a Deployment not copied to its ReplicaSets (`annotationsToSkip`).
const NOT_COPIED: [&str; 5] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED,
    MAX,
];

/// One ReplicaSet: the stored object and what the decisions see of it.
struct Set {
    obj: Arc<Obj>,
    view: Rs,
}

fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn count(v: &Value, field: &str) -> i32 {
    v.pointer(&format!("/status/{field}"))
        .and_then(Value::as_i64)
        .unwrap_or(0) as i32
}

fn view(obj: &Obj) -> Rs {
    let v = &obj.value;
    let observed = v
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Rs {
        name: ops::meta_str(v, "name").unwrap_or("").into(),
        revision: annotation(v, REVISION)
            .and_then(|r| r.parse().ok())
            .unwrap_or(0),
        spec_replicas: super::replicas(v) as i32,
        replicas: count(v, "replicas"),
        ready: count(v, "readyReplicas"),
        available: count(v, "availableReplicas"),
        stale: generation(v) > observed,
    }
}

/// What one sync of a Deployment works from.
struct Ctx<'a> {
    w: Writer<'a>,
    dobj: &'a Obj,
    replicas: i32,
    surge: i32,
    unavailable: i32,
}

impl Ctx<'_> {
    /// The annotations a ReplicaSet of this Deployment carries: the Deployment's own (but
    /// `NOT_COPIED`), its revision, desired and max replicas.
    fn annotations(&self, current: Option<&Value>, revision: i64) -> Map<String, Value> {
        let mut out: Map<String, Value> = current
            .and_then(|v| v.pointer("/metadata/annotations"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(own) = self
            .dobj
            .value
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            for (k, v) in own {
                if !NOT_COPIED.contains(&k.as_str()) {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        out.insert(REVISION.into(), json!(revision.to_string()));
        out.insert(DESIRED.into(), json!(self.replicas.to_string()));
        out.insert(MAX.into(), json!((self.replicas + self.surge).to_string()));
        out
    }

    /// Set a ReplicaSet's `spec.replicas` and annotations (unless they are so already).
    fn scale(&self, set: &Set, replicas: i32, revision: i64) -> Result<bool, Failed> {
        let annotations = self.annotations(Some(&set.obj.value), revision);
        let same_annotations = set
            .obj
            .value
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            == Some(&annotations);
        if set.view.spec_replicas == replicas && same_annotations {
            return Ok(false);
        }
        let rt = resource(self.w.app, "apps", "replicasets");
        self.w.patch(
            &rt,
            &set.obj,
            json!({"metadata": {"annotations": annotations}, "spec": {"replicas": replicas}}),
        )?;
        Ok(true)
    }
}

/// Reconcile one Deployment.
pub fn sync(app: &App, ns: &str, name: &str) -> Result<(), Failed> {
    let Some(dobj) = live(app, "apps/deployments", ns, name) else {
        return Ok(());
    };
    let d: Deployment = decode(CONTROLLER, &dobj)?;
    let spec = d.spec;
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let rolling_update = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    let (surge, unavailable) = if recreate {
        (0, 0)
    } else {
        match rolling::fenceposts(
            rolling_update.and_then(|r| r.max_surge.as_ref()),
            rolling_update.and_then(|r| r.max_unavailable.as_ref()),
            replicas,
        ) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(
                    "{CONTROLLER}: deployment {}/{}: {}",
                    ns.escape_debug(),
                    name.escape_debug(),
                    e.to_string().escape_debug()
                );
                return Ok(());
            }
        }
    };
    let cx = Ctx {
        w: Writer::controller_manager(app, CONTROLLER),
        dobj: &dobj,
        replicas,
        surge,
        unavailable,
    };
    let uid = ops::meta_str(&dobj.value, "uid").unwrap_or("");
    let template = pod_template(&dobj.value);
    let want = without_hash(&template, HASH_LABEL);
    let mut sets: Vec<Set> = controlled(app, "apps/replicasets", uid)
        .into_iter()
        .map(|obj| Set {
            view: view(&obj),
            obj,
        })
        .collect();
    // The new set: the oldest whose template is the Deployment's (`FindNewReplicaSet`).
    sets.sort_by(|a, b| {
        let t = |s: &Set| ops::meta_str(&s.obj.value, "creationTimestamp").map(str::to_string);
        t(a).cmp(&t(b)).then(a.view.name.cmp(&b.view.name))
    });
    let new_index = sets.iter().position(|s| {
        s.obj
            .value
            .pointer("/spec/template")
            .is_some_and(|t| without_hash(t, HASH_LABEL) == want)
    });
    let new = new_index.map(|i| sets.remove(i));
    let olds = sets;
    let old_views: Vec<Rs> = olds.iter().map(|s| s.view.clone()).collect();
    let paused = spec.paused.unwrap_or(false);
    let next_revision = rolling::next_revision(&old_views);
    let mut created = None;
    let new = match new {
        Some(set) => {
            let revision = set.view.revision.max(next_revision);
            // An undone template's set gets the next revision; desired/max follow the spec.
            if !paused && cx.scale(&set, set.view.spec_replicas, revision)? {
                return Ok(());
            }
            Some(set)
        }
        None if paused => None,
        None => {
            let initial = if recreate {
                if old_views
                    .iter()
                    .any(|r| r.spec_replicas > 0 || r.replicas > 0)
                {
                    0
                } else {
                    replicas
                }
            } else {
                let empty = Rs {
                    name: String::new(),
                    revision: next_revision,
                    spec_replicas: 0,
                    replicas: 0,
                    ready: 0,
                    available: 0,
                    stale: false,
                };
                rolling::new_replicas(replicas, surge, &empty, &old_views)
            };
            match create_set(&cx, &template, initial, next_revision)? {
                Made::Created(n) => created = Some(n),
                Made::Collision => return bump_collision(&cx),
                Made::Exists => return Ok(()),
            }
            None
        }
    };
    let revision = new
        .as_ref()
        .map(|s| s.view.revision.max(next_revision))
        .or(created.as_ref().map(|_| next_revision));
    if let Some(rev) = revision
        && annotation(&dobj.value, REVISION) != Some(rev.to_string().as_str())
    {
        let rt = resource(app, "apps", "deployments");
        return cx.w.patch(
            &rt,
            &dobj,
            json!({"metadata": {"annotations": {REVISION: rev.to_string()}}}),
        );
    }
    if created.is_none() && !paused {
        let moved = match &new {
            Some(n) if recreate => recreate_step(&cx, n, &olds, next_revision)?,
            None if recreate => scale_olds(&cx, &olds, &vec![0; olds.len()])?,
            Some(n) => rolling_step(&cx, n, &olds, &old_views, next_revision)?,
            None => false,
        };
        if moved {
            return Ok(());
        }
    }
    let new_view = new.as_ref().map(|s| s.view.clone());
    let counts = rolling::counts(new_view.as_ref(), &old_views);
    let new_name = new
        .as_ref()
        .map(|s| s.view.name.clone())
        .or(created.clone());
    write_status(&cx, counts, new_name.as_deref(), created.is_some(), paused)?;
    if (paused || rolling::complete(replicas, &counts)) && created.is_none() {
        let limit = spec.revision_history_limit.unwrap_or(10);
        let rt = resource(app, "apps", "replicasets");
        for gone in rolling::prune(&old_views, limit) {
            if let Some(set) = olds.iter().find(|s| s.view.name == gone) {
                cx.w.delete(&rt, &set.obj)?;
            }
        }
    }
    Ok(())
}

/// What creating the new ReplicaSet came to.
enum Made {
    Created(String),
    /// A set of that name with another template exists: `collisionCount` must change.
    Collision,
    /// Ours exists already (the observer runs the sync again).
    Exists,
}

fn create_set(
    cx: &Ctx<'_>,
    template: &Value,
    replicas: i32,
    revision: i64,
) -> Result<Made, Failed> {
    let app = cx.w.app;
    let d = &cx.dobj.value;
    let ns = ops::meta_str(d, "namespace").unwrap_or("");
    let collisions = d.pointer("/status/collisionCount").and_then(Value::as_i64);
    let h = template_hash(&without_hash(template, HASH_LABEL), collisions);
    let name = format!("{}-{h}", ops::meta_str(d, "name").unwrap_or(""));
    let mut template = template.clone();
    if !template
        .pointer("/metadata/labels")
        .is_some_and(Value::is_object)
    {
        if !template.get("metadata").is_some_and(Value::is_object) {
            template["metadata"] = json!({});
        }
        template["metadata"]["labels"] = json!({});
    }
    template["metadata"]["labels"][HASH_LABEL] = json!(h);
    let labels = template["metadata"]["labels"].clone();
    let mut selector = d
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !selector.get("matchLabels").is_some_and(Value::is_object) {
        selector["matchLabels"] = json!({});
    }
    selector["matchLabels"][HASH_LABEL] = json!(h);
    let mut spec = json!({"replicas": replicas, "selector": selector, "template": template});
    if let Some(m) = d.pointer("/spec/minReadySeconds") {
        spec["minReadySeconds"] = m.clone();
    }
    let body = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": cx.annotations(None, revision),
            "ownerReferences": [owner_reference("apps/v1", "Deployment", d)],
        },
        "spec": spec,
    });
    let rt = resource(app, "apps", "replicasets");
    if cx.w.create(&rt, ns, body)?.is_some() {
        return Ok(Made::Created(name));
    }
    let Some(existing) = app.store.get("apps/replicasets", ns, &name) else {
        return Ok(Made::Exists);
    };
    let uid = ops::meta_str(d, "uid").unwrap_or("");
    let ours = super::controlled_by(&existing.value, uid)
        && existing.value.pointer("/spec/template").is_some_and(|t| {
            without_hash(t, HASH_LABEL) == hash::normalise(&without_hash(&template, HASH_LABEL))
        });
    Ok(if ours { Made::Exists } else { Made::Collision })
}

/// A name collision: count it in `status.collisionCount`, so the next hash differs.
fn bump_collision(cx: &Ctx<'_>) -> Result<(), Failed> {
    let mut status = cx
        .dobj
        .value
        .get("status")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let n = status
        .get("collisionCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    status["collisionCount"] = json!(n + 1);
    let rt = resource(cx.w.app, "apps", "deployments");
    cx.w.status(&rt, cx.dobj, status)
}

/// One rolling-update step: scale the new set up, else the old ones down. Whether it wrote.
fn rolling_step(
    cx: &Ctx<'_>,
    new: &Set,
    olds: &[Set],
    old_views: &[Rs],
    revision: i64,
) -> Result<bool, Failed> {
    let up = rolling::new_replicas(cx.replicas, cx.surge, &new.view, old_views);
    let revision = new.view.revision.max(revision);
    if up != new.view.spec_replicas {
        return cx.scale(new, up, revision);
    }
    let downs = rolling::old_replicas(cx.replicas, cx.unavailable, Some(&new.view), old_views);
    scale_olds(cx, olds, &downs)
}

/// Recreate: every old Pod gone before the new set is scaled up. Whether it wrote.
fn recreate_step(cx: &Ctx<'_>, new: &Set, olds: &[Set], revision: i64) -> Result<bool, Failed> {
    if scale_olds(cx, olds, &vec![0; olds.len()])? {
        return Ok(true);
    }
    if olds.iter().any(|s| s.view.replicas > 0) {
        return Ok(false);
    }
    cx.scale(new, cx.replicas, new.view.revision.max(revision))
}

fn scale_olds(cx: &Ctx<'_>, olds: &[Set], targets: &[i32]) -> Result<bool, Failed> {
    let mut moved = false;
    for (set, &target) in olds.iter().zip(targets) {
        if target != set.view.spec_replicas {
            moved |= cx.scale(set, target, set.view.revision)?;
        }
    }
    Ok(moved)
}

/// A condition, keeping the times of the current one of its type when nothing about it
/// changed (`lastTransitionTime` also when only the reason or message did).
fn condition(current: &[Value], ty: &str, status: &str, reason: &str, message: String) -> Value {
    let now = now_rfc3339();
    let old = current.iter().find(|c| c.get("type") == Some(&json!(ty)));
    let same = |k: &str, v: &str| old.and_then(|o| o.get(k)).and_then(Value::as_str) == Some(v);
    if same("status", status) && same("reason", reason) && same("message", &message) {
        return old.cloned().expect("same implies present");
    }
    let transition = match old {
        Some(o) if same("status", status) => {
            o.get("lastTransitionTime").cloned().unwrap_or(json!(now))
        }
        _ => json!(now),
    };
    json!({"type": ty, "status": status, "lastUpdateTime": now, "lastTransitionTime": transition,
        "reason": reason, "message": message})
}

/// The status as the real controller writes it (zero counts left out, as its `omitempty`).
fn write_status(
    cx: &Ctx<'_>,
    c: Counts,
    new: Option<&str>,
    created: bool,
    paused: bool,
) -> Result<(), Failed> {
    let d = &cx.dobj.value;
    let old = d.get("status").cloned().unwrap_or_else(|| json!({}));
    let conditions: Vec<Value> = old
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut status = json!({"observedGeneration": generation(d)});
    for (k, v) in [
        ("replicas", c.replicas),
        ("updatedReplicas", c.updated),
        ("readyReplicas", c.ready),
        ("availableReplicas", c.available),
        ("unavailableReplicas", c.unavailable),
    ] {
        if v != 0 {
            status[k] = json!(v);
        }
    }
    if let Some(n) = old.get("collisionCount") {
        status["collisionCount"] = n.clone();
    }
    let available = if c.available >= cx.replicas - cx.unavailable {
        condition(
            &conditions,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
        )
    } else {
        condition(
            &conditions,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
        )
    };
    let rs = new.unwrap_or("");
    let was_paused = conditions.iter().any(|c| {
        c.get("type") == Some(&json!("Progressing"))
            && c.get("reason") == Some(&json!("DeploymentPaused"))
    });
    let changed = [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
    ]
    .iter()
    .any(|k| old.get(*k) != status.get(*k));
    let keep_progressing = conditions
        .iter()
        .find(|c| c.get("type") == Some(&json!("Progressing")))
        .filter(|_| !changed && !was_paused);
    let progressing = if paused {
        condition(
            &conditions,
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
        )
    } else if created {
        condition(
            &conditions,
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            format!("Created new replica set \"{rs}\""),
        )
    } else if new.is_some() && rolling::complete(cx.replicas, &c) {
        condition(
            &conditions,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{rs}\" has successfully progressed."),
        )
    } else if was_paused {
        condition(
            &conditions,
            "Progressing",
            "Unknown",
            "DeploymentResumed",
            "Deployment is resumed".into(),
        )
    } else if let Some(k) = keep_progressing {
        k.clone()
    } else {
        condition(
            &conditions,
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{rs}\" is progressing."),
        )
    };
    // Existing conditions keep their places; new ones follow.
    let mut out: Vec<Value> = Vec::new();
    for c in &conditions {
        match c.get("type").and_then(Value::as_str) {
            Some("Available") => out.push(available.clone()),
            Some("Progressing") => out.push(progressing.clone()),
            _ => out.push(c.clone()),
        }
    }
    for (ty, c) in [("Available", &available), ("Progressing", &progressing)] {
        if !out.iter().any(|o| o.get("type") == Some(&json!(ty))) {
            out.push(c.clone());
        }
    }
    status["conditions"] = json!(out);
    let rt = resource(cx.w.app, "apps", "deployments");
    cx.w.status(&rt, cx.dobj, status)
}
