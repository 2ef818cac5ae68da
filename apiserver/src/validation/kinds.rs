//! The rules deployments run into: size limits (annotations, ConfigMaps), ConfigMap keys and
//! `binaryData`, Lease fields, RBAC rules and role references, Deployment selectors and
//! PodDisruptionBudget budgets. Also the one canonical form the server imposes on those kinds:
//! `binaryData` is bytes on the real server, so line-wrapped base64 (what `kubectl kustomize`
//! writes) is accepted and served back unwrapped.

use base64::Engine;
use serde_json::Value;

use super::Cause;
use crate::registry::ResourceType;

/// Total size of all annotation keys and values (apimachinery's `TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Total size of a ConfigMap's `data` values plus decoded `binaryData` (`MaxSecretSize`).
pub const MAX_CONFIGMAP_BYTES: usize = 1024 * 1024;

/// Brings `new` into the canonical form the real server stores.
pub(super) fn canonicalize(rt: &ResourceType, new: &mut Value) {
    if !rt.custom && rt.group.is_empty() && rt.kind == "ConfigMap" {
        unwrap_binary_data(new);
    }
    if !rt.custom && rt.group.is_empty() && rt.kind == "Secret" {
        fold_string_data(new);
    }
}

/// A Secret's `stringData` is write-only: the real server encodes each value into `data`
/// (overriding a `data` entry of the same key) and never stores or serves `stringData`.
fn fold_string_data(secret: &mut Value) {
    let Some(Value::Object(strings)) = secret.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    let Some(obj) = secret.as_object_mut() else {
        return;
    };
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(Default::default()));
    if !data.is_object() {
        *data = Value::Object(Default::default());
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in strings {
            let text = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            data.insert(
                k,
                Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

/// Decodes base64 as Go's decoder does for `[]byte` fields: line breaks are skipped.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let compact: String = s.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}

/// Rewrites each decodable `binaryData` value as unwrapped base64, as the real server serves
/// what it decoded; undecodable values are left for `check` to refuse.
fn unwrap_binary_data(cm: &mut Value) {
    let Some(binary) = cm.get_mut("binaryData").and_then(Value::as_object_mut) else {
        return;
    };
    for v in binary.values_mut() {
        let canonical = v
            .as_str()
            .filter(|s| s.contains(['\n', '\r']))
            .and_then(decode_base64)
            .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes));
        if let Some(c) = canonical {
            *v = Value::String(c);
        }
    }
}

/// The first failed rule of `new` (the complete object about to be stored); `old` is the stored
/// state on updates, for the fields the real server keeps immutable.
pub(super) fn check(rt: &ResourceType, new: &Value, old: Option<&Value>) -> Option<Cause> {
    let annotations: usize = new
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    if annotations > MAX_ANNOTATIONS_BYTES {
        return err(
            "metadata.annotations",
            format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
        )
        .err();
    }
    if rt.custom {
        return None;
    }
    let rule = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "ConfigMap") => config_map(new),
        ("coordination.k8s.io", "Lease") => lease(new),
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => rules(new, rt.kind == "Role"),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            binding(new, old, rt.kind == "RoleBinding")
        }
        ("apps", "Deployment") => deployment(new, old),
        ("policy", "PodDisruptionBudget") => budget(new),
        _ => Ok(()),
    };
    rule.err()
}

type Rule = Result<(), Cause>;

/// A failed rule; the cause's reason follows from the real server's message prefix.
fn err(field: impl Into<String>, detail: impl Into<String>) -> Rule {
    let detail = detail.into();
    let reason = if detail.starts_with("Required value") {
        "FieldValueRequired"
    } else if detail.starts_with("Too long") {
        "FieldValueTooLong"
    } else if detail.starts_with("Unsupported value") {
        "FieldValueNotSupported"
    } else {
        "FieldValueInvalid"
    };
    Err((field.into(), reason, detail))
}

/// ConfigMap keys: `[-._a-zA-Z0-9]+`, at most 253 characters, not `.` or `..`.
fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

