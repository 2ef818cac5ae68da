//! The host's own objects, which no plugin may write whatever its grants say: the ConfigMap the
//! plugins and their manifests are deployed from (a plugin writing it would rewrite its own
//! grants), the leader-election Lease, the host's ServiceAccount and Deployment, and the RBAC
//! objects that give the host its rights. In a cluster the list is derived from the host's own
//! Pod at start (see `host_pod.rs`): the Pod and its siblings, their ReplicaSet and Deployment,
//! every ConfigMap and Secret it mounts or reads, its ServiceAccount and that account's token
//! Secrets, the bindings naming it and the roles they bind, the PodDisruptionBudget; the names
//! below (`deploy/`'s) are what a host that cannot read its Pod falls back to. The host's own
//! Secrets are refused to `get` too: a mounted registry credential or a token is the host's
//! identity.
//!
//! A write to one is refused at the call, never sent. A grant that would cover one still
//! loads (a ConfigMap `apply` grant on every namespace is a normal thing to grant), with a
//! warning at load and in `kubewasm check` that those writes are refused at the call (nothing to change: the rest of the grant works).

use std::fmt;

use serde::Serialize;

use super::{Grants, Verb};

/// Namespace `deploy/` installs the host into.
pub(crate) const DEFAULT_HOST_NAMESPACE: &str = "kubewasm";
/// ConfigMap `deploy/` ships the plugins in (`configMapGenerator` in `kustomization.yaml`).
pub(crate) const DEFAULT_PLUGINS_CONFIGMAP: &str = "kubewasm-plugins";
/// Name of the host's ServiceAccount, Deployment, PodDisruptionBudget and default Lease in
/// `deploy/`.
pub(crate) const HOST_NAME: &str = "kubewasm";
/// The Role and RoleBinding of `deploy/rbac.yaml` (leader election, the host's Events).
pub(crate) const LEADER_ELECTION_RBAC: &str = "kubewasm-leader-election";
/// The (Cluster)Roles and bindings `kubewasm rbac` prints by default (`--name`).
pub(crate) const PLUGINS_RBAC: &str = "kubewasm-plugins";
/// `deploy-registry/`'s sources ConfigMap, named `<this>-<hash>` by kustomize.
const SOURCES_CONFIGMAP: &str = "kubewasm-plugin-sources";
/// `deploy-registry/`'s registry credentials Secret.
const REGISTRY_SECRET: &str = "kubewasm-registry";
/// Prefix of the per-plugin ServiceAccounts (and their RBAC) a host impersonates.
pub(crate) const PLUGIN_ACCOUNT_PREFIX: &str = "kubewasm-plugin-";

const RBAC: &str = "rbac.authorization.k8s.io/v1";

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

/// The names an own object goes by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnName {
    /// Exactly this name.
    Exact(String),
    /// A name a controller generates: `stem`, then `segments` parts `-[a-z0-9]{1,10}` (a
    /// ReplicaSet names its Pods `<rs>-x7k2p`, a Deployment its ReplicaSets `<deploy>-5d4f8b`,
    /// a StatefulSet `<sts>-0`, token Secrets `<sa>-token-q2w9z`). Matching the pattern
    /// rather than the names seen at start keeps a sibling created later protected, with no
    /// read per call.
    Generated {
        /// What the controller puts first.
        stem: String,
        /// How many `-suffix` parts follow.
        segments: usize,
    },
    /// Any name starting with this (the per-plugin ServiceAccounts and their RBAC).
    Prefix(String),
}

impl OwnName {
    fn matches(&self, name: &str) -> bool {
        match self {
            OwnName::Exact(n) => n == name,
            OwnName::Prefix(p) => name.starts_with(p.as_str()),
            OwnName::Generated { stem, segments } => {
                let Some(rest) = name
                    .strip_prefix(stem.as_str())
                    .and_then(|r| r.strip_prefix('-'))
                else {
                    return false;
                };
                let parts: Vec<&str> = rest.split('-').collect();
                parts.len() == *segments
                    && parts.iter().all(|p| {
                        (1..=10).contains(&p.len())
                            && p.bytes()
                                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                    })
            }
        }
    }
}

impl fmt::Display for OwnName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnName::Exact(n) => f.write_str(n),
            OwnName::Prefix(p) => write!(f, "{p}*"),
            OwnName::Generated { stem, segments } => {
                f.write_str(stem)?;
                for _ in 0..*segments {
                    f.write_str("-*")?;
                }
                Ok(())
            }
        }
    }
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
    pub name: OwnName,
    /// Why it is the host's (`mounted by the host's Pod`, …), for the refusal and `check`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<&'static str>,
}

impl fmt::Display for OwnObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scope {
            OwnScope::Cluster => write!(f, "{} {}", self.kind, self.name)?,
            OwnScope::Namespace(ns) => write!(f, "{} {ns}/{}", self.kind, self.name)?,
            OwnScope::AnyNamespace => write!(f, "{} {} in any namespace", self.kind, self.name)?,
        }
        match self.why {
            Some(why) => write!(f, " ({why})"),
            None => Ok(()),
        }
    }
}

/// The group of an apiVersion (`""` for the core group).
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

impl OwnObject {
    /// An own object named exactly `name`.
    pub fn exact(
        api_version: &'static str,
        kind: &'static str,
        scope: OwnScope,
        name: &str,
        why: Option<&'static str>,
    ) -> Self {
        OwnObject {
            api_version,
            kind,
            scope,
            name: OwnName::Exact(name.to_string()),
            why,
        }
    }

