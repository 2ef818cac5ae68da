//! Events about objects (`events.k8s.io/v1`, written by the host; the `events` grant and the
//! host's rate limit decide what is recorded, so emitting never fails).

use crate::bindings::kubewasm::handler::events::{self as raw, EventType};
use crate::bindings::kubewasm::handler::types::ObjectMeta as RawMeta;
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

/// Records a Normal Event about `obj` (a typed object or a [`Lazy`](crate::Lazy) one): `reason`
/// (CamelCase), then the `note` for people, then the `action` taken (`None`: the reason). The
/// order is the Python and JavaScript SDKs' own, so a handler ported between them keeps its
/// arguments in place.
pub fn normal(obj: &(impl Named + ?Sized), reason: &str, note: &str, action: Option<&str>) {
    raw::emit(
        &regarding(obj),
        EventType::Normal,
        reason,
        action.unwrap_or(reason),
        note,
    );
}

/// Records a Warning Event about `obj`, as [`normal`] does.
pub fn warning(obj: &(impl Named + ?Sized), reason: &str, note: &str, action: Option<&str>) {
    raw::emit(
        &regarding(obj),
        EventType::Warning,
        reason,
        action.unwrap_or(reason),
        note,
    );
}
