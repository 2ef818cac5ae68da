//! The resource registry: which kinds exist, how they are addressed and what the server does to them.
//!
//! Built-in kinds are registered at start-up; CustomResourceDefinitions add and remove entries at run time.
//! Discovery and OpenAPI documents are generated from this registry, so whatever is here is what clients see.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// Decodes an object as a kind's k8s-openapi type: `Err` names the first wrong JSON type.
pub type ShapeCheck = fn(&Value) -> Result<(), serde_json::Error>;

/// Why a CustomResourceDefinition serves nothing, in the API server's field-error wording.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CrdError {
    /// A field the definition must have.
    #[error("{0}: Required value")]
    Required(&'static str),
    /// A scope other than `Namespaced` or `Cluster`.
    #[error("spec.scope: Unsupported value: \"{0}\"")]
    Scope(String),
    /// No versions, or not exactly one storage version.
    #[error(
        "spec.versions: Invalid value: must have exactly one version marked as storage version"
    )]
    StorageVersion,
}

/// Everything the server needs to know about one served resource (group, version, plural).
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version inside the group, e.g. `v1`.
    pub version: String,
    /// Lower-case plural used in URLs.
    pub plural: String,
    /// Lower-case singular (`kubectl get widget`).
    pub singular: String,
    /// Kind of a single object.
    pub kind: String,
    /// Kind of the list envelope.
    pub list_kind: String,
    /// Whether objects live inside a namespace.
    pub namespaced: bool,
    /// Short names advertised in discovery.
    pub short_names: Vec<String>,
    /// Categories advertised in discovery (e.g. `all`).
    pub categories: Vec<String>,
    /// Whether `/status` is a separate subresource (then the main resource ignores `.status`).
    pub status_subresource: bool,
    /// Whether `/scale` serves an autoscaling/v1 `Scale` view of `spec.replicas`.
    pub scale_subresource: bool,
    /// Whether the server maintains `metadata.generation` for this kind.
    pub has_generation: bool,
    /// Whether DELETE answers with the deleted object instead of a Status.
    pub return_deleted_object: bool,
    /// Whether strategic merge patch is accepted (built-in kinds only).
    pub strategic_merge: bool,
    /// Defined by a CRD rather than built in.
    pub custom: bool,
    /// CRD `additionalPrinterColumns` of this version: (name, type, jsonPath, priority).
    pub printer_columns: Vec<(String, String, String, i64)>,
    /// Built-in kinds: decodes an object as the kind's k8s-openapi type, the structural check
    /// (wrong JSON types) the real server's decoder makes before validation.
    pub shape: Option<ShapeCheck>,
}

impl ResourceType {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Storage identity: objects of all versions of one group/plural share a single collection,
    /// and both Event APIs share core v1's (`events.rs`).
    pub fn storage_key(&self) -> String {
        if crate::events::is_events_v1(self) {
            return crate::events::STORAGE_KEY.to_string();
        }
        format!("{}/{}", self.group, self.plural)
    }

    /// The "qualified resource" used in error messages: `configmaps`, `widgets.example.com`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// URL prefix of the group-version: `/api/v1` or `/apis/g/v`.
    pub fn gv_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

/// Resource types served by the registry, in discovery order.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    types: Vec<Arc<ResourceType>>,
    /// Bumped on every change, used as the OpenAPI/discovery hash so clients refetch.
    pub generation: u64,
}

impl Registry {
    /// The built-in kinds of the Kubernetes version k8s-openapi names (see `builtins.rs`).
    pub fn with_builtins() -> Registry {
        Registry {
            types: crate::builtins::all().into_iter().map(Arc::new).collect(),
            generation: 1,
        }
    }

    /// All served resource types.
    pub fn all(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// Look a resource up by its URL coordinates.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// The resource an object reference's `apiVersion` and `kind` name (an `ownerReference`):
    /// that version, else any served version of the group's kind (versions share storage).
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let of_kind = |t: &&Arc<ResourceType>| t.group == group && t.kind == kind;
        self.types
            .iter()
            .filter(of_kind)
            .find(|t| t.version == version)
            .or_else(|| self.types.iter().find(of_kind))
            .cloned()
    }

