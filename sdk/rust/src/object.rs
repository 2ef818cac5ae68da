//! [`Object`]: what a handler can be generic over, a built-in kind from `k8s-openapi` or a
//! [`DynamicObject`] for custom kinds.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// `metadata` of every object (`k8s-openapi`'s type).
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A Kubernetes object the SDK can decode, write and name.
pub trait Object: Serialize + DeserializeOwned {
    /// `apiVersion` and `kind` known at compile time; `None` for [`DynamicObject`], whose
    /// [`Describe`](crate::Describe) must name them.
    const TYPE: Option<(&'static str, &'static str)>;
    /// Its `metadata`.
    fn meta(&self) -> &ObjectMeta;
    /// Its `metadata`, writable: where [`owner::set_controller`](crate::owner::set_controller)
    /// puts the owner reference. `k8s-openapi` kinds, [`DynamicObject`] and
    /// [`custom_resource!`](crate::custom_resource) kinds edit it in place; the default (`None`,
    /// for a hand-written impl that does not override it) makes `set_controller` go through the
    /// object's JSON instead, a round trip that compiles in a second decoder of the kind.
    fn meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        None
    }
    /// Its `apiVersion` and `kind`.
    fn type_of(&self) -> (&str, &str);
}

impl<K> Object for K
where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Serialize
        + DeserializeOwned,
{
    const TYPE: Option<(&'static str, &'static str)> = Some((K::API_VERSION, K::KIND));

    fn meta(&self) -> &ObjectMeta {
        k8s_openapi::Metadata::metadata(self)
    }

    fn meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        Some(k8s_openapi::Metadata::metadata_mut(self))
    }

    fn type_of(&self) -> (&str, &str) {
        (K::API_VERSION, K::KIND)
    }
}

/// Any object, typed only in `apiVersion`, `kind` and `metadata`; the rest as JSON. For custom
/// kinds (or write your own `serde` struct and implement [`Object`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DynamicObject {
    /// e.g. `example.com/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// e.g. `Widget`.
    pub kind: String,
    /// Name, namespace, labels, …
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Everything else (`spec`, `status`, `data`, …).
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

impl Object for DynamicObject {
    const TYPE: Option<(&'static str, &'static str)> = None;

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> Option<&mut ObjectMeta> {
        Some(&mut self.metadata)
    }

    fn type_of(&self) -> (&str, &str) {
        (&self.api_version, &self.kind)
    }
}

/// Implements [`Object`] for a `serde` struct of a custom resource with a `metadata:
/// ObjectMeta` field, so it is a typed kind like a `k8s-openapi` one: a [`Handler`]'s or a
/// [`Controller`]'s `Kind`, and what `cache::get::<T>`, `kube::patch_status::<T>` and
/// `Controls::owns::<T>` take. The struct needs no `apiVersion` or `kind` field to be read or
/// patched; give it those two (serialized as `apiVersion` and `kind`) to `apply` or `create` it.
///
/// ```ignore
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Widget { metadata: kubewasm_sdk::ObjectMeta, spec: WidgetSpec }
/// kubewasm_sdk::custom_resource!(Widget, "example.com/v1", "Widget");
/// ```
///
/// [`Handler`]: crate::Handler
/// [`Controller`]: crate::Controller
#[macro_export]
macro_rules! custom_resource {
    ($type:ty, $api_version:literal, $kind:literal) => {
        impl $crate::Object for $type {
            const TYPE: ::core::option::Option<(&'static str, &'static str)> =
                ::core::option::Option::Some(($api_version, $kind));

            fn meta(&self) -> &$crate::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> ::core::option::Option<&mut $crate::ObjectMeta> {
                ::core::option::Option::Some(&mut self.metadata)
            }

            fn type_of(&self) -> (&str, &str) {
                ($api_version, $kind)
            }
        }
    };
}

/// What names an object and reads its labels, implemented by typed objects and by
/// [`Lazy`](crate::Lazy) (from the metadata the host extracted, without a decode), so [`key`],
/// [`label`] and [`events`](crate::events) take either.
pub trait Named {
    /// e.g. `v1`, `apps/v1`.
    fn api_version(&self) -> &str;
    /// e.g. `Service`.
    fn kind(&self) -> &str;
    /// `None` for cluster-scoped objects.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.name`.
    fn name(&self) -> &str;
    /// `metadata.uid` (empty on an object not yet stored).
    fn uid(&self) -> &str;
    /// `metadata.resourceVersion` (empty on an object not yet stored).
    fn resource_version(&self) -> &str;
    /// `metadata.generation`, when the server tracks it.
    fn generation(&self) -> Option<i64>;
    /// The value of label `name`, if set.
    fn label(&self, name: &str) -> Option<&str>;
}

impl<K: Object> Named for K {
    fn api_version(&self) -> &str {
        self.type_of().0
    }

    fn kind(&self) -> &str {
        self.type_of().1
    }

    fn namespace(&self) -> Option<&str> {
        self.meta().namespace.as_deref()
    }

    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    fn uid(&self) -> &str {
        self.meta().uid.as_deref().unwrap_or_default()
    }

    fn resource_version(&self) -> &str {
        self.meta().resource_version.as_deref().unwrap_or_default()
    }

    fn generation(&self) -> Option<i64> {
        self.meta().generation
    }

    fn label(&self, name: &str) -> Option<&str> {
        self.meta().labels.as_ref()?.get(name).map(String::as_str)
    }
}

/// `namespace/name`, or `name` for cluster-scoped objects: how logs and the host name objects.
pub fn key(obj: &(impl Named + ?Sized)) -> String {
    match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name()),
        None => obj.name().to_string(),
    }
}

/// The value of label `name`, if set.
pub fn label<'a>(obj: &'a (impl Named + ?Sized), name: &str) -> Option<&'a str> {
    obj.label(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};

    #[test]
    fn keys_name_namespaced_and_cluster_scoped_objects() {
        let cm: ConfigMap = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"a","name":"b","labels":{"team":"x"}}}"#,
        )
        .unwrap();
        assert_eq!(key(&cm), "a/b");
        assert_eq!(label(&cm, "team"), Some("x"));
        assert_eq!(label(&cm, "other"), None);
        let ns: Namespace = serde_json::from_str(r#"{"metadata":{"name":"a"}}"#).unwrap();
        assert_eq!(key(&ns), "a");
        assert_eq!(ConfigMap::TYPE, Some(("v1", "ConfigMap")));
    }

    #[derive(Serialize, Deserialize)]
    struct Widget {
        metadata: ObjectMeta,
        spec: serde_json::Value,
    }
    crate::custom_resource!(Widget, "example.com/v1", "Widget");

    #[test]
    fn a_custom_resource_struct_is_a_typed_kind() {
        assert_eq!(Widget::TYPE, Some(("example.com/v1", "Widget")));
        let w: Widget = serde_json::from_str(
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"a","name":"w","uid":"u"},"spec":{}}"#,
        )
        .unwrap();
        assert_eq!(
            (w.kind(), key(&w), w.uid()),
            ("Widget", "a/w".to_string(), "u")
        );
        assert_eq!(w.api_version(), "example.com/v1");
    }

    #[test]
    fn dynamic_objects_keep_what_they_do_not_type() {
        let text = r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":3}}"#;
        let w: DynamicObject = serde_json::from_str(text).unwrap();
        assert_eq!(w.type_of(), ("example.com/v1", "Widget"));
        assert_eq!(w.rest["spec"]["size"], 3);
        let back: serde_json::Value = serde_json::to_value(&w).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
    }
}
