//! [`Lazy`]: an object as the host delivered it, decoded into its typed kind only when the
//! handler first asks, so a handler that routes or filters on metadata (or returns at once)
//! never pays for a decode, which costs about nine calls' worth for a Pod-sized object.

use std::cell::OnceCell;
use std::fmt;

use crate::bindings::kubewasm::handler0_2_0::types::Object as RawObject;
use crate::error::{Error, Result};
use crate::object::{Named, Object};

/// An object of kind `K` as delivered: the metadata the host already extracted (name,
/// namespace, uid, resourceVersion, generation, labels), readable at no cost, and the JSON,
/// decoded into `K` by the first [`get`](Lazy::get) and kept for later calls.
pub struct Lazy<K> {
    raw: RawObject,
    typed: OnceCell<K>,
}

impl<K: Object> Lazy<K> {
    /// Wraps what the host sent; nothing is parsed.
    #[doc(hidden)]
    pub fn new(raw: RawObject) -> Self {
        Lazy {
            raw,
            typed: OnceCell::new(),
        }
    }

    /// The same object as another kind, not decoded (a decode already done is dropped).
    pub(crate) fn retype<T: Object>(self) -> Lazy<T> {
        Lazy::new(self.raw)
    }

    /// The typed object if [`get`](Lazy::get) already decoded it.
    pub(crate) fn decoded(&self) -> Option<&K> {
        self.typed.get()
    }

    /// What the host sent.
    pub(crate) fn raw(&self) -> &RawObject {
        &self.raw
    }

    /// The typed object, decoded on the first call. An object that does not decode as `K`
    /// will not decode on redelivery either: the error is fatal.
    pub fn get(&self) -> Result<&K> {
        if let Some(k) = self.typed.get() {
            return Ok(k);
        }
        let k = self.decode()?;
        Ok(self.typed.get_or_init(|| k))
    }

    /// The typed object, owned (decoded now unless [`get`](Lazy::get) already did).
    pub fn into_inner(self) -> Result<K> {
        match self.typed.into_inner() {
            Some(k) => Ok(k),
            None => Lazy::<K>::new(self.raw).decode(),
        }
    }

    fn decode(&self) -> Result<K> {
        serde_json::from_str(&self.raw.json).map_err(|e| {
            Error::fatal(format!(
                "cannot decode {} {}: {e}",
                self.raw.meta.kind,
                crate::key(self)
            ))
        })
    }

    /// The JSON as the host sent it (cut to the subscription's projection, if any).
    pub fn json(&self) -> &str {
        &self.raw.json
    }

    /// The value at JSON Pointer `pointer` (RFC 6901, e.g. `/status/availableReplicas`), read
    /// from the JSON without decoding `K`; `None` when it is absent. One field of a big kind (a
    /// Deployment's status) costs a generic JSON parse, and the component never holds the kind's
    /// decoder, which [`get`](Lazy::get) compiles in (a Deployment's alone can make a component
    /// too costly to compile).
    pub fn pointer(&self, pointer: &str) -> Option<serde_json::Value> {
        let mut json: serde_json::Value = serde_json::from_str(&self.raw.json).ok()?;
        json.pointer_mut(pointer).map(serde_json::Value::take)
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> String {
        crate::key(self)
    }

    /// Every label, in the order the host sent them.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.raw
            .meta
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl<K: Object> Named for Lazy<K> {
    fn api_version(&self) -> &str {
        &self.raw.meta.api_version
    }

    fn kind(&self) -> &str {
        &self.raw.meta.kind
    }

    fn namespace(&self) -> Option<&str> {
        self.raw.meta.namespace.as_deref()
    }

    fn name(&self) -> &str {
        &self.raw.meta.name
    }

    fn uid(&self) -> &str {
        &self.raw.meta.uid
    }

    fn resource_version(&self) -> &str {
        &self.raw.meta.resource_version
    }

    fn generation(&self) -> Option<i64> {
        self.raw.meta.generation
    }

    fn label(&self, name: &str) -> Option<&str> {
        self.labels().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

impl<K: Clone> Clone for Lazy<K> {
    fn clone(&self) -> Self {
        Lazy {
            raw: self.raw.clone(),
            typed: self.typed.clone(),
        }
    }
}

/// Shows the key only: logs never carry object content.
impl<K> fmt::Debug for Lazy<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.raw.meta;
        f.debug_struct("Lazy")
            .field("kind", &m.kind)
            .field("namespace", &m.namespace)
            .field("name", &m.name)
            .field("decoded", &self.typed.get().is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::kubewasm::handler0_2_0::types::ObjectMeta as RawMeta;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn raw(json: &str) -> RawObject {
        RawObject {
            meta: RawMeta {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("a".into()),
                name: "b".into(),
                uid: "u".into(),
                resource_version: "7".into(),
                generation: None,
                labels: vec![("team".into(), "x".into())],
            },
            json: json.into(),
        }
    }

    #[test]
    fn metadata_reads_need_no_decode_and_the_decode_happens_once() {
        let obj = Lazy::<ConfigMap>::new(raw(r#"{"metadata":{"name":"b"},"data":{"k":"v"}}"#));
        assert_eq!(
            (obj.key(), obj.label("team")),
            ("a/b".to_string(), Some("x"))
        );
        assert_eq!((obj.uid(), obj.resource_version()), ("u", "7"));
        assert!(obj.typed.get().is_none());
        let first: *const ConfigMap = obj.get().unwrap();
        assert!(std::ptr::eq(first, obj.get().unwrap()));
        assert_eq!(obj.into_inner().unwrap().data.unwrap()["k"], "v");
    }

    #[test]
    fn a_pointer_reads_one_value_without_a_decode() {
        let obj = Lazy::<ConfigMap>::new(raw(r#"{"data":{"k":"v"}}"#));
        assert_eq!(obj.pointer("/data/k"), Some(serde_json::json!("v")));
        assert_eq!(obj.pointer("/data/x"), None);
        assert!(obj.typed.get().is_none());
    }

    #[test]
    fn an_object_that_does_not_decode_is_fatal_and_named() {
        let obj = Lazy::<ConfigMap>::new(raw(r#"{"data":{"k":1}}"#));
        let e = obj.get().unwrap_err();
        assert!(!e.is_retryable());
        assert!(
            e.to_string().starts_with("cannot decode ConfigMap a/b:"),
            "{e}"
        );
        assert!(obj.into_inner().is_err());
    }
}
