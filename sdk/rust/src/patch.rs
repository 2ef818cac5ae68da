//! Patch builders: JSON Patch (RFC 6902) operations and merge patches (RFC 7386) as values the
//! typed client sends, so no handler writes patch JSON by hand.

use serde_json::{Value, json};

/// A JSON Patch: a list of operations applied in order, all or nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JsonPatch(Vec<Value>);

impl JsonPatch {
    /// An empty patch.
    pub fn new() -> Self {
        JsonPatch(Vec::new())
    }

    /// Fail the whole patch unless `path` holds `value` (optimistic concurrency on a field;
    /// `null` tests that it is absent).
    pub fn test(mut self, path: &str, value: impl Into<Value>) -> Self {
        self.0
            .push(json!({"op": "test", "path": path, "value": value.into()}));
        self
    }

    /// Set `path` to `value` (appending when `path` ends in `/-`).
    pub fn add(mut self, path: &str, value: impl Into<Value>) -> Self {
        self.0
            .push(json!({"op": "add", "path": path, "value": value.into()}));
        self
    }

    /// Replace the existing value at `path`.
    pub fn replace(mut self, path: &str, value: impl Into<Value>) -> Self {
        self.0
            .push(json!({"op": "replace", "path": path, "value": value.into()}));
        self
    }

    /// Remove `path`.
    pub fn remove(mut self, path: &str) -> Self {
        self.0.push(json!({"op": "remove", "path": path}));
        self
    }

    /// The operations as JSON text.
    pub fn to_json(&self) -> String {
        Value::Array(self.0.clone()).to_string()
    }
}

/// Escapes one JSON Pointer segment (`~` → `~0`, `/` → `~1`), e.g. for label keys
/// such as `app.kubernetes.io/name`.
pub fn pointer_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// A merge patch setting (or, with `None`, removing) one annotation.
pub fn annotation(name: &str, value: Option<&str>) -> Value {
    json!({"metadata": {"annotations": {name: value}}})
}

/// A merge patch setting (or, with `None`, removing) one label.
pub fn label(name: &str, value: Option<&str>) -> Value {
    json!({"metadata": {"labels": {name: value}}})
}

/// A merge patch for the `status` subresource replacing the fields `status` names.
pub fn status(status: impl serde::Serialize) -> crate::Result<Value> {
    Ok(json!({ "status": serde_json::to_value(status)? }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_patches_are_rfc_6902_operations_in_order() {
        let p = JsonPatch::new()
            .test("/metadata/finalizers", Value::Null)
            .add("/metadata/finalizers", json!(["f"]))
            .replace("/spec/x", 1)
            .remove("/metadata/finalizers/0");
        assert_eq!(
            serde_json::from_str::<Value>(&p.to_json()).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
                {"op": "replace", "path": "/spec/x", "value": 1},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
    }

    #[test]
    fn merge_patch_helpers_set_and_remove() {
        assert_eq!(
            annotation("a/b", Some("1")),
            json!({"metadata": {"annotations": {"a/b": "1"}}})
        );
        assert_eq!(
            label("x", None),
            json!({"metadata": {"labels": {"x": null}}})
        );
        assert_eq!(
            status(json!({"loadBalancer": {}})).unwrap(),
            json!({"status": {"loadBalancer": {}}})
        );
        assert_eq!(pointer_segment("a.io/b~c"), "a.io~1b~0c");
    }
}
