//! The source abstraction the reflector drives (client-go ListerWatcher), plus error classes
//! that decide between relist, re-watch and backoff.

use std::sync::Arc;

use futures::stream::BoxStream;
use serde_json::Value;

use super::{InformerError, InformerKey};

/// Options of one LIST request; selectors are fixed by the [`ListerWatcher`] itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `""` = consistent read, `"0"` = any (watch cache), otherwise not-older-than.
    pub resource_version: String,
    /// Page size; `None` = unlimited.
    pub limit: Option<u32>,
    /// Continuation token of a paged list (then `resource_version` is empty).
    pub continue_token: Option<String>,
    /// KEP-5866 `shardSelector` of a sharded informer (the held ranges as of this list).
    pub shard_selector: Option<String>,
}

/// One page of a LIST response. Items are trees by default (scripted sources);
/// [`ListerWatcher::list_objects`] pages carry [`SourceObject`]s.
#[derive(Clone, Debug)]
pub struct ListPage<T = Value> {
    /// Decoded items of this page.
    pub items: Vec<T>,
    /// The list's resourceVersion (the snapshot point).
    pub resource_version: String,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// `metadata.shardInfo.selector`: the server's echo of the `shardSelector` it filtered by;
    /// absent when it did not filter (an older server, or the gate off).
    pub shard_selector: Option<String>,
}

impl<T> Default for ListPage<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            resource_version: String::new(),
            continue_token: None,
            shard_selector: None,
        }
    }
}

impl<T> ListPage<T> {
    /// The same page with every item converted by `f`.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> ListPage<U> {
        ListPage {
            items: self.items.into_iter().map(f).collect(),
            resource_version: self.resource_version,
            continue_token: self.continue_token,
            shard_selector: self.shard_selector,
        }
    }
}

/// An object as a source hands it to the reflector, which turns it into a cached
/// [`KubeObject`](super::KubeObject).
#[derive(Clone)]
pub enum SourceObject {
    /// An already decoded tree (scripted sources, tests).
    Tree(Value),
    /// The object's JSON exactly as the server sent it: decoded straight into the cache's
    /// representation, with no intermediate tree.
    Json(Box<str>),
}

impl SourceObject {
    /// The object as a tree; text that does not parse becomes `null` (callers use this only to
    /// name an object they reject).
    pub fn into_tree(self) -> Value {
        match self {
            SourceObject::Tree(v) => v,
            SourceObject::Json(j) => serde_json::from_str(&j).unwrap_or(Value::Null),
        }
    }
}

impl std::fmt::Debug for SourceObject {
    // Content stays out of debug output: the object may be a Secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceObject::Tree(_) => f.write_str("SourceObject::Tree(..)"),
            SourceObject::Json(j) => write!(f, "SourceObject::Json({} bytes)", j.len()),
        }
    }
}

/// Options of one WATCH request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// Resume point; `""` with `send_initial_events` means "now".
    pub resource_version: String,
    /// Server-side timeout, randomised by the reflector.
    pub timeout_seconds: u32,
    /// Ask for BOOKMARK events (always true from the reflector).
    pub allow_bookmarks: bool,
    /// Streaming list (KEP-3157): the server first sends the current state, then a bookmark.
    pub send_initial_events: bool,
    /// KEP-5866 `shardSelector`, the same as the cycle's list sent. Watch events carry no echo,
    /// so the reflector re-checks each of them anyway.
    pub shard_selector: Option<String>,
}

/// A decoded watch event. `Error` events arrive as `Err(SourceError)` in the stream instead.
/// Objects are trees by default; [`ListerWatcher::watch_objects`] streams carry [`SourceObject`]s.
#[derive(Clone, Debug)]
pub enum WatchEvent<T = Value> {
    /// Object created.
    Added(T),
    /// Object changed.
    Modified(T),
    /// Object deleted (its last state).
    Deleted(T),
    /// Progress marker: advances the resourceVersion only.
    Bookmark {
        /// The resourceVersion the watch has reached.
        resource_version: String,
        /// `k8s.io/initial-events-end: "true"` annotation of a streaming list.
        initial_events_end: bool,
    },
}

impl<T> WatchEvent<T> {
    /// The same event with its object converted by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> WatchEvent<U> {
        match self {
            WatchEvent::Added(o) => WatchEvent::Added(f(o)),
            WatchEvent::Modified(o) => WatchEvent::Modified(f(o)),
            WatchEvent::Deleted(o) => WatchEvent::Deleted(f(o)),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            },
        }
    }

    /// Event type name for logs.
    pub fn type_name(&self) -> &'static str {
        match self {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark { .. } => "BOOKMARK",
        }
    }
}

/// Stream of watch events; ends when the server closes the watch.
pub type WatchStream<T = Value> = BoxStream<'static, Result<WatchEvent<T>, SourceError>>;

