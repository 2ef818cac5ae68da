//! [`PluginClient`]: one plugin version's `kube` and `events` imports, carried out under its
//! grants through the host's kube `Client`.
//!
//! Every call is checked in this order, and the first failure answers the guest without
//! anything reaching the API server: the guest's strings (apiVersion, kind, namespace, name,
//! subresource, JSON) are validated, names and namespaces by Kubernetes' own syntax (so no
//! `:`, which the API server would read as proxy syntax); the grant for the verb, kind,
//! namespace and subresource is looked up (403 `Forbidden` when missing; `exec`, `attach`,
//! `portforward` and `proxy` are never granted); a write to one of the host's own objects is
//! refused (403, see `OwnObjects`); a write takes a token from the plugin's write bucket
//! (`write-qps`, `write-burst`) and a `get` one from its read bucket (`read-qps`,
//! `read-burst`), waiting for one if that fits in half the call's timeout and answering 429
//! otherwise. Then the kind is resolved through discovery (cached), and the request is sent
//! on the host's runtime with a timeout of [`KUBE_CALL_TIMEOUT`]. Writes carry the field
//! manager `kubewasm:<plugin>` and, in dry-run mode (host `--dry-run`, manifest `dry-run`, or the
//! guest's own option), `dryRun=All`. Each write is logged once (plugin, verb, object, code) and
//! counted; object content never reaches a log. A write that succeeded already paid a token of
//! the write bucket, which bounds its line; every other line (a refusal, a failed call) takes a
//! token from the plugin's [`GuestCausedLog`] first.
//!
//! What a call makes the host hold is charged to the plugin's memory budget before it is made
//! ([`CallMemory`], given with the call by the runtime): an apply's or patch's serialised body,
//! the observer's copy of the call, and the API server's answer, read into a buffer charged by
//! its capacity as it grows (at most [`MAX_ANSWER_BYTES`]) and the text kept from it. A refusal
//! answers `429 TooManyRequests` (`413` when it could never fit), as the runtime's own charges
//! do.

mod answer;
mod call;
mod request;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::ApiResource;
use kube::discovery::Scope;
use parking_lot::Mutex;

use super::event_recorder::EventRecorder;
use crate::informer::{InformerError, resolve_kind};
use crate::plugins::grants::{Grants, OwnObjects};
use crate::plugins::metrics::PluginMetrics;
use crate::runtime::{
    ApiError, CallMemory, ClusterAccess, EventCall, GuestCausedLog, KubeCall, KubeFuture,
    RuntimeMetrics, SharedObserver,
};
use crate::workqueue::BucketRateLimiter;

/// Most bytes of one answer of the API server read for a guest: above the largest object the API
/// server stores (etcd's 1.5 MiB request limit, JSON-encoded) and its own 3 MiB request limit,
/// with room to spare. A larger answer is refused (500) without reading past the bound.
pub(crate) const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Longest one `kube` call may take, rate-limit wait included; the guest then gets a 504.
pub(crate) const KUBE_CALL_TIMEOUT: Duration = Duration::from_secs(10);

const TARGET: &str = "kubewasm::plugins::kube";

use super::acting_as::ActingAs;

/// The ServiceAccount plugin `plugin` acts as in namespace `namespace`: `kubewasm-plugin-`
/// and the plugin's name made a valid object name (lower case, `[a-z0-9.-]`).
pub(crate) fn plugin_account(plugin: &str) -> String {
    let name: String = plugin
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    let name = format!("{}{name}", crate::plugins::PLUGIN_ACCOUNT_PREFIX);
    let trimmed = crate::text::truncate(&name, 253);
    trimmed.trim_end_matches(['-', '.']).to_string()
}

/// The user name of plugin `plugin`'s ServiceAccount in `namespace`, as `Impersonate-User`
/// and audit logs spell it.
pub(crate) fn plugin_user(namespace: &str, plugin: &str) -> String {
    format!(
        "system:serviceaccount:{namespace}:{}",
        plugin_account(plugin)
    )
}

