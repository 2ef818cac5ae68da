//! HTTP layer: path resolution, query parsing, bodies, content negotiation and responses.
//!
//! One fallback handler resolves every path itself, because Kubernetes paths are ambiguous
//! (`/api/v1/namespaces/x/configmaps` vs `/api/v1/namespaces/x/status`) and depend on the live registry.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode, header};
use rand::Rng;
use serde_json::{Value, json};

use crate::App;
use crate::authz;
use crate::deletion::{self, DeleteOpts, Deleted};
use crate::discovery;
use crate::openapi;
use crate::ops::{self, WriteOpts};
use crate::patch::{Patch, PatchKind};
use crate::registry::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector, Selectors, Shards};
use crate::status::{ApiError, ApiResult};
use crate::store::{Expired, Obj};
use crate::watch::{self, WatchSpec, WatchStart};
use kubewasm_apimachinery::ShardSelector;

/// Largest accepted request body (etcd's object size limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Parsed query string (last value wins; empty pairs skipped, as kube-rs sends `?&a=b`).
struct Query(HashMap<String, String>);

impl Query {
    fn parse(q: Option<&str>) -> Query {
        let mut m = HashMap::new();
        for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            m.insert(decode(k), decode(v));
        }
        Query(m)
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    fn flag(&self, k: &str) -> bool {
        self.get(k)
            .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    }
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    bytes_response(
        code,
        "application/json",
        Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
    )
}

fn bytes_response(code: StatusCode, ct: &'static str, body: Bytes) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

fn obj_response(code: StatusCode, obj: &Obj) -> Response {
    bytes_response(code, "application/json", obj.json.clone())
}

/// Entry point for every request: authenticated and authorized (`authz.rs`), served, and
/// recorded in the audit log when there is one.
pub async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    if path.starts_with("/_kubewasm/") {
        return fault_endpoint(&app, &req, &path);
    }
    let received = chrono::Utc::now();
    app.counters.request(req.method().as_str(), &path);
    let (identity, admitted) =
        authz::admit(&app, req.method(), &path, req.uri().query(), req.headers());
    let audit = app
        .config
        .audit
        .as_ref()
        .map(|sink| (sink, crate::audit::Request::new(&req, received, identity)));
    let resp = match admitted {
        Ok(()) => serve(&app, req, &path).await,
        Err(e) => e.into_response(),
    };
    if let Some((sink, request)) = audit {
        request.record(sink, resp.status().as_u16());
    }
    resp
}

