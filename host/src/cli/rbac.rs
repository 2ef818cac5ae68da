//! `kubewasm rbac DIR`: the Kubernetes RBAC the host and the plugins in a directory need, as
//! YAML for `kubectl apply -f -`.
//!
//! Each plugin is described exactly as the host loads it (manifest, `describe()`, grants), and
//! its RBAC is derived from its **grants**, the operator's intent, not from what `describe()`
//! asks: every verb, kind, namespace and subresource granted, nothing more.
//!
//! - a `watch` entry gives `get`, `list`, `watch`;
//! - a `write` entry gives the RBAC verbs of each of its verbs ([`Verb::rbac_verbs`]: `apply`
//!   needs `create` and `patch`); its `patch` and `update` (the calls that take a subresource)
//!   also on `status` and on every subresource it names (`subresources = ["scale"]`);
//! - `events = true` gives `create` and `patch` on `events.k8s.io` Events in the namespaces the
//!   plugin's other grants name (an Event is recorded only there), cluster-wide only when one
//!   of them covers every namespace.
//!
//! `api-version = "apps/*"` becomes API group `apps`, `*` every group. `kind = "*"` becomes
//! every built-in resource of those groups by name, never RBAC's resource `*`: that would
//! also grant every subresource (`nodes/proxy`, `pods/log`, `serviceaccounts/token`, …) and
//! Secrets, which `kind = "*"` does not cover; custom resources must then be named (a note on
//! stderr says so). An entry with
//! `namespaces` goes into a Role and RoleBinding in each; the rest into one ClusterRole and
//! ClusterRoleBinding. Resource names are derived from kinds the way kube-rs does without
//! discovery (`Service` → `services`); check irregular plurals of custom kinds.
//!
//! Each plugin acts under an identity of its own (the host runs with `--plugin-identity own`,
//! the default in a Pod): its `get` and writes go into (Cluster)Roles `<--name>-<plugin>` bound
//! to ServiceAccount `kubewasm-plugin-<plugin>` of `--namespace`, which the host impersonates,
//! so the API server's RBAC enforces the grants too and its audit log names the plugin. The
//! plugin's Events, which the host writes as the plugin, go into the plugin's Role too. The
//! host's ServiceAccount keeps what it does itself (the informers' `get`/`list`/`watch`) and
//! gets `impersonate` on exactly those ServiceAccounts
//! (`resourceNames`). `--shared-identity` binds everything to the host's ServiceAccount instead.
//!
//! A plugin that would not load (invalid, or asking for more than it is granted) contributes
//! nothing and is reported on stderr; the exit status is then 1, after the YAML of the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};

use crate::plugins::{
    DescribedPlugin, GrantPolicy, Grants, PLUGIN_ACCOUNT_PREFIX, READ_VERBS, Verb, describe_file,
    is_plugin_file, plugin_account, plugin_name,
};
use crate::runtime::{Limits, Runtime, RuntimeConfig, RuntimeMetrics};

/// Arguments of `kubewasm rbac`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RbacArgs {
    /// The plugins directory (`*.wasm` with optional `NAME.toml`).
    pub(crate) dir: PathBuf,
    /// Name of the ServiceAccount the host runs as.
    #[arg(long, default_value = "kubewasm")]
    pub(crate) service_account: String,
    /// Namespace of that ServiceAccount.
    #[arg(long, default_value = "kubewasm")]
    pub(crate) namespace: String,
    /// Name of every generated (Cluster)Role and binding.
    #[arg(long, default_value = "kubewasm-plugins")]
    pub(crate) name: String,
    /// Grants for plugins whose `NAME.toml` has no `[grants]` table, as `kubewasm run` takes
    /// them (default: the built-in default).
    #[arg(long, value_name = "FILE")]
    pub(crate) default_grants: Option<PathBuf>,
    /// Bind every plugin's grants to the host's ServiceAccount, for a host run with
    /// `--plugin-identity host` (default: one ServiceAccount per plugin, which the host
    /// impersonates).
    #[arg(long)]
    pub(crate) shared_identity: bool,
    /// Also print the host's own Lease permissions in `--namespace`, which `--leader-elect`
    /// and `--sharding` need (the kustomize base has them in `deploy/rbac.yaml`).
    #[arg(long)]
    pub(crate) leases: bool,
}

/// Which of a plugin's needs a set of rules takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Everything, for one shared identity.
    All,
    /// What the host does for the plugin under its own name: the informers' reads (`watch`
    /// grants).
    Host,
    /// What is done under the plugin's identity: its `get`, its writes and its Events (the
    /// host records them as the plugin).
    Plugin,
}

/// Verbs per (API group, resource), for one scope.
type Rules = BTreeMap<(String, String), BTreeSet<&'static str>>;

/// What every plugin needs: `None` is cluster-wide, `Some(ns)` one namespace.
#[derive(Default)]
struct Needs {
    scopes: BTreeMap<Option<String>, Rules>,
    plugins: Vec<String>,
    /// What the operator should know about the rules (printed on stderr).
    notes: Vec<String>,
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