/// What every plugin's client shares: the host's kube client, the kinds resolved so far, the
/// runtime the requests run on and the host-wide dry-run switch.
pub struct ClusterContext {
    client: kube::Client,
    host: tokio::runtime::Handle,
    dry_run: bool,
    /// Kinds resolved through discovery. Only kinds a plugin was granted are ever looked up,
    /// and only answers the server gave are kept, so the map is bounded by the granted kinds.
    kinds: Mutex<HashMap<(String, String), (ApiResource, bool)>>,
    metrics: PluginMetrics,
    /// `reportingInstance` of Events: this replica.
    instance: String,
    /// Sees every call and Event as the guest made it (`kubewasm test` records them).
    observer: Option<SharedObserver>,
    /// What no plugin may write, whatever its grants.
    own_objects: OwnObjects,
    /// Namespace of the per-plugin ServiceAccounts the plugins' calls impersonate; `None`: they
    /// act as the host.
    plugin_accounts: Option<String>,
}

impl ClusterContext {
    /// Requests go through `client` on the current Tokio runtime; `dry_run` sends every write
    /// of every plugin with `dryRun=All`; `observer` sees every call with its answer.
    pub fn new(
        client: kube::Client,
        dry_run: bool,
        metrics: PluginMetrics,
        observer: Option<SharedObserver>,
    ) -> Arc<Self> {
        Self::with_own_objects(client, dry_run, metrics, observer, OwnObjects::default())
    }

    /// Like [`ClusterContext::new`], for a host whose own objects (plugins ConfigMap, Lease,
    /// RBAC) are `own_objects` rather than `deploy/`'s.
    pub fn with_own_objects(
        client: kube::Client,
        dry_run: bool,
        metrics: PluginMetrics,
        observer: Option<SharedObserver>,
        own_objects: OwnObjects,
    ) -> Arc<Self> {
        Self::with_identity(client, dry_run, metrics, observer, own_objects, None)
    }

    /// Like [`ClusterContext::with_own_objects`]; with `plugin_accounts`, every `kube` call of
    /// plugin `p` impersonates ServiceAccount `kubewasm-plugin-<p>` of that namespace
    /// (`plugin_user`), so the API server's RBAC judges it by the plugin's own grants and its
    /// audit log names the plugin.
    pub fn with_identity(
        client: kube::Client,
        dry_run: bool,
        metrics: PluginMetrics,
        observer: Option<SharedObserver>,
        own_objects: OwnObjects,
        plugin_accounts: Option<String>,
    ) -> Arc<Self> {
        let instance = crate::identity::replica_name();
        Arc::new(ClusterContext {
            client,
            host: tokio::runtime::Handle::current(),
            dry_run,
            kinds: Mutex::new(HashMap::new()),
            metrics,
            instance,
            observer,
            own_objects,
            plugin_accounts,
        })
    }

    /// The user plugin `plugin`'s calls impersonate, if plugins act under identities of
    /// their own.
    pub fn plugin_user(&self, plugin: &str) -> Option<String> {
        self.plugin_accounts
            .as_deref()
            .map(|ns| plugin_user(ns, plugin))
    }

    /// What no plugin may write.
    pub fn own_objects(&self) -> &OwnObjects {
        &self.own_objects
    }

    /// Whether every write of every plugin is a dry run.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    pub(in crate::plugins) fn client(&self) -> &kube::Client {
        &self.client
    }

    pub(in crate::plugins) fn host(&self) -> &tokio::runtime::Handle {
        &self.host
    }

    pub(in crate::plugins) fn metrics(&self) -> &PluginMetrics {
        &self.metrics
    }

    pub(in crate::plugins) fn instance(&self) -> &str {
        &self.instance
    }

    /// The resource serving `kind` and whether it is namespaced.
    async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), ApiError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.kinds.lock().get(&key) {
            return Ok(found.clone());
        }
        match resolve_kind(&self.client, api_version, kind).await {
            Ok((ar, caps)) => {
                let found = (ar, caps.scope == Scope::Namespaced);
                self.kinds.lock().insert(key, found.clone());
                Ok(found)
            }
            Err(InformerError::UnknownKind { .. }) => Err(api_error(
                404,
                "NotFound",
                format!("the server does not serve kind {kind} of {api_version}"),
            )),
            Err(e) => Err(api_error(
                503,
                "ServiceUnavailable",
                format!("cannot resolve kind {kind} of {api_version}: {e}"),
            )),
        }
    }
}

