//! [`PluginClient`]: one plugin version's `kube` and `events` imports, carried out under its
//! grants through the host's kube `Client`.
//!
//! Every call is checked in this order, and the first failure answers the guest without
//! anything reaching the API server: the guest's strings (apiVersion, kind, namespace, name,
//! subresource, JSON) are validated; the grant for the verb, kind and namespace is looked up
//! (403 `Forbidden` when missing); a write takes a token from the plugin's bucket
//! (`write-qps`, `write-burst`), waiting for one if that fits the call's timeout and answering
//! 429 otherwise. Then the kind is resolved through discovery (cached), and the request is sent
//! on the host's runtime with a timeout of [`KUBE_CALL_TIMEOUT`]. Writes carry the field
//! manager `kubewasm:<plugin>` and, in dry-run mode (host `--dry-run`, manifest `dry-run`, or the
//! guest's own option), `dryRun=All`. Each write is logged once (plugin, verb, object, code) and
//! counted; object content never reaches a log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::ApiResource;
use kube::discovery::Scope;
use kubewasm_apimachinery::validation::{
    ValidationError, validate_api_version, validate_dns1123_label, validate_kind,
};
use parking_lot::Mutex;
use serde_json::Value;

use super::event_recorder::EventRecorder;
use crate::informer::{InformerError, KubeObject, resolve_kind, resource_path};
use crate::plugins::loading::grants::Grants;
use crate::plugins::metrics::{KubeRequestLabels, PluginMetrics, VerbLabels};
use crate::runtime::{
    ApiError, ClusterAccess, EventCall, GuestObject, KubeCall, KubeFuture, KubeResult, ObjectRef,
    PatchType, SharedObserver,
};
use crate::workqueue::BucketRateLimiter;

/// Longest one `kube` call may take, rate-limit wait included; the guest then gets a 504.
pub(crate) const KUBE_CALL_TIMEOUT: Duration = Duration::from_secs(10);

const TARGET: &str = "kubewasm::plugins::kube";

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
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .ok()
            .filter(|h| validate_dns1123_label(h).is_ok())
            .unwrap_or_else(|| "kubewasm".to_string());
        Arc::new(ClusterContext {
            client,
            host: tokio::runtime::Handle::current(),
            dry_run,
            kinds: Mutex::new(HashMap::new()),
            metrics,
            instance,
            observer,
        })
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

/// One plugin version's client: its grants, its write bucket and its Event recorder.
pub struct PluginClient {
    inner: Arc<Inner>,
    events: EventRecorder,
}

struct Inner {
    plugin: Arc<str>,
    ctx: Arc<ClusterContext>,
    grants: Arc<Grants>,
    writes: BucketRateLimiter,
    dry_run: bool,
}

impl PluginClient {
    /// A client for `plugin` acting within `grants`.
    pub fn new(plugin: &str, ctx: Arc<ClusterContext>, grants: Arc<Grants>) -> Self {
        let dry_run = ctx.dry_run || grants.dry_run();
        let events = EventRecorder::new(plugin, ctx.clone(), grants.events(), dry_run);
        PluginClient {
            inner: Arc::new(Inner {
                plugin: plugin.into(),
                writes: BucketRateLimiter::new(grants.write_qps(), grants.write_burst()),
                ctx,
                grants,
                dry_run,
            }),
            events,
        }
    }
}

impl ClusterAccess for PluginClient {
    /// The whole call runs on the host's runtime, never on the plugin's thread: the kube
    /// client's pooled connections are driven by tasks of the runtime that opened them, and a
    /// plugin's runtime stalls while its guest computes and ends when the plugin unloads.
    /// Dropping the returned future (the guest's call was abandoned) aborts the request.
    fn call(&self, call: KubeCall) -> KubeFuture {
        let observed = self
            .inner
            .ctx
            .observer
            .as_ref()
            .map(|o| (o.clone(), self.inner.plugin.clone(), call.clone()));
        let inner = self.inner.clone();
        let mut task = AbortOnDrop(
            self.inner
                .ctx
                .host
                .spawn(async move { inner.call(call).await }),
        );
        Box::pin(async move {
            let result = match (&mut task.0).await {
                Ok(result) => result,
                Err(e) => Err(api_error(
                    500,
                    "InternalError",
                    format!("request task failed: {e}"),
                )),
            };
            if let Some((observer, plugin, call)) = observed {
                observer.kube_request(&plugin, &call, result.as_ref().map(|_| ()));
            }
            result
        })
    }

