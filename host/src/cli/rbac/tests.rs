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
    // `kind = "*"`: every built-in resource of the group but Secrets, each by name (only
    // the namespaced ones in a Role).
    let targets = |api: &str, kind: &str, scope: &Option<String>| -> Vec<(String, String)> {
        let group = group_of(api);
        if kind != "*" {
            return vec![(group, plural(kind))];
        }
        apiserver::builtin_resources()
            .into_iter()
            .filter(|(g, r, namespaced)| {
                (group == "*" || *g == group)
                    && !(g.is_empty() && r == "secrets")
                    && (scope.is_none() || *namespaced)
            })
            .map(|(g, r, _)| (g, r))
            .collect()
    };
    let mut out = BTreeSet::new();
    let mut event_scopes = BTreeSet::new();
    for w in g.watch_grants() {
        for scope in scopes(&w.namespaces) {
            for (group, resource) in targets(w.api_version.as_str(), w.kind.as_str(), &scope) {
                for verb in ["get", "list", "watch"] {
                    out.insert((scope.clone(), group.clone(), resource.clone(), verb.into()));
                }
            }
            event_scopes.insert(scope);
        }
    }
    for w in g.write_grants() {
        for scope in scopes(&w.namespaces) {
            for (group, base) in targets(w.api_version.as_str(), w.kind.as_str(), &scope) {
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

/// Attack 12: `kind = "*"` used to print RBAC's resource `*`, which also grants every
/// subresource (`nodes/proxy`, `pods/log`, `serviceaccounts/token`) and Secrets.
#[test]
fn a_wildcard_kind_grants_no_subresource_and_no_secret() {
    let g = grants("[grants]\nwatch = [{ api-version = \"*\", kind = \"*\" }]\n");
    let mut needs = Needs::default();
    needs.add_grants("p", &g);
    let rules = &needs.scopes[&None];
    let resources: BTreeSet<&str> = rules.keys().map(|(_, r)| r.as_str()).collect();
    assert!(
        resources.iter().all(|r| *r != "*" && !r.contains('/')),
        "{resources:?}"
    );
    assert!(!rules.contains_key(&(String::new(), "secrets".to_string())));
    for r in ["pods", "nodes", "configmaps", "deployments"] {
        assert!(resources.contains(r), "{r}: {resources:?}");
    }
    assert!(
        !needs.notes.is_empty(),
        "the note says custom kinds need naming"
    );
}

/// Per-plugin identities: the plugin's account holds its `get`, writes and Events (which
/// the host writes as the plugin), the host its reads and `impersonate` on exactly the
/// plugins' accounts. The Events used to be the host's, and the plugin's Role lacked them.
#[test]
fn each_plugin_gets_an_account_with_its_grants_and_the_host_may_impersonate_only_those() {
    let args = RbacArgs {
        dir: PathBuf::new(),
        service_account: "kubewasm".into(),
        namespace: "ops".into(),
        name: "kw".into(),
        default_grants: None,
        shared_identity: false,
        leases: false,
    };
    let g = grants(
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
             write = [{ api-version = \"v1\", kind = \"Pod\", verbs = [\"patch\"], namespaces = [\"web\"] }]\n\
             events = true\n",
    );
    let mut host = Needs::default();
    host.plugins.push("Notifier_1".into());
    host.add_part("Notifier_1", &g, Part::Host);
    let mut plugin = Needs::default();
    plugin.add_part("Notifier_1", &g, Part::Plugin);
    let plugins = BTreeMap::from([("Notifier_1".to_string(), plugin)]);
    let yaml = render_identities(&host, &plugins, &args).unwrap();
    let docs: Vec<serde_yaml::Value> = yaml
        .split_once('\n')
        .unwrap()
        .1
        .split("\n---\n")
        .map(|d| serde_yaml::from_str(d).unwrap())
        .collect();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in\n{yaml}"))
    };
    let sa = find("ServiceAccount", "kubewasm-plugin-notifier-1");
    assert_eq!(sa["metadata"]["namespace"], "ops");
    let imp = find("Role", "kw-impersonate");
    assert_eq!(imp["metadata"]["namespace"], "ops");
    assert_eq!(
        serde_yaml::to_string(&imp["rules"]).unwrap(),
        "- apiGroups:\n  - ''\n  resourceNames:\n  - kubewasm-plugin-notifier-1\n  resources:\n  - serviceaccounts\n  verbs:\n  - impersonate\n"
    );
    assert_eq!(
        find("RoleBinding", "kw-impersonate")["subjects"][0]["name"],
        "kubewasm"
    );
    // The plugin: its patch in web, its reads and its Events cluster-wide (its watch
    // covers every namespace, so its Events may land in any).
    let role = serde_yaml::to_string(&find("Role", "kw-notifier-1")["rules"]).unwrap();
    assert!(role.contains("pods") && role.contains("patch"), "{role}");
    let binding = find("RoleBinding", "kw-notifier-1");
    assert_eq!(binding["subjects"][0]["name"], "kubewasm-plugin-notifier-1");
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
    let reads = serde_yaml::to_string(&find("ClusterRole", "kw-notifier-1")["rules"]).unwrap();
    assert!(
        reads.contains("configmaps") && !reads.contains("pods"),
        "{reads}"
    );
    assert!(
        reads.contains(
            "- events.k8s.io\n  resources:\n  - events\n  verbs:\n  - create\n  - patch\n"
        ),
        "{reads}"
    );
    // The host: the informers' reads, never the plugin's writes or Events.
    let host_rules: String = docs
        .iter()
        .filter(|d| {
            d["metadata"]["name"] == "kw"
                && ["Role", "ClusterRole"].contains(&d["kind"].as_str().unwrap())
        })
        .map(|d| serde_yaml::to_string(&d["rules"]).unwrap())
        .collect();
    assert!(host_rules.contains("configmaps"), "{host_rules}");
    assert!(
        !host_rules.contains("pods") && !host_rules.contains("events"),
        "{host_rules}"
    );
}

/// The arguments `deploy/` is printed with: one identity, the base's names.
fn base_args(leases: bool) -> RbacArgs {
    RbacArgs {
        dir: PathBuf::new(),
        service_account: "kubewasm".into(),
        namespace: "kubewasm".into(),
        name: "kubewasm-plugins".into(),
        default_grants: None,
        shared_identity: true,
        leases,
    }
}

#[test]
fn rbac_is_exactly_the_grants() {
    let args = base_args(false);
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

#[test]
fn the_lease_rules_are_the_ones_the_kustomize_base_grants() {
    let args = base_args(true);
    let mut needs = Needs::default();
    needs.add_leases(&args.namespace);
    let yaml = render(&needs, &args).unwrap();
    let printed: BTreeSet<String> = printed(yaml.split_once('\n').unwrap().1, &args)
        .into_iter()
        .map(|(scope, group, resource, verb)| {
            assert_eq!(
                (scope.as_deref(), group.as_str(), resource.as_str()),
                (Some("kubewasm"), "coordination.k8s.io", "leases")
            );
            verb
        })
        .collect();
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/rbac.yaml"))
        .unwrap();
    let role: serde_yaml::Value =
        serde_yaml::from_str(base.split("\n---\n").next().unwrap()).unwrap();
    let in_base: BTreeSet<String> = role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|r| r["resources"][0].as_str() == Some("leases"))
        .flat_map(|r| r["verbs"].as_sequence().unwrap().iter())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(printed, in_base);
    assert!(
        printed.contains("watch") && printed.contains("delete"),
        "{printed:?}"
    );
}