/// Error classes that drive the reflector's decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceErrorKind {
    /// 410 Gone / Expired: the requested resourceVersion is compacted away.
    Expired,
    /// The requested resourceVersion is newer than the server has seen.
    TooLarge,
    /// Connection refused: retry the watch without relisting.
    ConnectionRefused,
    /// 429: retry the watch without relisting.
    TooManyRequests,
    /// 500 InternalError (re-watched only with `max_internal_error_retry`).
    InternalError,
    /// An event or item that could not be decoded: ends the watch, then a relist (client-go).
    Malformed,
    /// Anything else (403, 404, StoreReadError, transport errors...).
    Other,
}

/// A classified list or watch failure.
#[derive(Clone, Debug)]
pub struct SourceError {
    /// Class deciding the reflector's reaction.
    pub kind: SourceErrorKind,
    /// Human-readable cause; logged through `Display`, except for `Malformed`.
    pub message: String,
}

/// What logs show. A decoder's message can quote the undecodable object (a Secret's data), so
/// for `Malformed` only the class is shown.
impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            SourceErrorKind::Malformed => {
                f.write_str("undecodable object or event (decoder message withheld)")
            }
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SourceError {}

impl SourceError {
    /// An error of `kind` with a human-readable cause.
    pub fn new(kind: SourceErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Classifies a `metav1.Status` failure the way client-go's reflector does
    /// (`isExpiredError`, `isTooLargeResourceVersionError`, 429, InternalError).
    /// `causes` are `(reason, message)` pairs of `details.causes`.
    pub fn from_status(code: u16, reason: &str, message: &str, causes: &[(&str, &str)]) -> Self {
        const TOO_LARGE: &str = "Too large resource version";
        let kind = if code == 410 || reason == "Expired" || reason == "Gone" {
            SourceErrorKind::Expired
        } else if causes.iter().any(|(r, _)| *r == "ResourceVersionTooLarge")
            || (reason == "Timeout"
                && (causes.iter().any(|(_, m)| m.contains(TOO_LARGE))
                    || message.contains(TOO_LARGE)))
        {
            SourceErrorKind::TooLarge
        } else if code == 429 || reason == "TooManyRequests" {
            SourceErrorKind::TooManyRequests
        } else if reason == "InternalError" || (code == 500 && reason.is_empty()) {
            SourceErrorKind::InternalError
        } else {
            SourceErrorKind::Other
        };
        let message = if reason.is_empty() {
            format!("{code}: {message}")
        } else {
            format!("{code} {reason}: {message}")
        };
        Self { kind, message }
    }

    /// Errors after which the watch is retried without a relist (client-go `isWatchErrorRetriable`).
    pub fn is_watch_retriable(&self) -> bool {
        matches!(
            self.kind,
            SourceErrorKind::ConnectionRefused | SourceErrorKind::TooManyRequests
        )
    }

    /// Errors after which the next list must be a consistent read (RV "").
    pub fn needs_consistent_relist(&self) -> bool {
        matches!(
            self.kind,
            SourceErrorKind::Expired | SourceErrorKind::TooLarge
        )
    }
}

/// LIST and WATCH for one resource with fixed namespace/selectors.
#[async_trait::async_trait]
pub trait ListerWatcher: Send + Sync + 'static {
    /// One LIST request (one page).
    async fn list(&self, opts: &ListOptions) -> Result<ListPage, SourceError>;
    /// Opens a WATCH; the stream ends when the server closes it.
    async fn watch(&self, opts: &WatchOptions) -> Result<WatchStream, SourceError>;

    /// The LIST the reflector uses. Sources that can hand over the served JSON override it so
    /// that no tree is built per item; the default wraps [`list`](Self::list)'s trees.
    async fn list_objects(
        &self,
        opts: &ListOptions,
    ) -> Result<ListPage<SourceObject>, SourceError> {
        Ok(self.list(opts).await?.map(SourceObject::Tree))
    }

    /// The WATCH the reflector uses; overridden like [`list_objects`](Self::list_objects).
    async fn watch_objects(
        &self,
        opts: &WatchOptions,
    ) -> Result<WatchStream<SourceObject>, SourceError> {
        use futures::StreamExt;
        let stream = self.watch(opts).await?;
        Ok(stream
            .map(|r| r.map(|ev| ev.map(SourceObject::Tree)))
            .boxed())
    }
}

/// Turns an informer key into a [`ListerWatcher`], resolving the kind against the server.
#[async_trait::async_trait]
pub trait SourceFactory: Send + Sync + 'static {
    /// Errors (naming the kind) when the server does not serve it.
    async fn lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Arc<dyn ListerWatcher>, InformerError>;
}