    fn emit(&self, event: EventCall) {
        // What is not granted is dropped by the recorder and never written: not observed.
        if let Some(o) = &self.inner.ctx.observer
            && self.inner.grants.events()
        {
            o.event(&self.inner.plugin, &event);
        }
        self.events.emit(event);
    }
}

/// Aborts the host-side task of a call whose guest stopped waiting.
struct AbortOnDrop(tokio::task::JoinHandle<KubeResult>);

impl Drop for AbortOnDrop {
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
    method: http::Method,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    /// Delete only if the object still has this uid.
    uid_precondition: Option<String>,
    field_manager: bool,
    force: bool,
    guest_dry_run: bool,
}

impl Inner {
    async fn call(&self, call: KubeCall) -> KubeResult {
        let started = Instant::now();
        let verb = call.verb();
        let mut prepared = match prepare(call) {
            Ok(p) => p,
            Err(e) => {
                self.count(verb, e.code, started);
                return Err(e);
            }
        };
        let result = self.checked(&mut prepared).await;
        let code = match &result {
            Ok(_) => 200,
            Err(e) => e.code,
        };
        self.count(verb, code, started);
        if verb != "get" || code == 403 {
            let t = &prepared.target;
            let dry = if self.dry_run || prepared.guest_dry_run {
                " (dry run)"
            } else {
                ""
            };
            tracing::info!(target: TARGET, plugin = &*self.plugin, verb,
                object = %format_args!("{} {} {}", t.api_version, t.kind, object_key(t)),
                subresource = prepared.subresource.as_deref().unwrap_or(""),
                code, "plugin {verb}{dry}");
        }
        result
    }

