//! [`HttpHooks`]: the host's side of a 0.2.0 handler's outbound `wasi:http` requests.
//!
//! wasmtime-wasi-http builds the request from the guest's resources first (it refuses forbidden
//! headers such as `Host`, a scheme other than http/https, invalid methods). Then, in order:
//!
//! 1. the request URI must name an origin (`http` or `https`, a host, no user info);
//! 2. the plugin's [`HttpGate`](super::HttpGate) must grant that origin (`HTTP-request-denied`);
//! 3. in dry run only GET and HEAD go out (`internal-error("… (dry run) …")`);
//! 4. the request takes a place among the plugin's `http-max-inflight` and the host's open
//!    requests ([`ConnectionPermit`]), or fails with `internal-error("connection limit
//!    reached: …")`; the place is held until its connection closes;
//! 5. the host name is resolved here, and every address is checked
//!    ([`Origin::may_reach`]): internal and metadata addresses only when the grant names them
//!    (`destination-IP-prohibited` if no address is left); the connection goes to a checked
//!    address, so a second lookup cannot answer differently;
//! 6. [`http_client::send`] sends it, with per-step timeouts and a response-size cap.
//!
//! With a stub in the policy (the scenario runner's), an interceptor answers after step 3 instead
//! of steps 4–6. The steps are stages of one exchange, each ending it with a refusal or passing it
//! on; how it ended is counted and logged in one place, after the last stage.
//!
//! Nothing a call started outlives it: when the call returns, every request it sent that is
//! still connecting or waiting is failed and every connection it opened is closed (their
//! resources stay in the guest's table, failed), so a guest cannot carry connections from one
//! call to the next.
//!
//! Logs name the plugin, the origin (scheme, host and port of a parsed URI, never path, query,
//! headers or bodies) and the result; a guest can repeat a request at will, so every such line
//! takes a token from the plugin's [`GuestCausedLog`]. Each exchange is counted once, when it
//! ends.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::guest_caused::GuestCausedLog;
use super::host_wait::{HostWait, HostWaitGuard};
use super::http_bounds::{ConnectionPermit, Refused};
use super::http_client::{self, BodyEnd, Exchange, Timeouts};
use super::http_policy::{BadUri, HttpPolicy, Origin};
use super::metrics::RuntimeMetrics;
use super::observer::{HttpExchange, SharedObserver};

const RUNTIME_TARGET: &str = "kubewasm::runtime";

/// Per-instance `wasi:http` policy.
pub(crate) struct HttpHooks {
    plugin: Arc<str>,
    lines: GuestCausedLog,
    policy: HttpPolicy,
    wait: HostWait,
    metrics: RuntimeMetrics,
    observer: Option<SharedObserver>,
    open_gauge: Gauge,
    /// Cancelled when the current call ends; replaced only after a call that sent a request.
    call: CancellationToken,
    sent_this_call: bool,
    /// The replica's fence: no request leaves while it is closed.
    shard: Arc<dyn super::shard::ShardView>,
}

impl HttpHooks {
    pub(crate) fn new(
        plugin: Arc<str>,
        lines: GuestCausedLog,
        policy: HttpPolicy,
        wait: HostWait,
        metrics: RuntimeMetrics,
        observer: Option<SharedObserver>,
    ) -> Self {
        Self {
            open_gauge: metrics.http_open_gauge(&plugin),
            plugin,
            lines,
            policy,
            wait,
            metrics,
            observer,
            call: CancellationToken::new(),
            sent_this_call: false,
            shard: super::shard::not_sharded(),
        }
    }

    /// The call (or start-up) ended: fails its requests still under way and closes its
    /// connections.
    pub(crate) fn end_call(&mut self) {
        if std::mem::take(&mut self.sent_this_call) {
            self.call.cancel();
            self.call = CancellationToken::new();
        }
    }
}

/// What `send_request` hands back: the response and a future for errors after the headers.
type SendFuture = Box<dyn Future<Output = wasmtime_wasi_http::Result<Exchange>> + Send>;

/// One exchange's context, moved into the task wasmtime-wasi-http runs it in.
struct Outbound {
    plugin: Arc<str>,
    lines: GuestCausedLog,
    policy: HttpPolicy,
    wait: HostWait,
    metrics: RuntimeMetrics,
    open_gauge: Gauge,
    call: CancellationToken,
    started: Instant,
}

