//! One immutable, shared object version as stored in the cache and handed to every handler.
//!
//! # Representation, and why
//!
//! Every cached version is held exactly once, as **the JSON the API server served** (one exact-size
//! allocation) plus the **metadata extracted from it** ([`ObjectMeta`] and the cache key). Nothing
//! else: no `serde_json::Value` tree, no second serialised copy.
//!
//! - Guests receive the JSON text anyway (the `object.json` of the WIT world), so those bytes are the
//!   one copy the host cannot avoid; holding them *as served* means no serialisation at all, and every
//!   handler of every plugin borrows the same bytes.
//! - Indexers, label selectors, keys, `isSync` routing and the `object.meta` record of the WIT world
//!   need only metadata, which is extracted once per version while the bytes are scanned.
//! - A `Value` tree costs roughly twice the JSON it came from (a heap node per map and string), and
//!   building it is most of the decoding time; nothing in the host walks it.
//!
//! The bytes are the served object with two documented edits: list items, which the API server sends
//! without `apiVersion`/`kind`, get them inserted at the front (a watch event of the same version
//! carries them too, so handlers always see one shape); and `metadata.managedFields` is cut out unless
//! the host keeps it (`--keep-managed-fields`), as kube-controller-manager's informers do. Both edits
//! splice byte ranges located while scanning, so the rest of the text is untouched.
//!
//! Objects built from a tree ([`KubeObject::from_value`]: scripted sources, and a user
//! [`TransformFunc`] that rewrites trees) keep the tree and serialise it lazily, at most once.
//!
//! # What it costs, measured
//!
//! The scale benchmark (`cargo bench -p kubewasm-e2e --bench scale`) holds a 1.4 KB ConfigMap in
//! 1,958 heap bytes (the JSON plus ~550 B of metadata, key and header) and ~2.7–3.4 KB of RSS per
//! object, against 3.8–4.5 KB for kube-runtime's typed store of the same objects without
//! `managedFields` and 6.7–7.1 KB as served; the previous representation (a tree plus a cached
//! serialisation) took ~8 KB. Decoding a list item is one scan of its text (no tree, no typed
//! struct), which is also why the initial sync stays close to kube-runtime's.
//!
//! # Rejected objects
//!
//! An object that cannot be cached (not an object, no name, another type) comes back from
//! [`KubeObject::from_source`] with the reason, still whole, so the reflector can name it (kind,
//! namespace, name, resourceVersion) in its warning without ever logging its content.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::list_watch::SourceObject;
use super::reflector::TransformFunc;

/// Counts JSON serialisations across the process, so benchmarks and tests can prove that each
/// object version is serialised at most once however many handlers read it.
static JSON_SERIALISATIONS: AtomicU64 = AtomicU64::new(0);

/// Total number of `KubeObject::json` serialisations performed so far in this process.
pub fn json_serialisations() -> u64 {
    JSON_SERIALISATIONS.load(Ordering::Relaxed)
}

/// Metadata extracted once per version, so handlers and indexes never re-parse the JSON.
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
    #[error("object is not valid JSON: {0}")]
    /// The text does not parse as JSON (the parser's message, which carries no content).
    InvalidJson(String),
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

/// One stored object version. Immutable and shared through [`SharedObject`]; see the module
/// documentation for why it holds served JSON plus metadata and nothing else.
pub struct KubeObject {
    meta: ObjectMeta,
    /// Shared with the indexer's index sets, which therefore hold no copy of their own.
    key: Arc<str>,
    body: Body,
}

enum Body {
    /// The served JSON (with the documented edits), exact size.
    Served(Box<str>),
    /// A tree handed in by a scripted source or a tree transform, serialised on first use.
    Tree(Box<TreeBody>),
}

struct TreeBody {
    value: Value,
    json: OnceLock<Box<str>>,
}

impl fmt::Debug for KubeObject {
    // Content stays out of debug output (it may be a Secret); identity is enough to debug.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeObject")
            .field("kind", &self.meta.kind)
            .field("key", &self.key)
            .field("resource_version", &self.meta.resource_version)
            .finish_non_exhaustive()
    }
}

