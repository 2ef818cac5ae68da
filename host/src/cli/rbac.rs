//! `kubewasm rbac DIR`: the Kubernetes RBAC the host's ServiceAccount needs for the plugins in
//! a directory, as YAML for `kubectl apply -f -`.
//!
//! Each plugin is described exactly as the host loads it (manifest, `describe()`, grants).
//! What it needs: `get`, `list`, `watch` on every subscription; the read verbs of its
//! permissions; for its write permissions (all granted, or it would not load) the RBAC verbs
//! of each write (`apply` needs `create` and `patch`), `patch` and `update` also on the
//! `status` subresource (a write grant covers it); `create` and `patch` on `events.k8s.io`
//! Events when it records Events (in any namespace: an Event lives beside the object it is
//! about). Whatever names a namespace goes into a Role and RoleBinding there; the rest into one
//! ClusterRole and ClusterRoleBinding. Resource names are derived from kinds the way kube-rs
//! does without discovery (`Service` → `services`); check irregular plurals of custom kinds.
//!
//! A plugin that would not load (invalid, or asking for more than it is granted) contributes
//! nothing and is reported on stderr; the exit status is then 1, after the YAML of the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};

use crate::plugins::{
    DescribedPlugin, GrantPolicy, READ_VERBS, Verb, describe_file, is_plugin_file, plugin_name,
};
use crate::runtime::{Limits, Runtime, RuntimeConfig, RuntimeMetrics};

/// Arguments of `kubewasm rbac`.
#[derive(clap::Args, Debug, Clone)]
pub struct RbacArgs {
    /// The plugins directory (`*.wasm` with optional `NAME.toml`).
    pub dir: PathBuf,
    /// Name of the ServiceAccount the host runs as.
    #[arg(long, default_value = "kubewasm")]
    pub service_account: String,
    /// Namespace of that ServiceAccount.
    #[arg(long, default_value = "kubewasm")]
    pub namespace: String,
    /// Name of every generated (Cluster)Role and binding.
    #[arg(long, default_value = "kubewasm-plugins")]
    pub name: String,
    /// Grants for plugins whose `NAME.toml` has no `[grants]` table, as `kubewasm run` takes
    /// them (default: the built-in default).
    #[arg(long, value_name = "FILE")]
    pub default_grants: Option<PathBuf>,
}

/// Verbs per (API group, resource), for one scope.
type Rules = BTreeMap<(String, String), BTreeSet<&'static str>>;

/// What every plugin needs: `None` is cluster-wide, `Some(ns)` one namespace.
#[derive(Default)]
struct Needs {
    scopes: BTreeMap<Option<String>, Rules>,
    plugins: Vec<String>,
}

impl Needs {
    fn add(&mut self, scope: Option<&str>, group: &str, resource: &str, verbs: &[&'static str]) {
        self.scopes
            .entry(scope.map(str::to_string))
            .or_default()
            .entry((group.to_string(), resource.to_string()))
            .or_default()
            .extend(verbs);
    }

    /// Adds `plugin`'s subscriptions, permissions and Events.
    fn add_plugin(&mut self, name: &str, plugin: &DescribedPlugin) {
        self.plugins.push(name.to_string());
        for s in &plugin.info.subscriptions {
            let (group, resource) = resource_of(&s.api_version, &s.kind);
            self.add(s.namespace.as_deref(), &group, &resource, &READ_VERBS);
        }
        for p in &plugin.info.permissions {
            let (group, resource) = resource_of(&p.api_version, &p.kind);
            let ns = p.namespace.as_deref();
            for v in &p.verbs {
                if let Some(read) = READ_VERBS.iter().find(|r| **r == v.as_str()) {
                    self.add(ns, &group, &resource, &[read]);
                } else if let Some(write) = Verb::parse(v) {
                    self.add(ns, &group, &resource, write.rbac_verbs());
                    if matches!(write, Verb::Patch | Verb::Update) {
                        self.add(
                            ns,
                            &group,
                            &format!("{resource}/status"),
                            write.rbac_verbs(),
                        );
                    }
                }
            }
        }
        if plugin.info.events {
            self.add(None, "events.k8s.io", "events", &["create", "patch"]);
        }
    }
}

/// The API group and resource (plural) of a kind, without asking a server.
fn resource_of(api_version: &str, kind: &str) -> (String, String) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    (ar.group, ar.plural)
}

