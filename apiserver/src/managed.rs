//! Field ownership (`metadata.managedFields`), after the real server's structured-merge-diff field manager.
//!
//! Every write records who owns which fields. A non-apply write (create, update, patch) is an `Update`
//! operation: its manager takes every field it changed away from everyone else, and never conflicts. A
//! server-side apply is an `Apply` operation: the manager owns exactly the fields of its applied
//! configuration; changing a field another manager owns is a 409 conflict unless `force=true` (then the
//! ownership moves), and a field it applied before but leaves out now is removed from the object unless
//! another manager still owns it.
//!
//! Paths are spelled with FieldsV1 keys: `f:name` for a map field, `k:{"name":"a"}` for an item of a list
//! merged by key, `v:"x"` for an item of a set (`finalizers`), `i:0` only when a client wrote one. Which lists
//! are keyed or sets is `patch.rs`'s table (the same one strategic merge and apply merging use); custom
//! resources outside `metadata` have only atomic lists, as with the real server's deduced schema.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::patch::{self, ListStrategy};
use crate::status::ApiError;

/// A field path, one FieldsV1 key per step.
pub type FieldPath = Vec<String>;

/// A set of field paths.
pub type FieldSet = BTreeSet<FieldPath>;

/// Which list semantics apply to an object's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lists {
    /// Built-in kinds: the keyed lists and sets of `patch.rs`.
    Builtin,
    /// Custom resources: lists are atomic except in `metadata`.
    Custom,
}

/// The part of an object an endpoint writes, and so the part its managers own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything (kinds without a status subresource).
    Whole,
    /// Everything but `status` (the main resource of a kind with a status subresource).
    NoStatus,
    /// Only `status` (the `/status` subresource).
    StatusOnly,
}

/// Who is writing, through which endpoint.
#[derive(Debug, Clone)]
pub struct Writer {
    /// Field manager name.
    pub manager: String,
    /// The request's group/version (recorded in the entry).
    pub api_version: String,
    /// List semantics of the kind.
    pub lists: Lists,
    /// Which part of the object this endpoint writes.
    pub scope: Scope,
    /// Timestamp for entries this write touches (RFC 3339, seconds).
    pub now: String,
}

/// The real server keeps at most this many `Update` managers; older ones are merged into one entry.
const MAX_UPDATE_MANAGERS: usize = 10;
/// Name of the entry the oldest `Update` managers are merged into.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    apply: bool,
    api_version: String,
    subresource: String,
    time: Option<String>,
    set: FieldSet,
}

impl Entry {
    /// Whether two entries are the same manager: name, operation, subresource, and for updates the version.
    fn same_manager(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.apply == other.apply
            && self.subresource == other.subresource
            && (self.apply || self.api_version == other.api_version)
    }

    /// How the conflict message names this manager (as the real server prints it).
    fn describe(&self) -> String {
        let mut s = quoted(&self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {}", quoted(&self.subresource)));
        }
        if !self.apply {
            s.push_str(&format!(" using {}", self.api_version));
            if let Some(t) = &self.time {
                s.push_str(&format!(" at {t}"));
            }
        }
        s
    }

