//! Kubernetes informers with client-go semantics (classic DeltaFIFO path), natively in Rust.
//!
//! Pipeline: [`ListerWatcher`] → reflector → [`DeltaFifo`] → process loop (updates the
//! [`Indexer`], then notifies) → one listener per handler → [`ResourceEventHandler`].
//! See `shared/reference/informer-semantics.md` for the normative behaviour.

#![warn(missing_docs)]

mod backoff;
pub mod delta_fifo;
mod factory;
pub mod indexer;
pub mod kube_source;
pub mod list_watch;
mod listener;
mod metrics;
pub mod object;
mod processor;
pub mod reflector;
pub mod resync;
pub mod selector;
pub mod shared_informer;

#[cfg(test)]
mod tests;

pub use backoff::BackoffConfig;
pub use delta_fifo::{DeletedFinalStateUnknown, Delta, DeltaFifo, DeltaObject, DeltaType};
pub use factory::{HandlerRegistration, InformerFactory};
pub use indexer::{IndexError, IndexFunc, Indexer, NAMESPACE_INDEX};
pub use kube_source::{KubeListerWatcher, KubeSourceFactory};
pub use list_watch::{
    ListOptions, ListPage, ListerWatcher, SourceError, SourceErrorKind, SourceFactory,
    SourceObject, WatchEvent, WatchOptions, WatchStream,
};
pub use listener::{FilteringHandler, ResourceEventHandler};
pub use metrics::InformerMetrics;
pub use object::{KubeObject, MalformedObject, ObjectMeta, SharedObject, json_serialisations};
pub use reflector::{ReflectorConfig, TransformFunc};
pub use selector::LabelSelector;
pub use shared_informer::{HandlerHandle, SharedIndexInformer};

/// Identity of a shared informer: handlers asking for the same key share one watch and cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InformerKey {
    /// `v1`, `apps/v1`, `example.com/v1alpha1`.
    pub api_version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// `None` = all namespaces (or a cluster-scoped kind).
    pub namespace: Option<String>,
    /// Server-side label selector.
    pub label_selector: Option<String>,
    /// Server-side field selector.
    pub field_selector: Option<String>,
}

impl InformerKey {
    /// A key for all objects of a kind.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: None,
            label_selector: None,
            field_selector: None,
        }
    }

    /// Restricts the key to one namespace.
    pub fn in_namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// Adds a server-side label selector.
    pub fn with_labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Adds a server-side field selector.
    pub fn with_fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }
}

impl std::fmt::Display for InformerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " ns={ns}")?;
        }
        if let Some(l) = &self.label_selector {
            write!(f, " labels={l}")?;
        }
        if let Some(fs) = &self.field_selector {
            write!(f, " fields={fs}")?;
        }
        Ok(())
    }
}

/// Failures visible to callers of the informer API.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InformerError {
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
