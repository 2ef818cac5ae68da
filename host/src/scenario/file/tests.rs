use super::*;

#[test]
fn concurrency_is_read_and_bounded() {
    let s = parse(Path::new("s.yaml"), "concurrency: 4\n").unwrap();
    assert_eq!(s.concurrency, Some(4));
    assert_eq!(
        parse(Path::new("s.yaml"), "{}\n").unwrap().concurrency,
        None
    );
    for bad in ["0", "65"] {
        let text = format!("description: x\nconcurrency: {bad}\n");
        let e = parse(Path::new("s.yaml"), &text).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("s.yaml:2: concurrency must be between 1 and 64, got {bad}")
        );
    }
}

#[test]
fn workloads_are_opt_in() {
    assert!(!parse(Path::new("s.yaml"), "{}\n").unwrap().workloads);
    assert!(
        parse(Path::new("s.yaml"), "workloads: true\n")
            .unwrap()
            .workloads
    );
    assert!(parse(Path::new("s.yaml"), "workloads: 3\n").is_err());
}

#[test]
fn durations_parse_and_print() {
    assert_eq!(duration("1m30s").unwrap(), Duration::from_secs(90));
    assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
    assert!(duration("5 minutes").is_err());
    assert!(duration("").is_err());
    assert_eq!(humanize(Duration::from_secs(300)), "5m");
    assert_eq!(humanize(Duration::from_millis(1500)), "1500ms");
}

#[test]
fn references_parse() {
    let k = ObjectKey::parse("apps/v1/Deployment prod/api").unwrap();
    assert_eq!(
        (
            k.api_version.as_str(),
            k.kind.as_str(),
            k.namespace.as_deref(),
            k.name.as_str()
        ),
        ("apps/v1", "Deployment", Some("prod"), "api")
    );
    assert_eq!(
        ObjectKey::parse("v1/Namespace team-a").unwrap().namespace,
        None
    );
    assert!(ObjectKey::parse("ConfigMap a").is_err());
}

#[test]
fn errors_name_file_and_line() {
    let text = "steps:\n  - apply:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: a, namespace: default}\n  - advance: 5 minutes\n";
    let e = parse(Path::new("s.yaml"), text).unwrap_err().to_string();
    assert!(e.starts_with("s.yaml:6: duration"), "{e}");
    let e = parse(
        Path::new("s.yaml"),
        "steps:\n  - restart: {}\n    bogus: 1\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("s.yaml:2:") || e.starts_with("s.yaml:3:"),
        "{e}"
    );
    assert!(e.contains("bogus"), "{e}");
    let text = "steps:\n  - start: {}\n    expect:\n      - {call: on-add, object: v1/ConfigMap default/a}\n      - {call: on-create}\n";
    let e = parse(Path::new("s.yaml"), text).unwrap_err().to_string();
    assert!(e.starts_with("s.yaml:5:"), "{e}");
    let e = parse(Path::new("s.yaml"), "steps:\n  - delete: ConfigMap a\n").unwrap_err();
    assert!(matches!(e.problem, Problem::ObjectKey(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "s.yaml:2: object reference \"ConfigMap a\" is not APIVERSION/KIND NAMESPACE/NAME or \
             APIVERSION/KIND NAME (e.g. \"v1/ConfigMap default/a\")"
    );
    let e = load(Path::new("/nonexistent/s.yaml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/s.yaml: cannot read: "),
        "{e}"
    );
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn refusals_stand_alone_and_nones_do_not_contradict() {
    let s = parse(
        Path::new("s.yaml"),
        "manifest: narrow.toml\nrefused:\n  missing: [record Events]\n",
    )
    .unwrap();
    let r = s.refused.unwrap();
    assert_eq!(r.missing, Some(vec!["record Events".to_string()]));
    assert_eq!(r.line, 2);
    let e = parse(
        Path::new("s.yaml"),
        "refused: {}\nsteps:\n  - advance: 1m\n",
    )
    .unwrap_err();
    assert!(matches!(e.problem, Problem::RefusedWithSteps), "{e}");
    let text = "steps:\n  - start: {}\n    expect:\n      - {writes: []}\n      - {write: patch}\n";
    let e = parse(Path::new("s.yaml"), text).unwrap_err();
    assert!(e.to_string().starts_with("s.yaml:5: `writes: []`"), "{e}");
    let text = "steps:\n  - start: {}\n    expect:\n      - {writes: []}\n      - {events: []}\n      - {http: []}\n      - {call: on-synced}\n";
    let s = parse(Path::new("s.yaml"), text).unwrap();
    assert_eq!(s.steps[0].expect.as_ref().unwrap().len(), 4);
}

#[test]
fn a_start_is_implied() {
    let s = parse(Path::new("s.yaml"), "steps:\n  - advance: 1m\n").unwrap();
    assert_eq!(s.steps[0].action, Action::Start);
    assert_eq!(s.steps[1].action, Action::Advance(Duration::from_secs(60)));
    assert_eq!(s.steps[1].line, 2);
}
