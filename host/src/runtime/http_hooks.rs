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
use super::host_wait::HostWait;
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

impl Outbound {
    /// The request's place among the open ones (none for a benchmark baseline).
    fn permit(&self) -> Result<Option<ConnectionPermit>, Refused> {
        if !self.policy.bounded {
            return Ok(None);
        }
        let host = self.policy.host_connections.as_ref();
        ConnectionPermit::take(self.policy.inflight(), host, &self.open_gauge).map(Some)
    }

    /// Counts a request that ended before its response headers, and logs why.
    fn refused(&self, origin: &str, code: &'static str, error: Error) -> Error {
        let plugin = &*self.plugin;
        if self.lines.admit() {
            tracing::info!(target: RUNTIME_TARGET, plugin, origin, code, "outbound HTTP request failed: {error}");
        }
        self.metrics.http_request(plugin, origin, code);
        self.metrics
            .http_latency(plugin, self.started.elapsed().as_secs_f64());
        error
    }

    async fn run(
        self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<Exchange, Error> {
        let origin = match Origin::of(request.uri()) {
            Ok(o) => o,
            Err(BadUri::Scheme) => {
                return Err(self.refused("denied", "invalid", Error::HttpProtocolError));
            }
            Err(BadUri::Host) => {
                return Err(self.refused("denied", "invalid", Error::HttpRequestUriInvalid));
            }
        };
        if !origin.granted(&*self.policy.gate) {
            let plugin = &*self.plugin;
            if self.lines.admit() {
                tracing::info!(target: RUNTIME_TARGET, plugin, origin = %origin,
                    "outbound HTTP request denied: origin not granted");
            }
            self.metrics.http_request(plugin, "denied", "denied");
            return Err(Error::HttpRequestDenied);
        }
        let label = self.policy.origin_label(&origin);
        let method = request.method();
        if self.policy.dry_run && method != http::Method::GET && method != http::Method::HEAD {
            let msg = format!(
                "{origin}: {} refused (dry run): only GET and HEAD requests are sent",
                short(method.as_str())
            );
            return Err(self.refused(&label, "dry_run", Error::InternalError(Some(msg))));
        }

        if let Some(stub) = self.policy.stub.clone() {
            let answered = super::http_stub::answer(stub, &self.plugin, request).await;
            return match answered {
                Ok(exchange) => {
                    let status = exchange.0.status().as_u16().to_string();
                    self.metrics.http_request(&self.plugin, &label, &status);
                    Ok(exchange)
                }
                Err(e) => Err(self.refused(&label, "error", e)),
            };
        }
        let permit = match self.permit() {
            Ok(p) => p,
            Err(refused) => {
                let plugin = &*self.plugin;
                let msg = refused.message();
                if self.lines.admit() {
                    tracing::info!(target: RUNTIME_TARGET, plugin, origin = %origin,
                        "outbound HTTP request refused: {msg}");
                }
                self.metrics.http_refused(plugin, refused.bound());
                self.metrics.http_request(plugin, &label, "limit");
                return Err(Error::InternalError(Some(msg)));
            }
        };
        let policy = &self.policy;
        let options = options.unwrap_or_default();
        let timeouts = Timeouts {
            connect: shorter(options.connect_timeout, policy.timeout),
            first_byte: shorter(options.first_byte_timeout, policy.timeout),
            between_bytes: shorter(options.between_bytes_timeout, policy.timeout),
        };
        // From here on the guest waits for the network: until the response headers (the body
        // has its own account, see `http_client::CappedBody`).
        let waiting = self.wait.enter();
        let lookup = resolve(&origin, policy.resolver.as_deref());
        let addrs = match tokio::time::timeout(timeouts.connect, lookup).await {
            Err(_) => return Err(self.refused(&label, "timeout", Error::DnsTimeout)),
            Ok(Err(e)) => return Err(self.refused(&label, "dns", e)),
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
        if allowed.is_empty() {
            let plugin = &*self.plugin;
            let refused = refused.join(", ");
            if self.lines.admit() {
                tracing::info!(target: RUNTIME_TARGET, plugin, origin = %origin,
                    "outbound HTTP request denied: {} resolves only to internal addresses the \
                     grant does not name: {refused}", origin.host);
            }
            self.metrics.http_request(plugin, &label, "ip_denied");
            return Err(Error::DestinationIpProhibited);
        }

        let sent = http_client::send(
            &origin,
            &allowed,
            request,
            timeouts,
            policy.max_response_bytes,
            self.wait.clone(),
        )
        .await;
        drop(waiting);
        match sent {
            Ok(exchange) => {
                let status = exchange.status();
                let plugin = &*self.plugin;
                if debug_enabled() && self.lines.admit() {
                    tracing::debug!(target: RUNTIME_TARGET, plugin, origin = %origin, status,
                        "outbound HTTP response");
                }
                self.metrics
                    .http_latency(plugin, self.started.elapsed().as_secs_f64());
                let (metrics, plugin) = (self.metrics.clone(), self.plugin.clone());
                let call = self.call.clone();
                let bounded = self.policy.bounded;
                let lines = self.lines.clone();
                let (response, io) = exchange.finish(move |how: BodyEnd| {
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
                // The connection lives in `io`: it closes when the exchange is done or the
                // call that sent it ends, and gives its place back then.
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
                Ok((response, Box::new(io)))
            }
            Err(e) => {
                let code = error_kind(&e);
                Err(self.refused(&label, code, e))
            }
        }
    }
}

impl WasiHttpHooks for HttpHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
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