    fn to_json(&self) -> Value {
        let mut e = json!({"manager": self.manager,
            "operation": if self.apply { "Apply" } else { "Update" },
            "apiVersion": self.api_version});
        if let Some(t) = &self.time {
            e["time"] = json!(t);
        }
        e["fieldsType"] = json!("FieldsV1");
        e["fieldsV1"] = to_fields_v1(&self.set);
        if !self.subresource.is_empty() {
            e["subresource"] = json!(self.subresource);
        }
        e
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn subresource_of(scope: Scope) -> &'static str {
    match scope {
        Scope::StatusOnly => "status",
        Scope::Whole | Scope::NoStatus => "",
    }
}

/// Decode the entries of a `managedFields` list (entries that are not FieldsV1 are dropped).
fn decode(list: Option<&Value>) -> Vec<Entry> {
    list.and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| {
                    e.get("fieldsType")
                        .and_then(Value::as_str)
                        .is_none_or(|t| t == "FieldsV1")
                })
                .map(|e| {
                    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    Entry {
                        manager: s("manager"),
                        apply: s("operation") == "Apply",
                        api_version: s("apiVersion"),
                        subresource: s("subresource"),
                        time: e.get("time").and_then(Value::as_str).map(str::to_string),
                        set: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn managed_fields(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/managedFields")
}

/// Store `entries` in `obj` in the real server's order (Apply first, then by time and name); no entries
/// means no `managedFields` key.
fn store(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (
            !a.apply,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                !b.apply,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

/// Merge the oldest `Update` managers into one `ancient-changes` entry once there are too many.
fn cap_update_managers(entries: &mut Vec<Entry>) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|&i| !entries[i].apply && entries[i].manager != ANCIENT_CHANGES)
        .collect();
    let ancient = entries
        .iter()
        .position(|e| !e.apply && e.manager == ANCIENT_CHANGES);
    let total = updaters.len() + usize::from(ancient.is_some());
    if total <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|&a, &b| entries[a].time.cmp(&entries[b].time));
    // Enough of the oldest that, with the bucket, MAX_UPDATE_MANAGERS remain.
    let n = total - MAX_UPDATE_MANAGERS + usize::from(ancient.is_none());
    let merge: Vec<usize> = updaters[..n].to_vec();
    let mut bucket = match ancient {
        Some(i) => entries[i].clone(),
        None => Entry {
            manager: ANCIENT_CHANGES.into(),
            apply: false,
            api_version: String::new(),
            subresource: String::new(),
            time: None,
            set: FieldSet::new(),
        },
    };
    for &i in &merge {
        bucket.set.extend(entries[i].set.iter().cloned());
        bucket.time = bucket.time.max(entries[i].time.clone());
        bucket.api_version = entries[i].api_version.clone();
    }
    let mut drop: Vec<usize> = merge;
    drop.extend(ancient);
    drop.sort_unstable();
    for i in drop.into_iter().rev() {
        entries.remove(i);
    }
    entries.push(bucket);
}

// ---------------------------------------------------------------------------------------------------------
// Field sets of objects

/// The member paths of an object inside `scope`, with the value of each leaf (`None` for list items, which
/// are compared by presence; their fields are members of their own).
fn members(obj: &Value, lists: Lists, scope: Scope) -> BTreeMap<FieldPath, Option<&Value>> {
    let mut out = BTreeMap::new();
    let Some(top) = obj.as_object() else {
        return out;
    };
    let mut path = Vec::new();
    for (k, v) in top {
        let keep = match (k.as_str(), scope) {
            ("apiVersion" | "kind", _) => false,
            ("status", Scope::NoStatus) => false,
            ("status", Scope::StatusOnly) => true,
            (_, Scope::StatusOnly) => false,
            _ => true,
        };
        if !keep {
            continue;
        }
        if k == "metadata" {
            let Some(m) = v.as_object() else { continue };
            for (mk, mv) in m {
                if is_server_metadata(mk) {
                    continue;
                }
                path.push("f:metadata".to_string());
                walk_field(mk, mv, Lists::Builtin, &mut path, &mut out);
                path.pop();
            }
            continue;
        }
        walk_field(k, v, lists, &mut path, &mut out);
    }
    out
}

/// Metadata the server owns or that identifies the object; nobody manages it.
fn is_server_metadata(key: &str) -> bool {
    matches!(
        key,
        "name"
            | "namespace"
            | "uid"
            | "resourceVersion"
            | "generation"
            | "creationTimestamp"
            | "deletionTimestamp"
            | "deletionGracePeriodSeconds"
            | "selfLink"
            | "managedFields"
    )
}

fn walk_field<'v>(
    key: &str,
    v: &'v Value,
    lists: Lists,
    path: &mut FieldPath,
    out: &mut BTreeMap<FieldPath, Option<&'v Value>>,
) {
    path.push(format!("f:{key}"));
    match v {
        Value::Object(m) => {
            // An empty map owns nothing, as in structured-merge-diff.
            for (k, child) in m {
                walk_field(k, child, lists, path, out);
            }
        }
        Value::Array(items) => walk_list(key, items, v, lists, path, out),
        _ => {
            out.insert(path.clone(), Some(v));
        }
    }
    path.pop();
}

fn walk_list<'v>(
    key: &str,
    items: &'v [Value],
    whole: &'v Value,
    lists: Lists,
    path: &mut FieldPath,
    out: &mut BTreeMap<FieldPath, Option<&'v Value>>,
) {
    let strategy = match lists {
        Lists::Custom => ListStrategy::Atomic,
        Lists::Builtin => patch::list_strategy(key, items.first()),
    };
    match strategy {
        ListStrategy::Keyed(k) if items.iter().all(|i| i.get(k).is_some()) => {
            for item in items {
                path.push(format!("k:{}", json!({ k: item[k] })));
                out.insert(path.clone(), None);
                if let Some(m) = item.as_object() {
                    for (ik, iv) in m {
                        walk_field(ik, iv, lists, path, out);
                    }
                }
                path.pop();
            }
        }
        ListStrategy::PrimitiveSet => {
            for item in items {
                path.push(format!("v:{item}"));
                out.insert(path.clone(), None);
                path.pop();
            }
        }
        // Atomic lists, and keyed lists with an item missing its key, are owned as a whole.
        _ => {
            out.insert(path.clone(), Some(whole));
        }
    }
}

/// The fields an object sets inside `scope` (what an applied configuration claims).
pub fn fields_of(obj: &Value, lists: Lists, scope: Scope) -> FieldSet {
    members(obj, lists, scope).into_keys().collect()
}

/// What changed between two states of an object.
#[derive(Debug, Default)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

impl Comparison {
    fn of(old: Option<&Value>, new: &Value, lists: Lists, scope: Scope) -> Comparison {
        let before = old.map(|o| members(o, lists, scope)).unwrap_or_default();
        let after = members(new, lists, scope);
        let mut c = Comparison::default();
        for (p, v) in &after {
            match before.get(p) {
                None => {
                    c.added.insert(p.clone());
                }
                Some(old_v) if old_v != v => {
                    c.modified.insert(p.clone());
                }
                Some(_) => {}
            }
        }
        for p in before.keys() {
            if !after.contains_key(p) {
                c.removed.insert(p.clone());
            }
        }
        c
    }

    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    /// Fields whose value the write sets (changed or new).
    fn set_by_write(&self) -> FieldSet {
        self.added.union(&self.modified).cloned().collect()
    }
}

// ---------------------------------------------------------------------------------------------------------
// FieldsV1

#[derive(Default)]
struct Node {
    member: bool,
    children: BTreeMap<String, Node>,
}

/// Encode as FieldsV1: `{"f:data":{"f:a":{}}}`; a member that also has members below it gets `".":{}`.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Node::default();
    for path in set {
        let mut cur = &mut root;
        for seg in path {
            cur = cur.children.entry(seg.clone()).or_default();
        }
        cur.member = true;
    }
    fn render(n: &Node) -> Value {
        let mut m = Map::new();
        if n.member && !n.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (k, c) in &n.children {
            m.insert(k.clone(), render(c));
        }
        Value::Object(m)
    }
    render(&root)
}

