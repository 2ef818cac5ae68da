use super::*;
use serde_json::json;

fn served(json: &str, keep: bool) -> Result<KubeObject, MalformedObject> {
    KubeObject::from_json_for(json.into(), "v1", "ConfigMap", keep)
}

#[test]
fn served_text_is_kept_verbatim_when_nothing_is_edited() {
    let text = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"d","uid":"u","resourceVersion":"7","generation":3,"labels":{"x":"1","n":2}},"data":{"k":"v \" \\ é"}}"#;
    let o = served(text, false).unwrap();
    assert_eq!(o.json(), text);
    assert_eq!(o.key(), "d/a");
    let m = o.meta();
    assert_eq!(
        (m.api_version.as_str(), m.kind.as_str(), m.uid.as_str()),
        ("v1", "ConfigMap", "u")
    );
    assert_eq!((m.resource_version.as_str(), m.generation), ("7", Some(3)));
    assert_eq!(m.labels, vec![("x".to_string(), "1".to_string())]);
}

#[test]
fn text_and_tree_paths_extract_the_same_metadata() {
    let v = json!({"metadata":{"name":"n","namespace":"ns","uid":"u","resourceVersion":"9",
            "generation":2,"labels":{"a":"b","c":"d"},"annotations":{"z":"y"}},"data":{"q":"r"}});
    let tree = KubeObject::from_value_for(v.clone(), "v1", "ConfigMap").unwrap();
    let text = served(&v.to_string(), false).unwrap();
    assert_eq!(tree.meta(), text.meta());
    assert_eq!(tree.key(), text.key());
    assert_eq!(tree.to_value(), text.to_value());
}

#[test]
fn list_items_get_their_type_inserted() {
    let o = served(r#"{"metadata":{"name":"a"},"data":{}}"#, false).unwrap();
    assert_eq!(
        o.json(),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{}}"#
    );
    let o = served(r#"{ "kind" : "ConfigMap", "metadata":{"name":"a"}}"#, false).unwrap();
    assert_eq!(o.to_value()["apiVersion"], "v1");
    assert_eq!(o.meta().api_version, "v1");
}

#[test]
fn managed_fields_are_cut_wherever_they_sit() {
    let mf = r#""managedFields":[{"manager":"m","fieldsV1":{"f:data":{".":{}}}}]"#;
    for md in [
        format!(r#"{{"name":"a",{mf},"uid":"u"}}"#),
        format!(r#"{{"name":"a", {mf} }}"#),
        format!(r#"{{ {mf} , "name":"a"}}"#),
    ] {
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{md},"data":{{"managedFields":"kept"}}}}"#
        );
        let stripped = served(&text, false).unwrap();
        let mut want: Value = serde_json::from_str(&text).unwrap();
        want["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(stripped.to_value(), want, "{}", stripped.json());
        assert_eq!(stripped.meta().name, "a");
        assert_eq!(served(&text, true).unwrap().json(), text);
    }
    // Only member of metadata: the name is then missing, which is the error reported.
    let only = format!(r#"{{"metadata":{{{mf}}}}}"#);
    assert_eq!(
        served(&only, false).unwrap_err(),
        MalformedObject::MissingName
    );
}

#[test]
fn bad_text_is_named() {
    assert_eq!(
        served("[1]", false).unwrap_err(),
        MalformedObject::NotAnObject
    );
    assert!(matches!(
        served("{\"metadata\":", false).unwrap_err(),
        MalformedObject::InvalidJson(_)
    ));
    assert_eq!(
        served(r#"{"data":{}}"#, false).unwrap_err(),
        MalformedObject::MissingMetadata
    );
    assert_eq!(
        served(r#"{"metadata":{"name":""}}"#, false).unwrap_err(),
        MalformedObject::MissingName
    );
    assert!(matches!(
        served(
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a"}}"#,
            false
        ),
        Err(MalformedObject::WrongKind { .. })
    ));
    assert!(matches!(
        served(r#"{"apiVersion":1,"metadata":{"name":"a"}}"#, false),
        Err(MalformedObject::WrongKind { .. })
    ));
}

#[test]
fn sources_strip_managed_fields_from_trees_too_and_transform_last() {
    let v = json!({"apiVersion":"v1","kind":"ConfigMap",
            "metadata":{"name":"a","managedFields":[{"manager":"m"}]}});
    let o = KubeObject::from_source(
        SourceObject::Tree(v.clone()),
        "v1",
        "ConfigMap",
        false,
        None,
    )
    .unwrap();
    assert!(o.to_value()["metadata"].get("managedFields").is_none());
    let upper: TransformFunc = Arc::new(|mut v: Value| {
        v["metadata"]["name"] = json!("B");
        v
    });
    let o = KubeObject::from_source(
        SourceObject::Json(v.to_string().into()),
        "v1",
        "ConfigMap",
        true,
        Some(&upper),
    )
    .unwrap();
    assert_eq!(o.key(), "B");
    assert!(o.to_value()["metadata"].get("managedFields").is_some());
}
