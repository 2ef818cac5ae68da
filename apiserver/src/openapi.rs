//! `/openapi/v3`: the minimal documents kubectl needs to validate `create/apply/replace -f` server-side.
//!
//! kubectl only checks that each kind has a PATCH operation tagged with `x-kubernetes-group-version-kind` and a
//! `fieldValidation` parameter; then it sends `fieldValidation=Strict` and trusts the server. Component schemas
//! are intentionally left empty so client-side apply falls back to its compiled-in strategic-merge metadata.

use serde_json::{Map, Value, json};

use crate::discovery::hash;
use crate::registry::Registry;

fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The hash of one group-version document (changes whenever its resources change).
fn gv_hash(reg: &Registry, group: &str, version: &str) -> String {
    let doc = group_version(reg, group, version)
        .map(|d| d.to_string())
        .unwrap_or_default();
    format!("{:016X}", hash(&doc))
}

/// `GET /openapi/v3`: the index of group-version documents.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (g, versions) in reg.groups() {
        for v in versions {
            let key = gv_key(&g, &v);
            let url = format!("/openapi/v3/{key}?hash={}", gv_hash(reg, &g, &v));
            paths.insert(key, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/G/V`.
pub fn group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if !reg.has_group_version(group, version) {
        return None;
    }
    let mut paths = Map::new();
    for t in reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ]);
        let op = |action: &str| {
            json!({"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": action,
                   "parameters": params, "responses": {"200": {"description": "OK"}}})
        };
        let base = if t.namespaced {
            format!("{}/namespaces/{{namespace}}/{}", t.gv_path(), t.plural)
        } else {
            format!("{}/{}", t.gv_path(), t.plural)
        };
        paths.insert(base.clone(), json!({"post": op("post"), "get": op("list")}));
        paths.insert(
            format!("{base}/{{name}}"),
            json!({"get": op("get"), "put": op("put"),
            "patch": op("patch"), "delete": op("delete")}),
        );
        if t.status_subresource {
            paths.insert(
                format!("{base}/{{name}}/status"),
                json!({"get": op("get"), "put": op("put"),
                "patch": op("patch")}),
            );
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
