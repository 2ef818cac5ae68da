//! The garbage collector, after kube-controller-manager's: objects whose owners are gone are
//! deleted, owners deleted in the foreground wait for their blocking dependents, orphaned
//! dependents lose their references.
//!
//! A controller written against a cluster relies on this: it sets `ownerReferences` and never
//! deletes what it made. The [`Graph`] is the real collector's dependency graph (owner uid →
//! dependents), kept exact by the store's observer hook (`controllers.rs`), which also queues the
//! [`Work`] each write causes. [`process`] does one piece of work through the API semantics
//! (`deletion::delete`, merge patches as manager `kube-controller-manager`), so watchers see the
//! writes a real cluster makes, in the same order:
//!
//! * `Background`: the owner is DELETED by the request, then each dependent with no other live
//!   owner is DELETED (a dependent with another live owner is MODIFIED: the dead reference goes).
//! * `Foreground`: the owner is MODIFIED (`deletionTimestamp`, `foregroundDeletion`), every
//!   dependent is deleted (foreground too when it has dependents itself), and once those with
//!   `blockOwnerDeletion: true` are gone the owner loses the finalizer and is DELETED.
//! * `Orphan`: the owner is MODIFIED (`orphan` finalizer), each dependent is MODIFIED (the
//!   reference removed), then the owner is DELETED.
//!
//! Owner references resolve by kind, name and uid: a namespaced owner only in the dependent's
//! namespace; a cluster-scoped dependent's reference to a namespaced kind, or to a kind the
//! server does not serve, is unresolvable and the dependent is never collected (as the real
//! collector leaves it). One difference: a reference to a uid this server never issued is left
//! alone (a real collector would delete the dependent), so fixtures may own objects by
//! imaginary owners; a uid that was deleted, or that belongs to another object, is dangling.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::App;
use crate::controllers::Failed;
use crate::deletion::{self, DeleteOpts, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation};
use crate::ops::{self, WriteOpts};
use crate::patch::{Patch, PatchKind};
use crate::registry::ResourceType;
use crate::store::{Obj, ObjKey};

/// The field manager (and User-Agent prefix) of the collector's writes, as on a real cluster.
pub const MANAGER: &str = "kube-controller-manager";

/// Deleted uids remembered to tell a dangling reference from one to a uid never issued.
const DELETED_UIDS_KEPT: usize = 1 << 20;

/// One object as the graph names it: its collection (`ResourceType::storage_key`) and key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// Storage key of the collection.
    pub res: Arc<str>,
    /// Namespace, `""` for cluster-scoped objects.
    pub ns: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ns.is_empty() {
            write!(f, "{} {}", self.res, self.name)
        } else {
            write!(f, "{} {}/{}", self.res, self.ns, self.name)
        }
    }
}

/// A piece of the collector's work, named after the real collector's queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Work {
    /// Delete the object if all its owners are gone or going (`attemptToDeleteItem`).
    AttemptToDelete(Node),
    /// Let a foreground-deleting owner go once its blocking dependents are gone
    /// (`processDeletingDependentsItem`).
    DeletingDependents(Node),
    /// Remove the references of an orphaning owner's dependents, then let it go.
    Orphan(Node),
}

/// The dependency graph: who owns whom, by uid, and which uids the server has issued.
#[derive(Debug, Default)]
pub struct Graph {
    /// Owner uid → the objects whose `ownerReferences` name it.
    dependents: HashMap<String, BTreeSet<Node>>,
    /// Uids of the stored objects.
    live: HashSet<String>,
    /// Uids of deleted objects (the newest [`DELETED_UIDS_KEPT`]).
    deleted: HashSet<String>,
    deleted_order: VecDeque<String>,
    /// Owners being deleted in the foreground (uid → object).
    deleting: HashMap<String, Node>,
}

