//! One Event store for core v1 `events` and `events.k8s.io/v1` `events`, as in kube-apiserver:
//! both APIs read and write the same objects (same name, namespace, uid, resourceVersion,
//! history), stored in core v1 form and converted at the edge for `events.k8s.io/v1`.
//!
//! Why: a controller records with the new API (client-go's `events` broadcaster, kube-runtime's
//! `Recorder`), `kubectl describe` and `kubectl get events` read with the old one (describe by
//! a fieldSelector on `involvedObject.*`). The conversion is the real one
//! (`pkg/apis/events/v1/conversion.go`): `regarding`↔`involvedObject`, `note`↔`message`,
//! `reportingController`↔`reportingComponent`, `deprecatedSource`↔`source`,
//! `deprecatedCount`↔`count`, `deprecatedFirstTimestamp`↔`firstTimestamp`,
//! `deprecatedLastTimestamp`↔`lastTimestamp`; `eventTime`, `series`, `action`, `reason`,
//! `type`, `related` and `reportingInstance` keep their names. Fields absent (or null, or empty
//! strings) in one form are absent in the other.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::registry::ResourceType;
use crate::store::{Obj, event_line};

/// (core v1 name, events.k8s.io/v1 name) of every renamed field.
const RENAMED: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
];

/// The collection both Event APIs store in.
pub const STORAGE_KEY: &str = "/events";

/// Whether `rt` is `events.k8s.io` Events (served from the core v1 store, converted).
pub fn is_events_v1(rt: &ResourceType) -> bool {
    rt.group == "events.k8s.io" && rt.plural == "events"
}

