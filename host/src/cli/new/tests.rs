use super::*;

#[test]
fn resources_parse_with_and_without_group() {
    let r = parse_resource("apps/v1/Deployment").unwrap();
    assert_eq!(
        (r.api_version.as_str(), r.kind.as_str()),
        ("apps/v1", "Deployment")
    );
    let r = parse_resource("v1/Service").unwrap();
    assert_eq!((r.api_version.as_str(), r.kind.as_str()), ("v1", "Service"));
    for bad in [
        "ConfigMap",
        "v1/configmap",
        "/v1/ConfigMap",
        "apps/v1/",
        "a/b/c/D",
        "V1/Pod",
    ] {
        assert!(parse_resource(bad).is_err(), "{bad}");
    }
}

#[test]
fn every_template_renders_without_leftover_placeholders() {
    for lang in [
        Lang::Rust,
        Lang::Python,
        Lang::Javascript,
        Lang::C,
        Lang::Go,
    ] {
        for resource in ["v1/ConfigMap", "apps/v1/Deployment", "v1/Namespace"] {
            for kind in [Kind::Handler, Kind::Reconcile] {
                let args = NewArgs {
                    name: "my-handler".into(),
                    lang,
                    resource: parse_resource(resource).unwrap(),
                    kind,
                };
                let files = match render_all(&args, Some(Path::new("/repo"))) {
                    Ok(files) => files,
                    // C and Go have no controller template, and say so.
                    Err(e) if kind == Kind::Reconcile && matches!(lang, Lang::C | Lang::Go) => {
                        assert!(e.to_string().contains("--kind reconcile"), "{e}");
                        continue;
                    }
                    Err(e) => panic!("{lang:?} {resource} {kind:?}: {e:#}"),
                };
                assert!(files.iter().any(|(p, _, x)| p == "build.sh" && *x));
                assert!(files.iter().any(|(p, _, _)| p == "my-handler.toml"));
            }
        }
    }
}

/// Every module of the Rust, Python and JavaScript SDKs reaches a new project (a module added to
/// an SDK but not to its list here would break the project's build only outside the repo).
#[test]
fn every_sdk_module_reaches_a_new_project() {
    for (lang, dir, ext, prefix) in [
        (
            Lang::Python,
            "python/kubewasm_sdk",
            "py",
            "sdk/kubewasm_sdk/",
        ),
        (Lang::Javascript, "javascript", "js", "sdk/"),
        (Lang::Rust, "rust/src", "rs", "sdk/src/"),
    ] {
        let args = NewArgs {
            name: "my-handler".into(),
            lang,
            resource: parse_resource("v1/ConfigMap").unwrap(),
            kind: Kind::Reconcile,
        };
        let files = render_all(&args, None).unwrap();
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sdk")
            .join(dir);
        let mut modules = 0;
        for entry in std::fs::read_dir(&sdk).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(&format!(".{ext}")) {
                modules += 1;
                let path = format!("{prefix}{name}");
                assert!(
                    files.iter().any(|(p, _, _)| *p == path),
                    "{path} missing from the {lang:?} project"
                );
            }
        }
        assert!(modules >= 8, "{modules} modules in {}", sdk.display());
    }
}

#[test]
fn scenario_names_objects_as_refs() {
    let r = parse_resource("v1/Namespace").unwrap();
    let o = example_object(&r, "first", None);
    assert_eq!(object_ref(&o), "v1/Namespace first");
    let r = parse_resource("apps/v1/Deployment").unwrap();
    let o = example_object(&r, "first", None);
    assert_eq!(object_ref(&o), "apps/v1/Deployment default/first");
    assert_eq!(
        flow(&json!({"a": "true", "b": [1, "x y"], "c": "v1"})),
        r#"{a: "true", b: [1, "x y"], c: v1}"#
    );
    let mut yaml = String::new();
    block(&o, 0, &mut yaml);
    assert!(yaml.starts_with("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  namespace: default\n  name: first\nspec:\n"), "{yaml}");
}
