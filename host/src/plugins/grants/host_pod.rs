//! The host's own objects as its Pod names them: pure functions from the objects the host
//! read at start (its Pod, the Pod's ReplicaSet, ServiceAccount, the RBAC bindings and the
//! PodDisruptionBudgets of its namespace) to the [`OwnObject`]s no plugin may write. Reading
//! them is the host layer's job; what is derived is decided here, so it is testable without a
//! server.
//!
//! Siblings are matched by the name their controller generates (`<rs>-<suffix>`, and for a
//! Deployment's ReplicaSets `<deploy>-<hash>` with Pods `<deploy>-<hash>-<suffix>`) rather than
//! by the names seen at start, so a replica created later is protected too, with no read per
//! call.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodSpec, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kubewasm_apimachinery::{LabelSelector as Selector, Operator, Requirement};

use super::own_objects::{OwnName, OwnObject, OwnScope};

const RBAC: &str = "rbac.authorization.k8s.io/v1";

/// Where the host's Pod is: the downward API's `POD_NAMESPACE` and `POD_NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPod {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub name: String,
}

impl HostPod {
    /// The Pod the downward API names (`POD_NAMESPACE`, `POD_NAME`), or `None` outside a
    /// cluster (or when the Deployment does not export them).
    pub fn from_env() -> Option<HostPod> {
        let get = |k| {
            std::env::var(k)
                .ok()
                .filter(|v: &String| !v.trim().is_empty())
        };
        Some(HostPod {
            namespace: get("POD_NAMESPACE")?,
            name: get("POD_NAME")?,
        })
    }
}

fn exact(
    api_version: &'static str,
    kind: &'static str,
    ns: &str,
    name: &str,
    why: &'static str,
) -> OwnObject {
    OwnObject::exact(
        api_version,
        kind,
        OwnScope::Namespace(ns.to_string()),
        name,
        Some(why),
    )
}

fn generated(
    api_version: &'static str,
    kind: &'static str,
    ns: &str,
    stem: &str,
    segments: usize,
    why: &'static str,
) -> OwnObject {
    OwnObject {
        api_version,
        kind,
        scope: OwnScope::Namespace(ns.to_string()),
        name: OwnName::Generated {
            stem: stem.to_string(),
            segments,
        },
        why: Some(why),
    }
}

/// The ownerReference of `owners` that is the controller.
pub(crate) fn controller(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    owners?.iter().find(|o| o.controller == Some(true))
}

/// The ServiceAccount a Pod runs as (`default` when the spec names none).
pub(crate) fn service_account(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// What the Pod itself names: the Pod, its siblings (by its controller), every ConfigMap and
/// Secret it mounts or reads, its image pull Secrets, its ServiceAccount and that account's
/// token Secrets.
pub(crate) fn from_pod(pod: &Pod) -> Vec<OwnObject> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = Vec::new();
    if let Some(name) = &pod.metadata.name {
        out.push(exact("v1", "Pod", ns, name, "the host's Pod"));
    }
    if let Some(owner) = controller(pod.metadata.owner_references.as_ref()) {
        let (api_version, kind): (&'static str, &'static str) =
            match (owner.api_version.as_str(), owner.kind.as_str()) {
                ("apps/v1", "ReplicaSet") => ("apps/v1", "ReplicaSet"),
                ("apps/v1", "StatefulSet") => ("apps/v1", "StatefulSet"),
                ("apps/v1", "DaemonSet") => ("apps/v1", "DaemonSet"),
                ("batch/v1", "Job") => ("batch/v1", "Job"),
                ("v1", "ReplicationController") => ("v1", "ReplicationController"),
                _ => ("", ""),
            };
        if !kind.is_empty() {
            out.push(exact(
                api_version,
                kind,
                ns,
                &owner.name,
                "controls the host's Pod",
            ));
        }
        out.push(generated(
            "v1",
            "Pod",
            ns,
            &owner.name,
            1,
            "a replica of the host",
        ));
    }
    if let Some(spec) = &pod.spec {
        let (config_maps, secrets) = mounted(spec);
        for cm in config_maps {
            out.push(exact(
                "v1",
                "ConfigMap",
                ns,
                &cm,
                "mounted or read by the host's Pod",
            ));
        }
        for s in secrets {
            out.push(exact(
                "v1",
                "Secret",
                ns,
                &s,
                "mounted or read by the host's Pod",
            ));
        }
    }
    let sa = service_account(pod);
    out.push(exact(
        "v1",
        "ServiceAccount",
        ns,
        &sa,
        "the host's identity",
    ));
    out.push(generated(
        "v1",
        "Secret",
        ns,
        &format!("{sa}-token"),
        1,
        "a token of the host's ServiceAccount",
    ));
    out
}

