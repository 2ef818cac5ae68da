use std::path::Path;

use serde::Deserialize;

use super::*;
use crate::runtime::Subscription;

fn table(text: &str) -> Result<GrantsTable, toml::de::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        grants: GrantsTable,
    }
    toml::from_str::<File>(text).map(|f| f.grants)
}

fn grants(text: &str) -> Grants {
    Grants::from_table(table(text).unwrap(), GrantSource::BuiltIn)
}

fn sub(api_version: &str, kind: &str, namespace: Option<&str>) -> Subscription {
    Subscription {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.map(str::to_string),
        label_selector: None,
        field_selector: None,
        resync_period_ms: 0,
        metadata_only: false,
        fields: Vec::new(),
    }
}

/// What a manifest at `p.toml` declares.
fn declared(table: Option<&GrantsTable>, settings: GrantSettings) -> Declared<'_> {
    Declared {
        table,
        settings,
        manifest_path: Path::new("p.toml"),
    }
}

fn info(subs: Vec<Subscription>) -> PluginInfo {
    PluginInfo {
        name: "p".into(),
        subscriptions: subs,
        permissions: Vec::new(),
        http_origins: Vec::new(),
        events: false,
        controller: None,
    }
}

fn perm(api_version: &str, kind: &str, namespace: Option<&str>, verbs: &[&str]) -> Permission {
    Permission {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.map(str::to_string),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
    }
}

#[test]
fn builtin_default_reads_everything_but_secrets_and_grants_nothing_else() {
    let g = Grants::builtin_default();
    assert!(g.allows_read("v1", "ConfigMap", None));
    assert!(g.allows_read("apps/v1", "Deployment", Some("web")));
    assert!(
        g.allows_read("example.com/v1", "Secret", None),
        "only core Secrets"
    );
    assert!(!g.allows_read("v1", "Secret", None));
    assert!(!g.allows_read("v1", "Secret", Some("default")));
    assert!(!g.allows_write("v1", "ConfigMap", Some("default"), "patch"));
    assert!(!g.events());
    assert!(!g.allows_origin("http", "127.0.0.1", 80));
    assert_eq!(g.write_qps(), DEFAULT_WRITE_QPS);
    assert_eq!(g.write_burst(), DEFAULT_WRITE_BURST);
    assert!(!g.dry_run());
}

#[test]
fn secrets_are_granted_only_by_name() {
    let g = grants(
        "[grants]\nwatch = [{ api-version = \"*\", kind = \"*\" }, \
             { api-version = \"v1\", kind = \"Secret\", namespaces = [\"vault\"] }]\n\
             write = [{ api-version = \"v1\", kind = \"*\", verbs = [\"create\"] }]",
    );
    assert!(g.allows_read("v1", "Secret", Some("vault")));
    assert!(!g.allows_read("v1", "Secret", Some("default")));
    assert!(!g.allows_read("v1", "Secret", None));
    assert!(g.allows_write("v1", "ConfigMap", None, "create"));
    assert!(!g.allows_write("v1", "Secret", Some("vault"), "create"));
}

#[test]
fn resources_match_by_api_version_pattern_kind_and_namespace() {
    let g = grants(
        "[grants]\nwatch = [{ api-version = \"apps/*\", kind = \"Deployment\", namespaces = [\"a\", \"b\"] }, \
             { api-version = \"v1\", kind = \"Service\" }]",
    );
    assert!(g.allows_read("apps/v1", "Deployment", Some("a")));
    assert!(g.allows_read("apps/v1beta2", "Deployment", Some("b")));
    assert!(!g.allows_read("apps/v1", "Deployment", Some("c")));
    assert!(
        !g.allows_read("apps/v1", "Deployment", None),
        "all namespaces needs an unrestricted grant"
    );
    assert!(!g.allows_read("extensions/v1beta1", "Deployment", Some("a")));
    assert!(!g.allows_read("apps/v1", "StatefulSet", Some("a")));
    assert!(g.allows_read("v1", "Service", None));
    assert!(g.allows_read("v1", "Service", Some("x")));
    assert!(!g.allows_read("v2", "Service", None));
}