fn config_map(cm: &Value) -> Rule {
    let mut size = 0usize;
    let data = cm.get("data").and_then(Value::as_object);
    let binary = cm.get("binaryData").and_then(Value::as_object);
    for (k, v) in data.into_iter().flatten() {
        if !valid_key(k) {
            return err(
                format!("data[{k}]"),
                format!(
                    "Invalid value: \"{k}\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                ),
            );
        }
        size += k.len() + v.as_str().map_or(0, str::len);
    }
    for (k, v) in binary.into_iter().flatten() {
        if !valid_key(k) {
            return err(
                format!("binaryData[{k}]"),
                format!(
                    "Invalid value: \"{k}\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                ),
            );
        }
        if data.is_some_and(|d| d.contains_key(k)) {
            return err(
                format!("binaryData[{k}]"),
                format!("Invalid value: \"{k}\": duplicate of key present in data"),
            );
        }
        let decoded = v.as_str().and_then(decode_base64);
        let Some(bytes) = decoded else {
            return err(
                format!("binaryData[{k}]"),
                "Invalid value: not a base64-encoded string",
            );
        };
        size += k.len() + bytes.len();
    }
    if size > MAX_CONFIGMAP_BYTES {
        return err(
            "[]",
            format!("Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes"),
        );
    }
    Ok(())
}

fn lease(l: &Value) -> Rule {
    if let Some(d) = l.pointer("/spec/leaseDurationSeconds")
        && d.as_i64().is_none_or(|d| d <= 0)
    {
        return err(
            "spec.leaseDurationSeconds",
            format!("Invalid value: {d}: must be greater than 0"),
        );
    }
    if let Some(t) = l.pointer("/spec/leaseTransitions")
        && t.as_i64().is_none_or(|t| t < 0)
    {
        return err(
            "spec.leaseTransitions",
            format!("Invalid value: {t}: must be greater than or equal to 0"),
        );
    }
    Ok(())
}

fn non_empty_list(v: Option<&Value>) -> bool {
    v.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

fn rules(role: &Value, namespaced: bool) -> Rule {
    let empty = Vec::new();
    let list = role
        .get("rules")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for (i, r) in list.iter().enumerate() {
        if !non_empty_list(r.get("verbs")) {
            return err(
                format!("rules[{i}].verbs"),
                "Required value: verbs must contain at least one value",
            );
        }
        if non_empty_list(r.get("nonResourceURLs")) {
            if namespaced {
                return err(
                    format!("rules[{i}].nonResourceURLs"),
                    "Invalid value: namespaced rules cannot apply to non-resource URLs",
                );
            }
            if non_empty_list(r.get("apiGroups")) || non_empty_list(r.get("resources")) {
                return err(
                    format!("rules[{i}].nonResourceURLs"),
                    "Invalid value: rules cannot apply to both regular resources and non-resource URLs",
                );
            }
            continue;
        }
        if !non_empty_list(r.get("apiGroups")) {
            return err(
                format!("rules[{i}].apiGroups"),
                "Required value: resource rules must supply at least one api group",
            );
        }
        if !non_empty_list(r.get("resources")) {
            return err(
                format!("rules[{i}].resources"),
                "Required value: resource rules must supply at least one resource",
            );
        }
    }
    Ok(())
}

fn binding(b: &Value, old: Option<&Value>, namespaced: bool) -> Rule {
    let role_ref = b.get("roleRef");
    let s = |p: &str| role_ref.and_then(|r| r.get(p)).and_then(Value::as_str);
    if s("apiGroup") != Some("rbac.authorization.k8s.io") {
        return err(
            "roleRef.apiGroup",
            "Unsupported value: supported values: \"rbac.authorization.k8s.io\"",
        );
    }
    match s("kind") {
        Some("ClusterRole") => {}
        Some("Role") if namespaced => {}
        _ if namespaced => {
            return err(
                "roleRef.kind",
                "Unsupported value: supported values: \"Role\", \"ClusterRole\"",
            );
        }
        _ => {
            return err(
                "roleRef.kind",
                "Unsupported value: supported values: \"ClusterRole\"",
            );
        }
    }
    if s("name").is_none_or(str::is_empty) {
        return err("roleRef.name", "Required value");
    }
    if let Some(before) = old.and_then(|o| o.get("roleRef"))
        && Some(before) != role_ref
    {
        return err("roleRef", "Invalid value: cannot change roleRef");
    }
    let empty = Vec::new();
    let subjects = b
        .get("subjects")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for (i, sub) in subjects.iter().enumerate() {
        let get = |p: &str| sub.get(p).and_then(Value::as_str).unwrap_or("");
        if get("name").is_empty() {
            return err(format!("subjects[{i}].name"), "Required value");
        }
        match get("kind") {
            "ServiceAccount" => {
                if !namespaced && get("namespace").is_empty() {
                    return err(format!("subjects[{i}].namespace"), "Required value");
                }
            }
            "User" | "Group" => {}
            other => {
                return err(
                    format!("subjects[{i}].kind"),
                    format!(
                        "Unsupported value: \"{other}\": supported values: \"ServiceAccount\", \"User\", \"Group\""
                    ),
                );
            }
        }
    }
    Ok(())
}

fn deployment(d: &Value, old: Option<&Value>) -> Rule {
    let Some(selector) = d.pointer("/spec/selector").filter(|s| s.is_object()) else {
        return err("spec.selector", "Required value");
    };
    if let Some(before) = old.and_then(|o| o.pointer("/spec/selector"))
        && before != selector
    {
        return err("spec.selector", "Invalid value: field is immutable");
    }
    let labels = d.pointer("/spec/template/metadata/labels");
    let wanted = selector.get("matchLabels").and_then(Value::as_object);
    let matches = wanted.is_some_and(|w| {
        !w.is_empty()
            && w.iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    });
    // matchExpressions are not evaluated here; a selector made only of them is accepted.
    let expressions = non_empty_list(selector.get("matchExpressions"));
    let only_expressions = expressions && wanted.is_none_or(|w| w.is_empty());
    if !(matches || only_expressions) {
        return err(
            "spec.template.metadata.labels",
            "Invalid value: `selector` does not match template `labels`",
        );
    }
    if !non_empty_list(d.pointer("/spec/template/spec/containers")) {
        return err("spec.template.spec.containers", "Required value");
    }
    let empty = Vec::new();
    let containers = d
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for (i, c) in containers.iter().enumerate() {
        for field in ["name", "image"] {
            if c.get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return err(
                    format!("spec.template.spec.containers[{i}].{field}"),
                    "Required value",
                );
            }
        }
    }
    Ok(())
}

fn budget(p: &Value) -> Rule {
    let spec = p.get("spec");
    let has = |k: &str| spec.and_then(|s| s.get(k)).is_some_and(|v| !v.is_null());
    if has("minAvailable") && has("maxUnavailable") {
        return err(
            "spec",
            "Invalid value: minAvailable and maxUnavailable cannot be both set",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    /// The server's message when it refuses `v`, `None` when it accepts it.
    fn refusal(plural: &str, group: &str, mut v: Value) -> Option<String> {
        let reg = Registry::with_builtins();
        let rt = reg.find(group, "v1", plural).unwrap();
        super::super::object(&rt, &mut v, None)
            .err()
            .map(|e| e.message)
    }

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let reg = Registry::with_builtins();
        let rt = reg.find("", "v1", "secrets").unwrap();
        let mut v = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "hunter2", "c": "z"}});
        super::super::object(&rt, &mut v, None).unwrap();
        assert_eq!(v.get("stringData"), None);
        assert_eq!(
            v["data"],
            json!({"a": "eA==", "b": "aHVudGVyMg==", "c": "eg=="})
        );
    }

    #[test]
    fn wrapped_binary_data_is_served_unwrapped() {
        let reg = Registry::with_builtins();
        let rt = reg.find("", "v1", "configmaps").unwrap();
        let mut v = json!({"metadata": {"name": "p"}, "binaryData": {"a.wasm": "AGFz\nbQ==\n"}});
        canonicalize(&rt, &mut v);
        assert_eq!(v["binaryData"]["a.wasm"], "AGFzbQ==");
    }

    #[test]
    fn config_maps_check_keys_base64_and_size() {
        let ok = json!({"metadata": {"name": "p"}, "data": {"a.toml": "x"},
            "binaryData": {"a.wasm": "AGFzbQ=="}});
        assert_eq!(refusal("configmaps", "", ok), None);
        let dup =
            json!({"metadata": {"name": "p"}, "data": {"k": "x"}, "binaryData": {"k": "AA=="}});
        assert!(
            refusal("configmaps", "", dup)
                .expect("refused")
                .contains("duplicate")
        );
        let bad = json!({"metadata": {"name": "p"}, "binaryData": {"k": "not base64!"}});
        assert!(
            refusal("configmaps", "", bad)
                .expect("refused")
                .contains("binaryData[k]")
        );
        let key = json!({"metadata": {"name": "p"}, "data": {"a/b": "x"}});
        assert!(
            refusal("configmaps", "", key)
                .expect("refused")
                .contains("data[a/b]")
        );
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_CONFIGMAP_BYTES]);
        let big = json!({"metadata": {"name": "p"}, "binaryData": {"k": big}});
        assert!(
            refusal("configmaps", "", big)
                .expect("refused")
                .contains("Too long")
        );
    }

    #[test]
    fn annotations_are_bounded_for_every_kind() {
        let huge = "x".repeat(MAX_ANNOTATIONS_BYTES);
        let v = json!({"metadata": {"name": "s", "annotations": {"a": huge}}});
        assert!(
            refusal("serviceaccounts", "", v)
                .expect("refused")
                .contains("metadata.annotations: Too long")
        );
    }

    #[test]
    fn rbac_rules_and_bindings() {
        let g = "rbac.authorization.k8s.io";
        let role = |rules: Value| json!({"metadata": {"name": "r"}, "rules": rules});
        let good = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]);
        assert_eq!(refusal("roles", g, role(good)), None);
        let no_verbs = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": []}]);
        assert!(
            refusal("roles", g, role(no_verbs))
                .expect("refused")
                .contains("rules[0].verbs")
        );
        let urls = json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]);
        assert!(refusal("roles", g, role(urls.clone())).is_some());
        assert_eq!(refusal("clusterroles", g, role(urls)), None);
        let sa = json!([{"kind": "ServiceAccount", "name": "kubewasm"}]);
        let rb = |kind: &str| {
            json!({"metadata": {"name": "b"}, "subjects": sa,
            "roleRef": {"apiGroup": g, "kind": kind, "name": "r"}})
        };
        assert_eq!(refusal("rolebindings", g, rb("Role")), None);
        assert!(refusal("clusterrolebindings", g, rb("Role")).is_some());
        assert!(
            refusal("clusterrolebindings", g, rb("ClusterRole"))
                .expect("refused")
                .contains("subjects[0].namespace")
        );
    }

    #[test]
    fn deployments_need_a_matching_selector_and_budgets_one_bound() {
        let d = |sel: Value| {
            json!({"metadata": {"name": "d"}, "spec": {"selector": sel,
            "template": {"metadata": {"labels": {"app": "k"}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        };
        assert_eq!(
            refusal(
                "deployments",
                "apps",
                d(json!({"matchLabels": {"app": "k"}}))
            ),
            None
        );
        assert!(
            refusal(
                "deployments",
                "apps",
                d(json!({"matchLabels": {"app": "x"}}))
            )
            .expect("refused")
            .contains("does not match")
        );
        let pdb =
            json!({"metadata": {"name": "p"}, "spec": {"minAvailable": 1, "maxUnavailable": 1}});
        assert!(refusal("poddisruptionbudgets", "policy", pdb).is_some());
    }
}
