//! `/version` and API discovery, legacy (`/api`, `/apis`, `/apis/G/V`) and aggregated (apidiscovery.k8s.io/v2).

use serde_json::{Value, json};

use crate::registry::{Registry, ResourceType};

/// Content type of aggregated discovery answers; client-go decides legacy vs aggregated by it.
pub const AGGREGATED_CT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the Accept header asks for aggregated discovery (v2, or v2beta1 which we answer as v2).
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let p = part.replace(' ', "");
        p.contains("g=apidiscovery.k8s.io")
            && p.contains("as=APIGroupDiscoveryList")
            && p.contains("v=v2;")
            || p.contains("g=apidiscovery.k8s.io")
                && p.contains("as=APIGroupDiscoveryList")
                && p.ends_with("v=v2")
    })
}

/// `GET /version`: minor 32 so the gcloud kubectl dispatcher runs its default 1.32 binary.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0-kubewasm", "gitCommit": "kubewasm",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
        "compiler": "gc", "platform": "linux/amd64",
    })
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_entries(t: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
        "verbs": VERBS, "storageVersionHash": format!("{:x}", hash(&t.storage_key())),
    });
    if !t.short_names.is_empty() {
        main["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        main["categories"] = json!(t.categories);
    }
    let mut out = vec![main];
    if t.status_subresource {
        out.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced,
            "kind": t.kind, "verbs": ["get", "patch", "update"]}));
    }
    if t.scale_subresource {
        out.push(json!({"name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced,
            "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
    }
    if is_service_accounts(t) {
        out.push(json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
            "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
    }
    out
}

/// The subresources of `t` in aggregated discovery; `responseKind` is what kubectl's scale client
/// resolves the `Scale` kind from.
fn subresources(t: &ResourceType, rk: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    if t.status_subresource {
        out.push(json!({"subresource": "status", "responseKind": rk, "verbs": ["get", "patch", "update"]}));
    }
    if t.scale_subresource {
        out.push(json!({"subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"]}));
    }
    if is_service_accounts(t) {
        out.push(json!({"subresource": "token",
            "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"},
            "verbs": ["create"]}));
    }
    out
}

/// ServiceAccounts serve the TokenRequest subresource `token` (`authn.rs`).
fn is_service_accounts(t: &ResourceType) -> bool {
    t.group.is_empty() && t.plural == "serviceaccounts"
}

/// Small stable hash for discovery/openapi fingerprints (FNV-1a 64, the one the shards use).
pub fn hash(s: &str) -> u64 {
    kubewasm_apimachinery::fnv1a64(s.as_bytes())
}

/// `GET /api` (legacy).
pub fn api_versions(host: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
}

/// `GET /apis` (legacy).
pub fn api_group_list(reg: &Registry) -> Value {
    let groups = reg.groups();
    let items: Vec<Value> = reg
        .group_order()
        .into_iter()
        .filter(|g| !g.is_empty())
        .map(|g| group_json(&g, &groups[&g]))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": items})
}

fn group_json(g: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"name": g, "versions": vs, "preferredVersion": vs[0]})
}

/// `GET /apis/G` (legacy APIGroup), if the group exists.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let groups = reg.groups();
    let versions = groups.get(group).filter(|_| !group.is_empty())?;
    let mut v = group_json(group, versions);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// `GET /api/v1` or `/apis/G/V` (APIResourceList), if served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if !reg.has_group_version(group, version) {
        return None;
    }
    let resources: Vec<Value> = reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .flat_map(|t| resource_entries(t))
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// Aggregated discovery for the core group (`core == true`, `/api`) or all named groups (`/apis`).
pub fn aggregated(reg: &Registry, core: bool) -> Value {
    let groups = reg.groups();
    let mut items = Vec::new();
    for g in reg.group_order() {
        if g.is_empty() != core {
            continue;
        }
        let versions: Vec<Value> = groups[&g]
            .iter()
            .map(|v| {
                let resources: Vec<Value> = reg
                    .all()
                    .iter()
                    .filter(|t| t.group == g && &t.version == v)
                    .map(|t| {
                        let rk = json!({"group": t.group, "version": t.version, "kind": t.kind});
                        let mut r = json!({
                            "resource": t.plural, "responseKind": rk,
                            "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                            "singularResource": t.singular, "verbs": VERBS,
                        });
                        if !t.short_names.is_empty() {
                            r["shortNames"] = json!(t.short_names);
                        }
                        if !t.categories.is_empty() {
                            r["categories"] = json!(t.categories);
                        }
                        let subs = subresources(t, &rk);
                        if !subs.is_empty() {
                            r["subresources"] = json!(subs);
                        }
                        r
                    })
                    .collect();
                json!({"version": v, "freshness": "Current", "resources": resources})
            })
            .collect();
        items.push(json!({"metadata": {"name": g}, "versions": versions}));
    }
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;as=APIGroupDiscoveryList;v=v2"
        ));
        assert!(!wants_aggregated("application/json, */*"));
    }

    #[test]
    fn legacy_and_aggregated_list_builtins() {
        let reg = Registry::with_builtins();
        let apis = api_group_list(&reg);
        assert!(
            apis["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "apps")
        );
        let core = resource_list(&reg, "", "v1").unwrap();
        assert!(
            core["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "pods/status")
        );
        let agg = aggregated(&reg, true);
        assert_eq!(agg["items"][0]["metadata"]["name"], "");
    }
}