    async fn checked(&self, p: &mut Prepared) -> KubeResult {
        let t = &p.target;
        let ns = t.namespace.as_deref();
        let granted = if p.verb == "get" {
            self.grants.allows_read(&t.api_version, &t.kind, ns)
        } else {
            self.grants
                .allows_write(&t.api_version, &t.kind, ns, p.verb)
        };
        if !granted {
            let place = ns.map_or("cluster-wide".to_string(), |n| format!("in namespace {n}"));
            return Err(ApiError::not_granted(
                &self.plugin,
                &format!("{} {} of {} {place}", p.verb, t.kind, t.api_version),
            ));
        }
        let deadline = tokio::time::Instant::now() + KUBE_CALL_TIMEOUT;
        if p.verb != "get" {
            let Some(wait) = self.writes.reserve_within(KUBE_CALL_TIMEOUT / 2) else {
                return Err(api_error(
                    429,
                    "TooManyRequests",
                    format!(
                        "client-side rate limit: plugin {} writes more than {} per second (burst {})",
                        self.plugin,
                        self.grants.write_qps(),
                        self.grants.write_burst()
                    ),
                ));
            };
            // A zero sleep would still wait for the timer wheel's next millisecond tick.
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        let (ar, namespaced) = self.ctx.resolve(&t.api_version, &t.kind).await?;
        match (namespaced, ns) {
            (true, None) => {
                return Err(bad_request(format!(
                    "{} is namespaced: the call must name a namespace",
                    t.kind
                )));
            }
            (false, Some(_)) => {
                return Err(bad_request(format!(
                    "{} is cluster-scoped: the call must not name a namespace",
                    t.kind
                )));
            }
            _ => {}
        }
        let request = self.request(p, &ar)?;
        let sent = tokio::time::timeout_at(deadline, self.ctx.client.request_text(request)).await;
        let text = match sent {
            Ok(Ok(text)) => text,
            Ok(Err(kube::Error::Api(s))) => {
                if p.verb == "get" && s.code == 404 {
                    return Ok(None);
                }
                return Err(api_error(s.code, &s.reason, s.message));
            }
            Ok(Err(e)) => {
                return Err(api_error(
                    503,
                    "ServiceUnavailable",
                    format!("API server unreachable: {e}"),
                ));
            }
            Err(_) => {
                return Err(api_error(
                    504,
                    "Timeout",
                    format!("no answer within {} s", KUBE_CALL_TIMEOUT.as_secs_f64()),
                ));
            }
        };
        if p.method == http::Method::DELETE {
            return Ok(None);
        }
        let t = &p.target;
        let obj = KubeObject::from_json_for(text.into_boxed_str(), &t.api_version, &t.kind, true)
            .map_err(|e| {
            api_error(
                500,
                "InternalError",
                format!("the API server answered with a malformed object: {e}"),
            )
        })?;
        Ok(Some(Arc::new(obj) as Arc<dyn GuestObject>))
    }

    /// The HTTP request for a prepared call against resource `ar`; takes the body out of `p`
    /// rather than copying up to `MAX_WRITE_BYTES`.
    fn request(
        &self,
        p: &mut Prepared,
        ar: &ApiResource,
    ) -> Result<http::Request<Vec<u8>>, ApiError> {
        let mut path = resource_path(
            ar,
            p.target.namespace.as_deref(),
            p.name.as_deref(),
            p.subresource.as_deref(),
        );
        // Every value below is fixed text or a validated plugin name: nothing needs escaping.
        let mut query = Vec::new();
        if p.field_manager {
            query.push(format!("fieldManager=kubewasm:{}", self.plugin));
        }
        if p.force {
            query.push("force=true".to_string());
        }
        let dry_run = self.dry_run || p.guest_dry_run;
        if dry_run && p.method != http::Method::DELETE && p.method != http::Method::GET {
            query.push("dryRun=All".to_string());
        }
        if !query.is_empty() {
            path.push('?');
            path.push_str(&query.join("&"));
        }
        let body = if p.method == http::Method::DELETE {
            let mut options = serde_json::json!({"apiVersion": "v1", "kind": "DeleteOptions"});
            if dry_run {
                options["dryRun"] = serde_json::json!(["All"]);
            }
            if let Some(uid) = &p.uid_precondition {
                options["preconditions"] = serde_json::json!({ "uid": uid });
            }
            serde_json::to_vec(&options).unwrap_or_default()
        } else {
            std::mem::take(&mut p.body)
        };
        let mut builder = http::Request::builder().method(p.method.clone()).uri(path);
        if let Some(ct) = p.content_type {
            builder = builder.header(http::header::CONTENT_TYPE, ct);
        } else if p.method == http::Method::DELETE {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
        }
        builder
            .body(body)
            .map_err(|e| bad_request(format!("cannot build the request: {e}")))
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

/// `namespace/name` or `name`.
fn object_key(t: &ObjectRef) -> String {
    match &t.namespace {
        Some(ns) => format!("{ns}/{}", t.name),
        None => t.name.clone(),
    }
}

/// Most bytes of an object name: a DNS subdomain's limit, the longest any kind allows.
const MAX_NAME_LEN: usize = 253;

/// The rule the API server applies to every name that goes into a path, made stricter so a
/// name can go into a URL and a log unescaped: printable ASCII without `/`, `%`, `?`, `#`,
/// whitespace or quotes, not `.` or `..`.
fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("longer than {MAX_NAME_LEN} bytes"));
    }
    if name == "." || name == ".." {
        return Err("may not be '.' or '..'".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !c.is_ascii_graphic() || "/%?#\"'\\".contains(*c))
    {
        return Err(format!("may not contain {c:?}"));
    }
    Ok(())
}

fn validate_subresource(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 || !s.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err("must be 1-63 lowercase letters, e.g. status".into());
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

/// What a JSON body names: apiVersion, kind, namespace, name (absent for `generateName`).
fn body_target(json: &str) -> Result<(ObjectRef, Option<String>), ApiError> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| bad_request(format!("invalid JSON: {e}")))?;
    let text = |v: Option<&Value>, what: &str| -> Result<Option<String>, ApiError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad_request(format!("{what} must be a string"))),
        }
    };
    let api_version = text(v.get("apiVersion"), "apiVersion")?
        .ok_or_else(|| bad_request("apiVersion is required".into()))?;
    let kind =
        text(v.get("kind"), "kind")?.ok_or_else(|| bad_request("kind is required".into()))?;
    let meta = v.get("metadata");
    let namespace = text(meta.and_then(|m| m.get("namespace")), "metadata.namespace")?;
    let name = text(meta.and_then(|m| m.get("name")), "metadata.name")?;
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
    let base = |target: ObjectRef, name: Option<String>, method: http::Method| Prepared {
        verb,
        target,
        name,
        subresource: None,
        method,
        content_type: None,
        body: Vec::new(),
        uid_precondition: None,
        field_manager: false,
        force: false,
        guest_dry_run: false,
    };
    let p = match call {
        KubeCall::Get(target) => {
            validate_ref(&target)?;
            check_name(&target.name)?;
            let name = Some(target.name.clone());
            base(target, name, http::Method::GET)
        }
        KubeCall::Create { json, opts } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            if let Some(n) = &name {
                check_name(n)?;
            }
            Prepared {
                content_type: Some("application/json"),
                body: json.into_bytes(),
                field_manager: true,
                guest_dry_run: opts.dry_run,
                ..base(target, None, http::Method::POST)
            }
        }
        KubeCall::Apply { json, opts } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            let name = name.ok_or_else(|| bad_request("apply needs metadata.name".into()))?;
            check_name(&name)?;
            Prepared {
                content_type: Some("application/apply-patch+yaml"),
                body: json.into_bytes(),
                field_manager: true,
                force: opts.force,
                guest_dry_run: opts.dry_run,
                ..base(target, Some(name), http::Method::PATCH)
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
            serde_json::from_str::<serde::de::IgnoredAny>(&patch)
                .map_err(|e| bad_request(format!("invalid JSON in patch: {e}")))?;
            let name = Some(target.name.clone());
            Prepared {
                subresource,
                content_type: Some(match patch_type {
                    PatchType::Merge => "application/merge-patch+json",
                    PatchType::Json => "application/json-patch+json",
                    PatchType::Strategic => "application/strategic-merge-patch+json",
                }),
                body: patch.into_bytes(),
                field_manager: true,
                guest_dry_run: opts.dry_run,
                ..base(target, name, http::Method::PATCH)
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
                content_type: Some("application/json"),
                body: json.into_bytes(),
                field_manager: true,
                guest_dry_run: opts.dry_run,
                ..base(target, Some(name), http::Method::PUT)
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
                .is_some_and(|uid| uid.len() > MAX_NAME_LEN)
            {
                return Err(bad_request("invalid uid precondition: too long".into()));
            }
            Prepared {
                uid_precondition,
                ..base(target, name, http::Method::DELETE)
            }
        }
    };
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::WriteOptions;

    #[test]
    fn names_that_could_escape_a_path_or_a_log_are_refused() {
        for bad in ["", ".", "..", "a/b", "a%2f", "a b", "a\nb", "a?x", "é"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        for good in ["web", "system:controller", "a.b-c_1"] {
            assert!(validate_name(good).is_ok(), "{good:?}");
        }
        assert!(validate_name(&"a".repeat(254)).is_err());
    }

    #[test]
    fn bodies_name_their_target_and_bad_ones_are_400() {
        let (t, name) = body_target(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"ns","name":"x"}}"#,
        )
        .unwrap();
        assert_eq!(
            (t.kind.as_str(), t.namespace.as_deref(), name.as_deref()),
            ("ConfigMap", Some("ns"), Some("x"))
        );
        for bad in [
            "{",
            r#"{"kind":"ConfigMap"}"#,
            r#"{"apiVersion":1,"kind":"X"}"#,
        ] {
            assert_eq!(body_target(bad).err().map(|e| e.code), Some(400), "{bad}");
        }
        let bad_ns = KubeCall::Get(ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("../x".into()),
            name: "a".into(),
        });
        assert_eq!(prepare(bad_ns).err().map(|e| e.code), Some(400));
    }

    #[test]
    fn verbs_map_to_methods_and_content_types() {
        let target = ObjectRef {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: Some("default".into()),
            name: "web".into(),
        };
        let p = prepare(KubeCall::Patch {
            target: target.clone(),
            patch_type: PatchType::Merge,
            patch: "{}".into(),
            subresource: Some("status".into()),
            opts: WriteOptions::default(),
        })
        .unwrap();
        assert_eq!(
            (p.method, p.content_type),
            (http::Method::PATCH, Some("application/merge-patch+json"))
        );
        let p = prepare(KubeCall::Apply {
            json: r#"{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"default","name":"web"}}"#.into(),
            opts: WriteOptions { dry_run: false, force: true },
        })
        .unwrap();
        assert!(p.force && p.field_manager);
        assert_eq!(p.content_type, Some("application/apply-patch+yaml"));
        let p = prepare(KubeCall::Delete {
            target,
            uid_precondition: Some("u-1".into()),
        })
        .unwrap();
        assert_eq!(p.method, http::Method::DELETE);
    }
}