/// Objects travel through the FIFO, the indexer and every listener by reference count only.
pub type SharedObject = std::sync::Arc<KubeObject>;

impl KubeObject {
    /// Extracts the metadata; rejects trees that lack `metadata.name` (client-go cannot key them).
    pub fn from_value(value: Value) -> Result<Self, MalformedObject> {
        Self::from_tree(value).map_err(|(e, _)| e)
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

    /// Like [`from_value_for`](Self::from_value_for), handing the tree back on failure.
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
        match missing_type(found_av, found_kind, api_version, kind) {
            Err(e) => return Err((e, value)),
            Ok((add_av, add_kind)) => {
                if add_av {
                    map.insert("apiVersion".into(), Value::String(api_version.into()));
                }
                if add_kind {
                    map.insert("kind".into(), Value::String(kind.into()));
                }
            }
        }
        Self::from_tree(value)
    }

    fn from_tree(value: Value) -> Result<Self, (MalformedObject, Value)> {
        let Some(map) = value.as_object() else {
            return Err((MalformedObject::NotAnObject, value));
        };
        let text = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (text("apiVersion").to_string(), text("kind").to_string());
        let wire = match map.get("metadata").map(WireMeta::deserialize) {
            Some(Ok(w)) => w,
            _ => return Err((MalformedObject::MissingMetadata, value)),
        };
        let (meta, key) = match wire.into_meta(api_version, kind) {
            Ok(m) => m,
            Err(e) => return Err((e, value)),
        };
        Ok(Self {
            meta,
            key,
            body: Body::Tree(Box::new(TreeBody {
                value,
                json: OnceLock::new(),
            })),
        })
    }

    /// Builds a version from the JSON text the API server served for the informer's
    /// `apiVersion`/`kind`, without building a tree: the text is scanned once for its members and
    /// metadata, then kept (with `apiVersion`/`kind` inserted when absent, and `managedFields` cut
    /// out unless `keep_managed_fields`).
    pub fn from_json_for(
        json: Box<str>,
        api_version: &str,
        kind: &str,
        keep_managed_fields: bool,
    ) -> Result<Self, MalformedObject> {
        Self::try_from_json_for(json, api_version, kind, keep_managed_fields).map_err(|(e, _)| e)
    }

    /// Like [`from_json_for`](Self::from_json_for), handing the text back on failure so the
    /// caller can name the object it rejects.
    pub fn try_from_json_for(
        json: Box<str>,
        api_version: &str,
        kind: &str,
        keep_managed_fields: bool,
    ) -> Result<Self, (MalformedObject, Box<str>)> {
        // Everything that borrows the text is done before the text is moved into the object.
        let scanned = scan(&json, api_version, kind, keep_managed_fields);
        let (meta, key, add_av, add_kind, cut) = match scanned {
            Ok(s) => s,
            Err(e) => return Err((e, json)),
        };
        let json = splice(
            json,
            add_av.then_some(api_version),
            add_kind.then_some(kind),
            cut,
        );
        Ok(Self {
            meta,
            key,
            body: Body::Served(json),
        })
    }

    /// Turns what a source delivered into a cached version: served JSON goes through
    /// [`from_json_for`](Self::from_json_for) unless a tree `transform` needs a tree; trees lose
    /// `managedFields` the same way unless `keep_managed_fields`, then get the transform. A
    /// rejected object comes back with the reason, so the caller can name it in its warning.
    pub fn from_source(
        src: SourceObject,
        api_version: &str,
        kind: &str,
        keep_managed_fields: bool,
        transform: Option<&TransformFunc>,
    ) -> Result<Self, (MalformedObject, SourceObject)> {
        let mut value = match (src, transform) {
            (SourceObject::Json(json), None) => {
                return Self::try_from_json_for(json, api_version, kind, keep_managed_fields)
                    .map_err(|(e, json)| (e, SourceObject::Json(json)));
            }
            (SourceObject::Json(json), Some(_)) => match serde_json::from_str(&json) {
                Ok(v) => v,
                Err(e) => return Err((not_an_object(e), SourceObject::Json(json))),
            },
            (SourceObject::Tree(value), _) => value,
        };
        if !keep_managed_fields
            && let Some(md) = value.get_mut("metadata").and_then(Value::as_object_mut)
        {
            md.remove("managedFields");
        }
        if let Some(t) = transform {
            value = t(value);
        }
        Self::try_from_value_for(value, api_version, kind)
            .map_err(|(e, v)| (e, SourceObject::Tree(v)))
    }