/// The ConfigMaps and Secrets a Pod spec mounts or reads: volumes (projected ones too),
/// `envFrom`, `env[].valueFrom` of every container, init and ephemeral container, and image
/// pull Secrets.
pub(crate) fn mounted(spec: &PodSpec) -> (Vec<String>, Vec<String>) {
    let mut config_maps = Vec::new();
    let mut secrets = Vec::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            config_maps.push(cm.name.clone());
        }
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.push(s);
        }
        for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &source.config_map {
                config_maps.push(cm.name.clone());
            }
            if let Some(s) = &source.secret {
                secrets.push(s.name.clone());
            }
        }
    }
    let envs = spec
        .containers
        .iter()
        .map(|c| (&c.env, &c.env_from))
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| (&c.env, &c.env_from)),
        )
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| (&c.env, &c.env_from)),
        );
    for (env, env_from) in envs {
        for from in env_from.iter().flatten() {
            if let Some(cm) = &from.config_map_ref {
                config_maps.push(cm.name.clone());
            }
            if let Some(s) = &from.secret_ref {
                secrets.push(s.name.clone());
            }
        }
        for value_from in env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
            if let Some(cm) = &value_from.config_map_key_ref {
                config_maps.push(cm.name.clone());
            }
            if let Some(s) = &value_from.secret_key_ref {
                secrets.push(s.name.clone());
            }
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        secrets.push(s.name.clone());
    }
    config_maps.retain(|n| !n.is_empty());
    secrets.retain(|n| !n.is_empty());
    config_maps.sort();
    config_maps.dedup();
    secrets.sort();
    secrets.dedup();
    (config_maps, secrets)
}

/// What the Pod's ReplicaSet adds: its Deployment, that Deployment's other ReplicaSets and
/// their Pods (a rollout's new replicas).
pub(crate) fn from_replica_set(rs: &ReplicaSet) -> Vec<OwnObject> {
    let ns = rs.metadata.namespace.as_deref().unwrap_or("default");
    let Some(owner) = controller(rs.metadata.owner_references.as_ref())
        .filter(|o| o.kind == "Deployment" && o.api_version == "apps/v1")
    else {
        return Vec::new();
    };
    vec![
        exact(
            "apps/v1",
            "Deployment",
            ns,
            &owner.name,
            "controls the host's Pod",
        ),
        generated(
            "apps/v1",
            "ReplicaSet",
            ns,
            &owner.name,
            1,
            "a ReplicaSet of the host's Deployment",
        ),
        generated("v1", "Pod", ns, &owner.name, 2, "a replica of the host"),
    ]
}

/// What the ServiceAccount names: its (legacy) token Secrets and image pull Secrets.
pub(crate) fn from_service_account(sa: &ServiceAccount) -> Vec<OwnObject> {
    let ns = sa.metadata.namespace.as_deref().unwrap_or("default");
    let tokens = sa
        .secrets
        .iter()
        .flatten()
        .filter_map(|s| s.name.clone())
        .chain(
            sa.image_pull_secrets
                .iter()
                .flatten()
                .map(|s| s.name.clone()),
        );
    tokens
        .filter(|n| !n.is_empty())
        .map(|n| {
            exact(
                "v1",
                "Secret",
                ns,
                &n,
                "a Secret of the host's ServiceAccount",
            )
        })
        .collect()
}

fn names_account(subjects: Option<&Vec<Subject>>, sa_ns: &str, sa: &str) -> bool {
    subjects.into_iter().flatten().any(|s| {
        s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(sa_ns)
    })
}