/// How an exchange that got a response ended its stages.
enum Answered {
    /// The stub answered ([`intercept`]); counted now, by its status.
    Stubbed { exchange: Exchange, label: String },
    /// The response headers came; counted when the body ends.
    Sent {
        sent: http_client::Sent,
        origin: Origin,
        label: String,
        permit: Option<ConnectionPermit>,
    },
}

/// How an exchange that got no response ended: the error the guest gets, the `origin` and
/// `code` labels it is counted with, and what is logged.
struct Refusal {
    error: Error,
    /// The origin's label, or `denied` when the request has none or it is not granted.
    label: String,
    code: &'static str,
    why: Why,
}

/// Which log line a [`Refusal`] writes (and what else is recorded with it).
enum Why {
    /// The request failed: logged with its error, and its latency observed.
    Failed,
    /// The gate does not grant the origin (step 2).
    NotGranted(Origin),
    /// No place among the open requests (step 4), refused by `bound`.
    Limit {
        origin: Origin,
        bound: &'static str,
        message: String,
    },
    /// Every resolved address is one the grant does not name (step 5).
    IpDenied { origin: Origin, refused: String },
}

/// What a stage returns: its result, or how it ended the exchange (boxed: refusals are rare and
/// large).
type Stage<T> = Result<T, Box<Refusal>>;

impl Refusal {
    fn failed(label: &str, code: &'static str, error: Error) -> Box<Self> {
        Box::new(Self {
            error,
            label: label.to_owned(),
            code,
            why: Why::Failed,
        })
    }
}

/// What an exchange holds while its stages run. [`Outbound::run`] drops it only after the
/// outcome is recorded, so a refused request keeps its place (and its wait, until the stages
/// close it) until it is counted. Fields drop in this order.
#[derive(Default)]
struct Held {
    waiting: Option<HostWaitGuard>,
    permit: Option<ConnectionPermit>,
}