#[test]
fn writes_need_kind_verb_and_namespace() {
    let g = grants(
        "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Service\", verbs = [\"patch\", \"update\"], namespaces = [\"default\"] }]",
    );
    assert!(g.allows_write("v1", "Service", Some("default"), "patch"));
    assert!(g.allows_write("v1", "Service", Some("default"), "update"));
    assert!(!g.allows_write("v1", "Service", Some("other"), "patch"));
    assert!(!g.allows_write("v1", "Service", None, "patch"));
    assert!(!g.allows_write("v1", "Service", Some("default"), "delete"));
    assert!(!g.allows_write("v1", "Service", Some("default"), "apply"));
    assert!(!g.allows_write("v1", "Service", Some("default"), "get"));
    assert!(!g.allows_write("v1", "Service", Some("default"), "PATCH"));
    assert!(!g.allows_write("v1", "Endpoints", Some("default"), "patch"));
    assert!(
        !g.allows_read("v1", "Service", Some("default")),
        "a write grant is not a watch grant"
    );
}

#[test]
fn subresources_beyond_status_are_granted_by_name_and_some_never() {
    let g = grants(
        "[grants]\nwrite = [{ api-version = \"apps/v1\", kind = \"Deployment\", verbs = [\"patch\", \"update\"], subresources = [\"scale\"] }, \
             { api-version = \"v1\", kind = \"Pod\", verbs = [\"patch\"] }]",
    );
    let d = |sub| g.allows_write_at("apps/v1", "Deployment", Some("web"), "patch", sub);
    assert!(d(None));
    assert!(d(Some("status")), "status comes with every write grant");
    assert!(d(Some("scale")));
    assert!(!d(Some("rollback")));
    let pod = |sub| g.allows_write_at("v1", "Pod", Some("web"), "patch", sub);
    assert!(pod(None) && pod(Some("status")));
    for sub in [
        "ephemeralcontainers",
        "resize",
        "proxy",
        "exec",
        "attach",
        "portforward",
    ] {
        assert!(!pod(Some(sub)), "{sub}");
    }
    for sub in NEVER_GRANTED_SUBRESOURCES {
        let err = table(&format!(
                "[grants]\nwrite = [{{ api-version = \"v1\", kind = \"*\", verbs = [\"patch\"], subresources = [\"{sub}\"] }}]"
            ))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is never granted to a plugin"), "{sub}: {err}");
    }
    let err = table(
            "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Pod\", verbs = [\"patch\"], subresources = [\"Scale/x\"] }]",
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("lowercase letters"), "{err}");
}

#[test]
fn events_only_about_readable_objects_into_granted_namespaces() {
    let g = grants(
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"attack\"] }]\nevents = true",
    );
    assert_eq!(
        g.allows_event_about("v1", "ConfigMap", Some("attack"), "attack"),
        Ok(())
    );
    assert!(
        g.allows_event_about("v1", "Secret", Some("kube-system"), "kube-system")
            .is_err()
    );
    assert!(
        g.allows_event_about("v1", "ConfigMap", Some("default"), "default")
            .is_err()
    );
    assert!(g.allows_event_about("v1", "Node", None, "default").is_err());
    let nodes = grants(
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Node\" }, { api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"attack\"] }]\nevents = true",
    );
    assert_eq!(
        nodes.allows_event_about("v1", "Node", None, "default"),
        Ok(())
    );
    let elsewhere = grants(
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"attack\"] }]\nevents = true",
    );
    assert_eq!(
        elsewhere.allows_event_about("v1", "ConfigMap", Some("attack"), "default"),
        Err("event namespace outside the grants")
    );
    assert_eq!(
        Grants::builtin_default().allows_event_about("v1", "ConfigMap", Some("a"), "a"),
        Err("no events grant")
    );
}

#[test]
fn reads_have_their_own_rate() {
    let g = Grants::builtin_default();
    assert_eq!((g.read_qps(), g.read_burst()), (20.0, 40));
    let settings = GrantSettings {
        read_qps: Some(2.0),
        read_burst: Some(3),
        ..GrantSettings::default()
    };
    let g = GrantPolicy::default().grants_for(&declared(None, settings), &info(Vec::new()));
    assert_eq!((g.read_qps(), g.read_burst()), (2.0, 3));
    assert_eq!(g.write_qps(), DEFAULT_WRITE_QPS);
}

#[test]
fn apply_needs_patch_and_create_in_rbac() {
    assert_eq!(Verb::Apply.rbac_verbs(), &["create", "patch"]);
    assert_eq!(Verb::Update.rbac_verbs(), &["update"]);
}