/// An admitted request's response (faults first, when injected).
async fn serve(app: &Arc<App>, req: Request, path: &str) -> Response {
    let latency = app.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(code) = app.faults.take_failure() {
        let reason = if code == 429 {
            "TooManyRequests"
        } else {
            "InternalError"
        };
        let mut resp =
            ApiError::new(code, reason, format!("injected fault: {code}")).into_response();
        if code == 429 {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        return resp;
    }
    match dispatch(app, req, path).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn fault_endpoint(app: &App, req: &Request, path: &str) -> Response {
    if !app.config.enable_fault_endpoints || req.method() != Method::POST {
        return ApiError::unknown_path().into_response();
    }
    let q = Query::parse(req.uri().query());
    let n = q.get("n").and_then(|n| n.parse().ok()).unwrap_or(1usize);
    let f = &app.faults;
    match path.trim_start_matches("/_kubewasm/faults/") {
        "compact" => f.compact(),
        "end-watches" => f.end_watches(),
        "short-watches" => f.short_watches(n),
        "drop-streams" => f.drop_next_streams(n),
        "fail" => f.fail_next(
            n,
            q.get("status").and_then(|s| s.parse().ok()).unwrap_or(500),
        ),
        "latency" => f.set_latency(Duration::from_millis(
            q.get("ms").and_then(|s| s.parse().ok()).unwrap_or(0),
        )),
        _ => return ApiError::unknown_path().into_response(),
    }
    json_response(
        StatusCode::OK,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
}

/// Where a resource request points.
struct Target {
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<String>,
    status: bool,
    /// `…/{name}/scale`: the autoscaling/v1 `Scale` view (see `scale.rs`).
    scale: bool,
    force_watch: bool,
}

/// Serves one admitted request, in the order a real server resolves it: the non-resource
/// documents, the one subresource with a verb of its own (`serviceaccounts/{name}/token`), then a
/// resource (or its `scale` view) by verb.
async fn dispatch(app: &Arc<App>, req: Request, path: &str) -> ApiResult<Response> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let accept = header_or(&req, header::ACCEPT, "");
    if req.method() == Method::GET
        && let Some(resp) = non_resource(app, &segs, &accept)
    {
        return resp;
    }
    if let [
        "api",
        "v1",
        "namespaces",
        ns,
        "serviceaccounts",
        name,
        "token",
    ] = segs.as_slice()
        && req.method() == Method::POST
    {
        return token(app, ns, name, req).await;
    }
    let target = resolve(app, &segs).ok_or_else(|| unresolved(app, &segs))?;
    let call = Call::read(req, &accept).await?;
    let rt = &target.rt;
    if rt.namespaced && target.ns.is_none() && (target.name.is_some() || call.method != Method::GET)
    {
        return Err(ApiError::unknown_path());
    }
    if target.scale {
        return scale(app, &target, &call);
    }
    match (&call.method, target.name.as_deref()) {
        (&Method::GET, None) if target.force_watch || is_watch(&call.query) => {
            start_watch(app, &target, &call.query, None, call.table)
        }
        (&Method::GET, None) => list(app, &target, &call.query, call.table),
        (&Method::GET, Some(name)) => get(app, &target, &call, name),
        (&Method::POST, None) => {
            let v = parse_body(&call.body, &call.content_type)?;
            let opts = call.write_opts("CreateOptions")?;
            let obj = ops::create(app, rt, target.ns_or_empty(), v, &opts)?;
            Ok(obj_response(StatusCode::CREATED, &obj))
        }
        (&Method::PUT, Some(name)) => {
            let v = parse_body(&call.body, &call.content_type)?;
            let opts = call.write_opts("UpdateOptions")?;
            let obj = ops::update(app, rt, target.ns_or_empty(), name, v, target.status, &opts)?;
            Ok(obj_response(StatusCode::OK, &obj))
        }
        (&Method::PATCH, Some(name)) => {
            let patch = call.patch()?;
            let opts = call.write_opts("PatchOptions")?;
            let (obj, created) = ops::patch(
                app,
                rt,
                target.ns_or_empty(),
                name,
                patch,
                target.status,
                &opts,
            )?;
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(obj_response(code, &obj))
        }
        (&Method::DELETE, Some(name)) => delete(app, &target, &call, name),
        (&Method::DELETE, None) => delete_collection(app, &target, &call),
        (m, _) => Err(ApiError::method_not_allowed(
            &m.to_string().to_lowercase(),
            rt,
        )),
    }
}

/// A request header as text, or `default` when it is absent or not text.
fn header_or(req: &Request, name: header::HeaderName, default: &str) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(default)
        .to_string()
}

/// The discovery, OpenAPI and health documents a `GET` of `segs` names, if it names one.
fn non_resource(app: &App, segs: &[&str], accept: &str) -> Option<ApiResult<Response>> {
    let reg = app.registry.read();
    let doc = match segs {
        ["version"] => Some(discovery::version()),
        ["healthz"] | ["readyz"] | ["livez"] => {
            return Some(Ok(bytes_response(
                StatusCode::OK,
                "text/plain",
                Bytes::from_static(b"ok"),
            )));
        }
        ["api"] | ["apis"] if discovery::wants_aggregated(accept) => {
            let v = discovery::aggregated(&reg, segs[0] == "api");
            return Some(Ok(bytes_response(
                StatusCode::OK,
                discovery::AGGREGATED_CT,
                Bytes::from(serde_json::to_vec(&v).unwrap_or_default()),
            )));
        }
        ["api"] => Some(discovery::api_versions(&app.host)),
        ["apis"] => Some(discovery::api_group_list(&reg)),
        ["api", v] => discovery::resource_list(&reg, "", v),
        ["apis", g] => discovery::api_group(&reg, g),
        ["apis", g, v] => discovery::resource_list(&reg, g, v),
        ["openapi", "v3"] => Some(openapi::index(&reg)),
        ["openapi", "v3", "api", v] => openapi::group_version(&reg, "", v),
        ["openapi", "v3", "apis", g, v] => openapi::group_version(&reg, g, v),
        ["openapi", ..] => return Some(Err(ApiError::unknown_path())),
        _ => None,
    };
    doc.map(|d| Ok(json_response(StatusCode::OK, &d)))
}

/// `POST …/serviceaccounts/{name}/token`: a TokenRequest (see `authn.rs`).
async fn token(app: &App, ns: &str, name: &str, req: Request) -> ApiResult<Response> {
    let (ns, name) = (ns.to_string(), name.to_string());
    let content_type = header_or(&req, header::CONTENT_TYPE, "application/json");
    let body = parse_body(&read_body(req).await?, &content_type)?;
    let answer = crate::authn::token_request(
        &app.tokens,
        &app.store,
        &ns,
        &name,
        &body,
        chrono::Utc::now(),
    )?;
    Ok(json_response(StatusCode::CREATED, &answer))
}

/// What a resource request carries besides its path, read once (the body in full, bounded).
struct Call {
    method: Method,
    query: Query,
    content_type: String,
    user_agent: String,
    body: Bytes,
    /// The client asked for a `Table` (`kubectl get`).
    table: bool,
}

impl Call {
    async fn read(req: Request, accept: &str) -> ApiResult<Call> {
        let query = Query::parse(req.uri().query());
        let method = req.method().clone();
        let content_type = header_or(&req, header::CONTENT_TYPE, "application/json");
        let user_agent = header_or(&req, header::USER_AGENT, "");
        Ok(Call {
            method,
            query,
            content_type,
            user_agent,
            body: read_body(req).await?,
            table: crate::table::wants_table(accept),
        })
    }

    fn write_opts(&self, options_kind: &str) -> ApiResult<WriteOpts> {
        write_opts(&self.query, &self.user_agent, options_kind)
    }

    /// The body as a patch of the kind its content type names (apply patches are YAML).
    fn patch(&self) -> ApiResult<Patch> {
        let kind = PatchKind::from_content_type(&self.content_type)
            .ok_or_else(ApiError::unsupported_media_type)?;
        let ct = if kind == PatchKind::Apply {
            "application/yaml"
        } else {
            "application/json"
        };
        Ok(Patch {
            kind,
            body: parse_body(&self.body, ct)?,
        })
    }
}

impl Target {
    /// The namespace an item request names (`""` for cluster-scoped resources).
    fn ns_or_empty(&self) -> &str {
        self.ns.as_deref().unwrap_or_default()
    }
}

/// `…/{name}/scale`: read, replace or patch the `Scale` view (see `scale.rs`).
fn scale(app: &App, target: &Target, call: &Call) -> ApiResult<Response> {
    let (rt, ns) = (&target.rt, target.ns_or_empty());
    let name = target.name.as_deref().unwrap_or_default();
    let scale = match call.method {
        Method::GET => crate::scale::get(app, rt, ns, name)?,
        Method::PUT => {
            let v = parse_body(&call.body, &call.content_type)?;
            crate::scale::update(app, rt, ns, name, v, &call.write_opts("UpdateOptions")?)?
        }
        Method::PATCH => {
            let patch = call.patch()?;
            crate::scale::patch(app, rt, ns, name, patch, &call.write_opts("PatchOptions")?)?
        }
        ref m => {
            return Err(ApiError::method_not_allowed(
                &m.to_string().to_lowercase(),
                rt,
            ));
        }
    };
    Ok(json_response(StatusCode::OK, &scale))
}

/// `GET` of one object: a watch of it when asked, else the object (or its `Table` row).
fn get(app: &App, target: &Target, call: &Call, name: &str) -> ApiResult<Response> {
    if target.force_watch || is_watch(&call.query) {
        return start_watch(app, target, &call.query, Some(name), call.table);
    }
    let rt = &target.rt;
    let obj = app
        .store
        .get(&rt.storage_key(), target.ns_or_empty(), name)
        .map(|o| crate::events::view(rt, &o))
        .ok_or_else(|| ApiError::not_found(rt, name))?;
    if call.table {
        let meta = json!({"resourceVersion": obj.rv.to_string()});
        return Ok(json_response(
            StatusCode::OK,
            &crate::table::table(rt, meta, std::iter::once(&obj.value), true),
        ));
    }
    Ok(obj_response(StatusCode::OK, &obj))
}

/// `DELETE` of one object: the object while finalizers hold it, else the object or a `Status`
/// as the resource's kind returns (see `ResourceType::return_deleted_object`).
fn delete(app: &App, target: &Target, call: &Call, name: &str) -> ApiResult<Response> {
    let rt = &target.rt;
    let opts = delete_opts(&call.body, &call.query)?;
    match deletion::delete(app, rt, target.ns_or_empty(), name, &opts)? {
        Deleted::Terminating(obj) => Ok(obj_response(StatusCode::OK, &obj)),
        Deleted::Gone(obj) if rt.return_deleted_object => Ok(obj_response(StatusCode::OK, &obj)),
        Deleted::Gone(obj) => {
            let mut details = json!({"name": name, "kind": rt.plural,
                "uid": obj.value.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)});
            if !rt.group.is_empty() {
                details["group"] = json!(rt.group);
            }
            Ok(json_response(
                StatusCode::OK,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
            ))
        }
    }
}

