//! Event rules: the `events.k8s.io/v1` API is strict (who reported, what happened, when, and a
//! series that only counts up) while core v1 keeps the legacy rules.

use kubewasm_apimachinery::validation::{ValidationError, validate_label_key};
use serde_json::{Value, json};

use super::Cause;
use crate::registry::ResourceType;

/// Limits of the real server's Event validation.
const REPORTING_INSTANCE_MAX: usize = 128;
const ACTION_MAX: usize = 128;
const REASON_MAX: usize = 128;
const NOTE_MAX: usize = 1024;

fn required(field: &str) -> Cause {
    (field.into(), "FieldValueRequired", "Required value".into())
}

fn invalid(field: &str, value: &Value, why: &str) -> Cause {
    (
        field.into(),
        "FieldValueInvalid",
        format!("Invalid value: {value}: {why}"),
    )
}

/// The field names of one Event API version (core v1 kept the old names).
struct EventFields {
    strict: bool,
    regarding: &'static str,
    controller: &'static str,
    note: &'static str,
    deprecated: [&'static str; 4],
}

const CORE_EVENT: EventFields = EventFields {
    strict: false,
    regarding: "involvedObject",
    controller: "reportingComponent",
    note: "message",
    deprecated: ["firstTimestamp", "lastTimestamp", "count", "source"],
};

const EVENTS_V1: EventFields = EventFields {
    strict: true,
    regarding: "regarding",
    controller: "reportingController",
    note: "note",
    deprecated: [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
        "deprecatedSource",
    ],
};

fn event_fields(rt: &ResourceType) -> Option<&'static EventFields> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Event") => Some(&CORE_EVENT),
        ("events.k8s.io", "Event") => Some(&EVENTS_V1),
        _ => None,
    }
}

/// Failed rules of a new Event (after the server filled in its metadata); none for other kinds.
pub(super) fn create(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    let Some(f) = event_fields(rt) else {
        return Vec::new();
    };
    let mut causes = legacy_event(f, obj);
    if f.strict {
        causes.extend(series(obj));
        if is_unset(obj.get("eventTime")) {
            causes.push(required("eventTime"));
        }
        let ty = obj.get("type").cloned().unwrap_or(json!(""));
        if ty != "Normal" && ty != "Warning" {
            causes.push(invalid(
                "type",
                &ty,
                "supported values: \"Normal\", \"Warning\"",
            ));
        }
        for d in f.deprecated {
            let v = obj.get(d);
            let set = match d {
                "deprecatedCount" => v.and_then(Value::as_i64).unwrap_or(0) != 0,
                "deprecatedSource" => v.is_some_and(|s| {
                    ["component", "host"].iter().any(|k| {
                        s.get(*k)
                            .and_then(Value::as_str)
                            .is_some_and(|x| !x.is_empty())
                    })
                }),
                _ => !is_unset(v),
            };
            if set {
                causes.push(invalid(d, v.unwrap_or(&Value::Null), "needs to be unset"));
            }
        }
    }
    causes
}

/// Failed rules of a replacement of the Event `old` by `new`; none for other kinds.
pub(super) fn update(rt: &ResourceType, old: &Value, new: &Value) -> Vec<Cause> {
    let Some(f) = event_fields(rt) else {
        return Vec::new();
    };
    let mut causes = legacy_event(f, new);
    if f.strict {
        if new.get("series") != old.get("series") {
            causes.extend(series(new));
        }
        // Only the series may move: everything that says what happened is fixed once reported.
        let fixed = [
            f.regarding,
            "reason",
            f.note,
            "type",
            "eventTime",
            "action",
            "related",
            f.controller,
            "reportingInstance",
        ];
        for field in fixed.into_iter().chain(f.deprecated) {
            let (a, b) = (old.get(field), new.get(field));
            if a != b && !(is_unset(a) && is_unset(b)) {
                causes.push(invalid(
                    field,
                    b.unwrap_or(&Value::Null),
                    "field is immutable",
                ));
            }
        }
    }
    causes
}

fn is_unset(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

fn str_of<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get(field).and_then(Value::as_str).unwrap_or("")
}

/// The rules every Event passes, whichever API wrote it.
fn legacy_event(f: &EventFields, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let regarding_ns = obj
        .get(f.regarding)
        .and_then(|r| r.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let ns_field = format!("{}.namespace", f.regarding);
    let mismatch = |causes: &mut Vec<Cause>| {
        causes.push(invalid(
            &ns_field,
            &json!(regarding_ns),
            "does not match event.namespace",
        ))
    };
    if is_unset(obj.get("eventTime")) {
        // Old-style events: the Event lives where its object does (cluster-scoped objects: "default").
        let ok = if regarding_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == regarding_ns
        };
        if !ok {
            mismatch(&mut causes);
        }
        return causes;
    }
    if regarding_ns.is_empty() && ns != "default" && ns != "kube-system" {
        mismatch(&mut causes);
    }
    if let Some(t) = obj.get("eventTime").and_then(Value::as_str)
        && chrono::DateTime::parse_from_rfc3339(t).is_err()
    {
        causes.push(invalid(
            "eventTime",
            &json!(t),
            "not an RFC 3339 time with microseconds",
        ));
    }
    let controller = str_of(obj, f.controller);
    if controller.is_empty() {
        causes.push(required(f.controller));
    } else if let Err(why) = qualified_name(controller) {
        causes.push(invalid(f.controller, &json!(controller), &why.to_string()));
    }
    for (field, max) in [
        ("reportingInstance", REPORTING_INSTANCE_MAX),
        ("action", ACTION_MAX),
        ("reason", REASON_MAX),
    ] {
        let v = str_of(obj, field);
        if v.is_empty() {
            causes.push(required(field));
        } else if v.len() > max {
            causes.push(invalid(
                field,
                &json!(""),
                &format!("can have at most {max} characters"),
            ));
        }
    }
    if str_of(obj, f.note).len() > NOTE_MAX {
        causes.push(invalid(
            f.note,
            &json!(""),
            &format!("can have at most {NOTE_MAX} characters"),
        ));
    }
    causes
}