    /// The same version (metadata, key) carrying other JSON text: a view of it cut down by a
    /// layer above (the plugins layer's projections). The metadata is not re-extracted, so the
    /// text must keep this version's `metadata`.
    pub fn with_json(&self, json: Box<str>) -> Self {
        Self {
            meta: self.meta.clone(),
            key: self.key.clone(),
            body: Body::Served(json),
        }
    }

    /// Extracted metadata of this version.
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The object's JSON text: the served bytes, or (for tree-built versions) serialised on first
    /// use and cached for every later reader.
    pub fn json(&self) -> &str {
        match &self.body {
            Body::Served(json) => json,
            Body::Tree(t) => t.json.get_or_init(|| {
                JSON_SERIALISATIONS.fetch_add(1, Ordering::Relaxed);
                serde_json::to_string(&t.value)
                    .unwrap_or_else(|_| "{}".to_string())
                    .into_boxed_str()
            }),
        }
    }

    /// The object as a tree, parsed on demand (nothing in the host needs one on its hot path).
    pub fn to_value(&self) -> Value {
        match &self.body {
            Body::Served(json) => serde_json::from_str(json).unwrap_or(Value::Null),
            Body::Tree(t) => t.value.clone(),
        }
    }

    /// Cache key, client-go `MetaNamespaceKeyFunc`: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key as a shared string, so index sets can hold it without copying.
    pub(crate) fn shared_key(&self) -> &Arc<str> {
        &self.key
    }

    /// The object's resourceVersion (shortcut used by `isSync` routing).
    pub fn resource_version(&self) -> &str {
        &self.meta.resource_version
    }

    /// Heap bytes this version holds (JSON, metadata strings, key), for the cache-size benchmark.
    pub fn heap_bytes(&self) -> usize {
        let m = &self.meta;
        let strings = m.api_version.capacity()
            + m.kind.capacity()
            + m.namespace.as_ref().map_or(0, String::capacity)
            + m.name.capacity()
            + m.uid.capacity()
            + m.resource_version.capacity()
            + m.labels.capacity() * std::mem::size_of::<(String, String)>()
            + m.labels
                .iter()
                .map(|(k, v)| k.capacity() + v.capacity())
                .sum::<usize>();
        let body = match &self.body {
            Body::Served(json) => json.len(),
            Body::Tree(t) => t.json.get().map_or(0, |j| j.len()),
        };
        std::mem::size_of::<Self>() + strings + self.key.len() + body
    }
}

/// What the text path learns from one scan of served JSON: the metadata, the cache key, whether
/// `apiVersion`/`kind` must be inserted, and the byte range of `managedFields` to cut (if any).
type Scanned = (ObjectMeta, Arc<str>, bool, bool, Option<(usize, usize)>);

/// Scans served JSON once: type check, metadata, and where `managedFields` sits.
fn scan(
    json: &str,
    api_version: &str,
    kind: &str,
    keep_managed_fields: bool,
) -> Result<Scanned, MalformedObject> {
    let top: Members<'_> = serde_json::from_str(json).map_err(not_an_object)?;
    let (mut found_av, mut found_kind, mut metadata) = (None, None, None);
    for (k, v) in &top.0 {
        // A type member that is not a string names no type: reported, never overwritten.
        let text = || raw_str(v).unwrap_or(Cow::Borrowed("(not a string)"));
        match raw_str(k).as_deref() {
            Some("apiVersion") => found_av = Some(text()),
            Some("kind") => found_kind = Some(text()),
            Some("metadata") => metadata = Some(*v),
            _ => {}
        }
    }
    let (add_av, add_kind) = missing_type(
        found_av.as_deref(),
        found_kind.as_deref(),
        api_version,
        kind,
    )?;
    let metadata = metadata.ok_or(MalformedObject::MissingMetadata)?;
    let wire: WireMeta<'_> =
        serde_json::from_str(metadata.get()).map_err(|_| MalformedObject::MissingMetadata)?;
    // Past the type check both are the informer's, found or filled in.
    let (meta, key) = wire.into_meta(api_version.to_string(), kind.to_string())?;
    let cut = if keep_managed_fields {
        None
    } else {
        managed_fields_range(json, metadata)
    };
    Ok((meta, key, add_av, add_kind, cut))
}

