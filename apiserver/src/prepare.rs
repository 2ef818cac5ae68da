//! What the server sets on a new object before validation, as kube-apiserver's
//! `PrepareForCreate` strategies do: the initial status of the kinds whose status the server
//! or a controller owns, a Pod's QoS class, a Namespace's `kubernetes` finalizer, a CRD's
//! conditions and accepted names.

use serde_json::{Value, json};

use crate::ops::{meta_str, now_rfc3339};
use crate::registry::{ResourceType, types_from_crd};
use crate::status::{ApiError, ApiResult};

/// Status on creation, as kube-apiserver's `PrepareForCreate` strategies set it: a kind with a
/// status subresource starts with no status (its controller or kubelet writes it through
/// `/status`), plus what the server itself sets; a Node keeps the status it registers with (the
/// kubelet creates it so); CRDs become Established immediately.
pub fn create(rt: &ResourceType, body: &mut Value) -> ApiResult<()> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Node") => {}
        ("", "Namespace") => {
            body["status"] = json!({"phase": "Active"});
            crate::namespaces::require_finalizer(body);
        }
        // A new Service has no load balancer yet, whatever the request said.
        ("", "Service") => body["status"] = json!({"loadBalancer": {}}),
        ("", "Pod") => {
            let qos = pod_qos_class(body);
            body["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        // Pending until bound (the PV strategy sets it; a PVC gets it from defaulting).
        ("", "PersistentVolume") => {
            body["status"] = json!({"phase": "Pending", "lastPhaseTransitionTime": now_rfc3339()})
        }
        ("", "PersistentVolumeClaim") => body["status"] = json!({"phase": "Pending"}),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            let types = types_from_crd(body)
                .map_err(|e| ApiError::invalid(&rt.kind, "", "spec", &e.to_string()))?;
            let group = body
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or("");
            let plural = body
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or("");
            let expected = format!("{plural}.{group}");
            let name = meta_str(body, "name").unwrap_or("").to_string();
            if name != expected {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &name,
                    "metadata.name",
                    &format!(
                        "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                    ),
                ));
            }
            let storage = body
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .and_then(|vs| {
                    vs.iter()
                        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                })
                .and_then(|v| v.get("name"))
                .cloned()
                .unwrap_or(json!("v1"));
            let mut accepted = body.pointer("/spec/names").cloned().unwrap_or(json!({}));
            let first = types.first().ok_or_else(|| {
                ApiError::invalid(
                    &rt.kind,
                    &name,
                    "spec.versions",
                    "Invalid value: no served versions",
                )
            })?;
            accepted["singular"] = json!(first.singular);
            accepted["listKind"] = json!(first.list_kind);
            let t = now_rfc3339();
            body["status"] = json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": t},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": t}],
                "acceptedNames": accepted,
                "storedVersions": [storage],
            });
        }
        _ => {
            if rt.status_subresource
                && let Some(o) = body.as_object_mut()
            {
                o.remove("status");
            }
        }
    }
    Ok(())
}

/// A Pod's QoS class as kube-apiserver computes it on create (`qos.GetPodQOS`) from its
/// containers' CPU and memory: no requests or limits at all is BestEffort; limits on both in
/// every container, with requests (if given) equal to them, is Guaranteed; else Burstable.
/// Quantities are compared as written (`1` and `1000m` differ here).
fn pod_qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let of =
        |c: &Value, which: &str, r: &str| c.pointer(&format!("/resources/{which}/{r}")).cloned();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        for r in ["cpu", "memory"] {
            let (request, limit) = (of(c, "requests", r), of(c, "limits", r));
            any |= request.is_some() || limit.is_some();
            guaranteed &=
                limit.is_some() && request.as_ref().is_none_or(|q| Some(q) == limit.as_ref());
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}