/// `series`, when present, counts repeats (so at least 2) and says when the last one was seen.
fn series(obj: &Value) -> Vec<Cause> {
    let Some(s) = obj.get("series").filter(|s| !s.is_null()) else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    let count = s.get("count").and_then(Value::as_i64).unwrap_or(0);
    if count < 2 {
        causes.push(invalid(
            "series.count",
            &json!(count),
            "should be at least 2",
        ));
    }
    match s.get("lastObservedTime") {
        v if is_unset(v) => causes.push(required("series.lastObservedTime")),
        Some(Value::String(t)) if chrono::DateTime::parse_from_rfc3339(t).is_err() => {
            causes.push(invalid(
                "series.lastObservedTime",
                &json!(t),
                "not an RFC 3339 time with microseconds",
            ))
        }
        _ => {}
    }
    causes
}

/// How a "qualified name" is broken, in the API server's wording.
#[derive(Debug, thiserror::Error)]
enum QualifiedNameError {
    /// The part before `/` is not a DNS subdomain.
    #[error("prefix part must be a lowercase RFC 1123 subdomain")]
    Prefix(#[source] ValidationError),
    /// More than one `/`.
    #[error(
        "a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an \
         optional DNS subdomain prefix and '/'"
    )]
    Slashes(#[source] ValidationError),
    /// The name part is too long or has other characters.
    #[error(
        "name part must consist of at most 63 alphanumeric characters, '-', '_' or '.', \
         starting and ending with an alphanumeric character"
    )]
    Name(#[source] ValidationError),
}

/// Kubernetes "qualified name" (`[DNS-subdomain-prefix/]name`), the rule of label keys, with the
/// API server's wording for each way it is broken.
fn qualified_name(s: &str) -> Result<(), QualifiedNameError> {
    validate_label_key(s).map_err(|e| match e {
        ValidationError::EmptyPrefix | ValidationError::InPrefix { .. } => {
            QualifiedNameError::Prefix(e)
        }
        _ if s.matches('/').count() > 1 => QualifiedNameError::Slashes(e),
        _ => QualifiedNameError::Name(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn events_v1() -> std::sync::Arc<ResourceType> {
        Registry::with_builtins()
            .find("events.k8s.io", "v1", "events")
            .unwrap()
    }

    fn good() -> Value {
        json!({"metadata": {"name": "e", "namespace": "default"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Service", "namespace": "default", "name": "s"},
            "reportingController": "kubewasm/lb", "reportingInstance": "host-1", "action": "Ensure",
            "reason": "Created", "note": "load balancer created", "type": "Normal"})
    }

    #[test]
    fn strict_events_need_who_what_when() {
        let rt = events_v1();
        assert!(create(&rt, &good()).is_empty());
        let mut bad = good();
        bad.as_object_mut().unwrap().remove("eventTime");
        bad["type"] = json!("Info");
        bad["series"] = json!({"count": 1});
        let e = super::super::reject(&rt, &bad, create(&rt, &bad)).unwrap_err();
        assert_eq!(e.code, 422);
        for field in [
            "eventTime",
            "type",
            "series.count",
            "series.lastObservedTime",
        ] {
            assert!(e.message.contains(field), "{field} in {}", e.message);
        }
        let mut bad = good();
        bad["reportingController"] = json!("a/b/c");
        assert!(!create(&rt, &bad).is_empty());
    }

    #[test]
    fn only_the_series_of_an_event_may_change() {
        let rt = events_v1();
        let old = good();
        let mut new = good();
        new["series"] = json!({"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"});
        assert!(update(&rt, &old, &new).is_empty());
        new["note"] = json!("something else");
        let e = super::super::reject(&rt, &new, update(&rt, &old, &new)).unwrap_err();
        assert!(e.message.contains("note: Invalid value"), "{}", e.message);
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name("kubewasm/lb-controller").is_ok());
        assert!(qualified_name("kubelet").is_ok());
        assert!(qualified_name("-x").is_err());
        assert!(qualified_name("Upper.Prefix/x").is_err());
        assert_eq!(
            qualified_name("a..b/x").unwrap_err().to_string(),
            "prefix part must be a lowercase RFC 1123 subdomain"
        );
        assert!(
            qualified_name("a/b/c")
                .unwrap_err()
                .to_string()
                .starts_with("a qualified name")
        );
        assert!(
            qualified_name(&"x".repeat(64))
                .unwrap_err()
                .to_string()
                .starts_with("name part")
        );
    }
}