    fn matches(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> bool {
        let scope_ok = match (&self.scope, namespace) {
            (OwnScope::Cluster, None) | (OwnScope::AnyNamespace, Some(_)) => true,
            (OwnScope::Namespace(own), Some(ns)) => own == ns,
            _ => false,
        };
        scope_ok
            && self.kind == kind
            && self.name.matches(name)
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
    /// ServiceAccount, Deployment, its ReplicaSets and Pods, the PodDisruptionBudget, the
    /// registry sources and credentials and the RBAC carry `deploy/`'s names. This is the
    /// fallback of a host that cannot read its own Pod; [`OwnObjects::add`] extends it with
    /// what the Pod names.
    pub fn new(namespace: &str, plugins_configmap: &str, lease: (&str, &str)) -> Self {
        let here = || OwnScope::Namespace(namespace.to_string());
        let generated = |api_version, kind, stem: &str, segments| OwnObject {
            api_version,
            kind,
            scope: here(),
            name: OwnName::Generated {
                stem: stem.to_string(),
                segments,
            },
            why: None,
        };
        // The plugins' accounts `kubewasm-plugin-<p>`, and `kubewasm rbac`'s roles for them
        // `kubewasm-plugins-<p>` (`--name` and the plugin).
        let prefix = |kind: &'static str, scope: OwnScope| OwnObject {
            api_version: if kind == "ServiceAccount" { "v1" } else { RBAC },
            kind,
            scope,
            name: OwnName::Prefix(if kind == "ServiceAccount" {
                PLUGIN_ACCOUNT_PREFIX.to_string()
            } else {
                format!("{PLUGINS_RBAC}-")
            }),
            why: Some("a plugin's identity"),
        };
        let e = |api_version, kind, scope, name: &str| {
            OwnObject::exact(api_version, kind, scope, name, None)
        };
        let objects = vec![
            e("v1", "ConfigMap", here(), plugins_configmap),
            e(
                "coordination.k8s.io/v1",
                "Lease",
                OwnScope::Namespace(lease.0.to_string()),
                lease.1,
            ),
            // The member Leases of a sharded host's ring (`<id>-<replica>`): a plugin that
            // wrote one could claim slots, or free another replica's.
            OwnObject {
                api_version: "coordination.k8s.io/v1",
                kind: "Lease",
                scope: OwnScope::Namespace(lease.0.to_string()),
                name: OwnName::Prefix(format!("{}-", lease.1)),
                why: Some("a shard ring member's Lease"),
            },
            e("v1", "ServiceAccount", here(), HOST_NAME),
            e("apps/v1", "Deployment", here(), HOST_NAME),
            generated("apps/v1", "ReplicaSet", HOST_NAME, 1),
            generated("v1", "Pod", HOST_NAME, 2),
            e("policy/v1", "PodDisruptionBudget", here(), HOST_NAME),
            e("v1", "ConfigMap", here(), SOURCES_CONFIGMAP),
            generated("v1", "ConfigMap", SOURCES_CONFIGMAP, 1),
            e("v1", "Secret", here(), REGISTRY_SECRET),
            generated("v1", "Secret", &format!("{HOST_NAME}-token"), 1),
            e(RBAC, "Role", here(), LEADER_ELECTION_RBAC),
            e(RBAC, "RoleBinding", here(), LEADER_ELECTION_RBAC),
            e(RBAC, "Role", OwnScope::AnyNamespace, PLUGINS_RBAC),
            e(RBAC, "RoleBinding", OwnScope::AnyNamespace, PLUGINS_RBAC),
            e(RBAC, "ClusterRole", OwnScope::Cluster, PLUGINS_RBAC),
            e(RBAC, "ClusterRoleBinding", OwnScope::Cluster, PLUGINS_RBAC),
            prefix("ServiceAccount", here()),
            prefix("Role", OwnScope::AnyNamespace),
            prefix("RoleBinding", OwnScope::AnyNamespace),
            prefix("ClusterRole", OwnScope::Cluster),
            prefix("ClusterRoleBinding", OwnScope::Cluster),
        ];
        OwnObjects {
            namespace: namespace.to_string(),
            objects,
        }
    }

    /// The namespace the host runs in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Adds `more` (what the host's Pod names), skipping what is already listed.
    pub fn add(&mut self, more: impl IntoIterator<Item = OwnObject>) {
        for o in more {
            if !self
                .objects
                .iter()
                .any(|x| x.kind == o.kind && x.scope == o.scope && x.name == o.name)
            {
                self.objects.push(o);
            }
        }
    }

    /// Every own object.
    pub fn all(&self) -> &[OwnObject] {
        &self.objects
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

    /// The own object a call with `verb` on `name` would touch, if the call must be refused:
    /// every write to an own object, and a `get` of an own Secret (a mounted credential or
    /// token is the host's identity).
    pub fn refuses(
        &self,
        verb: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<&OwnObject> {
        if name.is_empty()
            || (verb == "get" && !(kind == "Secret" && group(api_version).is_empty()))
        {
            return None;
        }
        self.find(api_version, kind, namespace, name)
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
            "the write grants cover the host's own {}: writes to them are refused at the call whatever the grants, the rest of the grant works as given (nothing to change)",
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
                "RoleBinding kubewasm-plugins in any namespace",
                "Role kubewasm-plugins-* in any namespace (a plugin's identity)",
                "RoleBinding kubewasm-plugins-* in any namespace (a plugin's identity)"
            ],
            "kubewasm rbac's Roles in web, nothing in the host's namespace"
        );
        assert!(own.warning(&Grants::builtin_default()).is_none());
    }
}
