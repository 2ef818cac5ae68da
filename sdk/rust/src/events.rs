//! Events about objects (`events.k8s.io/v1`, written by the host; the `events` grant and the
//! host's rate limit decide what is recorded, so emitting never fails).

use crate::bindings::kubewasm::handler::events::{self as raw, EventType};
use crate::bindings::kubewasm::handler::types::ObjectMeta as RawMeta;
use crate::object::Object;

fn regarding(obj: &impl Object) -> RawMeta {
    let m = obj.meta();
    let (api_version, kind) = obj.type_of();
    RawMeta {
        api_version,
        kind,
        namespace: m.namespace.clone(),
        name: m.name.clone().unwrap_or_default(),
        uid: m.uid.clone().unwrap_or_default(),
        resource_version: m.resource_version.clone().unwrap_or_default(),
        generation: m.generation,
        // The host reads only the reference fields of `regarding`.
        labels: Vec::new(),
    }
}

/// Records a Normal Event: `action` happened to `obj` for `reason` (CamelCase); `note` says more.
pub fn normal(obj: &impl Object, reason: &str, action: &str, note: &str) {
    raw::emit(&regarding(obj), EventType::Normal, reason, action, note);
}

/// Records a Warning Event about `obj`.
pub fn warning(obj: &impl Object, reason: &str, action: &str, note: &str) {
    raw::emit(&regarding(obj), EventType::Warning, reason, action, note);
}
