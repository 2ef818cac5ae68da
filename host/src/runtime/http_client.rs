//! Sends one checked outbound request: TCP to an address the policy already accepted (never a
//! fresh DNS lookup), TLS with the origin's host name for SNI and certificate checks (the
//! platform's roots, as kube uses), HTTP/1.1 over hyper, and a response body that counts its
//! bytes against the cap and times out between pieces.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, WasiBody};

use super::host_wait::HostWait;
use super::http_policy::Origin;

/// Per-step timeouts of one exchange (see [`HttpPolicy::timeout`](super::HttpPolicy::timeout)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// DNS, TCP connect, TLS and the HTTP handshake together.
    pub connect: Duration,
    /// From sending the request to its response headers.
    pub first_byte: Duration,
    /// Between two pieces of the response body.
    pub between_bytes: Duration,
}

/// How a response body ended, for the exchange's metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// Read to the end, or dropped by the guest before that.
    Done,
    /// Went past the size cap.
    TooLarge,
    /// No data for longer than the between-bytes timeout.
    Timeout,
    /// The connection failed mid-body.
    Failed,
}

impl BodyEnd {
    /// The metric code of a body that did not end well.
    pub(super) fn code(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::TooLarge => "too_large",
            Self::Timeout => "timeout",
            Self::Failed => "error",
        }
    }
}

/// Called once when the response body ends.
type OnBodyEnd = Box<dyn FnOnce(BodyEnd) + Send>;

/// The response and the connection's own future (wasmtime-wasi-http drives it).
pub(crate) type Exchange = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Sends `request` to `origin` at the first of `addrs` that accepts a connection. The request's
/// target becomes origin-form and its `Host` header is set from `origin` alone.
pub(crate) async fn send(
    origin: &Origin,
    addrs: &[SocketAddr],
    mut request: http::Request<WasiBody>,
    timeouts: Timeouts,
    max_body: u64,
    wait: HostWait,
) -> Result<Sent, Error> {
    let connect = async {
        let tcp = connect_any(addrs).await?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn Stream> = if origin.https {
            Box::new(tls(origin, tcp).await?)
        } else {
            Box::new(tcp)
        };
        hyper::client::conn::http1::handshake::<_, WasiBody>(TokioIo::new(stream))
            .await
            .map_err(Error::Hyper)
    };
    let (mut sender, conn) = tokio::time::timeout(timeouts.connect, connect)
        .await
        .map_err(|_| Error::ConnectionTimeout)??;

    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    *request.uri_mut() = path;
    let host = http::HeaderValue::try_from(origin.host_header())
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    // `insert` replaces every `Host` value, whoever set it.
    request.headers_mut().insert(http::header::HOST, host);

    let mut conn = Box::pin(conn);
    let mut conn_result = None;
    let response = tokio::time::timeout(timeouts.first_byte, async {
        let send = sender.send_request(request);
        tokio::pin!(send);
        loop {
            tokio::select! {
                r = &mut send => return r.map_err(Error::Hyper),
                r = &mut conn, if conn_result.is_none() => {
                    if let Err(e) = &r
                        && e.is_timeout()
                    {
                        return Err(Error::HttpResponseTimeout);
                    }
                    conn_result = Some(r);
                }
            }
        }
    })
    .await
    .map_err(|_| Error::HttpResponseTimeout)??;

    if let Some(declared) = http_body::Body::size_hint(response.body()).exact()
        && declared > max_body
    {
        return Err(Error::HttpResponseBodySize(Some(declared)));
    }
    let io: Box<dyn Future<Output = Result<(), Error>> + Send> = match conn_result {
        Some(r) => Box::new(async move { r.map_err(Error::Hyper) }),
        None => Box::new(async move { conn.await.map_err(Error::Hyper) }),
    };
    Ok(Sent {
        response,
        io,
        max_body,
        between_bytes: timeouts.between_bytes,
        wait,
    })
}

/// A response whose headers have arrived; its body is not wrapped yet.
pub(crate) struct Sent {
    response: http::Response<Incoming>,
    io: Box<dyn Future<Output = Result<(), Error>> + Send>,
    max_body: u64,
    between_bytes: Duration,
    wait: HostWait,
}

impl Sent {
    pub(super) fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// The exchange as wasmtime-wasi-http takes it; `on_end` is called once when the body
    /// ends (read to the end, failed, or dropped).
    pub(super) fn finish(self, on_end: impl FnOnce(BodyEnd) + Send + 'static) -> Exchange {
        let Sent {
            response,
            io,
            max_body,
            between_bytes,
            wait,
        } = self;
        let response = response.map(|incoming| {
            CappedBody {
                incoming,
                received: 0,
                max: max_body,
                between_bytes,
                timer: Box::pin(tokio::time::sleep(between_bytes)),
                wait,
                waiting: false,
                ended: false,
                on_end: Some(Box::new(on_end)),
            }
            .boxed_unsync()
        });
        (response, io)
    }
}

async fn connect_any(addrs: &[SocketAddr]) -> Result<TcpStream, Error> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or(Error::DestinationNotFound, Error::Connect))
}

async fn tls(
    origin: &Origin,
    tcp: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    use rustls::pki_types::ServerName;
    let config = tls_config()?;
    let name = match origin.ip {
        Some(ip) => ServerName::IpAddress(ip.into()),
        None => {
            ServerName::try_from(origin.host.clone()).map_err(|_| Error::HttpRequestUriInvalid)?
        }
    };
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(Error::Tls)
}

/// One client configuration for the process: ring, TLS 1.2 and 1.3, the platform's roots.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, Error> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, rustls::Error>> = OnceLock::new();
    let built = CONFIG.get_or_init(|| {
        use rustls_platform_verifier::BuilderVerifierExt;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_platform_verifier())
            .map(|b| Arc::new(b.with_no_client_auth()))
    });
    built.clone().map_err(|e| {
        tracing::warn!(target: "kubewasm::runtime", error = %e, "no TLS configuration");
        Error::ConfigurationError
    })
}

/// The response body as the guest reads it: at most `max` bytes, at most `between_bytes`
/// between pieces while someone waits for one, and a blocked read ([`HostWait::blocked`]) each
/// time the guest finds no data, which ends when the guest runs again.
struct CappedBody {
    incoming: Incoming,
    received: u64,
    max: u64,
    between_bytes: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    wait: HostWait,
    /// The between-bytes timer runs: a poll found no data and none came since.
    waiting: bool,
    ended: bool,
    on_end: Option<OnBodyEnd>,
}

impl CappedBody {
    fn end(&mut self, how: BodyEnd) {
        self.ended = true;
        self.waiting = false;
        if let Some(f) = self.on_end.take() {
            f(how);
        }
    }
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(None) => {
                this.end(BodyEnd::Done);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.end(BodyEnd::Failed);
                Poll::Ready(Some(Err(Error::Hyper(e))))
            }
            Poll::Ready(Some(Ok(frame))) => {
                this.waiting = false;
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    if this.received > this.max {
                        this.end(BodyEnd::TooLarge);
                        return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(
                            this.received,
                        )))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                this.wait.blocked();
                if !this.waiting {
                    this.waiting = true;
                    let at = tokio::time::Instant::now() + this.between_bytes;
                    this.timer.as_mut().reset(at);
                }
                if this.timer.as_mut().poll(cx).is_ready() {
                    this.end(BodyEnd::Timeout);
                    return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl Drop for CappedBody {
    fn drop(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(BodyEnd::Done);
        }
    }
}