impl Outbound {
    /// Runs the stages, then counts and logs how the exchange ended (the only place that does).
    async fn run(
        self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<Exchange, Error> {
        let mut held = Held::default();
        let ended = self.stages(request, options, &mut held).await;
        let result = match ended {
            Ok(answered) => Ok(self.answered(answered)),
            Err(refusal) => Err(self.refused(*refusal)),
        };
        drop(held);
        result
    }

    /// Steps 1–6 of the module documentation, in order.
    async fn stages(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        held: &mut Held,
    ) -> Stage<Answered> {
        let origin = origin_of(request.uri())?;
        self.granted(&origin)?;
        let label = self.policy.origin_label(&origin);
        self.dry_run(&origin, &label, request.method())?;
        if let Some(stub) = self.policy.stub.clone() {
            return intercept(stub, &self.plugin, request, label).await;
        }
        held.permit = self.permit(&origin, &label)?;
        let timeouts = self.timeouts(options);
        // From here on the guest waits for the network: until the response headers (the body
        // has its own account, see `http_client::CappedBody`).
        held.waiting = Some(self.wait.enter());
        let allowed = self.reachable(&origin, &label, timeouts.connect).await?;
        let sent = http_client::send(
            &origin,
            &allowed,
            request,
            timeouts,
            self.policy.max_response_bytes,
            self.wait.clone(),
        )
        .await;
        held.waiting = None;
        let sent = sent.map_err(|e| Refusal::failed(&label, error_kind(&e), e))?;
        Ok(Answered::Sent {
            sent,
            origin,
            label,
            permit: held.permit.take(),
        })
    }

    /// Step 2: the plugin's gate grants the origin.
    fn granted(&self, origin: &Origin) -> Stage<()> {
        if origin.granted(&*self.policy.gate) {
            return Ok(());
        }
        Err(Box::new(Refusal {
            error: Error::HttpRequestDenied,
            label: "denied".to_owned(),
            code: "denied",
            why: Why::NotGranted(origin.clone()),
        }))
    }

    /// Step 3: in dry run only GET and HEAD go out.
    fn dry_run(&self, origin: &Origin, label: &str, method: &http::Method) -> Stage<()> {
        if !self.policy.dry_run || method == http::Method::GET || method == http::Method::HEAD {
            return Ok(());
        }
        let msg = format!(
            "{origin}: {} refused (dry run): only GET and HEAD requests are sent",
            short(method.as_str())
        );
        Err(Refusal::failed(
            label,
            "dry_run",
            Error::InternalError(Some(msg)),
        ))
    }

    /// Step 4: the request's place among the open ones (none for a benchmark baseline).
    fn permit(&self, origin: &Origin, label: &str) -> Stage<Option<ConnectionPermit>> {
        if !self.policy.bounded {
            return Ok(None);
        }
        let host = self.policy.host_connections.as_ref();
        ConnectionPermit::take(self.policy.inflight(), host, &self.open_gauge)
            .map(Some)
            .map_err(|refused: Refused| {
                let message = refused.message();
                Box::new(Refusal {
                    error: Error::InternalError(Some(message.clone())),
                    label: label.to_owned(),
                    code: "limit",
                    why: Why::Limit {
                        origin: origin.clone(),
                        bound: refused.bound(),
                        message,
                    },
                })
            })
    }

    /// The guest's timeouts, each no longer than the host's.
    fn timeouts(&self, options: Option<RequestOptions>) -> Timeouts {
        let host = self.policy.timeout;
        let options = options.unwrap_or_default();
        Timeouts {
            connect: shorter(options.connect_timeout, host),
            first_byte: shorter(options.first_byte_timeout, host),
            between_bytes: shorter(options.between_bytes_timeout, host),
        }
    }

    /// Step 5: the origin's addresses that it may reach, looked up within `timeout`.
    async fn reachable(
        &self,
        origin: &Origin,
        label: &str,
        timeout: std::time::Duration,
    ) -> Stage<Vec<SocketAddr>> {
        let policy = &self.policy;
        let lookup = resolve(origin, policy.resolver.as_deref());
        let addrs = match tokio::time::timeout(timeout, lookup).await {
            Err(_) => return Err(Refusal::failed(label, "timeout", Error::DnsTimeout)),
            Ok(Err(e)) => return Err(Refusal::failed(label, "dns", e)),
            Ok(Ok(addrs)) => addrs,
        };
        let mut refused = Vec::new();
        let allowed: Vec<SocketAddr> = addrs
            .iter()
            .copied()
            .filter(
                |a| match origin.may_reach(a.ip(), &*policy.gate, &policy.cluster_api) {
                    Ok(()) => true,
                    Err(class) => {
                        refused.push(format!("{} ({class})", a.ip()));
                        false
                    }
                },
            )
            .collect();
        if !allowed.is_empty() {
            return Ok(allowed);
        }
        Err(Box::new(Refusal {
            error: Error::DestinationIpProhibited,
            label: label.to_owned(),
            code: "ip_denied",
            why: Why::IpDenied {
                origin: origin.clone(),
                refused: refused.join(", "),
            },
        }))
    }

    /// Records an exchange that got a response; a sent one is counted when its body ends, and
    /// its connection closes then or when the call that sent it ends, giving its place back.
    fn answered(self, answered: Answered) -> Exchange {
        let (sent, origin, label, permit) = match answered {
            Answered::Stubbed { exchange, label } => {
                let status = exchange.0.status().as_u16().to_string();
                self.metrics.http_request(&self.plugin, &label, &status);
                return exchange;
            }
            Answered::Sent {
                sent,
                origin,
                label,
                permit,
            } => (sent, origin, label, permit),
        };
        let status = sent.status();
        let plugin = &*self.plugin;
        if debug_enabled() && self.lines.admit() {
            tracing::debug!(target: RUNTIME_TARGET, plugin, origin = %origin, status,
                "outbound HTTP response");
        }
        self.metrics
            .http_latency(plugin, self.started.elapsed().as_secs_f64());
        let Outbound {
            plugin,
            lines,
            policy,
            metrics,
            call,
            ..
        } = self;
        let bounded = policy.bounded;
        let (response, io) = sent.finish(move |how: BodyEnd| {
            let code = match how {
                BodyEnd::Done => status.to_string(),
                failed => {
                    let code = failed.code();
                    if lines.admit() {
                        tracing::info!(target: RUNTIME_TARGET, plugin = &*plugin,
                            origin = %label, status, code, "outbound HTTP response body failed");
                    }
                    code.to_owned()
                }
            };
            metrics.http_request(&plugin, &label, &code);
        });
        let io = async move {
            let _permit = permit;
            if !bounded {
                return Box::into_pin(io).await;
            }
            tokio::select! {
                biased;
                () = call.cancelled() => Ok(()),
                r = Box::into_pin(io) => r,
            }
        };
        (response, Box::new(io))
    }

    /// Records an exchange that got no response, and gives the guest its error.
    fn refused(&self, refusal: Refusal) -> Error {
        let Refusal {
            error,
            label,
            code,
            why,
        } = refusal;
        let plugin = &*self.plugin;
        match &why {
            Why::Failed => {
                if self.lines.admit() {
                    let origin = label.as_str();
                    tracing::info!(target: RUNTIME_TARGET, plugin, origin, code,
                        "outbound HTTP request failed: {error}");
                }
            }
            Why::NotGranted(origin) => {
                if self.lines.admit() {
                    tracing::info!(target: RUNTIME_TARGET, plugin, origin = %origin,
                        "outbound HTTP request denied: origin not granted");
                }
            }
            Why::Limit {
                origin,
                bound,
                message,
            } => {
                if self.lines.admit() {
                    tracing::info!(target: RUNTIME_TARGET, plugin, origin = %origin,
                        "outbound HTTP request refused: {message}");
                }
                self.metrics.http_refused(plugin, bound);
            }
            Why::IpDenied { origin, refused } => {
                if self.lines.admit() {
                    tracing::info!(target: RUNTIME_TARGET, plugin, origin = %origin,
                        "outbound HTTP request denied: {} resolves only to internal addresses the \
                         grant does not name: {refused}", origin.host);
                }
            }
        }
        self.metrics.http_request(plugin, &label, code);
        if let Why::Failed = why {
            self.metrics
                .http_latency(plugin, self.started.elapsed().as_secs_f64());
        }
        error
    }
}

/// Step 1: the request URI names an origin.
fn origin_of(uri: &http::Uri) -> Stage<Origin> {
    Origin::of(uri).map_err(|bad| {
        let error = match bad {
            BadUri::Scheme => Error::HttpProtocolError,
            BadUri::Host => Error::HttpRequestUriInvalid,
        };
        Refusal::failed("denied", "invalid", error)
    })
}

/// The interceptor, consulted before the real send when the policy has a stub (the scenario
/// runner's `http_stub`): the stub answers a granted request instead of the network.
async fn intercept(
    stub: Arc<dyn super::HttpStub>,
    plugin: &str,
    request: http::Request<WasiBody>,
    label: String,
) -> Stage<Answered> {
    match super::http_stub::answer(stub, plugin, request).await {
        Ok(exchange) => Ok(Answered::Stubbed { exchange, label }),
        Err(e) => Err(Refusal::failed(&label, "error", e)),
    }
}

impl HttpHooks {
    /// Fences every later request by `view` (see [`ShardView::may_act`](super::ShardView::may_act)).
    pub(crate) fn set_shard(&mut self, view: Arc<dyn super::shard::ShardView>) {
        self.shard = view;
    }
}

impl WasiHttpHooks for HttpHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
        if !self.shard.may_act() {
            return Box::new(async {
                Err(Error::InternalError(Some(
                    "this replica is fenced: it could not renew its shard Lease in time".to_owned(),
                )))
            });
        }
        let bounded = self.policy.bounded;
        self.sent_this_call = bounded;
        let call = self.call.clone();
        let seen = self
            .observer
            .is_some()
            .then(|| (request.method().to_string(), request.uri().to_string()));
        let send = Outbound {
            plugin: self.plugin.clone(),
            lines: self.lines.clone(),
            policy: self.policy.clone(),
            wait: self.wait.clone(),
            metrics: self.metrics.clone(),
            open_gauge: self.open_gauge.clone(),
            call: call.clone(),
            started: Instant::now(),
        };
        let run = async move {
            if !bounded {
                return send.run(request, options).await;
            }
            tokio::select! {
                biased;
                () = call.cancelled() => Err(Error::InternalError(Some(
                    "the handler call that sent this request has ended".to_owned(),
                ))),
                r = send.run(request, options) => r,
            }
        };
        let Some(observer) = self.observer.clone() else {
            return Box::new(run);
        };
        let plugin = self.plugin.clone();
        let (method, url) = seen.unwrap_or_default();
        Box::new(async move {
            let sent = run.await;
            let result = match &sent {
                Ok(exchange) => Ok(exchange.0.status().as_u16()),
                Err(e) => Err(observed_code(e)),
            };
            let exchange = HttpExchange {
                method: &method,
                url: &url,
                result,
            };
            observer.http_request(&plugin, &exchange);
            sent
        })
    }

    // An unsent body holds `BODY_BUFFER_CHUNKS + 1` writes on the host; every body is charged
    // that much to the plugin's budget from its creation (see `budget.rs`).
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        super::budget::BODY_BUFFER_CHUNKS
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        super::budget::BODY_CHUNK_BYTES
    }

    // wasmtime-wasi-http's defaults log these at warn level without the plugin's name.
    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> ErrorCode {
        if debug_enabled() && self.lines.admit() {
            tracing::debug!(target: RUNTIME_TARGET, plugin = &*self.plugin, "HTTP error: {err}");
        }
        if err.is_timeout() {
            ErrorCode::HttpResponseTimeout
        } else {
            ErrorCode::HttpProtocolError
        }
    }

    fn p2_error_from_connect(&mut self, err: &std::io::Error) -> ErrorCode {
        if debug_enabled() && self.lines.admit() {
            tracing::debug!(target: RUNTIME_TARGET, plugin = &*self.plugin, "connect error: {err}");
        }
        ErrorCode::ConnectionRefused
    }

    fn p2_error_from_tls(&mut self, err: &std::io::Error) -> ErrorCode {
        if debug_enabled() && self.lines.admit() {
            tracing::debug!(target: RUNTIME_TARGET, plugin = &*self.plugin, "TLS error: {err}");
        }
        ErrorCode::TlsProtocolError
    }
}