/// `DELETE` of a collection: every object the selectors match, one by one; the answer lists
/// what was deleted (an object gone meanwhile is skipped).
fn delete_collection(app: &App, target: &Target, call: &Call) -> ApiResult<Response> {
    let rt = &target.rt;
    let opts = delete_opts(&call.body, &call.query)?;
    let selectors = selectors(app, rt, &call.query)?;
    let (rv, items) = app.store.list(&rt.storage_key(), target.ns.as_deref());
    let mut deleted = Vec::new();
    for item in items.iter().filter(|o| selectors.matches(&o.value)) {
        let field = |p: &str| item.value.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (ns, name) = (field("/metadata/namespace"), field("/metadata/name"));
        match deletion::delete(app, rt, ns, name, &opts) {
            Ok(Deleted::Gone(o)) | Ok(Deleted::Terminating(o)) => deleted.push(o),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(list_response(
        rt,
        app.store.current_rv().max(rv),
        None,
        None,
        &deleted,
        &Selectors::default(),
        false,
    ))
}

fn resolve(app: &App, segs: &[&str]) -> Option<Target> {
    let (group, version, rest) = match segs {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (force_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let reg = app.registry.read();
    let (ns, plural, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if reg
                .find(group, version, plural)
                .is_some_and(|t| t.namespaced) =>
        {
            (Some(ns.to_string()), *plural, tail)
        }
        [plural, tail @ ..] => (None, *plural, tail),
        [] => return None,
    };
    let rt = reg.find(group, version, plural)?;
    let (name, status, scale) = match tail {
        [] => (None, false, false),
        [name] => (Some(name.to_string()), false, false),
        [name, "status"] if rt.status_subresource => (Some(name.to_string()), true, false),
        [name, "scale"] if rt.scale_subresource => (Some(name.to_string()), false, true),
        _ => return None,
    };
    Some(Target {
        rt,
        ns,
        name,
        status,
        scale,
        force_watch,
    })
}

/// The error for a path `resolve` found nothing at: an unserved resource names what is served.
fn unresolved(app: &App, segs: &[&str]) -> ApiError {
    let (group, version, rest) = match segs {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return ApiError::unknown_path(),
    };
    let rest = rest.strip_prefix(&["watch"]).unwrap_or(rest);
    let plural = match rest {
        ["namespaces", _, plural, ..] => *plural,
        [plural, ..] => *plural,
        [] => return ApiError::unknown_path(),
    };
    let reg = app.registry.read();
    if reg.find(group, version, plural).is_some() {
        return ApiError::unknown_path();
    }
    let served: Vec<String> = reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .map(|t| t.plural.clone())
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    ApiError::unserved_resource(&gv, plural, &served)
}

fn is_watch(q: &Query) -> bool {
    match q.get("watch") {
        None => false,
        Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
    }
}

async fn read_body(req: Request) -> ApiResult<Bytes> {
    let too_large = || {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    };
    // Read (and discard) an oversized body before answering, so the client sees the 413 instead of a broken
    // pipe while it is still sending.
    let mut body = req.into_body().into_data_stream();
    let mut buf = BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = futures::StreamExt::next(&mut body).await {
        let chunk =
            chunk.map_err(|e| ApiError::bad_request(format!("error reading request body: {e}")))?;
        seen += chunk.len();
        if seen > MAX_BODY {
            if seen > 16 * MAX_BODY {
                break;
            }
            continue;
        }
        buf.extend_from_slice(&chunk);
    }
    if seen > MAX_BODY {
        return Err(too_large());
    }
    Ok(buf.freeze())
}

/// Decode a JSON (or, for YAML content types, YAML) request body.
fn parse_body(body: &Bytes, content_type: &str) -> ApiResult<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    let base = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if crate::protobuf::is_protobuf(&base) {
        return crate::protobuf::decode(body);
    }
    if base.contains("protobuf") || base.contains("cbor") {
        return Err(ApiError::unsupported_media_type());
    }
    if base.contains("yaml") {
        return serde_yaml::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    serde_json::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))
}

fn write_opts(q: &Query, user_agent: &str, options_kind: &str) -> ApiResult<WriteOpts> {
    Ok(WriteOpts {
        dry_run: dry_run(q, options_kind)?,
        field_manager: q.get("fieldManager").map(str::to_string),
        force: q.flag("force"),
        // What the real server names a write that names no manager: `kubectl/v1.32 (…)` → `kubectl`.
        default_manager: user_agent.split('/').next().unwrap_or("").to_string(),
    })
}

/// `dryRun=All`, the only value the real server accepts: anything else is refused rather than
/// taken as a real write.
fn dry_run(q: &Query, options_kind: &str) -> ApiResult<bool> {
    match q.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::invalid_options(
            options_kind,
            "dryRun",
            &format!("Unsupported value: \"{other}\": supported values: \"All\""),
        )),
    }
}