#[test]
fn origins_exact_default_ports_and_any_port() {
    let g = grants(
        "[grants]\nhttp = [\"https://lb.example.com\", \"http://127.0.0.1:9000\", \"http://10.0.0.1:*\", \"http://[::1]:8080\"]",
    );
    assert!(g.allows_origin("https", "lb.example.com", 443));
    assert!(!g.allows_origin("https", "lb.example.com", 8443));
    assert!(!g.allows_origin("http", "lb.example.com", 443), "scheme");
    assert!(!g.allows_origin("http", "lb.example.com", 80));
    assert!(!g.allows_origin("https", "x.lb.example.com", 443));
    assert!(g.allows_origin("http", "127.0.0.1", 9000));
    assert!(!g.allows_origin("http", "127.0.0.1", 9001));
    assert!(
        !g.allows_origin("http", "localhost", 9000),
        "no name for an IP"
    );
    assert!(g.allows_origin("http", "10.0.0.1", 1));
    assert!(g.allows_origin("http", "10.0.0.1", 65535));
    assert!(g.allows_origin("http", "::1", 8080));
    assert!(
        g.allows_origin("http", "0:0:0:0:0:0:0:1", 8080),
        "IPv6 compared as addresses"
    );
    assert!(!g.allows_origin("ftp", "127.0.0.1", 9000));
}

#[test]
fn subdomain_wildcards_cover_labels_below_never_the_apex_or_an_ip() {
    let g = grants("[grants]\nhttp = [\"https://*.example.com\"]");
    assert!(g.allows_origin("https", "a.example.com", 443));
    assert!(g.allows_origin("https", "a.b.example.com", 443));
    assert!(!g.allows_origin("https", "example.com", 443));
    assert!(!g.allows_origin("https", "badexample.com", 443));
    assert!(!g.allows_origin("https", ".example.com", 443));
    assert!(!g.allows_origin("https", "example.com.evil.org", 443));
    assert!(!g.allows_origin("https", "a.example.com", 8443));
    assert!(
        !g.allows_origin("https", "1.2.3.4", 443),
        "never an IP literal"
    );
    assert!(OriginPattern::parse("http://*.0.0.1:*").is_err());
    let deep = grants("[grants]\nhttp = [\"https://*.lb.example.com\"]");
    let asked = |o: &str| OriginPattern::parse(o).unwrap();
    let wide = OriginPattern::parse("https://*.example.com").unwrap();
    assert!(wide.covers(&asked("https://*.lb.example.com")));
    assert!(wide.covers(&asked("https://*.example.com")));
    assert!(
        !deep.http[0].covers(&wide),
        "a narrower wildcard does not cover a wider one"
    );
    assert!(!wide.covers(&asked("https://example.com")));
    assert!(
        !wide.covers(&asked("https://a.example.com:*")),
        "any port needs any port"
    );
}

#[test]
fn bad_origins_are_refused_with_the_reason() {
    for (origin, why) in [
        ("ftp://a.example.com", "scheme"),
        ("https://a.example.com/path", "no path"),
        ("https://a.example.com?q=1", "query"),
        ("https://user:pw@a.example.com", "user info"),
        ("https://*.1.2.3.4", "IP"),
        ("https://a.*.example.com", "wildcard"),
        ("https://*", "wildcard"),
        ("lb.example.com", "no scheme"),
        ("https://a.example.com:99999", "port"),
        ("https://a.example.com:80:*", "port"),
    ] {
        let err = OriginPattern::parse(origin).unwrap_err().to_string();
        assert!(
            err.to_lowercase().contains(&why.to_lowercase()) || err.contains("invalid"),
            "{origin}: {err}"
        );
        assert!(
            err.contains(&format!("{origin:?}")),
            "quotes the value: {err}"
        );
    }
    assert_eq!(
        OriginPattern::parse("HTTPS://LB.Example.COM:443/")
            .unwrap()
            .to_string(),
        "https://lb.example.com",
        "canonical: lowercase, default port left out"
    );
    assert!(OriginPattern::parse(&format!("https://{}.com", "a".repeat(600))).is_err());
}

