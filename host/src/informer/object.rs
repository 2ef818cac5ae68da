//! One immutable, shared object version as stored in the cache and handed to every handler.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

/// Counts JSON serialisations across the process, so benchmarks and tests can prove that each
/// object version is serialised at most once however many handlers read it.
static JSON_SERIALISATIONS: AtomicU64 = AtomicU64::new(0);

/// Total number of `KubeObject::json` serialisations performed so far in this process.
pub fn json_serialisations() -> u64 {
    JSON_SERIALISATIONS.load(Ordering::Relaxed)
}

/// Metadata extracted once per version, so handlers and indexes never re-parse the JSON tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.namespace`; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.labels` as pairs.
    pub labels: Vec<(String, String)>,
}

/// Why an object from the API server could not be turned into a [`KubeObject`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedObject {
    #[error("object is not a JSON object")]
    /// The JSON is not an object.
    NotAnObject,
    #[error("object has no metadata")]
    /// `metadata` is absent.
    MissingMetadata,
    #[error("object has no metadata.name")]
    /// `metadata.name` is absent or empty.
    MissingName,
    #[error("object is {found}, expected {expected}")]
    /// The object's type differs from the informer's.
    WrongKind {
        /// `apiVersion/kind` of the informer.
        expected: String,
        /// `apiVersion/kind` of the object.
        found: String,
    },
}

/// One stored object version. Immutable and shared through [`SharedObject`]; its JSON text is
/// produced lazily and at most once, because every WASM guest receives the same bytes.
///
/// `value()` is the decoded `serde_json::Value` tree (not a `DynamicObject`): the host never
/// needs typed access and a plain tree keeps the scripted test sources trivial.
#[derive(Debug)]
pub struct KubeObject {
    meta: ObjectMeta,
    key: String,
    value: Value,
    json: OnceLock<String>,
}

/// Objects travel through the FIFO, the indexer and every listener by reference count only.
pub type SharedObject = std::sync::Arc<KubeObject>;

impl KubeObject {
    /// Extracts the metadata; rejects trees that lack `metadata.name` (client-go cannot key them).
    pub fn from_value(value: Value) -> Result<Self, MalformedObject> {
        Self::build(value).map_err(|(e, _)| e)
    }

    /// Like [`from_value`](Self::from_value) but also checks the type against the informer's
    /// `apiVersion`/`kind`, filling them in when absent (list items usually omit them).
    pub fn from_value_for(
        value: Value,
        api_version: &str,
        kind: &str,
    ) -> Result<Self, MalformedObject> {
        Self::try_from_value_for(value, api_version, kind).map_err(|(e, _)| e)
    }

    /// Like [`from_value_for`](Self::from_value_for), handing the tree back on failure so the
    /// caller can log it without cloning every event up front.
    pub fn try_from_value_for(
        mut value: Value,
        api_version: &str,
        kind: &str,
    ) -> Result<Self, (MalformedObject, Value)> {
        let Some(map) = value.as_object_mut() else {
            return Err((MalformedObject::NotAnObject, value));
        };
        let found_av = map.get("apiVersion").and_then(Value::as_str);
        let found_kind = map.get("kind").and_then(Value::as_str);
        match (found_av, found_kind) {
            (Some(av), Some(k)) if av == api_version && k == kind => {}
            (None, None) => {
                map.insert("apiVersion".into(), Value::String(api_version.to_string()));
                map.insert("kind".into(), Value::String(kind.to_string()));
            }
            (None, Some(k)) if k == kind => {
                map.insert("apiVersion".into(), Value::String(api_version.to_string()));
            }
            (Some(av), None) if av == api_version => {
                map.insert("kind".into(), Value::String(kind.to_string()));
            }
            (av, k) => {
                let e = MalformedObject::WrongKind {
                    expected: format!("{api_version}/{kind}"),
                    found: format!("{}/{}", av.unwrap_or(""), k.unwrap_or("")),
                };
                return Err((e, value));
            }
        }
        Self::build(value)
    }

    fn build(value: Value) -> Result<Self, (MalformedObject, Value)> {
        let Some(map) = value.as_object() else {
            return Err((MalformedObject::NotAnObject, value));
        };
        let Some(md) = map.get("metadata").and_then(Value::as_object) else {
            return Err((MalformedObject::MissingMetadata, value));
        };
        let s = |m: &serde_json::Map<String, Value>, k: &str| {
            m.get(k).and_then(Value::as_str).map(str::to_string)
        };
        let Some(name) = s(md, "name").filter(|n| !n.is_empty()) else {
            return Err((MalformedObject::MissingName, value));
        };
        let namespace = s(md, "namespace").filter(|n| !n.is_empty());
        let labels = md
            .get("labels")
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let meta = ObjectMeta {
            api_version: s(map, "apiVersion").unwrap_or_default(),
            kind: s(map, "kind").unwrap_or_default(),
            namespace,
            name,
            uid: s(md, "uid").unwrap_or_default(),
            resource_version: s(md, "resourceVersion").unwrap_or_default(),
            generation: md.get("generation").and_then(Value::as_i64),
            labels,
        };
        let key = match &meta.namespace {
            Some(ns) => format!("{ns}/{}", meta.name),
            None => meta.name.clone(),
        };
        Ok(Self {
            meta,
            key,
            value,
            json: OnceLock::new(),
        })
    }

    /// Extracted metadata of this version.
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The object's JSON text, serialised on first use and cached for every later reader.
    pub fn json(&self) -> &str {
        self.json.get_or_init(|| {
            JSON_SERIALISATIONS.fetch_add(1, Ordering::Relaxed);
            serde_json::to_string(&self.value).unwrap_or_else(|_| "{}".to_string())
        })
    }

    /// Cache key, client-go `MetaNamespaceKeyFunc`: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The decoded object tree.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The object's resourceVersion (shortcut used by `isSync` routing).
    pub fn resource_version(&self) -> &str {
        &self.meta.resource_version
    }
}
