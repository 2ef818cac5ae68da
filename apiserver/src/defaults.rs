//! Defaulting of built-in kinds: the fields the real server fills in that clients read back and
//! act on (`kubectl scale` and `rollout status` read `spec.replicas`, controllers read a Secret's
//! `type` and a Service port's `protocol`/`targetPort`). Only these; the honest list is in README.

use serde_json::{Value, json};

use crate::registry::ResourceType;

/// Fill in the defaults of `obj`, a complete object about to be stored.
pub fn apply(rt: &ResourceType, obj: &mut Value) {
    if rt.custom || !obj.is_object() {
        return;
    }
    if rt.scale_subresource && obj.pointer("/spec/replicas").is_none_or(Value::is_null) {
        if !obj.get("spec").is_some_and(Value::is_object) {
            obj["spec"] = json!({});
        }
        obj["spec"]["replicas"] = json!(1);
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Secret")
            if obj
                .get("type")
                .is_none_or(|t| t.as_str().is_none_or(str::is_empty)) =>
        {
            obj["type"] = json!("Opaque");
        }
        ("", "Service") => service(obj),
        _ => {}
    }
}

fn service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("type").is_none_or(Value::is_null) {
        spec.insert("type".into(), json!("ClusterIP"));
    }
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        if port.get("protocol").is_none_or(Value::is_null) {
            port.insert("protocol".into(), json!("TCP"));
        }
        if port.get("targetPort").is_none_or(Value::is_null)
            && let Some(p) = port.get("port").cloned()
        {
            port.insert("targetPort".into(), p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn workloads_secrets_and_services_get_their_defaults() {
        let reg = Registry::with_builtins();
        let mut d = json!({"spec": {"template": {}}});
        apply(&reg.find("apps", "v1", "deployments").unwrap(), &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        let mut d = json!({"spec": {"replicas": 0}});
        apply(&reg.find("apps", "v1", "statefulsets").unwrap(), &mut d);
        assert_eq!(d["spec"]["replicas"], 0);
        let mut s = json!({"data": {}});
        apply(&reg.find("", "v1", "secrets").unwrap(), &mut s);
        assert_eq!(s["type"], "Opaque");
        let mut svc = json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}});
        apply(&reg.find("", "v1", "services").unwrap(), &mut svc);
        assert_eq!(
            svc["spec"],
            json!({"type": "ClusterIP", "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                {"port": 53, "protocol": "UDP", "targetPort": "dns"}]})
        );
    }
}