/// Decode FieldsV1: a node is a member if it is empty or carries `"."`.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn rec(v: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| *k != ".").collect();
        if !prefix.is_empty() && (children.is_empty() || m.contains_key(".")) {
            out.insert(prefix.clone());
        }
        for (k, child) in children {
            prefix.push(k.clone());
            rec(child, prefix, out);
            prefix.pop();
        }
    }
    let mut out = FieldSet::new();
    rec(v, &mut Vec::new(), &mut out);
    out
}

/// A path as the real server prints it in conflicts: `.spec.ports[port=80]`, `.metadata.finalizers[="x"]`.
pub fn path_string(path: &FieldPath) -> String {
    let mut s = String::new();
    for seg in path {
        let (kind, rest) = seg.split_at(seg.len().min(2));
        match kind {
            "f:" => {
                s.push('.');
                s.push_str(rest);
            }
            "k:" => {
                let keys: Vec<String> = serde_json::from_str::<Map<String, Value>>(rest)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                    .unwrap_or_else(|_| vec![rest.to_string()]);
                s.push_str(&format!("[{}]", keys.join(",")));
            }
            "v:" => s.push_str(&format!("[={rest}]")),
            "i:" => s.push_str(&format!("[{rest}]")),
            _ => s.push_str(seg),
        }
    }
    s
}

/// Remove the field or list item at `path` from `obj` (nothing happens if it is not there).
fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parents {
        let next = match find_child(cur, seg) {
            Some(Child::Field(k)) => cur.get_mut(k.as_str()),
            Some(Child::Item(i)) => cur.get_mut(i),
            None => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match find_child(cur, last) {
        Some(Child::Field(k)) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(&k);
            }
        }
        Some(Child::Item(i)) => {
            if let Some(a) = cur.as_array_mut() {
                a.remove(i);
            }
        }
        None => {}
    }
}