fn policy_rules(rules: &Rules) -> Vec<PolicyRule> {
    rules
        .iter()
        .map(|((group, resource), verbs)| PolicyRule {
            api_groups: Some(vec![group.clone()]),
            resources: Some(vec![resource.clone()]),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..PolicyRule::default()
        })
        .collect()
}

/// The YAML documents for `needs`.
fn render(needs: &Needs, args: &RbacArgs) -> anyhow::Result<String> {
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: args.service_account.clone(),
        namespace: Some(args.namespace.clone()),
        ..Subject::default()
    };
    let meta = |namespace: Option<&String>| ObjectMeta {
        name: Some(args.name.clone()),
        namespace: namespace.cloned(),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_string(),
            "kubewasm-rbac".to_string(),
        )])),
        ..ObjectMeta::default()
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: args.name.clone(),
    };
    let mut docs = Vec::new();
    for (scope, rules) in &needs.scopes {
        match scope {
            None => {
                docs.push(serde_yaml::to_string(&ClusterRole {
                    metadata: meta(None),
                    rules: Some(policy_rules(rules)),
                    ..ClusterRole::default()
                })?);
                docs.push(serde_yaml::to_string(&ClusterRoleBinding {
                    metadata: meta(None),
                    role_ref: role_ref("ClusterRole"),
                    subjects: Some(vec![subject.clone()]),
                })?);
            }
            Some(ns) => {
                docs.push(serde_yaml::to_string(&Role {
                    metadata: meta(Some(ns)),
                    rules: Some(policy_rules(rules)),
                })?);
                docs.push(serde_yaml::to_string(&RoleBinding {
                    metadata: meta(Some(ns)),
                    role_ref: role_ref("Role"),
                    subjects: Some(vec![subject.clone()]),
                })?);
            }
        }
    }
    Ok(format!(
        "# RBAC for the kubewasm plugins {} (generated by `kubewasm rbac`)\n{}",
        needs.plugins.join(", "),
        docs.join("---\n")
    ))
}

/// Describes every plugin in `args.dir` and prints the RBAC they need.
pub fn rbac(args: RbacArgs) -> anyhow::Result<()> {
    let policy = GrantPolicy::operator(args.default_grants.as_deref())
        .map_err(|e| anyhow::anyhow!("--default-grants: {e}"))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.dir)
        .map_err(|e| anyhow::anyhow!("cannot read plugins directory {}: {e}", args.dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_plugin_file(p) && p.is_file())
        .collect();
    files.sort();
    let runtime = Runtime::new(
        RuntimeConfig {
            cache_dir: super::default_cache_dir(),
            ..RuntimeConfig::default()
        },
        RuntimeMetrics::unregistered(),
    )?;
    let mut needs = Needs::default();
    let mut failed = 0;
    for file in &files {
        match describe_loadable(&runtime, &policy, file) {
            Ok(plugin) => needs.add_plugin(&plugin_name(file), &plugin),
            Err(e) => {
                eprintln!("skipped (would not load): {e:#}");
                failed += 1;
            }
        }
    }
    print!("{}", render(&needs, &args)?);
    if failed > 0 {
        anyhow::bail!(
            "{failed} of {} plugin(s) would not load and are not covered",
            files.len()
        );
    }
    Ok(())
}

fn describe_loadable(
    runtime: &Runtime,
    policy: &GrantPolicy,
    file: &Path,
) -> anyhow::Result<DescribedPlugin> {
    let described = describe_file(runtime, file, Limits::default(), policy)?;
    if let Some(e) = described.grant_error(&plugin_name(file), file) {
        return Err(e.into());
    }
    Ok(described)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_group_and_plural() {
        assert_eq!(resource_of("v1", "Service"), ("".into(), "services".into()));
        assert_eq!(
            resource_of("apps/v1", "Deployment"),
            ("apps".into(), "deployments".into())
        );
        assert_eq!(
            resource_of("networking.k8s.io/v1", "Ingress"),
            ("networking.k8s.io".into(), "ingresses".into())
        );
    }
}