#[test]
fn table_errors_name_the_line() {
    for (text, needle) in [
        (
            "[grants]\nevents = true\nwatch = [{ api-version = \"v1\", knd = \"Service\" }]",
            "line 3",
        ),
        (
            "[grants]\nwatch = [{ api-version = \"v1/x/y\", kind = \"Service\" }]",
            "line 2",
        ),
        (
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Ser vice\" }]",
            "line 2",
        ),
        (
            "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Service\", verbs = [] }]",
            "verbs = []",
        ),
        (
            "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Service\", verbs = [\"get\"] }]",
            "unknown variant",
        ),
        (
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"S\", namespaces = [\"Bad_NS\"] }]",
            "Bad_NS",
        ),
        ("[grants]\nhttps = []", "unknown field"),
    ] {
        let err = table(text).unwrap_err().to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn check_lists_every_missing_grant() {
    let g = grants(
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
             write = [{ api-version = \"v1\", kind = \"Service\", verbs = [\"patch\"] }]\n\
             http = [\"https://*.example.com\"]",
    );
    let mut i = info(vec![
        sub("v1", "ConfigMap", None),
        sub("v1", "Secret", Some("x")),
    ]);
    i.permissions = vec![
        perm(
            "v1",
            "Service",
            Some("default"),
            &["get", "patch", "update"],
        ),
        perm("v1", "ConfigMap", None, &["get"]),
    ];
    i.http_origins = vec![
        "https://a.example.com".into(),
        "https://example.com".into(),
        "https://*.b.example.com".into(),
    ];
    i.events = true;
    let Err(GrantError::Missing(missing)) = g.check(&i) else {
        panic!("must miss grants");
    };
    let shown: Vec<String> = missing.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "watch v1 Secret in namespace x",
            "get v1 Service in namespace default",
            "update v1 Service in namespace default",
            "record Events",
            "HTTP to https://example.com",
        ]
    );
    let lines = toml_lines(&missing).join("\n");
    let granted = Grants::from_table(table(&lines).expect(&lines), GrantSource::BuiltIn);
    let mut rest = i.clone();
    rest.subscriptions.retain(|s| s.kind == "Secret");
    rest.permissions = vec![perm("v1", "Service", Some("default"), &["get", "update"])];
    rest.http_origins = vec!["https://example.com".into()];
    assert_eq!(
        granted.check(&rest),
        Ok(()),
        "the suggested lines grant what is missing:\n{lines}"
    );
}

#[test]
fn invalid_asks_are_refused_before_comparing() {
    let g = Grants::builtin_default();
    let mut i = info(vec![sub("v1", "ConfigMap", None)]);
    i.permissions = vec![perm("v1", "Service", None, &["escalate"])];
    assert!(
        matches!(g.check(&i), Err(GrantError::InvalidAsk(m)) if m.to_string().contains("escalate"))
    );
    i.permissions = vec![perm("v1", "Service", Some("../x"), &["get"])];
    assert!(
        matches!(g.check(&i), Err(GrantError::InvalidAsk(m)) if m.to_string().contains("namespace"))
    );
    i.permissions.clear();
    i.http_origins = vec!["https://evil.example.com/\u{1b}[31m".into()];
    assert!(
        matches!(g.check(&i), Err(GrantError::InvalidAsk(m)) if m.to_string().contains("\\u{1b}"))
    );
    i.http_origins = vec!["https://a.example.com".into(); MAX_HTTP_ORIGINS + 1];
    assert!(matches!(g.check(&i), Err(GrantError::InvalidAsk(_))));
}

#[test]
fn a_permission_confined_to_namespaces_loads_and_is_enforced_per_call() {
    // The replicator: asks to apply ConfigMaps anywhere; the operator confines it.
    let mut i = info(vec![sub("v1", "ConfigMap", None)]);
    i.permissions = vec![perm("v1", "ConfigMap", None, &["get", "apply", "delete"])];
    let g = grants(
        r#"[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" }]
write = [{ api-version = "v1", kind = "ConfigMap", verbs = ["apply"], namespaces = ["team-a"] }]
"#,
    );
    // `delete` is granted nowhere: still missing. `apply` is confined: no longer missing.
    let Err(GrantError::Missing(m)) = g.check(&i) else {
        panic!("delete is not granted anywhere")
    };
    assert_eq!(
        m.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["delete v1 ConfigMap in every namespace"]
    );
    i.permissions = vec![perm("v1", "ConfigMap", None, &["get", "apply"])];
    assert_eq!(g.check(&i), Ok(()));
    let confined = g.confined(&i);
    assert_eq!(confined.len(), 1, "{confined:?}");
    assert!(
        confined[0].starts_with("apply v1 ConfigMap:"),
        "{confined:?}"
    );
    // Enforced per call.
    assert!(g.allows_write("v1", "ConfigMap", Some("team-a"), "apply"));
    assert!(!g.allows_write("v1", "ConfigMap", Some("team-b"), "apply"));
    // A subscription needs its whole scope: a confined watch grant does not cover it.
    let narrow_watch = grants(
        r#"[grants]
watch = [{ api-version = "v1", kind = "ConfigMap", namespaces = ["team-a"] }]
"#,
    );
    assert!(
        matches!(narrow_watch.check(&info(vec![sub("v1", "ConfigMap", None)])),
            Err(GrantError::Missing(m)) if matches!(m[0], Missing::Watch(_)))
    );
    // Another kind is not confinement.
    i.permissions = vec![perm("v1", "Secret", None, &["apply"])];
    assert!(g.check(&i).is_err());
    assert!(g.confined(&i).is_empty());
}

#[test]
fn everything_asked_grants_exactly_the_asks() {
    let mut i = info(vec![sub("v1", "Secret", Some("vault"))]);
    i.permissions = vec![perm("v1", "Service", Some("default"), &["get", "apply"])];
    i.http_origins = vec!["http://127.0.0.1:9000".into()];
    i.events = true;
    let g = Grants::everything_asked(&i);
    assert_eq!(g.check(&i), Ok(()));
    assert!(g.allows_read("v1", "Secret", Some("vault")));
    assert!(!g.allows_read("v1", "Secret", Some("other")));
    assert!(g.allows_write("v1", "Service", Some("default"), "apply"));
    assert!(!g.allows_write("v1", "Service", Some("default"), "delete"));
    assert!(g.allows_origin("http", "127.0.0.1", 9000));
    assert!(!g.allows_origin("http", "127.0.0.1", 9001));
    assert_eq!(g.source(), &GrantSource::EverythingAsked);
}

#[test]
fn refusal_message_lists_missing_grants_and_the_lines_to_add() {
    let i = {
        let mut i = info(vec![sub("v1", "Secret", None)]);
        i.events = true;
        i
    };
    // From the default: the suggested table must grant everything, the watch too.
    let g = Grants::builtin_default();
    let err = g.check(&i).unwrap_err();
    let msg = err.message("p", &g, Path::new("/plugins/p.toml"), &i);
    assert!(
        msg.contains("not granted: watch v1 Secret in every namespace"),
        "{msg}"
    );
    assert!(msg.contains("not granted: record Events"), "{msg}");
    assert!(msg.contains("built-in default"), "{msg}");
    assert!(msg.contains("/plugins/p.toml"), "{msg}");
    assert!(msg.contains("    [grants]\n    watch = [{ api-version = \"v1\", kind = \"Secret\" }]\n    events = true"), "{msg}");
    // From a manifest: only what is missing.
    let g = Grants::from_table(
        table("[grants]\nwatch = [{ api-version = \"v1\", kind = \"Secret\" }]").unwrap(),
        GrantSource::Manifest {
            path: "/plugins/p.toml".into(),
        },
    );
    let msg = g
        .check(&i)
        .unwrap_err()
        .message("p", &g, Path::new("/plugins/p.toml"), &i);
    assert!(!msg.contains("watch ="), "{msg}");
    assert!(msg.contains("events = true"), "{msg}");
}

#[test]
fn policy_takes_the_manifest_table_else_the_default() {
    let table: GrantsTable = toml::from_str("events = true\n").unwrap();
    let settings = GrantSettings {
        write_qps: Some(0.5),
        write_burst: Some(3),
        dry_run: Some(true),
        ..GrantSettings::default()
    };
    let i = info(vec![sub("v1", "ConfigMap", None)]);
    let g = GrantPolicy::default().grants_for(&declared(Some(&table), settings), &i);
    assert!(g.events());
    assert!(
        !g.allows_read("v1", "ConfigMap", None),
        "a [grants] table replaces the default"
    );
    assert_eq!(
        (g.write_qps(), g.write_burst(), g.dry_run()),
        (0.5, 3, true)
    );
    let g = GrantPolicy::default().grants_for(&declared(None, GrantSettings::default()), &i);
    assert_eq!(g, Grants::builtin_default());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("defaults.toml");
    std::fs::write(&file, "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"a\"] }]\n").unwrap();
    let policy = GrantPolicy::operator(Some(&file)).unwrap();
    let g = policy.grants_for(&declared(None, GrantSettings::default()), &i);
    assert!(g.allows_read("v1", "ConfigMap", Some("a")));
    assert!(!g.allows_read("v1", "ConfigMap", None));
    assert!(matches!(g.source(), GrantSource::DefaultFile { .. }));
    std::fs::write(&file, "[grants]\nwatch = 3\n").unwrap();
    let err = GrantPolicy::operator(Some(&file)).unwrap_err().to_string();
    assert!(
        err.contains("defaults.toml") && err.contains("line 2"),
        "{err}"
    );
    let g = GrantPolicy::EverythingAsked.grants_for(&declared(None, GrantSettings::default()), &i);
    assert_eq!(g.check(&i), Ok(()));
}