enum Child {
    Field(String),
    Item(usize),
}

/// Resolve one FieldsV1 step against a value.
fn find_child(v: &Value, seg: &str) -> Option<Child> {
    if let Some(f) = seg.strip_prefix("f:") {
        return v.get(f).map(|_| Child::Field(f.to_string()));
    }
    let items = v.as_array()?;
    if let Some(k) = seg.strip_prefix("k:") {
        let keys: Map<String, Value> = serde_json::from_str(k).ok()?;
        return items
            .iter()
            .position(|i| keys.iter().all(|(kk, kv)| i.get(kk) == Some(kv)))
            .map(Child::Item);
    }
    if let Some(val) = seg.strip_prefix("v:") {
        let want: Value = serde_json::from_str(val).ok()?;
        return items.iter().position(|i| *i == want).map(Child::Item);
    }
    let i: usize = seg.strip_prefix("i:")?.parse().ok()?;
    (i < items.len()).then_some(Child::Item(i))
}

/// Whether `path` is the key field of a list item (`…/k:{"name":"a"}/f:name`): it goes only with its item.
fn is_item_key(path: &[String]) -> bool {
    let [.., item, field] = path else {
        return false;
    };
    match (item.strip_prefix("k:"), field.strip_prefix("f:")) {
        (Some(keys), Some(f)) => {
            serde_json::from_str::<Map<String, Value>>(keys).is_ok_and(|k| k.contains_key(f))
        }
        _ => false,
    }
}

/// Whether `set` owns `path`, something inside it, or something containing it.
fn overlaps(set: &FieldSet, path: &FieldPath) -> bool {
    set.iter()
        .any(|o| o.starts_with(path) || path.starts_with(o))
}

// ---------------------------------------------------------------------------------------------------------
// Operations

/// Record a non-apply write (create, update, patch) by `w`: `new` is the state about to be stored, `live`
/// the stored one (`None` on create). Managed fields the client sent are taken as given (that is how
/// clients reset or migrate them), except through `/status`; otherwise the stored ones carry over.
pub fn record_update(live: Option<&Value>, new: &mut Value, w: &Writer) {
    let given = managed_fields(new).filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
    let mut entries = match given {
        Some(g) if w.scope != Scope::StatusOnly => decode(Some(g)),
        _ => decode(live.and_then(managed_fields)),
    };
    let cmp = Comparison::of(live, new, w.lists, w.scope);
    let me = Entry {
        manager: w.manager.clone(),
        apply: false,
        api_version: w.api_version.clone(),
        subresource: subresource_of(w.scope).to_string(),
        time: Some(w.now.clone()),
        set: FieldSet::new(),
    };
    let mine = entries.iter().position(|e| e.same_manager(&me));
    if !cmp.is_empty() {
        let taken = cmp.set_by_write();
        for (i, e) in entries.iter_mut().enumerate() {
            if Some(i) == mine {
                continue;
            }
            e.set
                .retain(|p| !taken.contains(p) && !cmp.removed.contains(p));
        }
        let mut entry = match mine {
            Some(i) => entries.remove(i),
            None => me,
        };
        entry.set.retain(|p| !cmp.removed.contains(p));
        entry.set.extend(taken);
        entry.time = Some(w.now.clone());
        entries.push(entry);
        cap_update_managers(&mut entries);
    }
    store(new, entries);
}