/// The informer's type check, shared by the tree and the text paths: which of `apiVersion` and
/// `kind` must be filled in, or why the object is of another type.
fn missing_type(
    found_av: Option<&str>,
    found_kind: Option<&str>,
    api_version: &str,
    kind: &str,
) -> Result<(bool, bool), MalformedObject> {
    match (found_av, found_kind) {
        (Some(av), Some(k)) if av == api_version && k == kind => Ok((false, false)),
        (None, None) => Ok((true, true)),
        (None, Some(k)) if k == kind => Ok((true, false)),
        (Some(av), None) if av == api_version => Ok((false, true)),
        (av, k) => Err(MalformedObject::WrongKind {
            expected: format!("{api_version}/{kind}"),
            found: format!("{}/{}", av.unwrap_or(""), k.unwrap_or("")),
        }),
    }
}

/// Classifies a parse failure: well-formed JSON of another type, or broken text.
fn not_an_object(e: serde_json::Error) -> MalformedObject {
    match e.classify() {
        serde_json::error::Category::Data => MalformedObject::NotAnObject,
        _ => MalformedObject::InvalidJson(e.to_string()),
    }
}

/// A JSON object's members in order, each as its raw key (quotes included) and raw value, both
/// borrowed from the text so their byte offsets are known.
pub(crate) struct Members<'a>(Vec<(&'a RawValue, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The members in text order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(&'a RawValue, &'a RawValue)> {
        self.0.iter()
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(8);
                while let Some(k) = m.next_key::<&'de RawValue>()? {
                    out.push((k, m.next_value::<&'de RawValue>()?));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The string a raw JSON value holds, `None` when it is not a string.
pub(crate) fn raw_str(v: &RawValue) -> Option<Cow<'_, str>> {
    let t = v.get();
    if !t.starts_with('"') {
        return None;
    }
    if !t.contains('\\') {
        return Some(Cow::Borrowed(&t[1..t.len() - 1]));
    }
    serde_json::from_str::<String>(t).ok().map(Cow::Owned)
}

/// Byte offset of `part` inside `whole` (`part` is a sub-slice of it).
fn offset(whole: &str, part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// The byte range of `metadata.managedFields` in `json`, with one adjacent comma, so that cutting
/// it leaves valid JSON; `None` when the member is absent.
fn managed_fields_range(json: &str, metadata: &RawValue) -> Option<(usize, usize)> {
    if !metadata.get().contains("\"managedFields\"") {
        return None;
    }
    let members: Members<'_> = serde_json::from_str(metadata.get()).ok()?;
    let i = members
        .0
        .iter()
        .position(|(k, _)| raw_str(k).as_deref() == Some("managedFields"))?;
    // Offsets into `metadata` are shifted to offsets into `json`.
    let base = offset(json, metadata.get());
    let md = metadata.get();
    let key_start = |j: usize| base + offset(md, members.0[j].0.get());
    let value_end = |j: usize| {
        let v = members.0[j].1.get();
        base + offset(md, v) + v.len()
    };
    Some(if i + 1 < members.0.len() {
        (key_start(i), key_start(i + 1))
    } else if i > 0 {
        (value_end(i - 1), value_end(i))
    } else {
        (key_start(i), value_end(i))
    })
}

/// Applies the documented edits in one exact-size copy (or none, when there is nothing to do).
fn splice(
    json: Box<str>,
    api_version: Option<&str>,
    kind: Option<&str>,
    cut: Option<(usize, usize)>,
) -> Box<str> {
    if api_version.is_none() && kind.is_none() && cut.is_none() {
        return json;
    }
    let member = |name: &str, v: &str| {
        format!(
            "\"{name}\":{},",
            serde_json::to_string(v).unwrap_or_default()
        )
    };
    let mut front = String::new();
    if let Some(av) = api_version {
        front.push_str(&member("apiVersion", av));
    }
    if let Some(k) = kind {
        front.push_str(&member("kind", k));
    }
    let (cut_start, cut_end) = cut.unwrap_or((json.len(), json.len()));
    let mut out = String::with_capacity(json.len() + front.len() - (cut_end - cut_start));
    // The object has members (metadata at least), so each inserted member is followed by one.
    out.push('{');
    out.push_str(&front);
    out.push_str(&json[1..cut_start]);
    out.push_str(&json[cut_end..]);
    out.into_boxed_str()
}

/// The metadata fields the cache extracts. Deserialised from the served text (borrowing its
/// strings) or from a tree alike, so the extraction rule exists once. Fields of an unexpected
/// type count as absent, as they would with a tree lookup.
#[derive(Deserialize)]
struct WireMeta<'a> {
    #[serde(borrow, default)]
    name: Scalar<'a>,
    #[serde(borrow, default)]
    namespace: Scalar<'a>,
    #[serde(borrow, default)]
    uid: Scalar<'a>,
    #[serde(rename = "resourceVersion", borrow, default)]
    resource_version: Scalar<'a>,
    #[serde(borrow, default)]
    generation: Scalar<'a>,
    #[serde(default)]
    labels: Labels,
}

impl WireMeta<'_> {
    fn into_meta(
        self,
        api_version: String,
        kind: String,
    ) -> Result<(ObjectMeta, Arc<str>), MalformedObject> {
        let name = self
            .name
            .into_string()
            .filter(|n| !n.is_empty())
            .ok_or(MalformedObject::MissingName)?;
        let namespace = self.namespace.into_string().filter(|n| !n.is_empty());
        let key: Arc<str> = match &namespace {
            Some(ns) => format!("{ns}/{name}").into(),
            None => name.as_str().into(),
        };
        let meta = ObjectMeta {
            api_version,
            kind,
            namespace,
            name,
            uid: self.uid.into_string().unwrap_or_default(),
            resource_version: self.resource_version.into_string().unwrap_or_default(),
            generation: match self.generation {
                Scalar::Int(g) => Some(g),
                _ => None,
            },
            labels: self.labels.0,
        };
        Ok((meta, key))
    }
}

/// A metadata value as the cache cares about it: a string, an integer, or anything else.
#[derive(Default)]
enum Scalar<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    #[default]
    Other,
}

impl Scalar<'_> {
    fn into_string(self) -> Option<String> {
        match self {
            Scalar::Str(s) => Some(s.into_owned()),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Scalar<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar<'a>, E> {
                Ok(i64::try_from(v).map_or(Scalar::Other, Scalar::Int))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Other)
            }
            fn visit_none<E: de::Error>(self) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Other)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Scalar<'a>, D2::Error> {
                Scalar::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Scalar<'a>, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Scalar<'a>, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `metadata.labels` as pairs; entries whose value is not a string are skipped, and anything but
/// a map counts as no labels.
#[derive(Default)]
struct Labels(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Labels;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Labels, A::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(4));
                while let Some((k, v)) = m.next_entry::<String, Scalar<'de>>()? {
                    if let Scalar::Str(v) = v {
                        out.push((k, v.into_owned()));
                    }
                }
                Ok(Labels(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Labels, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Labels::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Labels, E> {
                Ok(Labels::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Labels, E> {
                Ok(Labels::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Labels, E> {
                Ok(Labels::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Labels, E> {
                Ok(Labels::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Labels, E> {
                Ok(Labels::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Labels, E> {
                Ok(Labels::default())
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