/// Whether debug lines of this module are written at all, so a disabled one takes no token
/// from the plugin's budget.
fn debug_enabled() -> bool {
    tracing::enabled!(target: RUNTIME_TARGET, tracing::Level::DEBUG)
}

/// The addresses of `origin`: its literal address, or what `resolver` or else the system
/// resolver answers.
async fn resolve(
    origin: &Origin,
    resolver: Option<&dyn super::Resolver>,
) -> Result<Vec<SocketAddr>, Error> {
    if let Some(ip) = origin.ip {
        return Ok(vec![SocketAddr::new(ip, origin.port)]);
    }
    if let Some(found) = resolver.and_then(|r| r.resolve(&origin.host)) {
        if found.is_empty() {
            return Err(Error::DestinationNotFound);
        }
        return Ok(found
            .into_iter()
            .map(|ip| SocketAddr::new(unmap(ip), origin.port))
            .collect());
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((origin.host.as_str(), origin.port))
        .await
        .map_err(|_| Error::DnsError {
            rcode: Some("lookup failed".to_owned()),
            info_code: None,
        })?
        .map(|a| SocketAddr::new(unmap(a.ip()), a.port()))
        .collect();
    if found.is_empty() {
        return Err(Error::DestinationNotFound);
    }
    Ok(found)
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn shorter(guest: Option<std::time::Duration>, host: std::time::Duration) -> std::time::Duration {
    guest.map_or(host, |g| g.min(host))
}

/// A method name as logged: methods are HTTP tokens (no spaces or controls), only long ones
/// are cut.
fn short(method: &str) -> &str {
    crate::text::truncate(method, 16)
}

/// How a request that got no response ended, as [`HttpExchange::result`] says it.
fn observed_code(e: &Error) -> &'static str {
    match e {
        Error::HttpRequestDenied => "denied",
        Error::DestinationIpProhibited => "ip_denied",
        Error::HttpProtocolError | Error::HttpRequestUriInvalid => "invalid",
        e => error_kind(e),
    }
}

/// The metric code of a failed exchange.
fn error_kind(e: &Error) -> &'static str {
    match e {
        Error::ConnectionTimeout
        | Error::ConnectionReadTimeout
        | Error::HttpResponseTimeout
        | Error::DnsTimeout => "timeout",
        Error::HttpResponseBodySize(_) => "too_large",
        Error::Connect(_) | Error::ConnectionRefused | Error::DestinationNotFound => "connect",
        Error::Tls(_) | Error::TlsProtocolError | Error::TlsCertificateError => "tls",
        _ => "error",
    }
}
