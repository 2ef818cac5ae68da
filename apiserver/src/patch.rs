//! PATCH semantics: JSON merge patch, JSON patch (with the apiserver's null-test quirk), a documented subset
//! of strategic merge patch, and the merge used by server-side apply.

use serde_json::{Map, Value};

/// A PATCH request's patch: its flavour and its document, which the patch operations
/// ([`crate::ops::patch`], [`crate::scale::patch`]) always take together.
#[derive(Debug, Clone)]
pub struct Patch {
    /// How `body` applies, from the request's Content-Type.
    pub kind: PatchKind,
    /// The patch document (for apply, the YAML already parsed).
    pub body: Value,
}

/// The patch flavours, chosen by request Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// Map a Content-Type header to a patch kind.
    pub fn from_content_type(ct: &str) -> Option<PatchKind> {
        let base = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match base.as_str() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Some(PatchKind::Apply),
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchError {
    /// The patch document itself is malformed (400).
    Malformed(String),
    /// A JSON-patch operation failed, e.g. a `test` (422).
    Failed(String),
}

/// RFC 7386 merge patch.
pub fn merge_patch(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
}

/// RFC 6902 patch, atomically. A `test` of `null` against an absent path succeeds, as on the real apiserver
/// (kube-runtime's finalizer helper relies on that).
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| PatchError::Malformed("json patch must be an array of operations".into()))?;
    if ops.len() > 10_000 {
        return Err(PatchError::Malformed(
            "the allowed maximum operations in a JSON patch is 10000".into(),
        ));
    }
    let mut work = doc.clone();
    for op in ops {
        let is_null_test = op.get("op").and_then(Value::as_str) == Some("test")
            && op.get("value").is_some_and(Value::is_null);
        if is_null_test {
            let path = op.get("path").and_then(Value::as_str).unwrap_or("");
            if work.pointer(path).is_none_or(Value::is_null) {
                continue;
            }
        }
        let parsed: json_patch::PatchOperation = serde_json::from_value(op.clone())
            .map_err(|e| PatchError::Malformed(format!("invalid JSON patch operation: {e}")))?;
        json_patch::patch(&mut work, std::slice::from_ref(&parsed))
            .map_err(|e| PatchError::Failed(e.to_string()))?;
    }
    *doc = work;
    Ok(())
}

/// How a list field is merged by strategic merge patch / apply, and owned by field managers.
pub enum ListStrategy {
    /// Replace the whole list (the default).
    Atomic,
    /// Merge object items by this key.
    Keyed(&'static str),
    /// Union of primitive values.
    PrimitiveSet,
}

/// The strategic-merge metadata for the list fields we know, keyed by field name (and item shape).
pub fn list_strategy(field: &str, sample: Option<&Value>) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => ListStrategy::Keyed("name"),
        "volumeMounts" => ListStrategy::Keyed("mountPath"),
        "volumeDevices" => ListStrategy::Keyed("devicePath"),
        "conditions" => ListStrategy::Keyed("type"),
        "hostAliases" => ListStrategy::Keyed("ip"),
        "ownerReferences" => ListStrategy::Keyed("uid"),
        "topologySpreadConstraints" => ListStrategy::Keyed("topologyKey"),
        "finalizers" => ListStrategy::PrimitiveSet,
        "ports" => {
            if sample.is_some_and(|s| s.get("containerPort").is_some()) {
                ListStrategy::Keyed("containerPort")
            } else {
                ListStrategy::Keyed("port")
            }
        }
        _ => ListStrategy::Atomic,
    }
}

/// Strategic merge patch over built-in kinds (see README for what is approximated).
pub fn strategic_merge(doc: &mut Value, patch: &Value) -> Result<(), PatchError> {
    if !patch.is_object() {
        return Err(PatchError::Malformed(
            "strategic merge patch must be a JSON object".into(),
        ));
    }
    smp_map(doc, patch, true);
    Ok(())
}

/// The merge used by server-side apply: maps merged, known associative lists merged by key, other lists
/// replaced. Custom resources get plain maps-merged/lists-replaced semantics outside `metadata`, whose
/// lists (finalizers, ownerReferences) are the same as everywhere.
pub fn apply_merge(doc: &mut Value, applied: &Value, builtin: bool) {
    if builtin {
        smp_map(doc, applied, false);
        return;
    }
    let mut rest = applied.clone();
    let meta = rest.as_object_mut().and_then(|m| m.remove("metadata"));
    merge_patch(doc, &rest);
    if let (Some(meta), Some(d)) = (meta, doc.as_object_mut()) {
        let entry = d.entry("metadata").or_insert(Value::Null);
        smp_map(entry, &meta, false);
    }
}