fn role_of(role_ref: &RoleRef, binding_ns: Option<&str>) -> OwnObject {
    let (kind, scope) = match (role_ref.kind.as_str(), binding_ns) {
        ("Role", Some(ns)) => ("Role", OwnScope::Namespace(ns.to_string())),
        _ => ("ClusterRole", OwnScope::Cluster),
    };
    OwnObject::exact(
        RBAC,
        kind,
        scope,
        &role_ref.name,
        Some("bound to the host's ServiceAccount"),
    )
}

/// The bindings naming ServiceAccount `sa_ns/sa` and the roles they bind.
pub(crate) fn from_bindings(
    sa_ns: &str,
    sa: &str,
    role_bindings: &[RoleBinding],
    cluster_role_bindings: &[ClusterRoleBinding],
) -> Vec<OwnObject> {
    let why = Some("binds the host's ServiceAccount");
    let mut out = Vec::new();
    for b in role_bindings {
        if !names_account(b.subjects.as_ref(), sa_ns, sa) {
            continue;
        }
        let (Some(ns), Some(name)) = (&b.metadata.namespace, &b.metadata.name) else {
            continue;
        };
        out.push(OwnObject::exact(
            RBAC,
            "RoleBinding",
            OwnScope::Namespace(ns.clone()),
            name,
            why,
        ));
        out.push(role_of(&b.role_ref, Some(ns)));
    }
    for b in cluster_role_bindings {
        if !names_account(b.subjects.as_ref(), sa_ns, sa) {
            continue;
        }
        let Some(name) = &b.metadata.name else {
            continue;
        };
        out.push(OwnObject::exact(
            RBAC,
            "ClusterRoleBinding",
            OwnScope::Cluster,
            name,
            why,
        ));
        out.push(role_of(&b.role_ref, None));
    }
    out
}

/// The PodDisruptionBudgets of `pdbs` whose selector selects `pod`.
pub(crate) fn from_pdbs(pod: &Pod, pdbs: &[PodDisruptionBudget]) -> Vec<OwnObject> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    pdbs.iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|s| selects(s, labels))
        })
        .filter_map(|p| {
            Some(exact(
                "policy/v1",
                "PodDisruptionBudget",
                p.metadata.namespace.as_deref()?,
                p.metadata.name.as_deref()?,
                "selects the host's Pod",
            ))
        })
        .collect()
}

/// Whether a metav1 `LabelSelector` selects `labels`; an empty selector selects everything (as
/// a `policy/v1` PDB reads it), an invalid one nothing.
fn selects(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let mut reqs = Vec::new();
    for (k, v) in s.match_labels.iter().flatten() {
        match Requirement::new(k, Operator::Equals, vec![v.clone()]) {
            Ok(r) => reqs.push(r),
            Err(_) => return false,
        }
    }
    for e in s.match_expressions.iter().flatten() {
        let op = match e.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            _ => return false,
        };
        match Requirement::new(&e.key, op, e.values.clone().unwrap_or_default()) {
            Ok(r) => reqs.push(r),
            Err(_) => return false,
        }
    }
    Selector::from_requirements(reqs).matches(labels)
}