    /// Adds `part` of what `plugin`'s grants allow.
    /// The host's own Leases (leader election, the shard ring) in its namespace.
    fn add_leases(&mut self, namespace: &str) {
        self.add(
            Some(namespace),
            "coordination.k8s.io",
            "leases",
            crate::election::LEASE_VERBS,
        );
    }

    fn add_plugin(&mut self, name: &str, plugin: &DescribedPlugin, part: Part) {
        self.plugins.push(name.to_string());
        self.add_part(name, &plugin.grants, part);
    }

    /// Adds one rule per grant entry, namespace and verb (see the module doc).
    #[cfg(test)]
    fn add_grants(&mut self, name: &str, grants: &Grants) {
        self.add_part(name, grants, Part::All);
    }

    /// Adds the rules of `part` of `grants`, one per entry, namespace and verb.
    fn add_part(&mut self, name: &str, grants: &Grants, part: Part) {
        // Where the plugin's Events may go: every namespace a grant names, or everywhere.
        let mut event_scopes: BTreeSet<Option<&str>> = BTreeSet::new();
        let mut wildcard = false;
        for w in grants.watch_grants() {
            let targets = rule_targets(w.api_version.as_str(), w.kind.as_str());
            wildcard |= w.kind.as_str() == "*";
            for scope in scopes(&w.namespaces) {
                for (group, resource) in in_scope(&targets, scope) {
                    self.add(scope, group, resource, &READ_VERBS);
                }
                event_scopes.insert(scope);
            }
        }
        for w in grants.write_grants() {
            let targets = rule_targets(w.api_version.as_str(), w.kind.as_str());
            wildcard |= w.kind.as_str() == "*";
            let verbs: Vec<&'static str> = w
                .verbs
                .verbs()
                .iter()
                .flat_map(|v| v.rbac_verbs())
                .copied()
                .collect();
            let sub_verbs: Vec<&'static str> = w
                .verbs
                .verbs()
                .iter()
                .filter(|v| matches!(v, Verb::Patch | Verb::Update))
                .flat_map(|v| v.rbac_verbs())
                .copied()
                .collect();
            let subresources =
                std::iter::once("status").chain(w.subresources.iter().map(|s| s.as_str()));
            let subresources: Vec<&str> = subresources.collect();
            for scope in scopes(&w.namespaces) {
                event_scopes.insert(scope);
                if part == Part::Host {
                    continue;
                }
                for (group, resource) in in_scope(&targets, scope) {
                    self.add(scope, group, resource, &verbs);
                    if !sub_verbs.is_empty() {
                        for sub in &subresources {
                            self.add(scope, group, &format!("{resource}/{sub}"), &sub_verbs);
                        }
                    }
                }
            }
        }
        if grants.events() && part != Part::Host {
            let everywhere = event_scopes.contains(&None);
            for scope in event_scopes {
                if everywhere && scope.is_some() {
                    continue;
                }
                self.add(scope, "events.k8s.io", "events", &["create", "patch"]);
            }
        }
        if wildcard && part != Part::Plugin {
            self.notes.push(format!(
                "{name}: kind = \"*\" is printed as every built-in resource by name (RBAC's \
                 \"*\" would also grant every subresource, such as nodes/proxy and pods/log, and \
                 Secrets); custom resources are not among them: name their kinds."
            ));
        }
    }
}

/// The scopes of an entry's namespaces: each named one, or `None` (cluster-wide).
fn scopes(namespaces: &Option<crate::plugins::NamespaceList>) -> Vec<Option<&str>> {
    match namespaces {
        None => vec![None],
        Some(l) => l.names().map(Some).collect(),
    }
}

/// One RBAC target: API group, resource, and whether the resource is namespaced (`true`
/// for a named kind, whose scope `rbac` cannot know).
type Target = (String, String, bool);

/// The targets of `scope` (`None`: a ClusterRole): a Role holds only namespaced resources.
fn in_scope<'a>(
    targets: &'a [Target],
    scope: Option<&str>,
) -> impl Iterator<Item = (&'a str, &'a str)> {
    targets
        .iter()
        .filter(move |t| scope.is_none() || t.2)
        .map(|t| (t.0.as_str(), t.1.as_str()))
}

/// The RBAC targets of a grant's `api-version` and `kind` patterns: `group/*` is the group (RBAC
/// has no versions); `kind = "*"` is every built-in resource of the matching groups by name,
/// Secrets excepted (RBAC's `*` would add every subresource and Secrets).
fn rule_targets(api_version: &str, kind: &str) -> Vec<Target> {
    let group = match api_version {
        "*" => "*".to_string(),
        v => v.split_once('/').map_or("", |(g, _)| g).to_string(),
    };
    if kind == "*" {
        return wildcard_resources(&group);
    }
    let (group, resource) = rule_target(api_version, kind, group);
    vec![(group, resource, true)]
}