    /// The preferred served resource of a storage collection ([`ResourceType::storage_key`]).
    pub fn by_storage_key(&self, key: &str) -> Option<Arc<ResourceType>> {
        let (group, plural) = key.split_once('/')?;
        let mut of_key = self
            .types
            .iter()
            .filter(|t| t.group == group && t.plural == plural);
        let first = of_key.next()?;
        Some(
            of_key
                .fold(first, |best, t| {
                    if version_priority(&t.version) > version_priority(&best.version) {
                        t
                    } else {
                        best
                    }
                })
                .clone(),
        )
    }

    /// Whether any resource is served under this group-version.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.types
            .iter()
            .any(|t| t.group == group && t.version == version)
    }

    /// Groups (excluding core) with their versions in preference order.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in &self.types {
            let v = out.entry(t.group.clone()).or_default();
            if !v.contains(&t.version) {
                v.push(t.version.clone());
            }
        }
        for versions in out.values_mut() {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    /// Group names in discovery order: built-in groups first, then custom ones alphabetically.
    pub fn group_order(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for t in self.types.iter().filter(|t| !t.custom) {
            if !seen.contains(&t.group) {
                seen.push(t.group.clone());
            }
        }
        let mut custom: Vec<String> = self
            .types
            .iter()
            .filter(|t| t.custom && !seen.contains(&t.group))
            .map(|t| t.group.clone())
            .collect();
        custom.sort();
        custom.dedup();
        seen.extend(custom);
        seen
    }

    /// Replace all resources defined by the CRD `crd_name` with `types` (empty removes them).
    pub fn set_custom(&mut self, crd_group: &str, crd_plural: &str, types: Vec<ResourceType>) {
        self.types
            .retain(|t| !(t.custom && t.group == crd_group && t.plural == crd_plural));
        self.types.extend(types.into_iter().map(Arc::new));
        self.generation += 1;
    }
}

/// Kubernetes version ordering: GA > beta > alpha, then by number.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let rest = match v.strip_prefix('v') {
        Some(r) => r,
        None => return (0, 0, 0),
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major: u32 = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (class, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, major, 0);
    };
    (class, major, num.parse().unwrap_or(0))
}

/// Derive the resource types a CRD object serves (one per `served: true` version).
pub fn types_from_crd(crd: &Value) -> Result<Vec<ResourceType>, CrdError> {
    let spec = crd.get("spec").ok_or(CrdError::Required("spec"))?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or(CrdError::Required("spec.group"))?;
    let names = spec.get("names").ok_or(CrdError::Required("spec.names"))?;
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .ok_or(CrdError::Required("spec.names.plural"))?;
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(CrdError::Required("spec.names.kind"))?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names
        .get("listKind")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let strings = |key: &str| -> Vec<String> {
        names
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let scope = spec
        .get("scope")
        .and_then(Value::as_str)
        .unwrap_or("Namespaced");
    if scope != "Namespaced" && scope != "Cluster" {
        return Err(CrdError::Scope(scope.to_string()));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or(CrdError::StorageVersion)?;
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        return Err(CrdError::StorageVersion);
    }
    let mut out = Vec::new();
    for v in versions {
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or(CrdError::Required("spec.versions[].name"))?;
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let status = v.pointer("/subresources/status").is_some();
        out.push(ResourceType {
            group: group.into(),
            version: name.into(),
            plural: plural.into(),
            singular: singular.clone(),
            kind: kind.into(),
            list_kind: list_kind.clone(),
            namespaced: scope == "Namespaced",
            short_names: strings("shortNames"),
            categories: strings("categories"),
            status_subresource: status,
            scale_subresource: false,
            has_generation: true,
            return_deleted_object: false,
            strategic_merge: false,
            custom: true,
            printer_columns: v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .filter_map(|c| {
                            Some((
                                c.get("name")?.as_str()?.to_string(),
                                c.get("type")
                                    .and_then(Value::as_str)
                                    .unwrap_or("string")
                                    .to_string(),
                                c.get("jsonPath")?.as_str()?.to_string(),
                                c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            shape: None,
        });
    }
    out.sort_by_key(|t| std::cmp::Reverse(version_priority(&t.version)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut v = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1"];
        v.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }
}
