//! [`ClusterAccess`]: how a 0.2.0 guest's `kube` and `events` imports reach the cluster. The
//! runtime turns the WIT calls into these plain types and hands them to whatever the plugins
//! layer installed (grant checks, rate limits and the kube client live there); the runtime
//! itself holds no client and decides nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::budget::CallMemory;
use super::types::{ApiError, GuestObject};

/// Most bytes of JSON (an object, a patch) one write may carry: the Kubernetes API server's own
/// request limit (3 MiB), checked before anything leaves the guest's call.
pub const MAX_WRITE_BYTES: usize = 3 << 20;

/// The object a call names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// Group/version, e.g. `v1`.
    pub api_version: String,
    /// Kind, e.g. `Service`.
    pub kind: String,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

/// `write-options` as the guest passed them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Send with `dryRun=All`: validated and answered, not stored.
    pub dry_run: bool,
    /// Server-side apply only: take ownership of conflicting fields.
    pub force: bool,
}

/// The patch formats Kubernetes accepts besides apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
}

/// One `kube` import call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeCall {
    /// `kube.get`: read one object from the API server (not the cache).
    Get(ObjectRef),
    /// `kube.create`: POST the object.
    Create {
        /// The object, with apiVersion, kind and metadata.
        json: String,
        /// Options.
        opts: WriteOptions,
    },
    /// `kube.apply`: server-side apply under the plugin's field manager.
    Apply {
        /// The applied configuration.
        json: String,
        /// Options.
        opts: WriteOptions,
    },
    /// `kube.patch`.
    Patch {
        /// The patched object.
        target: ObjectRef,
        /// Format of `patch`.
        patch_type: PatchType,
        /// The patch document.
        patch: String,
        /// `status`, `scale`, … or the object itself.
        subresource: Option<String>,
        /// Options.
        opts: WriteOptions,
    },
    /// `kube.replace`: PUT the whole object (optimistic concurrency on its resourceVersion).
    Replace {
        /// The object.
        json: String,
        /// `status`, `scale`, … or the object itself.
        subresource: Option<String>,
        /// Options.
        opts: WriteOptions,
    },
    /// `kube.delete`.
    Delete {
        /// The deleted object.
        target: ObjectRef,
        /// Delete only if the object still has this uid.
        uid_precondition: Option<String>,
    },
}

impl ObjectRef {
    fn held_bytes(&self) -> usize {
        self.api_version.len()
            + self.kind.len()
            + self.namespace.as_ref().map_or(0, String::len)
            + self.name.len()
    }
}

impl KubeCall {
    /// The bytes of the strings the call holds (what lifting it out of guest memory made).
    pub fn held_bytes(&self) -> usize {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        match self {
            KubeCall::Get(t) => t.held_bytes(),
            KubeCall::Create { json, .. } | KubeCall::Apply { json, .. } => json.len(),
            KubeCall::Replace {
                json, subresource, ..
            } => json.len() + opt(subresource),
            KubeCall::Patch {
                target,
                patch,
                subresource,
                ..
            } => target.held_bytes() + patch.len() + opt(subresource),
            KubeCall::Delete {
                target,
                uid_precondition,
            } => target.held_bytes() + opt(uid_precondition),
        }
    }

    /// The Kubernetes verb the call needs (what grants and RBAC speak of).
    pub fn verb(&self) -> &'static str {
        match self {
            KubeCall::Get(_) => "get",
            KubeCall::Create { .. } => "create",
            KubeCall::Apply { .. } => "apply",
            KubeCall::Patch { .. } => "patch",
            KubeCall::Replace { .. } => "update",
            KubeCall::Delete { .. } => "delete",
        }
    }
}

/// `normal` or `warning`, as Events spell them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Nothing is wrong.
    Normal,
    /// Something may need attention.
    Warning,
}

