//! Events about objects (`events.k8s.io/v1`, written by the host; the `events` grant and the
//! host's rate limit decide what is recorded, so emitting never fails).

use crate::bindings::kubewasm::handler0_2_0::events::{self as raw, EventType};
use crate::bindings::kubewasm::handler0_2_0::types::ObjectMeta as RawMeta;
use crate::object::Named;

fn regarding(obj: &(impl Named + ?Sized)) -> RawMeta {
    RawMeta {
        api_version: obj.api_version().to_string(),
        kind: obj.kind().to_string(),
        namespace: obj.namespace().map(str::to_string),
        name: obj.name().to_string(),
        uid: obj.uid().to_string(),
        resource_version: obj.resource_version().to_string(),
        generation: obj.generation(),
        // The host reads only the reference fields of `regarding`.
        labels: Vec::new(),
    }
}

/// Records a Normal Event about `obj` (a typed object or a [`Lazy`](crate::Lazy) one): the
/// `reason` (CamelCase, e.g. `QuotaCreated`), the `action` taken (e.g. `Apply`), then the `note`
/// for people. The order is the WIT's, and the Python and JavaScript SDKs' too, so a handler
/// ported between them keeps its arguments in place.
pub fn normal(obj: &(impl Named + ?Sized), reason: &str, action: &str, note: &str) {
    emit_to(raw::emit, obj, EventType::Normal, reason, action, note);
}

/// Records a Warning Event about `obj`, as [`normal`] does.
pub fn warning(obj: &(impl Named + ?Sized), reason: &str, action: &str, note: &str) {
    emit_to(raw::emit, obj, EventType::Warning, reason, action, note);
}

/// Calls `emit` (the import, or natively a test's stand-in for the host) in the WIT's order.
fn emit_to(
    mut emit: impl FnMut(&RawMeta, EventType, &str, &str, &str),
    obj: &(impl Named + ?Sized),
    kind: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    emit(&regarding(obj), kind, reason, action, note);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn the_arguments_reach_the_import_in_the_wit_order() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns", "name": "cm", "uid": "u1", "resourceVersion": "7"}
        }))
        .unwrap();
        let mut seen = Vec::new();
        emit_to(
            |m: &RawMeta, t, reason: &str, action: &str, note: &str| {
                seen.push((
                    m.clone(),
                    t,
                    reason.to_string(),
                    action.to_string(),
                    note.to_string(),
                ))
            },
            &cm,
            EventType::Warning,
            "Broken",
            "Repair",
            "it broke",
        );
        let (meta, t, reason, action, note) = seen.pop().unwrap();
        assert_eq!(
            (
                meta.kind.as_str(),
                meta.namespace.as_deref(),
                meta.name.as_str(),
                meta.uid.as_str()
            ),
            ("ConfigMap", Some("ns"), "cm", "u1")
        );
        assert!(matches!(t, EventType::Warning));
        assert_eq!(
            (reason.as_str(), action.as_str(), note.as_str()),
            ("Broken", "Repair", "it broke")
        );
    }
}
