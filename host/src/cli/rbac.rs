//! `kubewasm rbac DIR`: the Kubernetes RBAC the host's ServiceAccount needs for the plugins in
//! a directory, as YAML for `kubectl apply -f -`.
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
//! `api-version = "apps/*"` becomes API group `apps`, `*` every group; `kind = "*"` becomes
//! resource `*`. RBAC has no exceptions, so a wildcard kind also covers Secrets there (the host
//! itself still refuses them to the plugin); a note on stderr says so. An entry with
//! `namespaces` goes into a Role and RoleBinding in each; the rest into one ClusterRole and
//! ClusterRoleBinding. Resource names are derived from kinds the way kube-rs does without
//! discovery (`Service` → `services`); check irregular plurals of custom kinds.
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
    DescribedPlugin, GrantPolicy, Grants, READ_VERBS, Verb, describe_file, is_plugin_file,
    plugin_name,
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

    /// Adds what `plugin`'s grants allow.
    fn add_plugin(&mut self, name: &str, plugin: &DescribedPlugin) {
        self.plugins.push(name.to_string());
        self.add_grants(name, &plugin.grants);
    }

    /// Adds one rule per grant entry, namespace and verb (see the module doc).
    fn add_grants(&mut self, name: &str, grants: &Grants) {
        // Where the plugin's Events may go: every namespace a grant names, or everywhere.
        let mut event_scopes: BTreeSet<Option<&str>> = BTreeSet::new();
        let mut wildcard = false;
        for w in grants.watch_grants() {
            let (group, resource) = rule_target(w.api_version.as_str(), w.kind.as_str());
            wildcard |= resource == "*";
            for scope in scopes(&w.namespaces) {
                self.add(scope, &group, &resource, &READ_VERBS);
                event_scopes.insert(scope);
            }
        }
        for w in grants.write_grants() {
            let (group, resource) = rule_target(w.api_version.as_str(), w.kind.as_str());
            wildcard |= resource == "*";
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
                self.add(scope, &group, &resource, &verbs);
                if !sub_verbs.is_empty() {
                    for sub in &subresources {
                        self.add(scope, &group, &format!("{resource}/{sub}"), &sub_verbs);
                    }
                }
                event_scopes.insert(scope);
            }
        }
        if grants.events() {
            let everywhere = event_scopes.contains(&None);
            for scope in event_scopes {
                if everywhere && scope.is_some() {
                    continue;
                }
                self.add(scope, "events.k8s.io", "events", &["create", "patch"]);
            }
        }
        if wildcard {
            self.notes.push(format!(
                "{name}: kind = \"*\" is resource \"*\" in RBAC, which includes Secrets (RBAC \
                 has no exceptions); the host still refuses Secrets to the plugin. Name the kinds \
                 for a least-privilege ServiceAccount."
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

/// The API group and resource of a grant's `api-version` and `kind` patterns: `*` stays `*`,
/// `group/*` is the group (RBAC has no versions).
fn rule_target(api_version: &str, kind: &str) -> (String, String) {
    let group = match api_version {
        "*" => "*".to_string(),
        v => v.split_once('/').map_or("", |(g, _)| g).to_string(),
    };
    if kind == "*" {
        return (group, "*".to_string());
    }
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
            compile: crate::runtime::CompileLimits {
                worker: super::compile_worker_binary(),
                ..Default::default()
            },
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
    for note in &needs.notes {
        eprintln!("note: {note}");
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

    /// One printed or required permission: scope (`None` cluster-wide), group, resource, verb.
    type Tuple = (Option<String>, String, String, String);

    fn grants(toml_text: &str) -> Grants {
        #[derive(serde::Deserialize)]
        struct File {
            grants: crate::plugins::GrantsTable,
        }
        let f: File = toml::from_str(toml_text).unwrap();
        Grants::from_table(f.grants, crate::plugins::GrantSource::BuiltIn)
    }

    /// The rules of the printed YAML, parsed back, with each binding checked to bind them.
    fn printed(yaml: &str, args: &RbacArgs) -> BTreeSet<Tuple> {
        let mut out = BTreeSet::new();
        let mut roles = BTreeSet::new();
        let mut bindings = BTreeSet::new();
        for doc in yaml.split("\n---\n") {
            let doc: serde_yaml::Value = serde_yaml::from_str(doc).unwrap();
            let kind = doc["kind"].as_str().unwrap().to_string();
            let scope = doc["metadata"]["namespace"].as_str().map(str::to_string);
            assert_eq!(doc["metadata"]["name"].as_str(), Some(args.name.as_str()));
            match kind.as_str() {
                "Role" | "ClusterRole" => {
                    assert_eq!(kind == "Role", scope.is_some(), "{doc:?}");
                    roles.insert((kind.clone(), scope.clone()));
                    for rule in doc["rules"].as_sequence().unwrap() {
                        for group in rule["apiGroups"].as_sequence().unwrap() {
                            for resource in rule["resources"].as_sequence().unwrap() {
                                for verb in rule["verbs"].as_sequence().unwrap() {
                                    out.insert((
                                        scope.clone(),
                                        group.as_str().unwrap().to_string(),
                                        resource.as_str().unwrap().to_string(),
                                        verb.as_str().unwrap().to_string(),
                                    ));
                                }
                            }
                        }
                    }
                }
                "RoleBinding" | "ClusterRoleBinding" => {
                    assert_eq!(doc["subjects"][0]["name"].as_str(), Some("kubewasm"));
                    bindings.insert((doc["roleRef"]["kind"].as_str().unwrap().to_string(), scope));
                }
                other => panic!("unexpected document {other}"),
            }
        }
        assert_eq!(roles, bindings, "every role is bound, nothing else is");
        out
    }

    /// Whether the grants' `api-version` pattern `pattern` is API group `group` in RBAC.
    fn group_of(pattern: &str) -> String {
        match pattern {
            "*" => "*".into(),
            p => p.split_once('/').map_or("", |(g, _)| g).into(),
        }
    }

    /// Everything `g` grants, spelled as RBAC tuples, written from the grants reference
    /// (`docs/grants.md`) rather than from the code under test.
    fn granted(g: &Grants, plural: &dyn Fn(&str) -> String) -> BTreeSet<Tuple> {
        let scopes = |ns: &Option<crate::plugins::NamespaceList>| -> Vec<Option<String>> {
            match ns {
                None => vec![None],
                Some(l) => l.names().map(|n| Some(n.to_string())).collect(),
            }
        };
        let resource = |kind: &str| {
            if kind == "*" {
                "*".to_string()
            } else {
                plural(kind)
            }
        };
        let mut out = BTreeSet::new();
        let mut event_scopes = BTreeSet::new();
        for w in g.watch_grants() {
            for scope in scopes(&w.namespaces) {
                for verb in ["get", "list", "watch"] {
                    out.insert((
                        scope.clone(),
                        group_of(w.api_version.as_str()),
                        resource(w.kind.as_str()),
                        verb.to_string(),
                    ));
                }
                event_scopes.insert(scope);
            }
        }
        for w in g.write_grants() {
            for scope in scopes(&w.namespaces) {
                let group = group_of(w.api_version.as_str());
                let base = resource(w.kind.as_str());
                for verb in w.verbs.verbs() {
                    let rbac: &[&str] = match verb {
                        Verb::Apply => &["create", "patch"],
                        Verb::Create => &["create"],
                        Verb::Update => &["update"],
                        Verb::Patch => &["patch"],
                        Verb::Delete => &["delete"],
                    };
                    for v in rbac {
                        out.insert((scope.clone(), group.clone(), base.clone(), v.to_string()));
                    }
                    if matches!(verb, Verb::Patch | Verb::Update) {
                        let subs = std::iter::once("status")
                            .chain(w.subresources.iter().map(|s| s.as_str()));
                        for sub in subs {
                            out.insert((
                                scope.clone(),
                                group.clone(),
                                format!("{base}/{sub}"),
                                rbac[0].to_string(),
                            ));
                        }
                    }
                }
                event_scopes.insert(scope);
            }
        }
        if g.events() {
            let everywhere = event_scopes.contains(&None);
            for scope in event_scopes {
                if everywhere && scope.is_some() {
                    continue;
                }
                for v in ["create", "patch"] {
                    out.insert((
                        scope.clone(),
                        "events.k8s.io".into(),
                        "events".into(),
                        v.into(),
                    ));
                }
            }
        }
        out
    }

    /// Whether printed tuple `t` is within what `g` grants: a printed rule may be no wider than
    /// some grant (a wildcard rule only where the grant is a wildcard).
    fn within(t: &Tuple, allowed: &BTreeSet<Tuple>) -> bool {
        allowed.contains(t)
    }

    #[test]
    fn rbac_is_exactly_the_grants() {
        let args = RbacArgs {
            dir: PathBuf::new(),
            service_account: "kubewasm".into(),
            namespace: "kubewasm".into(),
            name: "kubewasm-plugins".into(),
            default_grants: None,
        };
        let plural = |kind: &str| resource_of("v1", kind).1;
        let manifests = [
            // Plain watch and a write in one namespace, Events scoped to it.
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Service\", namespaces = [\"web\"] }]\n\
             write = [{ api-version = \"v1\", kind = \"Service\", verbs = [\"patch\", \"apply\"], namespaces = [\"web\"] }]\n\
             events = true\n",
            // Wildcard kinds and groups, namespace lists.
            "[grants]\nwatch = [{ api-version = \"apps/*\", kind = \"*\", namespaces = [\"a\", \"b\"] }, \
             { api-version = \"*\", kind = \"*\", namespaces = [\"c\"] }]\n\
             write = [{ api-version = \"apps/v1\", kind = \"*\", verbs = [\"update\"], namespaces = [\"b\"] }]\n\
             events = true\n",
            // All namespaces: a ClusterRole, Events cluster-wide; subresources by name.
            "[grants]\nwatch = [{ api-version = \"apps/v1\", kind = \"Deployment\" }]\n\
             write = [{ api-version = \"apps/v1\", kind = \"Deployment\", verbs = [\"patch\", \"update\", \"delete\"], \
             subresources = [\"scale\"] }, { api-version = \"v1\", kind = \"ConfigMap\", verbs = [\"create\"], \
             namespaces = [\"x\"] }]\nevents = true\n",
            // A Secret named, a create-only write (no subresource calls), no Events.
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Secret\", namespaces = [\"vault\"] }]\n\
             write = [{ api-version = \"v1\", kind = \"Secret\", verbs = [\"create\"], namespaces = [\"vault\"] }]\n",
            // The built-in default's shape.
            "[grants]\nwatch = [{ api-version = \"*\", kind = \"*\" }]\n",
        ];
        for m in manifests {
            let g = grants(m);
            let mut needs = Needs::default();
            needs.add_grants("p", &g);
            let yaml = render(&needs, &args).unwrap();
            let body = yaml.split_once('\n').unwrap().1;
            let printed = printed(body, &args);
            let allowed = granted(&g, &plural);
            for t in &printed {
                assert!(
                    within(t, &allowed),
                    "{t:?} is wider than every grant of\n{m}\n{yaml}"
                );
            }
            for t in &allowed {
                assert!(
                    printed.contains(t),
                    "{t:?} granted but not printed for\n{m}\n{yaml}"
                );
            }
            assert_eq!(
                needs.notes.is_empty(),
                !m.contains("kind = \"*\""),
                "a wildcard kind gets its note"
            );
        }
        // Events stay in the namespaces the plugin is granted.
        let g = grants(manifests[0]);
        let allowed = granted(&g, &plural);
        assert!(allowed.contains(&(
            Some("web".into()),
            "events.k8s.io".into(),
            "events".into(),
            "create".into()
        )));
        assert!(!allowed.iter().any(|t| t.0.is_none()), "{allowed:?}");
    }
}