impl EventType {
    /// The Event's `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an Event is about, as the guest named it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Regarding {
    /// The object.
    pub object: ObjectRef,
    /// Its uid (may be empty).
    pub uid: String,
    /// Its resourceVersion (may be empty).
    pub resource_version: String,
}

/// One `events.emit` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventCall {
    /// What the Event is about.
    pub regarding: Regarding,
    /// Normal or Warning.
    pub event_type: EventType,
    /// Why (`UpperCamelCase`, machine-readable).
    pub reason: String,
    /// What the controller did or failed to do.
    pub action: String,
    /// Human-readable detail.
    pub note: String,
}

impl EventCall {
    /// The bytes of the strings the Event holds (what lifting it out of guest memory made).
    pub fn held_bytes(&self) -> usize {
        let r = &self.regarding;
        r.object.held_bytes()
            + r.uid.len()
            + r.resource_version.len()
            + self.reason.len()
            + self.action.len()
            + self.note.len()
    }
}

/// A `kube` call the API server answered with success.
#[derive(Clone)]
pub struct KubeAnswer {
    /// The object as served (`None` for a get that found nothing and for a delete).
    pub object: Option<Arc<dyn GuestObject>>,
    /// The HTTP status the server answered with, so that logs, metrics, transcripts and
    /// `apply-outcome` can tell a create (201) from an update (200).
    pub code: u16,
}

impl std::fmt::Debug for KubeAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeAnswer")
            .field("object", &self.object.is_some())
            .field("code", &self.code)
            .finish()
    }
}

/// What a `kube` call resolves to.
pub(crate) type KubeResult = Result<KubeAnswer, ApiError>;

/// A `kube` call in flight.
pub(crate) type KubeFuture = Pin<Box<dyn Future<Output = KubeResult> + Send>>;

/// Carries out a plugin's `kube` and `events` imports; one per plugin version. Implementations
/// decide what is granted and must bound the time a call may take.
pub trait ClusterAccess: Send + Sync + 'static {
    /// Performs one call. The future is polled on the plugin's thread as part of the guest's
    /// call: work it does inside `poll` (checks, parsing) counts against the guest's deadline,
    /// time it is pending does not, only against the plugin's wall-clock limit. Costly work
    /// belongs there, not on a shared runtime.
    fn call(&self, call: KubeCall) -> KubeFuture;

    /// Records one Event; never waits (Events are best effort, as in client-go).
    fn emit(&self, event: EventCall);

    /// [`call`](Self::call), charging what the call makes the host hold (copies of the body,
    /// the answer as read) to `memory` before making it, and answering the charge's refusal
    /// ([`BudgetExceeded::api_error`](super::BudgetExceeded::api_error)) instead. The runtime
    /// charged the body the guest passed and charges the answer's copy for the guest itself.
    fn call_within(&self, call: KubeCall, memory: CallMemory) -> KubeFuture {
        let _ = memory;
        self.call(call)
    }

    /// [`emit`](Self::emit), charging what the Event holds while it waits to be written to an
    /// account [`detached`](CallMemory::detached) from `memory`; an Event refused there is
    /// dropped like one over its rate.
    fn emit_within(&self, event: EventCall, memory: &CallMemory) {
        let _ = memory;
        self.emit(event)
    }
}

/// Refuses everything: every call gets a 403 `Forbidden` without reaching anything, Events are
/// dropped. What instances get outside a host (`kubewasm check`, benchmarks) and the default.
#[derive(Clone, Debug)]
pub(crate) struct NoClusterAccess {
    plugin: Arc<str>,
}

impl NoClusterAccess {
    /// For the plugin named in refusals.
    pub(crate) fn new(plugin: &str) -> Self {
        Self {
            plugin: plugin.into(),
        }
    }
}

impl ClusterAccess for NoClusterAccess {
    fn call(&self, call: KubeCall) -> KubeFuture {
        let err = ApiError::not_granted(&self.plugin, &format!("{} this object", call.verb()));
        Box::pin(async move { Err(err) })
    }

    fn emit(&self, _event: EventCall) {}
}
