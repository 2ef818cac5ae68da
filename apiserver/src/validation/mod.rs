//! Kind-specific validation the real server does and clients depend on: Events (strict
//! `events.k8s.io/v1`, legacy core v1) and the kinds deployments are made of. Storage stays
//! schemaless otherwise. Every failed rule answers 422 `Invalid` naming the field with the real
//! server's wording, so `kubectl apply --dry-run=server` fails here where it fails in a cluster.

mod events;
mod kinds;

use serde_json::{Value, json};

use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult};

/// One failed rule: (field, reason, message).
type Cause = (String, &'static str, String);

/// Checks `new` (the complete object about to be stored, after the server filled in its
/// metadata) and brings it into canonical form; `old` is the stored state on updates.
pub fn object(rt: &ResourceType, new: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    kinds::canonicalize(rt, new);
    let mut causes: Vec<Cause> = kinds::check(rt, new, old).into_iter().collect();
    causes.extend(match old {
        None => events::create(rt, new),
        Some(old) => events::update(rt, old, new),
    });
    reject(rt, new, causes)?;
    match rt.shape.map(|decode| decode(new)) {
        Some(Err(e)) => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
            kind = rt.kind,
            version = rt.version
        ))),
        _ => Ok(()),
    }
}

/// The real server's 422 listing every failed rule.
fn reject(rt: &ResourceType, obj: &Value, causes: Vec<Cause>) -> ApiResult<()> {
    if causes.is_empty() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    };
    let listed: Vec<String> = causes.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
    let summary = match listed.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let mut e = ApiError::new(
        422,
        "Invalid",
        format!("{kind} \"{name}\" is invalid: {summary}"),
    );
    let mut details = json!({"name": name, "kind": rt.kind,
        "causes": causes.iter().map(|(f, r, m)| json!({"reason": r, "message": m, "field": f})).collect::<Vec<_>>()});
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    e.details = Some(details);
    Err(e)
}
