use super::answer::AnswerBuffer;
use super::request::{body_target, build_request, prepare, validate_name};
use super::*;
use crate::runtime::{ObjectRef, PatchType, WriteOptions};
use serde_json::Value;

#[test]
fn an_answer_is_charged_as_its_buffer_grows_and_refused_past_the_budget() {
    use crate::runtime::MemoryBudget;
    let metrics = RuntimeMetrics::unregistered();
    let budget = MemoryBudget::new("p", 10_000, &metrics);
    let memory = CallMemory::new(budget.clone());
    let mut b = AnswerBuffer::new(&memory);
    b.push(&[0; 1000]).unwrap();
    assert_eq!(memory.held(), 1000);
    b.push(&[0; 100]).unwrap();
    assert_eq!(memory.held(), 2000, "doubled, as the buffer grows");
    b.push(&[0; 5000]).unwrap();
    assert_eq!(memory.held(), 6100);
    let e = b.push(&[0; 5000]).unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
    assert!(e.message.contains("memory budget"), "{}", e.message);
    let e = b.reserve(MAX_ANSWER_BYTES + 1).unwrap_err();
    assert_eq!(e.code, 500, "{}", e.message);
    let (bytes, charged) = b.into_inner();
    assert_eq!((bytes.len(), charged), (6100, 6100));
    assert!(bytes.capacity() >= 6100);
    assert_eq!(metrics.budget_refused("p", "call"), 1);
    drop(memory);
    assert_eq!(budget.used(), 0);
}

#[test]
fn names_that_could_escape_a_path_or_a_log_or_proxy_are_refused() {
    for bad in [
        "",
        ".",
        "..",
        "a/b",
        "a%2f",
        "a b",
        "a\nb",
        "a?x",
        "é",
        "http:web:80",
        "web:80",
        "system:controller",
        "Web",
    ] {
        assert!(validate_name(bad).is_err(), "{bad:?}");
    }
    for good in ["web", "a.b-c1", "kubewasm-plugins.17a3f"] {
        assert!(validate_name(good).is_ok(), "{good:?}");
    }
    assert!(validate_name(&"a".repeat(254)).is_err());
}

#[test]
fn bodies_name_their_target_and_bad_ones_are_400() {
    let (t, name) = body_target(
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"ns","name":"x"}}"#,
    )
    .unwrap();
    assert_eq!(
        (t.kind.as_str(), t.namespace.as_deref(), name.as_deref()),
        ("ConfigMap", Some("ns"), Some("x"))
    );
    for bad in [
        "{",
        r#"{"kind":"ConfigMap"}"#,
        r#"{"apiVersion":1,"kind":"X"}"#,
    ] {
        assert_eq!(body_target(bad).err().map(|e| e.code), Some(400), "{bad}");
    }
    let bad_ns = KubeCall::Get(ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("../x".into()),
        name: "a".into(),
    });
    assert_eq!(prepare(bad_ns).err().map(|e| e.code), Some(400));
}

/// The request `call` becomes for plugin `p` on the ConfigMaps or Services of `default`.
fn built(call: KubeCall, host_dry_run: bool) -> http::Request<Vec<u8>> {
    let mut p = prepare(call).unwrap();
    let collection = format!(
        "/api/v1/namespaces/default/{}",
        p.target.kind.to_lowercase() + "s"
    );
    build_request(&mut p, &collection, "p", host_dry_run).unwrap()
}

fn summary(r: &http::Request<Vec<u8>>) -> (String, String, Option<&str>) {
    (
        r.method().to_string(),
        r.uri().to_string(),
        r.headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    )
}