fn delete_opts(body: &Bytes, q: &Query) -> ApiResult<DeleteOpts> {
    let query = |k: &str| q.get(k).map(str::to_string);
    DeleteOpts::parse(body, &query, dry_run(q, "DeleteOptions")?)
}

fn selectors(app: &App, rt: &ResourceType, q: &Query) -> ApiResult<Selectors> {
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), &rt.group, &rt.kind)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    // A server without sharding (before 1.36, or the gate off) ignores the parameter whole.
    let shards = match q.get("shardSelector") {
        Some(text) if app.config.shard_selector => Some(Shards {
            selector: ShardSelector::parse(text).map_err(ApiError::bad_request)?,
            text: text.to_string(),
        }),
        _ => None,
    };
    Ok(Selectors {
        labels,
        fields,
        shards,
    })
}

fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

/// A continue token: base64 JSON, `sid` names a retained snapshot (absent for "inconsistent" tokens).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: u64,
    start: (String, String),
    #[serde(skip_serializing_if = "Option::is_none", default)]
    sid: Option<u64>,
    #[serde(default)]
    off: usize,
}

impl ContinueToken {
    fn encode(&self) -> String {
        base64::engine::general_purpose::STANDARD
            .encode(serde_json::to_vec(self).unwrap_or_default())
    }
    fn decode(s: &str) -> ApiResult<ContinueToken> {
        let bad = || {
            ApiError::bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion",
            )
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|_| bad())?;
        serde_json::from_slice(&raw).map_err(|_| bad())
    }
}

