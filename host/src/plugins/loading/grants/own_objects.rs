//! The host's own objects, which no plugin may write whatever its grants say: the ConfigMap the
//! plugins and their manifests are deployed from (a plugin writing it would rewrite its own
//! grants), the leader-election Lease, the host's ServiceAccount and Deployment, and the RBAC
//! objects that give the host its rights.
//!
//! A write to one is refused at the call, never sent. A grant that would cover one still
//! loads (a ConfigMap `apply` grant on every namespace is a normal thing to grant), with a
//! warning at load and in `kubewasm check` that those writes will always be refused.

use std::fmt;

use serde::Serialize;

use super::{Grants, Verb};

/// Namespace `deploy/` installs the host into.
pub(crate) const DEFAULT_HOST_NAMESPACE: &str = "kubewasm";
/// ConfigMap `deploy/` ships the plugins in (`configMapGenerator` in `kustomization.yaml`).
pub const DEFAULT_PLUGINS_CONFIGMAP: &str = "kubewasm-plugins";
/// Name of the host's ServiceAccount, Deployment and default Lease in `deploy/`.
pub(crate) const HOST_NAME: &str = "kubewasm";
/// The Role and RoleBinding of `deploy/rbac.yaml` (leader election, the host's Events).
pub(crate) const LEADER_ELECTION_RBAC: &str = "kubewasm-leader-election";
/// The (Cluster)Roles and bindings `kubewasm rbac` prints by default (`--name`).
pub(crate) const PLUGINS_RBAC: &str = "kubewasm-plugins";

/// Where an own object lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnScope {
    /// A cluster-scoped object.
    Cluster,
    /// This namespace.
    Namespace(String),
    /// Every namespace (`kubewasm rbac` writes one Role per namespace a plugin writes in).
    AnyNamespace,
}

/// One object no plugin may write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OwnObject {
    /// The version the host's grants are compared with; any version of its group matches.
    pub api_version: &'static str,
    /// Its kind.
    pub kind: &'static str,
    /// Where it lives.
    pub scope: OwnScope,
    /// Its name.
    pub name: String,
}

impl fmt::Display for OwnObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scope {
            OwnScope::Cluster => write!(f, "{} {}", self.kind, self.name),
            OwnScope::Namespace(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            OwnScope::AnyNamespace => write!(f, "{} {} in any namespace", self.kind, self.name),
        }
    }
}

/// The group of an apiVersion (`""` for the core group).
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

impl OwnObject {
    fn matches(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> bool {
        let scope_ok = match (&self.scope, namespace) {
            (OwnScope::Cluster, None) | (OwnScope::AnyNamespace, Some(_)) => true,
            (OwnScope::Namespace(own), Some(ns)) => own == ns,
            _ => false,
        };
        scope_ok
            && self.kind == kind
            && self.name == name
            && group(self.api_version) == group(api_version)
    }

    /// Whether some write verb of `grants` reaches this object (for
    /// [`OwnScope::AnyNamespace`]: in the host's namespace or one a write grant names).
    fn covered_by(&self, grants: &Grants, host_namespace: &str) -> bool {
        let places: Vec<Option<&str>> = match &self.scope {
            OwnScope::Cluster => vec![None],
            OwnScope::Namespace(ns) => vec![Some(ns.as_str())],
            OwnScope::AnyNamespace => std::iter::once(host_namespace)
                .chain(
                    grants
                        .write
                        .iter()
                        .flat_map(|g| g.namespaces.iter().flat_map(|l| l.0.iter()))
                        .map(|n| n.0.as_str()),
                )
                .map(Some)
                .collect(),
        };
        places.into_iter().any(|ns| {
            Verb::ALL
                .iter()
                .any(|v| grants.allows_write(self.api_version, self.kind, ns, v.as_str()))
        })
    }
}

/// The host's own objects of one deployment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OwnObjects {
    namespace: String,
    objects: Vec<OwnObject>,
}

impl Default for OwnObjects {
    /// The names `deploy/` and `kubewasm rbac` use.
    fn default() -> Self {
        OwnObjects::new(
            DEFAULT_HOST_NAMESPACE,
            DEFAULT_PLUGINS_CONFIGMAP,
            (DEFAULT_HOST_NAMESPACE, HOST_NAME),
        )
    }
}

