//! Data exchanged between the runtime and the plugins layer, free of wasmtime types.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

/// Borrowed view of one Kubernetes object version, so the host never re-serialises or copies an
/// object per plugin: the runtime copies these strings straight into guest memory.
#[derive(Clone, Copy, Debug)]
pub struct ObjectView<'a> {
    /// `apiVersion`, e.g. `v1` or `apps/v1`.
    pub api_version: &'a str,
    /// `kind`, e.g. `ConfigMap`.
    pub kind: &'a str,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<&'a str>,
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.uid`.
    pub uid: &'a str,
    /// `metadata.resourceVersion`; opaque, compare for equality only.
    pub resource_version: &'a str,
    /// `metadata.generation`, when the server tracks it for the kind.
    pub generation: Option<i64>,
    /// `metadata.labels` as pairs.
    pub labels: &'a [(String, String)],
    /// The object exactly as the API server served it.
    pub json: &'a str,
}

/// Anything that can present itself as an [`ObjectView`]; implemented by the plugins layer on
/// its shared cache entries so handlers and `cache` reads need no conversion step.
pub trait GuestObject: Send + Sync {
    /// Borrows the object's fields; called once per delivery or cache read.
    fn view(&self) -> ObjectView<'_>;
}

/// Names the object (kind, namespace/name, resourceVersion), never its content: Debug output
/// ends up in logs and test failures, and objects may be Secrets.
impl fmt::Debug for dyn GuestObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.view();
        write!(f, "{} {} ", v.api_version, v.kind)?;
        if let Some(ns) = v.namespace {
            write!(f, "{ns}/")?;
        }
        write!(f, "{} rv={}", v.name, v.resource_version)
    }
}

/// Answers a guest's `cache` imports. The implementation decides what a plugin may read:
/// refusing (e.g. an unsubscribed kind) is a [`CacheError`] whose text the guest receives as a
/// value, never a trap.
pub trait CacheReader: Send + Sync + 'static {
    /// Answers `cache.get`: `Ok(None)` when the cache does not hold the object.
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<dyn GuestObject>>, CacheError>;

    /// Answers `cache.list`, optionally limited to a namespace and a label selector.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<dyn GuestObject>>, CacheError>;
}

/// Why a `cache` read was refused. The guest receives the message as the import's error string,
/// so each says what to change; an unavailable cache is an error, never an empty answer, because
/// a handler acting on a false "absent" would delete what still exists.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The plugin reads a kind it did not subscribe to: no redelivery can change that, so the
    /// message says what would (the SDKs make it `fatal`).
    #[error(
        "plugin {plugin} does not subscribe to {api_version} {kind}; only subscribed resources \
         can be read from the cache: {}",
        subscribe_hint(api_version, kind)
    )]
    NotSubscribed {
        /// The plugin reading.
        plugin: String,
        /// The kind's `apiVersion`, as the guest asked.
        api_version: String,
        /// The kind, as the guest asked.
        kind: String,
    },
    /// The label selector of a `cache.list` does not parse.
    #[error("invalid label selector {selector:?}: {source}")]
    InvalidSelector {
        /// The selector as the guest sent it.
        selector: String,
        /// What is wrong with it.
        #[source]
        source: kubewasm_apimachinery::SelectorError,
    },
    /// A `cache.list` matches more objects than one answer holds; refused whole, since a cut
    /// answer would look complete.
    #[error(
        "cache.list of {scope} refused: it matches more than {max_objects} objects, over the \
         per-call bound of {max_objects} objects and {}; {NARROW}",
        human_bytes(*.max_bytes)
    )]
    TooManyObjects {
        /// The list asked for: kind, namespace, selector.
        scope: String,
        /// Most objects one answer holds.
        max_objects: usize,
        /// Most bytes of object data one answer holds.
        max_bytes: usize,
    },
    /// A `cache.list` matches more bytes of object data than one answer holds; refused whole
    /// like [`CacheError::TooManyObjects`].
    #[error(
        "cache.list of {scope} refused: it matches more than {} of object data, over the \
         per-call bound of {max_objects} objects and {}; {NARROW}",
        human_bytes(*.max_bytes),
        human_bytes(*.max_bytes)
    )]
    TooManyBytes {
        /// The list asked for: kind, namespace, selector.
        scope: String,
        /// Most objects one answer holds.
        max_objects: usize,
        /// Most bytes of object data one answer holds.
        max_bytes: usize,
    },
    /// The informer holding the kind is starting or stopping. The only refusal that heals on
    /// redelivery; the SDKs tell it from the others by "is not available" in its message, so
    /// that wording is part of the contract (`runtime::tests`).
    #[error(
        "the cache of {informer} is not available: its informer is stopping or not started yet"
    )]
    Unavailable {
        /// Which informer.
        informer: String,
    },
    /// The instance runs outside a host ([`NoCache`]).
    #[error("no informer cache is attached to this instance")]
    NotAttached,
}

/// How a plugin comes to read a kind: the subscription in `describe()`, and the manifest line
/// that grants it, ready to paste when the names can be written into TOML as they are.
fn subscribe_hint(api_version: &str, kind: &str) -> String {
    let plain = |s: &str, extra: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
    };
    if plain(api_version, "./-") && plain(kind, "") {
        format!(
            "subscribe to it in describe() and grant it in the plugin's manifest: [grants] \
             watch = [{{ api-version = \"{api_version}\", kind = \"{kind}\" }}]"
        )
    } else {
        "subscribe to it in describe() and grant it in the [grants] watch list of the plugin's \
         manifest"
            .to_string()
    }
}

impl CacheError {
    /// Whether the same read may succeed later by itself: only while an informer starts or
    /// stops; every other refusal needs the guest or its subscriptions to change.
    pub fn is_retriable(&self) -> bool {
        matches!(self, CacheError::Unavailable { .. })
    }
}

/// What a refused `cache.list` should do instead.
const NARROW: &str =
    "narrow it with a namespace or a label selector, or read single objects with cache.get";

/// `8 MiB` for whole MiB, else bytes.
fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// Which version of the `kubewasm:handler` world a component implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum HandlerWorld {
    /// `kubewasm:handler@0.1.0`: log and cache imports only.
    #[serde(rename = "0.1.0")]
    V0_1,
    /// `kubewasm:handler@0.2.0`: adds kube, events and `wasi:http` imports and `on-synced`.
    #[serde(rename = "0.2.0")]
    V0_2,
    /// `kubewasm:handler@0.3.0`, world `handler`: adds `settings` and `validate-settings`.
    #[serde(rename = "0.3.0")]
    V0_3,
    /// `kubewasm:handler@0.3.0`, world `controller`: reconciles keys instead of receiving
    /// events.
    #[serde(rename = "0.3.0-controller")]
    Controller,
}

impl HandlerWorld {
    /// Whether the world has `on-synced` (every version after 0.1.0).
    pub fn has_synced(self) -> bool {
        self != HandlerWorld::V0_1
    }

    /// Whether the world reads the operator's settings and exports `validate-settings`.
    pub fn has_settings(self) -> bool {
        matches!(self, HandlerWorld::V0_3 | HandlerWorld::Controller)
    }
}

impl fmt::Display for HandlerWorld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V0_1 => "kubewasm:handler@0.1.0",
            Self::V0_2 => "kubewasm:handler@0.2.0",
            Self::V0_3 => "kubewasm:handler@0.3.0",
            Self::Controller => "kubewasm:handler@0.3.0 (controller)",
        })
    }
}

/// What `describe()` returned: the name used in logs and metrics, what to subscribe to, and
/// (0.2.0 handlers) what the handler asks to be granted. A 0.1.0 handler asks for nothing
/// beyond its subscriptions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PluginInfo {
    /// The handler's own name (the plugins layer may prefer the file name for metrics).
    pub name: String,
    /// What the handler wants events for.
    pub subscriptions: Vec<Subscription>,
    /// Kubernetes API access the handler asks for, checked against the operator's grants.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<Permission>,
    /// Origins the handler calls over HTTP, checked against the operator's grants.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http_origins: Vec<String>,
    /// Whether the handler records Events.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub events: bool,
    /// For a controller: what each of `subscriptions` is to it (same order and length).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<Vec<Role>>,
}

/// What one of a controller's subscriptions is to it: how its events become keys of the
/// primary kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The kind reconciled: an event names its own object's key.
    Primary,
    /// An owned kind: an event names the owner its controller `ownerReference` points at.
    Owned,
    /// A watched kind, whose events name primaries through the mapping.
    Watched(KeyMapping),
}

/// How an event of a watched kind names primaries (the WIT `mapping`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyMapping {
    /// The primary with the object's own name, in its namespace.
    SameName,
    /// The primary named by this label's value.
    Label(String),
    /// The primary named by the string at this JSON pointer.
    Field(String),
    /// The guest's `keys-for` export.
    Guest,
}

/// The key of one primary object, as a controller's `reconcile` and `keys-for` exchange it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// `None` for a cluster-scoped kind.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// Parses a cache key (`namespace/name` or `name`).
    pub fn from_cache_key(key: &str) -> ObjectKey {
        match key.split_once('/') {
            Some((ns, name)) => ObjectKey {
                namespace: Some(ns.to_string()),
                name: name.to_string(),
            },
            None => ObjectKey {
                namespace: None,
                name: key.to_string(),
            },
        }
    }

    /// The cache key (client-go's `MetaNamespaceKeyFunc`).
    pub fn cache_key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The operator's `[settings]` for a plugin, prepared once at load in the shapes the `settings`
/// import answers with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginSettings {
    /// Every top-level setting as text, sorted by key.
    pub values: Vec<(String, String)>,
    /// The whole table as one JSON object.
    pub json: String,
}

impl PluginSettings {
    /// No settings: every `get` answers `none`, `get-json` `{}`.
    pub fn empty() -> PluginSettings {
        PluginSettings {
            values: Vec::new(),
            json: "{}".into(),
        }
    }

    /// One setting's text.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.values[i].1.as_str())
    }

    /// Bytes the settings hold, which every answer copies at most once.
    pub fn bytes(&self) -> usize {
        self.json.len()
            + self
                .values
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

/// Kubernetes API access a 0.2.0 handler asks for in `describe()`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Permission {
    /// Group/version, e.g. `v1` or `apps/v1`.
    pub api_version: String,
    /// Kind, e.g. `Service`.
    pub kind: String,
    /// One namespace, or every namespace when `None`.
    pub namespace: Option<String>,
    /// Kubernetes verbs, e.g. `get`, `patch`.
    pub verbs: Vec<String>,
}

/// A failed Kubernetes API call as a 0.2.0 handler receives it: the API server's `Status`, or
/// the host's own refusal of a call outside the plugin's grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// The `Status` reason, e.g. `Forbidden`.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

impl ApiError {
    /// The host's refusal of a call no grant covers: 403 `Forbidden`, without asking the API
    /// server. `what` says which call (e.g. `patch`), never echoing guest strings.
    pub fn not_granted(plugin: &str, what: &str) -> Self {
        Self {
            code: 403,
            reason: "Forbidden".into(),
            message: format!("not granted: plugin {plugin} has no grant to {what}"),
        }
    }
}

/// One resource a handler wants events for; equal subscriptions share one informer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Subscription {
    /// Group/version, e.g. `v1` or `apps/v1`.
    pub api_version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// One namespace, or all when `None`.
    pub namespace: Option<String>,
    /// Kubernetes label selector syntax.
    pub label_selector: Option<String>,
    /// Kubernetes field selector syntax.
    pub field_selector: Option<String>,
    /// 0 disables resync.
    pub resync_period_ms: u64,
    /// Deliver metadata only (0.2.0); always false for 0.1.0 handlers.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub metadata_only: bool,
    /// JSON pointers to keep besides metadata (0.2.0); empty keeps the whole object.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// How a handler call that ran to completion ended; drives redelivery in the plugins layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerOutcome {
    /// Handled.
    Ok,
    /// Redeliver later with backoff.
    Retry(String),
    /// Log and count, never redeliver.
    Fatal(String),
    /// A controller's reconcile succeeded and asks to be called for the key again after this
    /// delay (from [`MIN_REQUEUE_AFTER`] to [`MAX_REQUEUE_AFTER`]).
    RequeueAfter(std::time::Duration),
}

/// Shortest `requeue-after` the host honours: a controller asking for less gets this, so a
/// key cannot be made to spin.
pub const MIN_REQUEUE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Longest `requeue-after` the host honours (a week): a longer one is this, so no guest number
/// can overflow a timer; resyncs and events come back sooner anyway.
pub const MAX_REQUEUE_AFTER: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Severity of a guest log line, mirroring the WIT `log.level` enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GuestLogLevel {
    /// Finest detail.
    Trace,
    /// Diagnostics.
    Debug,
    /// Normal operation; also guest stdout lines.
    Info,
    /// Something looks wrong; also guest stderr lines.
    Warn,
    /// Something failed.
    Error,
}

impl fmt::Display for GuestLogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        })
    }
}

/// A cache that holds nothing and refuses every read, for running a handler outside a host
/// (`kubewasm check`, benchmarks, tests): there are no subscriptions to read from yet.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCache;

impl CacheReader for NoCache {
    fn get(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: &str,
    ) -> Result<Option<Arc<dyn GuestObject>>, CacheError> {
        Err(CacheError::NotAttached)
    }

    fn list(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<Vec<Arc<dyn GuestObject>>, CacheError> {
        Err(CacheError::NotAttached)
    }
}