fn key_of(o: &Obj) -> (String, String) {
    let m = o.value.get("metadata");
    let s = |k: &str| {
        m.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (s("namespace"), s("name"))
}

fn list(app: &App, target: &Target, q: &Query, table: bool) -> ApiResult<Response> {
    let rt = &target.rt;
    app.counters.list(&rt.plural);
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let rvm = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let cont = q.get("continue").filter(|s| !s.is_empty());
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    if q.get("sendInitialEvents").is_some() {
        return Err(ApiError::invalid_options(
            "ListOptions",
            "sendInitialEvents",
            "Forbidden: sendInitialEvents is forbidden for list",
        ));
    }
    if let Some(m) = rvm {
        if rv.is_none() {
            return Err(ApiError::invalid_options(
                "ListOptions",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if cont.is_some() {
            return Err(ApiError::invalid_options(
                "ListOptions",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            return Err(ApiError::invalid_options(
                "ListOptions",
                "resourceVersionMatch",
                &format!("Unsupported value: \"{m}\""),
            ));
        }
        if m == "Exact" && rv == Some("0") {
            return Err(ApiError::invalid_options(
                "ListOptions",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    let sel = selectors(app, rt, q)?;
    let res = rt.storage_key();
    let ns = target.ns.as_deref();
    if let Some(tok) = cont {
        if rv.is_some_and(|r| r != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let t = ContinueToken::decode(tok)?;
        let (list_rv, items, off) = match t
            .sid
            .and_then(|sid| app.store.snapshot(sid).map(|s| (sid, s)))
        {
            Some((_, (srv, items))) => (srv, items, t.off),
            None if t.sid.is_some() => {
                let fresh = ContinueToken {
                    v: t.v.clone(),
                    rv: app.store.current_rv(),
                    start: t.start.clone(),
                    sid: None,
                    off: 0,
                };
                let mut e = ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                );
                e.metadata = Some(json!({"continue": fresh.encode()}));
                return Err(e);
            }
            None => {
                let (crv, all) = app.store.list(&res, ns);
                let items: Vec<Arc<Obj>> = all
                    .into_iter()
                    .filter(|o| key_of(o) > t.start && sel.matches(&o.value))
                    .collect();
                (crv, Arc::new(items), 0)
            }
        };
        let source = PageSource {
            rv: list_rv,
            items,
            off,
            sid: t.sid,
        };
        return Ok(page(app, rt, source, limit, &sel, table));
    }
    let exact = match (rv, rvm) {
        (Some(r), Some("Exact")) => Some(parse_rv(r)?),
        (Some(r), None) if r != "0" && limit > 0 => Some(parse_rv(r)?),
        (Some(r), _) => {
            parse_rv(r)?;
            None
        }
        _ => None,
    };
    let (list_rv, all) = match exact {
        Some(x) => app.store.list_at(&res, ns, x).map_err(|e: Expired| {
            ApiError::expired(format!(
                "too old resource version: {} ({})",
                e.requested, e.oldest
            ))
        })?,
        None => app.store.list(&res, ns),
    };
    let items: Vec<Arc<Obj>> = if sel.is_empty() {
        all
    } else {
        all.into_iter().filter(|o| sel.matches(&o.value)).collect()
    };
    let source = PageSource {
        rv: list_rv,
        items: Arc::new(items),
        off: 0,
        sid: None,
    };
    Ok(page(app, rt, source, limit, &sel, table))
}

/// The list a [`page`] is cut from: what a first list call matched or what a continue token
/// points into, kept together since a continue token records all of it.
struct PageSource {
    /// The resourceVersion the items were listed at.
    rv: u64,
    /// Every matching item, in key order.
    items: Arc<Vec<Arc<Obj>>>,
    /// Index of the page's first item.
    off: usize,
    /// The saved snapshot the items come from, if one was saved already.
    sid: Option<u64>,
}

fn page(
    app: &App,
    rt: &ResourceType,
    source: PageSource,
    limit: usize,
    sel: &Selectors,
    table: bool,
) -> Response {
    let PageSource {
        rv,
        items,
        off,
        sid,
    } = source;
    let off = off.min(items.len());
    let end = if limit == 0 {
        items.len()
    } else {
        (off + limit).min(items.len())
    };
    let slice = &items[off..end];
    if end >= items.len() {
        if let Some(id) = sid {
            app.store.drop_snapshot(id);
        }
        return list_response(rt, rv, None, None, slice, sel, table);
    }
    let sid = sid.unwrap_or_else(|| app.store.save_snapshot(rv, items.clone()));
    let last = slice.last().map(|o| key_of(o)).unwrap_or_default();
    let token = ContinueToken {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: last,
        sid: Some(sid),
        off: end,
    };
    let remaining = if sel.is_empty() {
        Some(items.len() - end)
    } else {
        None
    };
    list_response(rt, rv, Some(token.encode()), remaining, slice, sel, table)
}

fn list_response(
    rt: &ResourceType,
    rv: u64,
    cont: Option<String>,
    remaining: Option<usize>,
    items: &[Arc<Obj>],
    sel: &Selectors,
    table: bool,
) -> Response {
    let converted: Vec<Arc<Obj>>;
    let items = if crate::events::is_events_v1(rt) {
        converted = items.iter().map(|o| crate::events::view(rt, o)).collect();
        &converted[..]
    } else {
        items
    };
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        meta["remainingItemCount"] = json!(r);
    }
    // The echo is how a client learns the server filtered (an older one sends everything).
    if let Some(shards) = &sel.shards {
        meta["shardInfo"] = json!({"selector": shards.text});
    }
    if table {
        let t = crate::table::table(rt, meta, items.iter().map(|o| &o.value), true);
        return json_response(StatusCode::OK, &t);
    }
    let head = json!({"kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": meta});
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let total: usize = items.iter().map(|o| o.json.len() + 1).sum();
    let mut buf = BytesMut::with_capacity(head.len() + total + 16);
    buf.extend_from_slice(&head[..head.len() - 1]);
    buf.extend_from_slice(b",\"items\":[");
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            buf.extend_from_slice(b",");
        }
        buf.extend_from_slice(&o.json);
    }
    buf.extend_from_slice(b"]}");
    bytes_response(StatusCode::OK, "application/json", buf.freeze())
}

fn start_watch(
    app: &App,
    target: &Target,
    q: &Query,
    name: Option<&str>,
    table: bool,
) -> ApiResult<Response> {
    let rt = target.rt.clone();
    app.counters.watch(&rt.plural);
    let mut sel = selectors(app, &rt, q)?;
    if sel.shards.is_some() && app.faults.take_unsharded() {
        sel.shards = None;
    }
    if let Some(n) = name {
        match sel.fields.name() {
            Some(other) if other != n => {
                return Err(ApiError::bad_request(
                    "fieldSelector metadata.name doesn't match requested name",
                ));
            }
            Some(_) => {}
            None => sel.fields.push_name(n),
        }
    }
    let send_initial = q.flag("sendInitialEvents");
    let rvm = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    if q.get("sendInitialEvents").is_some() {
        if rvm != Some("NotOlderThan") {
            return Err(ApiError::invalid_options(
                "ListOptions",
                "resourceVersionMatch",
                "Invalid value: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
    } else if rvm.is_some() {
        return Err(ApiError::invalid_options(
            "ListOptions",
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let start = match q
        .get("resourceVersion")
        .filter(|s| !s.is_empty() && *s != "0")
    {
        None => WatchStart::CurrentState,
        Some(r) => WatchStart::After(parse_rv(r)?),
    };
    // `sendInitialEvents=false` explicitly asks for no synthetic events, whatever the RV.
    let start = match start {
        WatchStart::CurrentState if q.get("sendInitialEvents").is_some() && !send_initial => {
            WatchStart::After(app.store.current_rv())
        }
        other => other,
    };
    let timeout = match q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()) {
        Some(t) if t > 0 => Duration::from_secs(t),
        _ => Duration::from_secs(rand::rng().random_range(1800..3600)),
    };
    let spec = WatchSpec {
        rt,
        ns: target.ns.clone(),
        selectors: sel,
        start,
        bookmarks: q.flag("allowWatchBookmarks"),
        send_initial,
        timeout,
        bookmark_interval: app.config.bookmark_interval,
        table,
    };
    let body = watch::start(app.store.clone(), &app.faults, spec);
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let t = ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv: 42,
            start: ("default".into(), "cm-7".into()),
            sid: Some(3),
            off: 500,
        };
        let back = ContinueToken::decode(&t.encode()).unwrap();
        assert_eq!(
            (back.rv, back.sid, back.off, back.start),
            (42, Some(3), 500, t.start.clone())
        );
        assert_eq!(ContinueToken::decode("not-base64!").unwrap_err().code, 400);
    }

    #[test]
    fn query_parsing_tolerates_kube_rs_forms() {
        let q = Query::parse(Some("&limit=500&labelSelector=a%20in%20(x%2Cy)&watch"));
        assert_eq!(q.get("limit"), Some("500"));
        assert_eq!(q.get("labelSelector"), Some("a in (x,y)"));
        assert!(is_watch(&q), "an empty watch value means true");
        assert!(!is_watch(&Query::parse(Some("watch=false"))));
        assert!(is_watch(&Query::parse(Some("watch=1"))));
    }
}