/// The built-in resources of `group` (`*`: every group) that `kind = "*"` covers.
fn wildcard_resources(group: &str) -> Vec<Target> {
    let mut out: Vec<Target> = apiserver::builtin_resources()
        .into_iter()
        .filter(|(g, r, _)| (group == "*" || g == group) && !(g.is_empty() && r == "secrets"))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The API group and resource of a named kind under `api-version` pattern `api_version`.
fn rule_target(api_version: &str, kind: &str, group: String) -> (String, String) {
    // The plural does not depend on the version; `group/*` has none to give.
    let version = api_version
        .rsplit('/')
        .next()
        .filter(|v| *v != "*")
        .unwrap_or("v1");
    let gv = if group.is_empty() || group == "*" {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    (group, resource_of(&gv, kind).1)
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

fn account(name: &str, namespace: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.to_string(),
        namespace: Some(namespace.to_string()),
        ..Subject::default()
    }
}

fn meta(name: &str, namespace: Option<&String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.cloned(),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_string(),
            "kubewasm-rbac".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

/// The YAML documents for `needs`, all of one shared identity.
fn render(needs: &Needs, args: &RbacArgs) -> anyhow::Result<String> {
    let subject = account(&args.service_account, &args.namespace);
    let docs = documents(needs, &args.name, &subject)?;
    Ok(format!(
        "# RBAC for the kubewasm plugins {} (generated by `kubewasm rbac`)\n{}",
        needs.plugins.join(", "),
        docs.join("---\n")
    ))
}

/// The YAML documents for per-plugin identities: the host's reads under its ServiceAccount, its `impersonate` permission limited by `resourceNames` to the plugins'
/// accounts, and for each plugin its ServiceAccount `kubewasm-plugin-<plugin>` (the host's
/// namespace) with exactly its grants, in (Cluster)Roles named `<--name>-<plugin>`.
fn render_identities(
    host: &Needs,
    plugins: &BTreeMap<String, Needs>,
    args: &RbacArgs,
) -> anyhow::Result<String> {
    let mut docs = documents(
        host,
        &args.name,
        &account(&args.service_account, &args.namespace),
    )?;
    let accounts: Vec<String> = plugins.keys().map(|p| plugin_account(p)).collect();
    if !accounts.is_empty() {
        let name = format!("{}-impersonate", args.name);
        let ns = Some(&args.namespace);
        docs.push(serde_yaml::to_string(&Role {
            metadata: meta(&name, ns),
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["serviceaccounts".into()]),
                resource_names: Some(accounts.clone()),
                verbs: vec!["impersonate".into()],
                ..PolicyRule::default()
            }]),
        })?);
        docs.push(serde_yaml::to_string(&RoleBinding {
            metadata: meta(&name, ns),
            role_ref: role_ref("Role", &name),
            subjects: Some(vec![account(&args.service_account, &args.namespace)]),
        })?);
    }
    for (plugin, needs) in plugins {
        let sa = plugin_account(plugin);
        docs.push(serde_yaml::to_string(&ServiceAccount {
            metadata: meta(&sa, Some(&args.namespace)),
            ..ServiceAccount::default()
        })?);
        let suffix = sa.strip_prefix(PLUGIN_ACCOUNT_PREFIX).unwrap_or(&sa);
        let name = format!("{}-{suffix}", args.name);
        docs.extend(documents(needs, &name, &account(&sa, &args.namespace))?);
    }
    Ok(format!(
        "# RBAC for the kubewasm plugins {}, each under a ServiceAccount of its own the host \
         impersonates (generated by `kubewasm rbac`)\n{}",
        host.plugins.join(", "),
        docs.join("---\n")
    ))
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.to_string(),
    }
}

/// A (Cluster)Role named `name` per scope of `needs`, each bound to `subject`.
fn documents(needs: &Needs, name: &str, subject: &Subject) -> anyhow::Result<Vec<String>> {
    let meta = |namespace: Option<&String>| meta(name, namespace);
    let role_ref = |kind: &str| role_ref(kind, name);
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
    Ok(docs)
}

/// Describes every plugin in `args.dir` and prints the RBAC they need.
pub(crate) fn rbac(args: RbacArgs) -> anyhow::Result<()> {
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
            compile: crate::runtime::CompileLimits {
                worker: super::compile_worker_binary(),
                ..Default::default()
            },
            ..RuntimeConfig::default()
        },
        RuntimeMetrics::unregistered(),
    )?;
    let mut needs = Needs::default();
    if args.leases {
        needs.add_leases(&args.namespace);
    }
    let mut plugins: BTreeMap<String, Needs> = BTreeMap::new();
    let mut failed = 0;
    for file in &files {
        match describe_loadable(&runtime, &policy, file) {
            Ok(plugin) => {
                let name = plugin_name(file);
                if args.shared_identity {
                    needs.add_plugin(&name, &plugin, Part::All);
                } else {
                    needs.add_plugin(&name, &plugin, Part::Host);
                    plugins.entry(name.clone()).or_default().add_plugin(
                        &name,
                        &plugin,
                        Part::Plugin,
                    );
                }
            }
            Err(e) => {
                eprintln!("skipped (would not load): {e:#}");
                failed += 1;
            }
        }
    }
    for note in &needs.notes {
        eprintln!("note: {note}");
    }
    if args.shared_identity {
        print!("{}", render(&needs, &args)?);
    } else {
        print!("{}", render_identities(&needs, &plugins, &args)?);
    }
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
mod tests;