fn api_error(code: u16, reason: &str, message: String) -> ApiError {
    ApiError {
        code,
        reason: reason.into(),
        message,
    }
}

fn bad_request(message: String) -> ApiError {
    api_error(400, "BadRequest", message)
}

/// One plugin version's client: its grants, its read and write buckets and its Event recorder.
pub struct PluginClient {
    inner: Arc<Inner>,
    events: EventRecorder,
}

struct Inner {
    plugin: Arc<str>,
    /// Whose identity every request carries (the plugin's Events carry the same).
    acting: ActingAs,
    lines: GuestCausedLog,
    ctx: Arc<ClusterContext>,
    grants: Arc<Grants>,
    writes: BucketRateLimiter,
    reads: BucketRateLimiter,
    dry_run: bool,
}

impl PluginClient {
    /// A client for `plugin` acting within `grants`, with a line budget of its own (unregistered).
    pub fn new(plugin: &str, ctx: Arc<ClusterContext>, grants: Arc<Grants>) -> Self {
        let lines = GuestCausedLog::new(plugin, &RuntimeMetrics::unregistered());
        Self::with_guest_caused_log(plugin, ctx, grants, lines)
    }

    /// A client for `plugin` acting within `grants` whose refusal lines draw on `lines`, the
    /// budget the plugin's instances share (how the host builds it).
    pub fn with_guest_caused_log(
        plugin: &str,
        ctx: Arc<ClusterContext>,
        grants: Arc<Grants>,
        lines: GuestCausedLog,
    ) -> Self {
        let dry_run = ctx.dry_run || grants.dry_run();
        let acting = ActingAs::user(ctx.plugin_user(plugin));
        let events = EventRecorder::new(
            plugin,
            ctx.clone(),
            grants.clone(),
            dry_run,
            lines.clone(),
            acting.clone(),
        );
        PluginClient {
            inner: Arc::new(Inner {
                plugin: plugin.into(),
                acting,
                lines,
                writes: BucketRateLimiter::new(grants.write_qps(), grants.write_burst()),
                reads: BucketRateLimiter::new(grants.read_qps(), grants.read_burst()),
                ctx,
                grants,
                dry_run,
            }),
            events,
        }
    }
}

impl ClusterAccess for PluginClient {
    /// The call runs on the plugin's thread, as part of the guest's call, so everything it costs
    /// the host counts against the guest's deadline: the checks, parsing the body, serialising
    /// the request and parsing the answer. Only the exchange with the API server (and a
    /// discovery on a kind's first use) runs on the host's runtime, whose tasks drive the kube
    /// client's pooled connections; a plugin's runtime stalls while its guest computes and ends
    /// when the plugin unloads. Dropping the returned future (the guest's call was abandoned)
    /// aborts the request.
    fn call(&self, call: KubeCall) -> KubeFuture {
        self.call_within(call, CallMemory::unbounded())
    }

    fn emit(&self, event: EventCall) {
        self.emit_within(event, &CallMemory::unbounded())
    }

    /// As [`call`](Self::call), charging `memory` for the copies the call makes.
    fn call_within(&self, call: KubeCall, memory: CallMemory) -> KubeFuture {
        let observing = self.inner.ctx.observer.is_some();
        // The observer keeps a copy of the call (its body included) until the answer.
        if observing && let Err(e) = memory.charge(call.held_bytes() as u64) {
            return Box::pin(std::future::ready(Err(e.api_error())));
        }
        let observed = self
            .inner
            .ctx
            .observer
            .as_ref()
            .map(|o| (o.clone(), self.inner.plugin.clone(), call.clone()));
        let inner = self.inner.clone();
        Box::pin(async move {
            let result = inner.call(call, &memory).await;
            if let Some((observer, plugin, call)) = observed {
                observer.kube_request(&plugin, &call, result.as_ref().map(|a| a.code));
            }
            result
        })
    }

    fn emit_within(&self, event: EventCall, memory: &CallMemory) {
        // What is not granted is dropped by the recorder and never written: not observed.
        if let Some(o) = &self.inner.ctx.observer
            && self.events.permits(&event)
        {
            o.event(&self.inner.plugin, &event);
        }
        self.events.emit_within(event, memory.detached());
    }
}

#[cfg(test)]
mod tests;