/// `v` with its fields renamed `from` → `to` (pairs of [`RENAMED`] picked by `pick`) and the
/// type meta set; unset fields (null, `""`) are dropped.
fn rename(
    v: &Value,
    api_version: &str,
    pick: fn(&(&'static str, &'static str)) -> (&'static str, &'static str),
) -> Value {
    let Some(o) = v.as_object() else {
        return v.clone();
    };
    let mut out = Map::with_capacity(o.len());
    for (k, val) in o {
        if val.is_null() || val.as_str() == Some("") {
            continue;
        }
        let to = RENAMED
            .iter()
            .map(pick)
            .find(|(from, _)| *from == k.as_str())
            .map(|(_, to)| to)
            .unwrap_or(k.as_str());
        // A field of the target form given as such wins over a renamed one.
        if to != k.as_str() && o.get(to).is_some_and(|t| !t.is_null()) {
            continue;
        }
        out.insert(to.to_string(), val.clone());
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event in core v1 form.
pub fn to_core(v1: &Value) -> Value {
    rename(v1, "v1", |&(core, v1)| (v1, core))
}

/// A core v1 Event in `events.k8s.io/v1` form.
pub fn to_v1(core: &Value) -> Value {
    rename(core, "events.k8s.io/v1", |&(core, v1)| (core, v1))
}

/// The stored object as `rt`'s clients see it (itself for every other resource).
pub fn view(rt: &ResourceType, obj: &Arc<Obj>) -> Arc<Obj> {
    if is_events_v1(rt) {
        Obj::new(to_v1(&obj.value), obj.rv)
    } else {
        obj.clone()
    }
}

/// A state written through `rt`, in the form it is stored in.
pub fn stored(rt: &ResourceType, v: Value) -> Value {
    if is_events_v1(rt) { to_core(&v) } else { v }
}

/// A watch line (`{"type":…,"object":…}`) of a stored Event in `events.k8s.io/v1` form.
pub fn v1_line(line: Bytes) -> Bytes {
    let Ok(ev) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    let kind = ev["type"].as_str().unwrap_or("");
    let obj = to_v1(&ev["object"]);
    event_line(kind, &serde_json::to_vec(&obj).unwrap_or_default())
}

/// The Event fields a field selector can name, as kube-apiserver's `ToSelectableFields` makes
/// them: `source` is the source component, else the reporting controller.
pub fn selectable_fields(core: &Value) -> Value {
    let s = |p: &str| core.pointer(p).and_then(Value::as_str).unwrap_or("");
    let source = match s("/source/component") {
        "" => s("/reportingComponent"),
        c => c,
    };
    let io = |f: &str| s(&format!("/involvedObject/{f}")).to_string();
    json!({
        "metadata": {"name": s("/metadata/name"), "namespace": s("/metadata/namespace")},
        "involvedObject": {"kind": io("kind"), "namespace": io("namespace"), "name": io("name"),
            "uid": io("uid"), "apiVersion": io("apiVersion"),
            "resourceVersion": io("resourceVersion"), "fieldPath": io("fieldPath")},
        "reason": s("/reason"),
        "reportingComponent": s("/reportingComponent"),
        "source": source,
        "type": s("/type"),
    })
}

/// The field labels of each Event API, and the core label an `events.k8s.io/v1` one means
/// (`AddFieldLabelConversionsForEvent` of both groups); `None`: not a field label there.
pub fn field_label(group: &str, label: &str) -> Option<String> {
    const COMMON: [&str; 5] = [
        "metadata.name",
        "metadata.namespace",
        "reason",
        "type",
        "reportingComponent",
    ];
    const OBJECT: [&str; 7] = [
        "kind",
        "namespace",
        "name",
        "uid",
        "apiVersion",
        "resourceVersion",
        "fieldPath",
    ];
    if group.is_empty() {
        let ok = label == "source"
            || COMMON.contains(&label)
            || label
                .strip_prefix("involvedObject.")
                .is_some_and(|f| OBJECT.contains(&f));
        return ok.then(|| label.to_string());
    }
    if label == "reportingController" {
        return Some("reportingComponent".into());
    }
    if let Some(f) = label.strip_prefix("regarding.") {
        return OBJECT.contains(&f).then(|| format!("involvedObject.{f}"));
    }
    (COMMON.contains(&label) && label != "reportingComponent").then(|| label.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_forms_convert_both_ways() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default", "uid": "u", "resourceVersion": "7"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "kubewasm/lb",
            "reportingInstance": "host-1", "action": "Ensure", "reason": "Created", "type": "Normal",
            "note": "made", "regarding": {"kind": "Service", "namespace": "default", "name": "s"},
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
            "deprecatedCount": 3, "deprecatedSource": {"component": "c", "host": "h"}});
        let core = to_core(&v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "s");
        assert_eq!(core["message"], "made");
        assert_eq!(core["reportingComponent"], "kubewasm/lb");
        assert_eq!(core["reportingInstance"], "host-1");
        assert_eq!(core["count"], 3);
        assert_eq!(core["source"]["host"], "h");
        assert_eq!(core["series"]["count"], 2);
        assert!(core.get("note").is_none() && core.get("regarding").is_none());
        assert_eq!(to_v1(&core), v1);
        // Nulls and empty strings of the old form are not carried over.
        let legacy = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x"},
            "firstTimestamp": null, "eventTime": null, "reportingComponent": "", "message": "m"});
        assert_eq!(
            to_v1(&legacy),
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}, "note": "m"})
        );
    }

    #[test]
    fn field_labels_of_both_groups() {
        assert_eq!(
            field_label("", "involvedObject.uid").as_deref(),
            Some("involvedObject.uid")
        );
        assert_eq!(field_label("", "source").as_deref(), Some("source"));
        assert_eq!(field_label("", "involvedObject.color"), None);
        assert_eq!(
            field_label("events.k8s.io", "regarding.name").as_deref(),
            Some("involvedObject.name")
        );
        assert_eq!(
            field_label("events.k8s.io", "reportingController").as_deref(),
            Some("reportingComponent")
        );
        assert_eq!(field_label("events.k8s.io", "involvedObject.name"), None);
        assert_eq!(field_label("events.k8s.io", "source"), None);
        let core = json!({"reportingComponent": "kubelet", "involvedObject": {"name": "p"}});
        let f = selectable_fields(&core);
        assert_eq!(
            (
                f["source"].as_str(),
                f["involvedObject"]["fieldPath"].as_str()
            ),
            (Some("kubelet"), Some(""))
        );
    }
}
