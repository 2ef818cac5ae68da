//! The `/scale` subresource: an autoscaling/v1 `Scale` view of a workload's `spec.replicas`, which is
//! what `kubectl scale` and autoscalers read and write instead of the workload itself.

use serde_json::{Value, json};

use crate::App;
use crate::ops::{self, WriteOpts};
use crate::patch::{self, Patch, PatchKind};
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult};

/// Replicas of a workload that does not say (the real server defaults `spec.replicas` to 1).
const DEFAULT_REPLICAS: i64 = 1;

/// The `Scale` of a stored workload.
pub fn view(obj: &Value) -> Value {
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut m = json!({});
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(k) {
            m[k] = v.clone();
        }
    }
    let replicas = obj
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_REPLICAS);
    let current = obj
        .pointer("/status/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": m,
        "spec": {"replicas": replicas},
        "status": {"replicas": current, "selector": selector(obj)},
    })
}

/// `status.selector`: the workload's pod selector in label-selector syntax (what an HPA matches
/// pods with). Apps kinds carry a `LabelSelector`, ReplicationControllers a plain map.
fn selector(obj: &Value) -> String {
    let Some(sel) = obj.pointer("/spec/selector") else {
        return String::new();
    };
    let labels = sel.get("matchLabels").unwrap_or(sel);
    let mut parts: Vec<String> = labels
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| *k != "matchExpressions" && *k != "matchLabels")
                .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(match e.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("DoesNotExist") => format!("!{key}"),
            _ => key.to_string(),
        });
    }
    parts.join(",")
}

/// `GET …/scale`.
pub fn get(app: &App, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Value> {
    let obj = app
        .store
        .get(&rt.storage_key(), ns, name)
        .ok_or_else(|| ApiError::not_found(rt, name))?;
    Ok(view(&obj.value))
}

/// `PUT …/scale`: write `spec.replicas` of the workload, honouring the Scale's resourceVersion.
pub fn update(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    scale: Value,
    opts: &WriteOpts,
) -> ApiResult<Value> {
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if replicas < 0 {
        return Err(ApiError::invalid(
            "Scale.autoscaling",
            name,
            "spec.replicas",
            &format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    let mut change = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
    {
        change["metadata"] = json!({"resourceVersion": rv});
    }
    let change = Patch {
        kind: PatchKind::Merge,
        body: change,
    };
    let (obj, _) = ops::patch(app, rt, ns, name, change, false, opts)?;
    Ok(view(&obj.value))
}

/// `PATCH …/scale`: the patch applies to the `Scale` view, whose new `spec.replicas` is written.
pub fn patch(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    change: Patch,
    opts: &WriteOpts,
) -> ApiResult<Value> {
    let Patch { kind, body } = change;
    let mut scale = get(app, rt, ns, name)?;
    let cur_rv = scale.pointer("/metadata/resourceVersion").cloned();
    match kind {
        PatchKind::Merge => patch::merge_patch(&mut scale, &body),
        PatchKind::Json => patch::json_patch(&mut scale, &body).map_err(ops::patch_err)?,
        PatchKind::Strategic => {
            patch::strategic_merge(&mut scale, &body).map_err(ops::patch_err)?
        }
        PatchKind::Apply => patch::apply_merge(&mut scale, &body, true),
    }
    // Only a resourceVersion the patch itself names is a precondition.
    if scale.pointer("/metadata/resourceVersion").cloned() == cur_rv
        && let Some(m) = scale.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.remove("resourceVersion");
    }
    update(app, rt, ns, name, scale, opts)
}