fn smp_map(doc: &mut Value, patch: &Value, directives: bool) {
    let Some(pmap) = patch.as_object() else {
        *doc = patch.clone();
        return;
    };
    if directives && pmap.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = pmap.clone();
        clean.remove("$patch");
        *doc = Value::Object(clean);
        return;
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let retain: Option<Vec<String>> = if directives {
        pmap.get("$retainKeys").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
    } else {
        None
    };
    let dmap = doc.as_object_mut().expect("object");
    for (k, pv) in pmap {
        if directives {
            if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
                continue;
            }
            if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
                if let (Some(Value::Array(list)), Some(del)) = (dmap.get_mut(field), pv.as_array())
                {
                    list.retain(|x| !del.contains(x));
                }
                continue;
            }
        }
        if pv.is_null() {
            dmap.remove(k);
            continue;
        }
        if directives && pv.get("$patch").and_then(Value::as_str) == Some("delete") {
            dmap.remove(k);
            continue;
        }
        match pv {
            Value::Object(_) => {
                let entry = dmap.entry(k.clone()).or_insert(Value::Null);
                smp_map(entry, pv, directives);
            }
            Value::Array(items) => {
                let existing = dmap.remove(k);
                let merged = smp_list(k, existing, items, directives);
                dmap.insert(k.clone(), merged);
            }
            _ => {
                dmap.insert(k.clone(), pv.clone());
            }
        }
    }
    if let Some(keep) = retain {
        dmap.retain(|k, _| keep.contains(k) || pmap.contains_key(k));
    }
}

fn smp_list(field: &str, existing: Option<Value>, items: &[Value], directives: bool) -> Value {
    let replace = directives
        && items
            .iter()
            .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let clean: Vec<Value> = items
        .iter()
        .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("replace"))
        .cloned()
        .collect();
    let mut current = match existing {
        Some(Value::Array(a)) if !replace => a,
        _ => {
            return Value::Array(
                clean
                    .into_iter()
                    .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                    .collect(),
            );
        }
    };
    match list_strategy(field, items.first().or(current.first())) {
        ListStrategy::Atomic => Value::Array(clean),
        ListStrategy::PrimitiveSet => {
            for v in clean {
                if !current.contains(&v) {
                    current.push(v);
                }
            }
            Value::Array(current)
        }
        ListStrategy::Keyed(key) => {
            for item in clean {
                let Some(kv) = item.get(key).cloned() else {
                    current.push(item);
                    continue;
                };
                let pos = current.iter().position(|c| c.get(key) == Some(&kv));
                let delete =
                    directives && item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(p), true) => {
                        current.remove(p);
                    }
                    (None, true) => {}
                    (Some(p), false) => smp_map(&mut current[p], &item, directives),
                    (None, false) => {
                        let mut fresh = Value::Object(Map::new());
                        smp_map(&mut fresh, &item, directives);
                        current.push(fresh);
                    }
                }
            }
            Value::Array(current)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_deletes_nulls_and_replaces_lists() {
        let mut d = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        merge_patch(&mut d, &json!({"a": null, "b": {"c": 5}, "l": [3]}));
        assert_eq!(d, json!({"b": {"c": 5, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_null_test_on_absent_path_succeeds() {
        let mut d = json!({"metadata": {"name": "x"}});
        let p = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                       {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]);
        json_patch(&mut d, &p).unwrap();
        assert_eq!(d["metadata"]["finalizers"], json!(["f"]));
        // The same null test now fails because the path exists: the whole patch is rejected, nothing changes.
        let before = d.clone();
        let p2 = json!([{"op": "add", "path": "/metadata/x", "value": 1},
                        {"op": "test", "path": "/metadata/finalizers", "value": null}]);
        assert!(matches!(
            json_patch(&mut d, &p2),
            Err(PatchError::Failed(_))
        ));
        assert_eq!(d, before);
        assert!(matches!(
            json_patch(&mut d, &json!({"op": "add"})),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn strategic_merge_merges_containers_by_name() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}}}});
        let p = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "c:1"}]}}}});
        strategic_merge(&mut d, &p).unwrap();
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "a:2", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
                   {"name": "c", "image": "c:1"}])
        );
    }

    #[test]
    fn strategic_merge_directives() {
        let mut d = json!({"metadata": {"finalizers": ["a", "b"]}, "data": {"x": "1", "y": "2"}, "spec": {"ports": [{"port": 80, "name": "http"}]}});
        let p = json!({"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]},
                       "data": {"$patch": "replace", "z": "3"},
                       "spec": {"ports": [{"port": 80, "targetPort": 8080}]}});
        strategic_merge(&mut d, &p).unwrap();
        assert_eq!(d["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(d["data"], json!({"z": "3"}));
        assert_eq!(
            d["spec"]["ports"],
            json!([{"port": 80, "name": "http", "targetPort": 8080}])
        );
    }

    #[test]
    fn apply_merge_keeps_unmentioned_fields() {
        let mut d = json!({"data": {"a": "1", "b": "2"}, "spec": {"containers": [{"name": "a", "image": "1"}]}});
        apply_merge(
            &mut d,
            &json!({"data": {"a": "9"}, "spec": {"containers": [{"name": "b", "image": "2"}]}}),
            true,
        );
        assert_eq!(d["data"], json!({"a": "9", "b": "2"}));
        assert_eq!(d["spec"]["containers"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchKind::Merge)
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml"),
            Some(PatchKind::Apply)
        );
        assert_eq!(PatchKind::from_content_type("application/json"), None);
    }
}