#[test]
fn verbs_map_to_requests() {
    let target = ObjectRef {
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: Some("default".into()),
        name: "web".into(),
    };
    let cm =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"default","name":"c"}}"#;
    let dry = WriteOptions {
        dry_run: true,
        force: false,
    };

    let r = built(KubeCall::Get(target.clone()), true);
    assert_eq!(
        summary(&r),
        (
            "GET".into(),
            "/api/v1/namespaces/default/services/web".into(),
            None
        )
    );

    let r = built(
        KubeCall::Create {
            json: cm.into(),
            opts: WriteOptions::default(),
        },
        false,
    );
    assert_eq!(
        summary(&r),
        (
            "POST".into(),
            "/api/v1/namespaces/default/configmaps?&fieldManager=kubewasm%3Ap".into(),
            Some("application/json")
        )
    );
    assert_eq!(r.body().as_slice(), cm.as_bytes());

    let r = built(
        KubeCall::Apply {
            json: cm.into(),
            opts: WriteOptions {
                dry_run: false,
                force: true,
            },
        },
        true,
    );
    assert_eq!(
            summary(&r),
            (
                "PATCH".into(),
                "/api/v1/namespaces/default/configmaps/c?&dryRun=All&force=true&fieldManager=kubewasm%3Ap"
                    .into(),
                Some("application/apply-patch+yaml")
            )
        );
    assert_eq!(r.body().as_slice(), cm.as_bytes(), "sent as written");

    for (patch_type, content_type) in [
        (PatchType::Merge, "application/merge-patch+json"),
        (PatchType::Json, "application/json-patch+json"),
        (
            PatchType::Strategic,
            "application/strategic-merge-patch+json",
        ),
    ] {
        let patch = r#"[{"op":"add","path":"/status","value":{}}]"#;
        let r = built(
            KubeCall::Patch {
                target: target.clone(),
                patch_type,
                patch: patch.into(),
                subresource: Some("status".into()),
                opts: dry,
            },
            false,
        );
        assert_eq!(
                summary(&r),
                (
                    "PATCH".into(),
                    "/api/v1/namespaces/default/services/web/status?&dryRun=All&fieldManager=kubewasm%3Ap"
                        .into(),
                    Some(content_type)
                )
            );
        assert_eq!(r.body().as_slice(), patch.as_bytes());
    }

    let r = built(
        KubeCall::Replace {
            json: cm.into(),
            subresource: None,
            opts: WriteOptions::default(),
        },
        false,
    );
    assert_eq!(
        summary(&r),
        (
            "PUT".into(),
            "/api/v1/namespaces/default/configmaps/c?&fieldManager=kubewasm%3Ap".into(),
            Some("application/json")
        )
    );

    let r = built(
        KubeCall::Delete {
            target,
            uid_precondition: Some("u-1".into()),
        },
        true,
    );
    assert_eq!(r.method(), http::Method::DELETE);
    assert_eq!(r.uri().path(), "/api/v1/namespaces/default/services/web");
    let options: Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(
        options,
        serde_json::json!({"dryRun": ["All"], "preconditions": {"uid": "u-1"}})
    );
}

#[test]
fn bodies_that_are_not_json_are_400_before_any_request() {
    let target = ObjectRef {
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: Some("default".into()),
        name: "web".into(),
    };
    // A patch is read only once the request is built, after the grant and rate checks.
    let mut p = prepare(KubeCall::Patch {
        target,
        patch_type: PatchType::Merge,
        patch: "{".into(),
        subresource: None,
        opts: WriteOptions::default(),
    })
    .unwrap();
    let e = build_request(&mut p, "/api/v1/namespaces/default/services", "p", false)
        .err()
        .unwrap();
    assert_eq!(e.code, 400);
    assert!(
        e.message.starts_with("invalid JSON in patch: "),
        "{}",
        e.message
    );
    // An object's body is read for its target, and must be JSON throughout.
    let create = |json: &str| KubeCall::Create {
        json: json.into(),
        opts: WriteOptions::default(),
    };
    let trailing = r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"k":[1,}}"#;
    assert_eq!(prepare(create(trailing)).err().map(|e| e.code), Some(400));
    let ok = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":[{}]}}"#;
    assert!(prepare(create(ok)).is_ok());
}