fn uid_of(v: &Value) -> &str {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn owner_refs(v: &Value) -> &[Value] {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn owner_uids(o: Option<&Obj>) -> Vec<&str> {
    o.map(|o| {
        owner_refs(&o.value)
            .iter()
            .filter_map(|r| r.get("uid").and_then(Value::as_str))
            .filter(|u| !u.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// Whether the object is being deleted and holds `finalizer`.
pub(crate) fn deleting_with(v: &Value, finalizer: &str) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
        && deletion::finalizer_names(v).iter().any(|f| f == finalizer)
}

impl Graph {
    /// Whether `uid` is or was an object of this server.
    pub fn known(&self, uid: &str) -> bool {
        self.live.contains(uid) || self.deleted.contains(uid)
    }

    /// The objects referring to `uid`, in key order.
    pub fn dependents_of(&self, uid: &str) -> Vec<Node> {
        self.dependents
            .get(uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn remember_deleted(&mut self, uid: &str) {
        if uid.is_empty() || !self.deleted.insert(uid.to_string()) {
            return;
        }
        self.deleted_order.push_back(uid.to_string());
        if self.deleted_order.len() > DELETED_UIDS_KEPT
            && let Some(old) = self.deleted_order.pop_front()
        {
            self.deleted.remove(&old);
        }
    }

    /// Take in one committed change and push the work it causes onto `out`.
    pub fn observe(
        &mut self,
        res: &str,
        key: &ObjKey,
        prev: Option<&Obj>,
        next: Option<&Obj>,
        out: &mut Vec<Work>,
    ) {
        let node = || Node {
            res: Arc::from(res),
            ns: key.0.clone(),
            name: key.1.clone(),
        };
        let before = owner_uids(prev);
        let after = owner_uids(next);
        if before != after {
            let n = node();
            // Sets, not the lists: a client may send tens of thousands of references, and this
            // runs under the store's write lock, so the diff must be linear.
            let (old_set, new_set): (HashSet<&str>, HashSet<&str>) = (
                before.iter().copied().collect(),
                after.iter().copied().collect(),
            );
            for u in old_set.iter().filter(|u| !new_set.contains(*u)) {
                if let Some(set) = self.dependents.get_mut(*u) {
                    set.remove(&n);
                    if set.is_empty() {
                        self.dependents.remove(*u);
                    }
                }
            }
            for u in new_set.iter().filter(|u| !old_set.contains(*u)) {
                self.dependents
                    .entry(u.to_string())
                    .or_default()
                    .insert(n.clone());
            }
        }
        let Some(uid) = next.or(prev).map(|o| uid_of(&o.value)) else {
            return;
        };
        match next {
            None => {
                self.live.remove(uid);
                self.remember_deleted(uid);
                self.deleting.remove(uid);
                out.extend(
                    self.dependents_of(uid)
                        .into_iter()
                        .map(Work::AttemptToDelete),
                );
            }
            Some(o) => {
                if !self.live.contains(uid) {
                    self.live.insert(uid.to_string());
                }
                let was = |f: &str| prev.is_some_and(|p| deleting_with(&p.value, f));
                if deleting_with(&o.value, FOREGROUND_FINALIZER) {
                    if !was(FOREGROUND_FINALIZER) {
                        self.deleting.insert(uid.to_string(), node());
                        out.extend(
                            self.dependents_of(uid)
                                .into_iter()
                                .map(Work::AttemptToDelete),
                        );
                        out.push(Work::DeletingDependents(node()));
                    }
                } else {
                    self.deleting.remove(uid);
                }
                if deleting_with(&o.value, ORPHAN_FINALIZER) && !was(ORPHAN_FINALIZER) {
                    out.push(Work::Orphan(node()));
                }
                // New references to owners this server knows are checked at once (an owner gone,
                // going, or in another namespace); those to uids never issued are left alone.
                if before != after && after.iter().any(|u| self.known(u)) {
                    out.push(Work::AttemptToDelete(node()));
                }
            }
        }
        // A dependent of a foreground-deleting owner changed or went: the owner may be free.
        for u in before.iter().chain(&after) {
            if let Some(owner) = self.deleting.get(*u) {
                out.push(Work::DeletingDependents(owner.clone()));
            }
        }
    }
}

/// How one owner reference resolves.
enum Owner {
    /// The owner exists and is not being deleted in the foreground.
    Solid,
    /// The owner is gone (or the uid names another object).
    Dangling,
    /// The owner is being deleted in the foreground, waiting for its dependents.
    Waiting,
    /// The reference cannot be resolved (unserved kind, namespaced owner of a cluster-scoped
    /// object): the dependent is left as it is.
    Unresolvable,
}

fn classify(app: &App, r: &Value, dependent_ns: &str) -> Owner {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    let Some(rt) = app.registry.read().find_kind(s("apiVersion"), s("kind")) else {
        return Owner::Unresolvable;
    };
    if rt.namespaced && dependent_ns.is_empty() {
        return Owner::Unresolvable;
    }
    let ns = if rt.namespaced { dependent_ns } else { "" };
    match app.store.get(&rt.storage_key(), ns, s("name")) {
        Some(o) if uid_of(&o.value) == s("uid") => {
            if deleting_with(&o.value, FOREGROUND_FINALIZER) {
                Owner::Waiting
            } else {
                Owner::Solid
            }
        }
        _ if app.controllers.with_graph(|g| g.known(s("uid"))) => Owner::Dangling,
        // A uid this server never issued: left alone (see the module doc).
        _ => Owner::Solid,
    }
}

fn failed(node: &Node, error: crate::status::ApiError) -> Failed {
    Failed::Write {
        controller: "garbage collector",
        what: node.to_string(),
        error: Box::new(error),
    }
}

fn resource(app: &App, node: &Node) -> Option<Arc<ResourceType>> {
    app.registry.read().by_storage_key(&node.res)
}

/// Do one piece of work.
pub fn process(app: &App, work: &Work) -> Result<(), Failed> {
    match work {
        Work::AttemptToDelete(node) => attempt_to_delete(app, node),
        Work::DeletingDependents(node) => deleting_dependents(app, node),
        Work::Orphan(node) => orphan(app, node),
    }
}

fn attempt_to_delete(app: &App, node: &Node) -> Result<(), Failed> {
    let (Some(rt), Some(obj)) = (
        resource(app, node),
        app.store.get(&node.res, &node.ns, &node.name),
    ) else {
        return Ok(());
    };
    let v = &obj.value;
    if v.pointer("/metadata/deletionTimestamp").is_some() {
        if deleting_with(v, FOREGROUND_FINALIZER) {
            return deleting_dependents(app, node);
        }
        return Ok(());
    }
    let refs = owner_refs(v);
    if refs.is_empty() {
        return Ok(());
    }
    // The references to owners gone or going, by index: comparing the references themselves
    // would be quadratic in a list a client chose.
    let (mut solid, mut gone, mut waiting) = (0, HashSet::new(), 0);
    for (i, r) in refs.iter().enumerate() {
        match classify(app, r, &node.ns) {
            Owner::Unresolvable => return Ok(()),
            Owner::Solid => solid += 1,
            Owner::Dangling => {
                gone.insert(i);
            }
            Owner::Waiting => {
                waiting += 1;
                gone.insert(i);
            }
        }
    }
    if solid > 0 {
        if gone.is_empty() {
            return Ok(());
        }
        // Another owner keeps the object: only the references to owners gone or going go.
        let keep: Vec<&Value> = refs
            .iter()
            .enumerate()
            .filter(|(i, _)| !gone.contains(i))
            .map(|(_, r)| r)
            .collect();
        return patch_metadata(app, &rt, node, &obj, json!({"ownerReferences": keep}));
    }
    let uid = uid_of(v);
    let dependents = app.controllers.with_graph(|g| g.dependents_of(uid));
    let policy = if waiting > 0 && !dependents.is_empty() {
        // A cycle of foreground deletions would wait forever: stop blocking our owners.
        let cycle = dependents.iter().any(|d| {
            app.store
                .get(&d.res, &d.ns, &d.name)
                .is_some_and(|o| deleting_with(&o.value, FOREGROUND_FINALIZER))
        });
        if cycle {
            let unblocked: Vec<Value> = refs
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    r["blockOwnerDeletion"] = json!(false);
                    r
                })
                .collect();
            patch_metadata(app, &rt, node, &obj, json!({"ownerReferences": unblocked}))?;
        }
        Propagation::Foreground
    } else if deletion::finalizer_names(v)
        .iter()
        .any(|f| f == ORPHAN_FINALIZER)
    {
        Propagation::Orphan
    } else if deletion::finalizer_names(v)
        .iter()
        .any(|f| f == FOREGROUND_FINALIZER)
    {
        Propagation::Foreground
    } else {
        Propagation::Background
    };
    // Preconditioned on what was read, as the real collector's delete: an owner added since
    // then makes it a 409, and the work runs again and sees that owner.
    let opts = DeleteOpts {
        resource_version: Some(obj.rv.to_string()),
        ..DeleteOpts::controller(uid, policy)
    };
    match deletion::delete(app, &rt, &node.ns, &node.name, &opts) {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(error) => Err(failed(node, error)),
    }
}

/// Whether `dependent` names `uid` as an owner that must wait for it.
fn blocks(dependent: &Value, uid: &str) -> bool {
    owner_refs(dependent).iter().any(|r| {
        r.get("uid").and_then(Value::as_str) == Some(uid)
            && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
    })
}

fn deleting_dependents(app: &App, node: &Node) -> Result<(), Failed> {
    let (Some(rt), Some(obj)) = (
        resource(app, node),
        app.store.get(&node.res, &node.ns, &node.name),
    ) else {
        return Ok(());
    };
    if !deleting_with(&obj.value, FOREGROUND_FINALIZER) {
        return Ok(());
    }
    let uid = uid_of(&obj.value);
    let blocking: Vec<(Node, Arc<Obj>)> = app
        .controllers
        .with_graph(|g| g.dependents_of(uid))
        .into_iter()
        .filter_map(|d| {
            let o = app.store.get(&d.res, &d.ns, &d.name)?;
            blocks(&o.value, uid).then_some((d, o))
        })
        .collect();
    if blocking.is_empty() {
        return remove_finalizer(app, &rt, node, &obj, FOREGROUND_FINALIZER);
    }
    for (d, o) in blocking {
        if !deleting_with(&o.value, FOREGROUND_FINALIZER) {
            app.controllers
                .enqueue(crate::controllers::Work::Gc(Work::AttemptToDelete(d)));
        }
    }
    Ok(())
}

fn orphan(app: &App, node: &Node) -> Result<(), Failed> {
    let (Some(rt), Some(obj)) = (
        resource(app, node),
        app.store.get(&node.res, &node.ns, &node.name),
    ) else {
        return Ok(());
    };
    if !deleting_with(&obj.value, ORPHAN_FINALIZER) {
        return Ok(());
    }
    let uid = uid_of(&obj.value);
    for d in app.controllers.with_graph(|g| g.dependents_of(uid)) {
        let (Some(drt), Some(dobj)) = (resource(app, &d), app.store.get(&d.res, &d.ns, &d.name))
        else {
            continue;
        };
        let keep: Vec<&Value> = owner_refs(&dobj.value)
            .iter()
            .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid))
            .collect();
        patch_metadata(app, &drt, &d, &dobj, json!({"ownerReferences": keep}))?;
    }
    remove_finalizer(app, &rt, node, &obj, ORPHAN_FINALIZER)
}

fn remove_finalizer(
    app: &App,
    rt: &ResourceType,
    node: &Node,
    obj: &Obj,
    finalizer: &str,
) -> Result<(), Failed> {
    let rest: Vec<String> = deletion::finalizer_names(&obj.value)
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    patch_metadata(app, rt, node, obj, json!({"finalizers": rest}))
}

/// A merge patch of `metadata` (an empty list removes the field) against the state read, as
/// the collector's manager; a 404 means the work is moot.
fn patch_metadata(
    app: &App,
    rt: &ResourceType,
    node: &Node,
    obj: &Obj,
    mut metadata: Value,
) -> Result<(), Failed> {
    if let Some(m) = metadata.as_object_mut() {
        for v in m.values_mut() {
            if v.as_array().is_some_and(Vec::is_empty) {
                *v = Value::Null;
            }
        }
        m.insert("resourceVersion".into(), json!(obj.rv.to_string()));
    }
    let change = Patch {
        kind: PatchKind::Merge,
        body: json!({"metadata": metadata}),
    };
    let opts = WriteOpts {
        default_manager: MANAGER.into(),
        ..WriteOpts::default()
    };
    match ops::patch(app, rt, &node.ns, &node.name, change, false, &opts) {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(error) => Err(failed(node, error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(uid: &str, owners: &[&str], extra: Value) -> Obj {
        let refs: Vec<Value> = owners
            .iter()
            .map(|u| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": u}))
            .collect();
        let mut v = json!({"metadata": {"name": "x", "namespace": "n", "uid": uid, "ownerReferences": refs}});
        if let (Some(m), Some(e)) = (v["metadata"].as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        Arc::try_unwrap(Obj::new(v, 1)).expect("a new Arc")
    }

    fn key(name: &str) -> ObjKey {
        ("n".into(), name.into())
    }

    #[test]
    fn the_graph_tracks_owners_and_queues_what_writes_cause() {
        let mut g = Graph::default();
        let mut out = Vec::new();
        let owner = obj("o1", &[], json!({}));
        g.observe("/configmaps", &key("o"), None, Some(&owner), &mut out);
        let child = obj("c1", &["o1"], json!({}));
        g.observe("/configmaps", &key("c"), None, Some(&child), &mut out);
        assert!(
            matches!(&out[..], [Work::AttemptToDelete(n)] if n.name == "c"),
            "{out:?}"
        );
        out.clear();
        g.observe(
            "/configmaps",
            &key("i"),
            None,
            Some(&obj("c0", &["never"], json!({}))),
            &mut out,
        );
        assert!(out.is_empty(), "a uid never issued causes no work: {out:?}");
        assert_eq!(g.dependents_of("o1").len(), 1);
        assert!(g.known("o1") && !g.known("never"));
        // The owner goes: its dependent is examined.
        g.observe("/configmaps", &key("o"), Some(&owner), None, &mut out);
        assert_eq!(out.len(), 1);
        assert!(matches!(&out[0], Work::AttemptToDelete(n) if n.name == "c"));
        assert!(g.known("o1"), "deleted uids stay known");
        // A new object naming the deleted owner is examined at once.
        out.clear();
        g.observe(
            "/configmaps",
            &key("late"),
            None,
            Some(&obj("c2", &["o1"], json!({}))),
            &mut out,
        );
        assert!(matches!(&out[..], [Work::AttemptToDelete(n)] if n.name == "late"));
        // An owner turning to foreground deletion queues its dependents, then itself.
        out.clear();
        g.observe(
            "/configmaps",
            &key("o2"),
            None,
            Some(&obj("o2", &[], json!({}))),
            &mut out,
        );
        assert!(out.is_empty());
        let fg = obj(
            "o2",
            &[],
            json!({"deletionTimestamp": "t", "finalizers": [FOREGROUND_FINALIZER]}),
        );
        let plain = obj("o2", &[], json!({}));
        g.observe(
            "/configmaps",
            &key("d"),
            None,
            Some(&obj("c3", &["o2"], json!({}))),
            &mut out,
        );
        out.clear();
        g.observe("/configmaps", &key("o2"), Some(&plain), Some(&fg), &mut out);
        assert!(
            matches!(&out[..], [Work::AttemptToDelete(d), Work::DeletingDependents(o)]
            if d.name == "d" && o.name == "o2"),
            "{out:?}"
        );
        // Its dependent going frees it.
        out.clear();
        g.observe(
            "/configmaps",
            &key("d"),
            Some(&obj("c3", &["o2"], json!({}))),
            None,
            &mut out,
        );
        assert!(
            matches!(&out[..], [Work::DeletingDependents(o)] if o.name == "o2"),
            "{out:?}"
        );
    }
}
