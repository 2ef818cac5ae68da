//! Server-side apply field ownership, reduced to what makes re-applies behave: each apply manager's field
//! set is kept in a `managedFields` entry (`operation: Apply`, FieldsV1), and fields a manager applied before
//! but leaves out now are removed unless another apply manager still sets them.
//!
//! Field sets are map paths: maps recurse, everything else (lists included) is a leaf. Update operations are
//! not recorded and there is no conflict detection.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A set of field paths.
pub type FieldSet = BTreeSet<Vec<String>>;

/// The fields an applied configuration sets (identity fields excluded).
pub fn fields_of(applied: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    let mut prefix = Vec::new();
    walk(applied, &mut prefix, &mut out);
    out.retain(|p| !is_identity(p));
    out
}

/// Fields that identify the object rather than configure it.
fn is_identity(p: &[String]) -> bool {
    match p {
        [first, ..] if first == "apiVersion" || first == "kind" => true,
        [meta, field] if meta == "metadata" => {
            matches!(
                field.as_str(),
                "name" | "namespace" | "resourceVersion" | "managedFields"
            )
        }
        _ => false,
    }
}

fn walk(v: &Value, prefix: &mut Vec<String>, out: &mut FieldSet) {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(k.clone());
                walk(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

/// Encode as FieldsV1 (`{"f:data":{"f:a":{}}}`).
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for seg in path {
            cur = cur
                .entry(format!("f:{seg}"))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

/// Decode FieldsV1 written by [`to_fields_v1`] (unknown key kinds are ignored).
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn rec(v: &Value, prefix: &mut Vec<String>, out: &mut FieldSet) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
            .unwrap_or_default();
        if children.is_empty() {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            return;
        }
        for (k, child) in children {
            prefix.push(k[2..].to_string());
            rec(child, prefix, out);
            prefix.pop();
        }
    }
    let mut out = FieldSet::new();
    rec(v, &mut Vec::new(), &mut out);
    out
}

/// Apply entries of an object: (manager, field set).
pub fn apply_entries(obj: &Value) -> Vec<(String, FieldSet)> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.get("operation").and_then(Value::as_str) == Some("Apply"))
                .filter_map(|e| {
                    let m = e.get("manager")?.as_str()?.to_string();
                    Some((m, e.get("fieldsV1").map(from_fields_v1).unwrap_or_default()))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        match cur.get_mut(p.as_str()) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last.as_str());
    }
}

/// After merging `applied` into `merged` for `manager`: drop fields the manager no longer applies (unless
/// another apply manager owns them) and record the manager's new field set. `live` is the state before.
/// Returns whether the manager's field set changed.
pub fn record_apply(
    live: Option<&Value>,
    merged: &mut Value,
    applied: &Value,
    manager: &str,
    api_version: &str,
    now: &str,
) -> bool {
    let entries = live.map(apply_entries).unwrap_or_default();
    let new_set = fields_of(applied);
    let old_set = entries
        .iter()
        .find(|(m, _)| m == manager)
        .map(|(_, s)| s.clone());
    let others: FieldSet = entries
        .iter()
        .filter(|(m, _)| m != manager)
        .flat_map(|(_, s)| s.iter().cloned())
        .collect();
    if let Some(old) = &old_set {
        for path in old.difference(&new_set) {
            if !others
                .iter()
                .any(|o| o.starts_with(path) || path.starts_with(o))
            {
                remove_path(merged, path);
            }
        }
    }
    let changed = old_set.as_ref() != Some(&new_set);
    let mut list: Vec<Value> = live
        .and_then(|l| l.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let entry = json!({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now,
        "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&new_set)});
    let existing = list.iter().position(|e| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
    });
    // Unchanged ownership keeps the old entry (and its time), so a no-op apply stays a no-op.
    match existing {
        Some(i) if changed => list[i] = entry,
        Some(_) => {}
        None => list.push(entry),
    }
    if let Some(m) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("managedFields".into(), Value::Array(list));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_v1_round_trip() {
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "b"}},
            "data": {"k": "v", "l": "w"}, "spec": {"list": [1, 2]}});
        let set = fields_of(&applied);
        assert_eq!(set.len(), 4);
        assert_eq!(from_fields_v1(&to_fields_v1(&set)), set);
    }

    #[test]
    fn dropped_fields_are_removed_unless_shared() {
        let first = json!({"metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}});
        let mut merged = first.clone();
        record_apply(None, &mut merged, &first, "m1", "v1", "t");
        let other = json!({"metadata": {"name": "x"}, "data": {"b": "2"}});
        let live = merged.clone();
        let mut merged2 = live.clone();
        record_apply(Some(&live), &mut merged2, &other, "m2", "v1", "t");
        let second = json!({"metadata": {"name": "x"}, "data": {"c": "3"}});
        let live = merged2.clone();
        let mut merged3 = live.clone();
        crate::patch::merge_patch(&mut merged3, &second);
        assert!(record_apply(
            Some(&live),
            &mut merged3,
            &second,
            "m1",
            "v1",
            "t"
        ));
        // a dropped by m1 and owned by nobody else → removed; b still owned by m2 → kept
        assert_eq!(merged3["data"], json!({"b": "2", "c": "3"}));
        assert_eq!(
            merged3["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }
}