impl OwnObjects {
    /// The objects of a host running in `namespace`, deployed from ConfigMap
    /// `plugins_configmap` there, whose leader-election Lease is `lease` (namespace, name); the
    /// ServiceAccount, Deployment and RBAC carry `deploy/`'s names.
    pub fn new(namespace: &str, plugins_configmap: &str, lease: (&str, &str)) -> Self {
        let here = || OwnScope::Namespace(namespace.to_string());
        let object = |api_version, kind, scope, name: &str| OwnObject {
            api_version,
            kind,
            scope,
            name: name.to_string(),
        };
        const RBAC: &str = "rbac.authorization.k8s.io/v1";
        let objects = vec![
            object("v1", "ConfigMap", here(), plugins_configmap),
            object(
                "coordination.k8s.io/v1",
                "Lease",
                OwnScope::Namespace(lease.0.to_string()),
                lease.1,
            ),
            object("v1", "ServiceAccount", here(), HOST_NAME),
            object("apps/v1", "Deployment", here(), HOST_NAME),
            object(RBAC, "Role", here(), LEADER_ELECTION_RBAC),
            object(RBAC, "RoleBinding", here(), LEADER_ELECTION_RBAC),
            object(RBAC, "Role", OwnScope::AnyNamespace, PLUGINS_RBAC),
            object(RBAC, "RoleBinding", OwnScope::AnyNamespace, PLUGINS_RBAC),
            object(RBAC, "ClusterRole", OwnScope::Cluster, PLUGINS_RBAC),
            object(RBAC, "ClusterRoleBinding", OwnScope::Cluster, PLUGINS_RBAC),
        ];
        OwnObjects {
            namespace: namespace.to_string(),
            objects,
        }
    }

    /// The own object a write to `name` (`kind` of `api_version` in `namespace`) would touch.
    pub fn find(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<&OwnObject> {
        self.objects
            .iter()
            .find(|o| o.matches(api_version, kind, namespace, name))
    }

    /// The own objects `grants` would let the plugin write, were they not refused at the call.
    pub fn covered_by(&self, grants: &Grants) -> Vec<&OwnObject> {
        self.objects
            .iter()
            .filter(|o| o.covered_by(grants, &self.namespace))
            .collect()
    }

    /// One warning for a plugin whose grants cover own objects, or `None`.
    pub fn warning(&self, grants: &Grants) -> Option<String> {
        let covered = self.covered_by(grants);
        if covered.is_empty() {
            return None;
        }
        let list: Vec<String> = covered.iter().map(ToString::to_string).collect();
        Some(format!(
            "the write grants cover the host's own {}: writes to them will always be refused",
            list.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{GrantSource, GrantsTable};
    use super::*;

    fn grants(text: &str) -> Grants {
        #[derive(serde::Deserialize)]
        struct File {
            grants: GrantsTable,
        }
        let f: File = toml::from_str(text).unwrap();
        Grants::from_table(f.grants, GrantSource::BuiltIn)
    }

    #[test]
    fn own_objects_match_by_group_kind_namespace_and_name() {
        let own = OwnObjects::new("ops", "plugins", ("ops", "lead"));
        assert!(
            own.find("v1", "ConfigMap", Some("ops"), "plugins")
                .is_some()
        );
        assert!(
            own.find("v1", "ConfigMap", Some("other"), "plugins")
                .is_none()
        );
        assert!(
            own.find("v1", "ConfigMap", Some("ops"), "plugins-2")
                .is_none()
        );
        assert!(
            own.find("coordination.k8s.io/v1beta1", "Lease", Some("ops"), "lead")
                .is_some(),
            "any version of the group"
        );
        assert!(
            own.find("example.com/v1", "Lease", Some("ops"), "lead")
                .is_none()
        );
        assert!(
            own.find(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                None,
                PLUGINS_RBAC
            )
            .is_some()
        );
        assert!(
            own.find(
                "rbac.authorization.k8s.io/v1",
                "Role",
                Some("web"),
                PLUGINS_RBAC
            )
            .is_some()
        );
        assert!(
            own.find("v1", "ServiceAccount", Some("ops"), HOST_NAME)
                .is_some()
        );
        assert_eq!(
            own.find("v1", "ConfigMap", Some("ops"), "plugins")
                .unwrap()
                .to_string(),
            "ConfigMap ops/plugins"
        );
    }

    #[test]
    fn grants_that_reach_own_objects_are_named() {
        let own = OwnObjects::default();
        let everywhere = grants(
            "[grants]\nwrite = [{ api-version = \"v1\", kind = \"ConfigMap\", verbs = [\"apply\"] }]",
        );
        let w = own.warning(&everywhere).unwrap();
        assert!(w.contains("ConfigMap kubewasm/kubewasm-plugins"), "{w}");
        let elsewhere = grants(
            "[grants]\nwrite = [{ api-version = \"*\", kind = \"*\", verbs = [\"patch\"], namespaces = [\"web\"] }]",
        );
        let covered: Vec<String> = own
            .covered_by(&elsewhere)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            covered,
            [
                "Role kubewasm-plugins in any namespace",
                "RoleBinding kubewasm-plugins in any namespace"
            ],
            "kubewasm rbac's Roles in web, nothing in the host's namespace"
        );
        assert!(own.warning(&Grants::builtin_default()).is_none());
    }
}
