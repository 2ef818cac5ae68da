//! Failures visible to callers of the informer API.

use super::key::InvalidKey;
use super::list_watch::SourceError;

/// Failures visible to callers of the informer API.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InformerError {
    /// The key breaks the API server's syntax; nothing was requested.
    #[error(transparent)]
    InvalidKey(#[from] InvalidKey),
    /// The server does not serve the kind.
    #[error("cannot resolve {kind} in {api_version}: {cause}")]
    UnknownKind {
        /// apiVersion that was asked for.
        api_version: String,
        /// Kind that was asked for.
        kind: String,
        /// What discovery answered.
        cause: String,
    },
    /// Discovery could not reach the server; the same request may succeed later.
    #[error("cannot resolve {kind} in {api_version} now (will retry): {cause}")]
    DiscoveryUnavailable {
        /// apiVersion that was asked for.
        api_version: String,
        /// Kind that was asked for.
        kind: String,
        /// Why discovery failed.
        cause: String,
    },
    /// The informer (or the factory) has been stopped.
    #[error("handler for {0} was not added to shared informer because it has stopped already")]
    Stopped(String),
    /// Configuration that is only allowed before the informer runs.
    #[error("{0}: informer has already started")]
    AlreadyStarted(String),
    /// A source failed while building the informer.
    #[error(transparent)]
    Source(#[from] SourceError),
}
