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
}

/// One page of a LIST response.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    /// Decoded items of this page.
    pub items: Vec<Value>,
    /// The list's resourceVersion (the snapshot point).
    pub resource_version: String,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
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
}

/// A decoded watch event. `Error` events arrive as `Err(SourceError)` in the stream instead.
#[derive(Clone, Debug)]
pub enum WatchEvent {
    /// Object created.
    Added(Value),
    /// Object changed.
    Modified(Value),
    /// Object deleted (its last state).
    Deleted(Value),
    /// Progress marker: advances the resourceVersion only.
    Bookmark {
        /// The resourceVersion the watch has reached.
        resource_version: String,
        /// `k8s.io/initial-events-end: "true"` annotation of a streaming list.
        initial_events_end: bool,
    },
}

impl WatchEvent {
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
pub type WatchStream = BoxStream<'static, Result<WatchEvent, SourceError>>;

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