#[cfg(test)]
mod tests {
    use super::super::OwnObjects;
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "namespace": "kw", "name": "host-5d4f8b-x7k2p",
                "labels": {"app": "host"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "host-5d4f8b", "uid": "u1", "controller": true}],
            },
            "spec": {
                "serviceAccountName": "host",
                "imagePullSecrets": [{"name": "pull"}],
                "containers": [{"name": "c", "image": "i",
                    "envFrom": [{"configMapRef": {"name": "env-cm"}}],
                    "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}}]}],
                "volumes": [
                    {"name": "a", "configMap": {"name": "plugin-sources-abc"}},
                    {"name": "b", "secret": {"secretName": "registry"}},
                    {"name": "c", "projected": {"sources": [{"configMap": {"name": "proj-cm"}},
                        {"secret": {"name": "proj-secret"}}, {"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "d", "emptyDir": {}},
                ],
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_pod_names_itself_its_siblings_and_everything_it_mounts_or_reads() {
        let mut own = OwnObjects::new("kw", "plugins", ("kw", "lead"));
        own.add(from_pod(&pod()));
        let found = |kind, ns, name| own.find("v1", kind, Some(ns), name).is_some();
        assert!(found("Pod", "kw", "host-5d4f8b-x7k2p"));
        assert!(
            found("Pod", "kw", "host-5d4f8b-q9z2w"),
            "a sibling created later"
        );
        assert!(
            !found("Pod", "kw", "host-5d4f8b"),
            "a Pod merely named like the set"
        );
        assert!(!found("Pod", "kw", "other-5d4f8b-x7k2p"));
        assert!(!found("Pod", "web", "host-5d4f8b-q9z2w"));
        for cm in ["plugin-sources-abc", "proj-cm", "env-cm"] {
            assert!(found("ConfigMap", "kw", cm), "{cm}");
        }
        for s in [
            "registry",
            "proj-secret",
            "env-secret",
            "pull",
            "host-token-abcde",
        ] {
            assert!(found("Secret", "kw", s), "{s}");
        }
        assert!(found("ServiceAccount", "kw", "host"));
        assert!(
            own.find("apps/v1", "ReplicaSet", Some("kw"), "host-5d4f8b")
                .is_some()
        );
        let refusal = own
            .refuses("patch", "v1", "ConfigMap", Some("kw"), "plugin-sources-abc")
            .unwrap()
            .to_string();
        assert_eq!(
            refusal,
            "ConfigMap kw/plugin-sources-abc (mounted or read by the host's Pod)"
        );
        assert!(
            own.refuses("get", "v1", "Secret", Some("kw"), "registry")
                .is_some(),
            "a mounted Secret is not even read"
        );
        assert!(
            own.refuses("get", "v1", "ConfigMap", Some("kw"), "env-cm")
                .is_none()
        );
    }

    #[test]
    fn the_replica_set_bindings_and_pdb_extend_the_list() {
        let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "kw", "name": "host-5d4f8b", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "host", "uid": "u0", "controller": true}]},
        }))
        .unwrap();
        let rb: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "web", "name": "host-writes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
            "subjects": [{"kind": "ServiceAccount", "name": "host", "namespace": "kw"}],
        }))
        .unwrap();
        let other: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "web", "name": "someone-else"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "host", "namespace": "web"}],
        }))
        .unwrap();
        let crb: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "host-watch"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "watcher"},
            "subjects": [{"kind": "ServiceAccount", "name": "host", "namespace": "kw"}],
        }))
        .unwrap();
        let pdb = |name: &str, app: &str| -> PodDisruptionBudget {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "kw", "name": name},
                "spec": {"selector": {"matchLabels": {"app": app}}},
            }))
            .unwrap()
        };
        let mut own = OwnObjects::new("kw", "plugins", ("kw", "lead"));
        own.add(from_replica_set(&rs));
        own.add(from_bindings("kw", "host", &[rb, other], &[crb]));
        own.add(from_pdbs(
            &pod(),
            &[pdb("mine", "host"), pdb("theirs", "web")],
        ));
        let f = |v, k, ns, n| own.find(v, k, ns, n).is_some();
        assert!(f("apps/v1", "Deployment", Some("kw"), "host"));
        assert!(
            f("apps/v1", "ReplicaSet", Some("kw"), "host-7c9d2f"),
            "next rollout"
        );
        assert!(f("v1", "Pod", Some("kw"), "host-7c9d2f-abcde"), "its Pods");
        assert!(f(RBAC, "RoleBinding", Some("web"), "host-writes"));
        assert!(f(RBAC, "Role", Some("web"), "writer"));
        assert!(!f(RBAC, "RoleBinding", Some("web"), "someone-else"));
        assert!(f(RBAC, "ClusterRoleBinding", None, "host-watch"));
        assert!(f(RBAC, "ClusterRole", None, "watcher"));
        assert!(f("policy/v1", "PodDisruptionBudget", Some("kw"), "mine"));
        assert!(!f("policy/v1", "PodDisruptionBudget", Some("kw"), "theirs"));
    }
}