/// Server-side apply by `w`: `merged` is the live object (`None` when creating) with `config` merged in and
/// restricted to the endpoint. Removes what the manager applied before but no longer does (unless another
/// manager owns it), detects conflicts with other managers (a 409 unless `force`; forced fields move to
/// the applier) and records the applier's field set. Returns the object to store.
pub fn apply(
    live: Option<&Value>,
    mut merged: Value,
    config: &Value,
    w: &Writer,
    force: bool,
) -> Result<Value, ApiError> {
    let mut entries = decode(live.and_then(managed_fields));
    let applied = fields_of(config, w.lists, w.scope);
    let me = Entry {
        manager: w.manager.clone(),
        apply: true,
        api_version: w.api_version.clone(),
        subresource: subresource_of(w.scope).to_string(),
        time: Some(w.now.clone()),
        set: applied.clone(),
    };
    let previous = entries
        .iter()
        .position(|e| e.same_manager(&me))
        .map(|i| entries.remove(i));
    if let Some(prev) = &previous {
        // Outermost first: a removed list item takes its fields with it.
        let mut dropped: Vec<&FieldPath> = prev.set.difference(&applied).collect();
        dropped.sort_by_key(|p| p.len());
        for path in dropped {
            if !entries.iter().any(|e| overlaps(&e.set, path))
                && !overlaps(&applied, path)
                && !is_item_key(path)
            {
                remove_path(&mut merged, path);
            }
        }
    }
    let cmp = Comparison::of(live, &merged, w.lists, w.scope);
    let taken = cmp.set_by_write();
    let mut conflicts: Vec<(String, FieldPath)> = Vec::new();
    for e in &entries {
        for p in e.set.intersection(&taken) {
            conflicts.push((e.describe(), p.clone()));
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(conflict_error(conflicts));
    }
    for e in entries.iter_mut() {
        e.set
            .retain(|p| !taken.contains(p) && !cmp.removed.contains(p));
    }
    let mut entry = me;
    // Unchanged ownership of an unchanged object keeps the old entry's time, so a repeated apply is a no-op.
    if let Some(prev) = previous
        && prev.set == entry.set
        && cmp.is_empty()
    {
        entry.time = prev.time;
    }
    entries.push(entry);
    store(&mut merged, entries);
    Ok(merged)
}

/// The real server's 409 for apply conflicts: one cause per (manager, field).
fn conflict_error(mut conflicts: Vec<(String, FieldPath)>) -> ApiError {
    conflicts.sort();
    let message = if let [(manager, path)] = conflicts.as_slice() {
        format!(
            "Apply failed with 1 conflict: conflict with {manager}: {}",
            path_string(path)
        )
    } else {
        let mut lines = Vec::new();
        let mut last: Option<&str> = None;
        for (manager, path) in &conflicts {
            if last != Some(manager.as_str()) {
                lines.push(format!("conflicts with {manager}:"));
                last = Some(manager);
            }
            lines.push(format!("- {}", path_string(path)));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"),
                "field": path_string(p)})
        })
        .collect();
    let mut e = ApiError::new(409, "Conflict", message);
    e.details = Some(json!({ "causes": causes }));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> Writer {
        Writer {
            manager: manager.into(),
            api_version: "v1".into(),
            lists: Lists::Builtin,
            scope: Scope::Whole,
            now: "2026-01-01T00:00:00Z".into(),
        }
    }

    fn apply_as(
        live: &Value,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, ApiError> {
        let mut merged = live.clone();
        patch::apply_merge(&mut merged, config, true);
        apply(Some(live), merged, config, &writer(manager), force)
    }

    fn managers(obj: &Value) -> Vec<(String, String)> {
        obj["metadata"]["managedFields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["manager"].as_str().unwrap().to_string(),
                            e["operation"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn fields_v1_round_trip_with_list_items() {
        let obj = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "labels": {"a": "b"},
            "finalizers": ["f/1"]}, "spec": {"ports": [{"port": 80, "name": "http"}], "selector": {}},
            "data": {"args": [1, 2]}});
        let set = fields_of(&obj, Lists::Builtin, Scope::Whole);
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"f/1\"": {}}},
                "f:spec": {"f:ports": {"k:{\"port\":80}": {".": {}, "f:name": {}, "f:port": {}}}},
                "f:data": {"f:args": {}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
        let port: FieldPath = vec!["f:spec".into(), "f:ports".into(), "k:{\"port\":80}".into()];
        assert_eq!(path_string(&port), ".spec.ports[port=80]");
        assert_eq!(
            path_string(&vec![
                "f:metadata".into(),
                "f:finalizers".into(),
                "v:\"f/1\"".into()
            ]),
            ".metadata.finalizers[=\"f/1\"]"
        );
    }

    #[test]
    fn updates_take_ownership_of_what_they_change() {
        let live = json!({"metadata": {"name": "x"}, "data": {"a": "1"}});
        let mut created = live.clone();
        record_update(None, &mut created, &writer("creator"));
        let mut new = created.clone();
        new["data"]["b"] = json!("2");
        record_update(Some(&created), &mut new, &writer("editor"));
        let entries = decode(managed_fields(&new));
        assert_eq!(entries.len(), 2);
        let editor = entries.iter().find(|e| e.manager == "editor").unwrap();
        assert_eq!(
            editor.set,
            FieldSet::from([vec!["f:data".to_string(), "f:b".to_string()]])
        );
        // A write that changes nothing records nothing.
        let mut same = new.clone();
        record_update(Some(&new), &mut same, &writer("third"));
        assert_eq!(same, new);
    }

    #[test]
    fn apply_conflicts_force_and_pruning() {
        let empty = json!({"metadata": {"name": "x"}});
        let a1 = json!({"metadata": {"name": "x"}, "data": {"k": "a", "only-a": "1"}});
        let s1 = apply_as(&empty, &a1, "a", false).unwrap();
        // Same value: shared ownership, no conflict.
        let b_same = json!({"metadata": {"name": "x"}, "data": {"k": "a"}});
        let s2 = apply_as(&s1, &b_same, "b", false).unwrap();
        // A different value conflicts and names the manager and the field.
        let b_diff = json!({"metadata": {"name": "x"}, "data": {"k": "b"}});
        let err = apply_as(&s2, &b_diff, "b", false).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"a\": .data.k"
        );
        assert_eq!(
            err.details.as_ref().unwrap()["causes"][0]["field"],
            ".data.k"
        );
        // Forced: b takes .data.k from a.
        let s3 = apply_as(&s2, &b_diff, "b", true).unwrap();
        assert_eq!(s3["data"]["k"], "b");
        let a = decode(managed_fields(&s3))
            .into_iter()
            .find(|e| e.manager == "a")
            .unwrap();
        assert!(
            !a.set
                .contains(&vec!["f:data".to_string(), "f:k".to_string()])
        );
        // a drops both fields: only-a goes (nobody else owns it); k stays (b owns it).
        let a2 = json!({"metadata": {"name": "x"}, "data": {"new": "1"}});
        let s4 = apply_as(&s3, &a2, "a", false).unwrap();
        assert_eq!(s4["data"], json!({"k": "b", "new": "1"}));
        assert_eq!(
            managers(&s4),
            vec![("a".into(), "Apply".into()), ("b".into(), "Apply".into())]
        );
        // Re-applying the same configuration is a no-op.
        assert_eq!(apply_as(&s4, &a2, "a", false).unwrap(), s4);
    }

    #[test]
    fn apply_conflicts_with_updaters_and_keyed_items() {
        let mut live = json!({"metadata": {"name": "x"},
            "spec": {"ports": [{"port": 80, "targetPort": 8080}]}});
        record_update(None, &mut live, &writer("kubectl-create"));
        // Another port item: no conflict (different list item).
        let cfg = json!({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 443, "targetPort": 8443}]}});
        let s = apply_as(&live, &cfg, "ctl", false).unwrap();
        assert_eq!(s["spec"]["ports"].as_array().unwrap().len(), 2);
        // Changing the updater's item field conflicts; the message names the Update manager with its version.
        let cfg2 = json!({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 80, "targetPort": 9090}]}});
        let err = apply_as(&s, &cfg2, "ctl", false).unwrap_err();
        assert!(
            err.message.contains(
                "conflict with \"kubectl-create\" using v1 at 2026-01-01T00:00:00Z: .spec.ports[port=80].targetPort"
            ),
            "{}",
            err.message
        );
        // ctl stops applying port 443: the item it alone owned is removed.
        let cfg3 = json!({"metadata": {"name": "x"}, "spec": {}});
        let s2 = apply_as(&s, &cfg3, "ctl", false).unwrap();
        assert_eq!(
            s2["spec"]["ports"],
            json!([{"port": 80, "targetPort": 8080}])
        );
    }

    #[test]
    fn too_many_updaters_are_merged() {
        let mut obj = json!({"metadata": {"name": "x"}, "data": {}});
        for i in 0..15 {
            let live = obj.clone();
            obj["data"][format!("k{i}")] = json!("v");
            let w = Writer {
                now: format!("2026-01-01T00:00:{i:02}Z"),
                ..writer(&format!("m{i:02}"))
            };
            record_update(Some(&live), &mut obj, &w);
        }
        let entries = decode(managed_fields(&obj));
        assert_eq!(entries.len(), MAX_UPDATE_MANAGERS);
        let ancient = entries
            .iter()
            .find(|e| e.manager == ANCIENT_CHANGES)
            .unwrap();
        assert_eq!(ancient.set.len(), 6);
    }
}
