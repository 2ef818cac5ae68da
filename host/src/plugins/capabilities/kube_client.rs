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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::ApiResource;
use kube::core::Request;
use kube::core::params::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kube::discovery::Scope;
use kubewasm_apimachinery::validation::{
    ValidationError, validate_api_version, validate_dns1123_label, validate_dns1123_subdomain,
    validate_kind,
};
use parking_lot::Mutex;
use serde_json::value::RawValue;

use super::event_recorder::EventRecorder;
use crate::informer::{InformerError, KubeObject, resolve_kind, resource_path};
use crate::plugins::grants::{Grants, NEVER_GRANTED_SUBRESOURCES, OwnObjects};
use crate::plugins::metrics::{KubeRequestLabels, PluginMetrics, RateLimitLabels, VerbLabels};
use crate::runtime::{
    ApiError, BudgetExceeded, CallMemory, ClusterAccess, EventCall, GuestCausedLog, GuestObject,
    KubeAnswer, KubeCall, KubeFuture, KubeResult, ObjectRef, PatchType, RuntimeMetrics,
    SharedObserver,
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
pub use super::acting_as::IMPERSONATE_USER;

/// The ServiceAccount plugin `plugin` acts as in namespace `namespace`: `kubewasm-plugin-`
/// and the plugin's name made a valid object name (lower case, `[a-z0-9.-]`).
pub fn plugin_account(plugin: &str) -> String {
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
pub fn plugin_user(namespace: &str, plugin: &str) -> String {
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
    /// ([`plugin_user`]), so the API server's RBAC judges it by the plugin's own grants and its
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

/// Aborts a host-side task whose call was abandoned.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// The task's output; a task that panicked or was aborted is a 500.
    async fn join(mut self) -> Result<T, ApiError> {
        (&mut self.0)
            .await
            .map_err(|e| api_error(500, "InternalError", format!("request task failed: {e}")))
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A call after validation: everything needed to check grants and build the request.
struct Prepared {
    verb: &'static str,
    target: ObjectRef,
    /// `None` for a create without a name (`generateName`).
    name: Option<String>,
    subresource: Option<String>,
    op: Op,
    guest_dry_run: bool,
}

/// What a prepared call does, with the body it sends. A create's, apply's or replace's body was
/// parsed for its target (so it is JSON); a patch is checked only when the request is built,
/// after the grant and rate checks.
enum Op {
    Get,
    Create(Vec<u8>),
    /// Server-side apply of a whole object; `force` takes over fields other managers own.
    Apply {
        body: String,
        force: bool,
    },
    Patch(PatchType, String),
    Replace(Vec<u8>),
    /// Delete, only if the object still has this uid when one is given.
    Delete(Option<String>),
}

/// What a call's log line names, once known (a body refused before it was read names nothing).
struct Named {
    target: ObjectRef,
    subresource: Option<String>,
    guest_dry_run: bool,
}

/// The API server's answer, as read off the wire on the host's runtime.
struct Raw {
    code: u16,
    body: Vec<u8>,
    /// What `body` is charged to the call's [`CallMemory`] (its capacity) until it is dropped.
    charged: u64,
}

impl Inner {
    async fn call(&self, call: KubeCall, memory: &CallMemory) -> KubeResult {
        let started = Instant::now();
        let verb = call.verb();
        let mut named = None;
        let result = self.steps(call, &mut named, memory).await;
        let code = match &result {
            Ok(a) => a.code,
            Err(e) => e.code,
        };
        self.count(verb, code, started);
        // A successful write paid a write token; anything else a guest may repeat at will.
        let logged = if verb != "get" && code < 400 {
            true
        } else {
            (verb != "get" || code == 403) && self.lines.admit()
        };
        if logged {
            self.log(verb, code, named.as_ref());
        }
        result
    }

    /// The call, cheapest check first: nothing costly happens for a call the checks refuse,
    /// and nothing but the exchange with the API server runs on the host's runtime.
    async fn steps(
        &self,
        call: KubeCall,
        named: &mut Option<Named>,
        memory: &CallMemory,
    ) -> KubeResult {
        self.acting.usable().map_err(unusable)?;
        let check_grants = !grant_checks_skipped();
        if check_grants {
            self.holds_verb(&call)?;
        }
        let mut p = prepare(call)?;
        *named = Some(Named {
            target: p.target.clone(),
            subresource: p.subresource.clone(),
            guest_dry_run: p.guest_dry_run,
        });
        if check_grants {
            self.refuse_never_granted(&p)?;
            self.refuse_not_granted(&p)?;
        }
        self.refuse_own_object(&p)?;
        let deadline = tokio::time::Instant::now() + KUBE_CALL_TIMEOUT;
        self.take_token(p.verb).await?;
        let (ar, namespaced) = self.resolve(&p.target, deadline).await?;
        check_scope(namespaced, &p.target)?;
        let request = self.request(&mut p, &ar, memory)?;
        let raw = self.exchange(request, deadline, memory).await?;
        answer(&p, raw, memory)
    }

    /// A body names the object it is about, so its grant cannot be checked before the body is
    /// read; but a plugin holding no grant for the verb at all is refused without reading it.
    fn holds_verb(&self, call: &KubeCall) -> Result<(), ApiError> {
        let body_named = matches!(
            call,
            KubeCall::Create { .. } | KubeCall::Apply { .. } | KubeCall::Replace { .. }
        );
        if body_named && !self.grants.grants_verb(call.verb()) {
            return Err(ApiError::not_granted(
                &self.plugin,
                &format!("{} any object", call.verb()),
            ));
        }
        Ok(())
    }

    /// `exec`, `attach`, `portforward` and `proxy` are never granted.
    fn refuse_never_granted(&self, p: &Prepared) -> Result<(), ApiError> {
        match p.subresource.as_deref() {
            Some(s) if NEVER_GRANTED_SUBRESOURCES.contains(&s) => Err(api_error(
                403,
                "Forbidden",
                format!(
                    "refused: plugin {} may never {} subresource {s} of {}: exec, attach, \
                     portforward and proxy are never granted",
                    self.plugin, p.verb, p.target.kind
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The grant for the verb, kind, namespace and subresource.
    fn refuse_not_granted(&self, p: &Prepared) -> Result<(), ApiError> {
        let t = &p.target;
        let ns = t.namespace.as_deref();
        let sub = p.subresource.as_deref();
        let granted = if p.verb == "get" {
            self.grants.allows_read(&t.api_version, &t.kind, ns)
        } else {
            self.grants
                .allows_write_at(&t.api_version, &t.kind, ns, p.verb, sub)
        };
        if granted {
            return Ok(());
        }
        let place = ns.map_or("cluster-wide".to_string(), |n| format!("in namespace {n}"));
        let sub = sub.map_or(String::new(), |s| format!(" (subresource {s})"));
        Err(ApiError::not_granted(
            &self.plugin,
            &format!("{} {} of {} {place}{sub}", p.verb, t.kind, t.api_version),
        ))
    }

    /// A write to one of the host's own objects, or a read of one of its Secrets, whatever the
    /// grants.
    fn refuse_own_object(&self, p: &Prepared) -> Result<(), ApiError> {
        let t = &p.target;
        // The body's name for a create too (`p.name` is `None` there): empty only for
        // `generateName`, which cannot pick an existing object.
        let ns = t.namespace.as_deref();
        match self
            .ctx
            .own_objects
            .refuses(p.verb, &t.api_version, &t.kind, ns, &t.name)
        {
            Some(own) => Err(api_error(
                403,
                "Forbidden",
                format!(
                    "refused: plugin {} may not {} {own}: it is one of the host's own objects, \
                     which no grant covers",
                    self.plugin, p.verb
                ),
            )),
            None => Ok(()),
        }
    }

    /// A token of the read or write bucket, waiting for one if that fits in half the call's
    /// timeout (the wait is the host's, not the guest's time); 429 otherwise.
    async fn take_token(&self, verb: &str) -> Result<(), ApiError> {
        let g = &self.grants;
        let (bucket, class, what, qps, burst) = if verb == "get" {
            (&self.reads, "read", "reads", g.read_qps(), g.read_burst())
        } else {
            let writes = (g.write_qps(), g.write_burst());
            (&self.writes, "write", "writes", writes.0, writes.1)
        };
        let Some(wait) = bucket.reserve_within(KUBE_CALL_TIMEOUT / 2) else {
            self.rate_limited(class, "refused");
            return Err(api_error(
                429,
                "TooManyRequests",
                format!(
                    "client-side rate limit: plugin {} {what} more than {qps} per second (burst {burst})",
                    self.plugin,
                ),
            ));
        };
        // A zero sleep would still wait for the timer wheel's next millisecond tick.
        if !wait.is_zero() {
            self.rate_limited(class, "delayed");
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// The resource serving the target's kind and whether it is namespaced: from the cache, or
    /// through discovery on the host's runtime (only ever for a granted kind).
    async fn resolve(
        &self,
        t: &ObjectRef,
        deadline: tokio::time::Instant,
    ) -> Result<(ApiResource, bool), ApiError> {
        let key = (t.api_version.clone(), t.kind.clone());
        if let Some(found) = self.ctx.kinds.lock().get(&key) {
            return Ok(found.clone());
        }
        let ctx = self.ctx.clone();
        let task = AbortOnDrop(self.ctx.host.spawn(async move {
            tokio::time::timeout_at(deadline, ctx.resolve(&key.0, &key.1)).await
        }));
        task.join().await?.unwrap_or_else(|_| Err(timed_out()))
    }

    /// Sends `request` on the host's runtime and reads the answer's status and bytes there;
    /// parsing them is left to the caller's thread.
    async fn exchange(
        &self,
        request: http::Request<Vec<u8>>,
        deadline: tokio::time::Instant,
        memory: &CallMemory,
    ) -> Result<Raw, ApiError> {
        let client = self.ctx.client.clone();
        let memory = memory.clone();
        let task = AbortOnDrop(self.ctx.host.spawn(async move {
            tokio::time::timeout_at(deadline, send(&client, request, &memory)).await
        }));
        match task.join().await? {
            Ok(Ok(Ok(raw))) => Ok(raw),
            Ok(Ok(Err(refused))) => Err(refused),
            Ok(Err(e)) => Err(api_error(
                503,
                "ServiceUnavailable",
                format!("API server unreachable: {e}"),
            )),
            Err(_) => Err(timed_out()),
        }
    }

    /// The call's one line: plugin, verb, object (once known), subresource and code.
    fn log(&self, verb: &'static str, code: u16, named: Option<&Named>) {
        let dry = if self.dry_run || named.is_some_and(|n| n.guest_dry_run) {
            " (dry run)"
        } else {
            ""
        };
        let object = named.map_or_else(
            || "(body not read)".to_string(),
            |n| {
                let t = &n.target;
                format!("{} {} {}", t.api_version, t.kind, object_key(t))
            },
        );
        let subresource = named.and_then(|n| n.subresource.as_deref()).unwrap_or("");
        tracing::info!(target: TARGET, plugin = &*self.plugin, verb, object = %object, subresource,
            code, "plugin {verb}{dry}");
    }

    /// The HTTP request for a prepared call against resource `ar`.
    fn request(
        &self,
        p: &mut Prepared,
        ar: &ApiResource,
        memory: &CallMemory,
    ) -> Result<http::Request<Vec<u8>>, ApiError> {
        let collection = resource_path(ar, p.target.namespace.as_deref(), None, None);
        // kube serialises an apply's or a patch's body into a new buffer, a second copy of
        // the text until the guest's is dropped with the built request's source.
        let copied = match &p.op {
            Op::Apply { body, .. } | Op::Patch(_, body) => body.len() as u64,
            _ => 0,
        };
        memory.charge(copied).map_err(|e| e.api_error())?;
        let built = build_request(p, &collection, &self.plugin, self.dry_run);
        memory.give_back(copied);
        let mut request = built?;
        // On the request rather than in a client of its own: the plugins share the host's
        // connection pool, and impersonation is one header.
        self.acting.mark(&mut request).map_err(unusable)?;
        Ok(request)
    }

    /// Counts a call its bucket delayed or refused; `class` is `read` or `write`.
    fn rate_limited(&self, class: &'static str, outcome: &'static str) {
        self.ctx
            .metrics()
            .kube_rate_limited
            .get_or_create(&RateLimitLabels {
                plugin: self.plugin.to_string(),
                class,
                outcome,
            })
            .inc();
    }

    fn count(&self, verb: &'static str, code: u16, started: Instant) {
        let m = self.ctx.metrics();
        m.kube_requests
            .get_or_create(&KubeRequestLabels {
                plugin: self.plugin.to_string(),
                verb: verb.to_string(),
                code: code.to_string(),
            })
            .inc();
        m.kube_request_seconds
            .get_or_create(&VerbLabels {
                plugin: self.plugin.to_string(),
                verb: verb.to_string(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// Whether this test-only build was told to skip the host's own grant checks
/// (`KUBEWASM_UNCHECKED_GRANTS_FOR_TESTS=1`), so the API server's RBAC alone judges a call.
#[cfg(feature = "unchecked-grants-for-tests")]
fn grant_checks_skipped() -> bool {
    static SKIPPED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SKIPPED.get_or_init(|| {
        let skipped = std::env::var("KUBEWASM_UNCHECKED_GRANTS_FOR_TESTS").as_deref() == Ok("1");
        if skipped {
            tracing::warn!(target: TARGET,
                "test-only build: the host's grant checks on plugins' kube calls are switched off");
        }
        skipped
    })
}

/// Every build but the test-only one checks the grants, always.
#[cfg(not(feature = "unchecked-grants-for-tests"))]
const fn grant_checks_skipped() -> bool {
    false
}

/// A call that cannot carry the plugin's identity: the host's fault, refused before sending.
fn unusable(e: super::acting_as::UnusableIdentity) -> ApiError {
    api_error(500, "InternalError", e.to_string())
}

fn timed_out() -> ApiError {
    api_error(
        504,
        "Timeout",
        format!("no answer within {} s", KUBE_CALL_TIMEOUT.as_secs_f64()),
    )
}

/// A namespaced kind needs a namespace, a cluster-scoped one must have none.
fn check_scope(namespaced: bool, t: &ObjectRef) -> Result<(), ApiError> {
    match (namespaced, &t.namespace) {
        (true, None) => Err(bad_request(format!(
            "{} is namespaced: the call must name a namespace",
            t.kind
        ))),
        (false, Some(_)) => Err(bad_request(format!(
            "{} is cluster-scoped: the call must not name a namespace",
            t.kind
        ))),
        _ => Ok(()),
    }
}

/// Sends `request` and keeps the response status, which kube's `request_text` drops: a guest
/// (`apply-outcome`), the logs, metrics and transcripts tell a create (201) from an update by it.
/// The body is read frame by frame into a buffer whose growth is charged to `memory` before it
/// is made (its whole declared length up front when the answer declares one), at most
/// [`MAX_ANSWER_BYTES`]; a refused charge or an answer over the bound ends the read with the
/// guest's error (the inner `Err`).
async fn send(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    memory: &CallMemory,
) -> kube::Result<Result<Raw, ApiError>> {
    use http_body_util::BodyExt;
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let code = response.status().as_u16();
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let mut buffer = AnswerBuffer::new(memory);
    if let Some(n) = declared
        && let Err(e) = buffer.reserve(n)
    {
        return Ok(Err(e));
    }
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data()
            && let Err(e) = buffer.push(&data)
        {
            return Ok(Err(e));
        }
    }
    let (body, charged) = buffer.into_inner();
    Ok(Ok(Raw {
        code,
        body,
        charged,
    }))
}

/// An answer's bytes as they arrive, every growth charged before it is made.
struct AnswerBuffer<'a> {
    memory: &'a CallMemory,
    bytes: Vec<u8>,
    /// The capacity charged so far (what `bytes` was asked to reserve).
    charged: usize,
}

impl<'a> AnswerBuffer<'a> {
    fn new(memory: &'a CallMemory) -> Self {
        Self {
            memory,
            bytes: Vec::new(),
            charged: 0,
        }
    }

    /// Makes room for `n` bytes in all, charging the growth (doubling, as `Vec` would).
    fn reserve(&mut self, n: usize) -> Result<(), ApiError> {
        if n > MAX_ANSWER_BYTES {
            return Err(api_error(
                500,
                "InternalError",
                format!("the API server's answer is over the limit of {MAX_ANSWER_BYTES} bytes"),
            ));
        }
        if n <= self.charged {
            return Ok(());
        }
        let grown = n.max(self.charged * 2).min(MAX_ANSWER_BYTES);
        self.memory
            .charge((grown - self.charged) as u64)
            .map_err(|e: BudgetExceeded| e.api_error())?;
        self.charged = grown;
        self.bytes.reserve_exact(grown - self.bytes.len());
        Ok(())
    }

    fn push(&mut self, data: &[u8]) -> Result<(), ApiError> {
        self.reserve(self.bytes.len() + data.len())?;
        self.bytes.extend_from_slice(data);
        Ok(())
    }

    /// The bytes and what they are charged: the caller gives that back when it drops them.
    fn into_inner(self) -> (Vec<u8>, u64) {
        (self.bytes, self.charged as u64)
    }
}

/// What the guest gets for the API server's answer `raw` to `p`: the object as served, or the
/// failure its `Status` names (the bare status when the body is not one).
fn answer(p: &Prepared, raw: Raw, memory: &CallMemory) -> KubeResult {
    let Raw {
        code,
        body,
        charged,
    } = raw;
    let result = answer_body(p, code, &body, memory);
    drop(body);
    memory.give_back(charged);
    result
}

/// [`answer`] for the bytes `body`, charging the text kept of them to `memory` before copying.
fn answer_body(p: &Prepared, code: u16, body: &[u8], memory: &CallMemory) -> KubeResult {
    if code >= 400 {
        if p.verb == "get" && code == 404 {
            return Ok(KubeAnswer { object: None, code });
        }
        return Err(match serde_json::from_slice::<kube::core::Status>(body) {
            // A `Status` without a code (some proxies) keeps the response's.
            Ok(s) => api_error(
                if s.code == 0 { code } else { s.code },
                &s.reason,
                s.message,
            ),
            Err(_) => api_error(
                code,
                "Unknown",
                format!("the API server answered {code} without a Status"),
            ),
        });
    }
    if p.verb == "delete" {
        return Ok(KubeAnswer { object: None, code });
    }
    let malformed = |e: &dyn std::fmt::Display| {
        api_error(
            500,
            "InternalError",
            format!("the API server answered with a malformed object: {e}"),
        )
    };
    let text = std::str::from_utf8(body).map_err(|e| malformed(&e))?;
    // The object keeps its own copy of the text (and a few hundred bytes of metadata).
    memory
        .charge(text.len() as u64)
        .map_err(|e| e.api_error())?;
    let t = &p.target;
    let obj = KubeObject::from_json_for(text.into(), &t.api_version, &t.kind, true)
        .map_err(|e| malformed(&e))?;
    Ok(KubeAnswer {
        object: Some(Arc::new(obj) as Arc<dyn GuestObject>),
        code,
    })
}

/// The HTTP request for `p` on the collection at `collection` (as [`resource_path`] gives it),
/// built by kube's [`Request`]: it writes the path, the query (`fieldManager`, `force`,
/// `dryRun`) and `DeleteOptions` as kube-rs does for its own calls. Writes carry the field manager
/// `kubewasm:<plugin>`; `host_dry_run` (or the guest's own option) makes them `dryRun=All`.
/// Takes the body out of `p` rather than copying up to `MAX_WRITE_BYTES`.
fn build_request(
    p: &mut Prepared,
    collection: &str,
    plugin: &str,
    host_dry_run: bool,
) -> Result<http::Request<Vec<u8>>, ApiError> {
    let r = Request::new(collection);
    let dry_run = host_dry_run || p.guest_dry_run;
    let field_manager = Some(format!("kubewasm:{plugin}"));
    let post = PostParams {
        dry_run,
        field_manager: field_manager.clone(),
    };
    let patch_params = |force| PatchParams {
        dry_run,
        force,
        field_manager: field_manager.clone(),
        field_validation: None,
    };
    // Every name reaching here passed `validate_name`; only a create may have none.
    let name = p.name.as_deref().unwrap_or_default();
    let sub = p.subresource.as_deref();
    let built = match std::mem::replace(&mut p.op, Op::Get) {
        Op::Get => r.get(name, &GetParams::default()),
        Op::Create(body) => r.create(&post, body),
        Op::Apply { body, force } => {
            let body = raw_json(body, "object")?;
            r.patch(name, &patch_params(force), &Patch::Apply(&*body))
        }
        Op::Patch(patch_type, body) => {
            let body = raw_json(body, "patch")?;
            // kube's `Patch::Json` wants the operations parsed into json-patch's types; the
            // guest's text goes to the server as written (the server judges the operations),
            // so it is built as a merge patch and relabelled.
            let patch = match patch_type {
                PatchType::Merge | PatchType::Json => Patch::Merge(&*body),
                PatchType::Strategic => Patch::Strategic(&*body),
            };
            let params = patch_params(false);
            let request = match sub {
                Some(sub) => r.patch_subresource(sub, name, &params, &patch),
                None => r.patch(name, &params, &patch),
            };
            request.map(|mut request| {
                if patch_type == PatchType::Json {
                    request.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json-patch+json"),
                    );
                }
                request
            })
        }
        Op::Replace(body) => match sub {
            Some(sub) => r.replace_subresource(sub, name, &post, body),
            None => r.replace(name, &post, body),
        },
        Op::Delete(uid) => {
            let params = DeleteParams {
                dry_run,
                preconditions: uid.map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            r.delete(name, &params)
        }
    };
    built.map_err(|e| bad_request(format!("cannot build the request: {e}")))
}

/// `json` as the server will get it, checked to be JSON (a patch's first check, after the grant
/// and rate checks; an object was parsed for its target already).
fn raw_json(json: String, what: &str) -> Result<Box<RawValue>, ApiError> {
    RawValue::from_string(json).map_err(|e| bad_request(format!("invalid JSON in {what}: {e}")))
}

/// `namespace/name` or `name`.
fn object_key(t: &ObjectRef) -> String {
    match &t.namespace {
        Some(ns) => format!("{ns}/{}", t.name),
        None => t.name.clone(),
    }
}

/// Longest uid precondition accepted (a uid is 36 characters; room for other formats).
const MAX_UID_LEN: usize = 253;

/// Kubernetes' name syntax for the objects a guest names: a DNS-1123 subdomain, the rule of
/// nearly every kind. It keeps out everything that could escape a path or a log (`/`, `%`,
/// `..`, spaces) and `:`, which the API server reads as proxy syntax (`http:web:80`).
fn validate_name(name: &str) -> Result<(), ValidationError> {
    validate_dns1123_subdomain(name)
}

/// Why a guest's subresource name was refused: only lowercase letters pass, so none can escape
/// the request path.
#[derive(Debug, thiserror::Error)]
#[error("must be 1-63 lowercase letters, e.g. status")]
struct BadSubresource;

fn validate_subresource(s: &str) -> Result<(), BadSubresource> {
    if s.is_empty() || s.len() > 63 || !s.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(BadSubresource);
    }
    Ok(())
}

/// Validates a target's strings; the error names the field and why, not the value.
fn validate_ref(t: &ObjectRef) -> Result<(), ApiError> {
    let field = |name: &str, r: Result<(), ValidationError>| {
        r.map_err(|why| bad_request(format!("invalid {name}: {why}")))
    };
    field("apiVersion", validate_api_version(&t.api_version))?;
    field("kind", validate_kind(&t.kind))?;
    if let Some(ns) = &t.namespace {
        field("namespace", validate_dns1123_label(ns))?;
    }
    Ok(())
}

/// The fields of a body that name its target; everything else is skipped unread (serde_json
/// checks its syntax without building it).
#[derive(serde::Deserialize)]
struct BodyHead {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<BodyMeta>,
}

#[derive(serde::Deserialize)]
struct BodyMeta {
    namespace: Option<String>,
    name: Option<String>,
}

/// What a JSON body names: apiVersion, kind, namespace, name (absent for `generateName`).
/// Reads only those four fields and checks the rest is JSON, building nothing else: the one
/// parse of a body, on the plugin's thread.
fn body_target(json: &str) -> Result<(ObjectRef, Option<String>), ApiError> {
    let head: BodyHead =
        serde_json::from_str(json).map_err(|e| bad_request(format!("invalid JSON: {e}")))?;
    let api_version = head
        .api_version
        .ok_or_else(|| bad_request("apiVersion is required".into()))?;
    let kind = head
        .kind
        .ok_or_else(|| bad_request("kind is required".into()))?;
    let (namespace, name) = head
        .metadata
        .map_or((None, None), |m| (m.namespace, m.name));
    let target = ObjectRef {
        api_version,
        kind,
        namespace,
        name: name.clone().unwrap_or_default(),
    };
    Ok((target, name))
}

/// Validates a call and turns it into what the request needs.
fn prepare(call: KubeCall) -> Result<Prepared, ApiError> {
    let verb = call.verb();
    let check_name =
        |n: &str| validate_name(n).map_err(|why| bad_request(format!("invalid name: {why}")));
    let check_sub = |s: &Option<String>| match s {
        Some(s) => validate_subresource(s)
            .map_err(|why| bad_request(format!("invalid subresource: {why}"))),
        None => Ok(()),
    };
    let base = |target: ObjectRef, name: Option<String>, op: Op| Prepared {
        verb,
        target,
        name,
        subresource: None,
        op,
        guest_dry_run: false,
    };
    let p = match call {
        KubeCall::Get(target) => {
            validate_ref(&target)?;
            check_name(&target.name)?;
            let name = Some(target.name.clone());
            base(target, name, Op::Get)
        }
        KubeCall::Create { json, opts } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            if let Some(n) = &name {
                check_name(n)?;
            }
            Prepared {
                guest_dry_run: opts.dry_run,
                ..base(target, None, Op::Create(json.into_bytes()))
            }
        }
        KubeCall::Apply { json, opts } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            let name = name.ok_or_else(|| bad_request("apply needs metadata.name".into()))?;
            check_name(&name)?;
            let op = Op::Apply {
                body: json,
                force: opts.force,
            };
            Prepared {
                guest_dry_run: opts.dry_run,
                ..base(target, Some(name), op)
            }
        }
        KubeCall::Patch {
            target,
            patch_type,
            patch,
            subresource,
            opts,
        } => {
            validate_ref(&target)?;
            check_name(&target.name)?;
            check_sub(&subresource)?;
            let op = Op::Patch(patch_type, patch);
            let name = Some(target.name.clone());
            Prepared {
                subresource,
                guest_dry_run: opts.dry_run,
                ..base(target, name, op)
            }
        }
        KubeCall::Replace {
            json,
            subresource,
            opts,
        } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            let name = name.ok_or_else(|| bad_request("replace needs metadata.name".into()))?;
            check_name(&name)?;
            check_sub(&subresource)?;
            Prepared {
                subresource,
                guest_dry_run: opts.dry_run,
                ..base(target, Some(name), Op::Replace(json.into_bytes()))
            }
        }
        KubeCall::Delete {
            target,
            uid_precondition,
        } => {
            validate_ref(&target)?;
            check_name(&target.name)?;
            let name = Some(target.name.clone());
            // The uid travels as a JSON string inside DeleteOptions, so any text is safe; it
            // is bounded like a name.
            if uid_precondition
                .as_ref()
                .is_some_and(|uid| uid.len() > MAX_UID_LEN)
            {
                return Err(bad_request("invalid uid precondition: too long".into()));
            }
            base(target, name, Op::Delete(uid_precondition))
        }
    };
    Ok(p)
}

#[cfg(test)]
mod tests;
