//! A small HTTP client over `wasi:http/outgoing-handler` (to origins the plugin is granted):
//! [`get`], [`post_json`] or a [`Request`] with its timeouts and a cap on the body read. Every
//! failure is an [`Error::Http`]: a denied origin is fatal, timeouts and connection failures
//! transient; a non-2xx status is an answer, not an error (see [`Response::error_for_status`]).

use std::time::Duration;

use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;
use crate::error::{Error, Result};

/// Default time for connecting, the first byte and between bytes, each.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default cap on a response body read into memory.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// An answered request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Response headers, as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body (at most the request's cap).
    pub body: Vec<u8>,
}

impl Response {
    /// The body decoded as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `self` when 2xx; otherwise an error, transient for 429 and 5xx.
    pub fn error_for_status(self) -> Result<Self> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        Err(Error::Http {
            transient: self.status == 429 || self.status >= 500,
            code: Some(format!("status-{}", self.status)),
            message: format!("answered {}", self.status),
        })
    }
}

/// One request to be sent with [`Request::send`].
#[derive(Clone, Debug)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Option<Vec<u8>>,
    timeout: Duration,
    max_body: usize,
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response> {
    Request::new("GET", url).send()
}

/// `POST url` with `body` as JSON.
pub fn post_json(url: &str, body: &impl serde::Serialize) -> Result<Response> {
    Request::new("POST", url).json(body)?.send()
}

impl Request {
    /// A request with `method` (e.g. `PUT`) to `url` (`http://` or `https://`).
    pub fn new(method: &str, url: &str) -> Self {
        let method = match method {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            "HEAD" => Method::Head,
            other => Method::Other(other.to_string()),
        };
        Request {
            method,
            url: url.to_string(),
            headers: Vec::new(),
            body: None,
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_string(), value.as_bytes().to_vec()));
        self
    }

    /// Sends `body` as JSON (`content-type: application/json`).
    pub fn json(self, body: &impl serde::Serialize) -> Result<Self> {
        let bytes = serde_json::to_vec(body)?;
        Ok(self.header("content-type", "application/json").body(bytes))
    }

    /// Sends `bytes` as the body.
    pub fn body(mut self, bytes: Vec<u8>) -> Self {
        self.body = Some(bytes);
        self
    }

    /// Limit for connecting, for the first byte and between bytes (each); default 10 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Largest body read; a longer one is an error (not truncated). Default 1 MiB.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Sends the request and reads the whole response.
    pub fn send(self) -> Result<Response> {
        let (scheme, authority, path) = split_url(&self.url)?;
        let headers = Fields::new();
        for (name, value) in &self.headers {
            headers
                .append(name, value)
                .map_err(|e| fatal(format!("header {name}: {e:?}")))?;
        }
        // A declared length, not chunked encoding: simple servers (Python's http.server) read
        // exactly Content-Length bytes.
        let declared = self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-length"));
        if let (Some(bytes), false) = (&self.body, declared) {
            headers
                .append("content-length", bytes.len().to_string().as_bytes())
                .map_err(|e| fatal(format!("header content-length: {e:?}")))?;
        }
        let request = OutgoingRequest::new(headers);
        let set = |ok: std::result::Result<(), ()>, what: &str| {
            ok.map_err(|()| {
                let code = if what == "method" {
                    ErrorCode::HttpRequestMethodInvalid
                } else {
                    ErrorCode::HttpRequestUriInvalid
                };
                invalid(&code, format!("invalid {what} in {}", self.url))
            })
        };
        set(request.set_method(&self.method), "method")?;
        let scheme = if scheme == "https" {
            Scheme::Https
        } else {
            Scheme::Http
        };
        set(request.set_scheme(Some(&scheme)), "scheme")?;
        set(request.set_authority(Some(authority)), "authority")?;
        set(request.set_path_with_query(Some(&path)), "path")?;
        let options = RequestOptions::new();
        let nanos = u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX);
        // A host may not support every timeout; the ones it takes still bound the request.
        let _ = options.set_connect_timeout(Some(nanos));
        let _ = options.set_first_byte_timeout(Some(nanos));
        let _ = options.set_between_bytes_timeout(Some(nanos));
        // A request without a body is sent without one: taking the body stream would make it
        // a chunked upload of nothing, which a simple server may not drain.
        let future = match &self.body {
            None => outgoing_handler::handle(request, Some(options)).map_err(from_code)?,
            Some(bytes) => {
                let outgoing = request
                    .body()
                    .map_err(|()| fatal("request body already taken".into()))?;
                let future = outgoing_handler::handle(request, Some(options)).map_err(from_code)?;
                write_body(&outgoing, bytes)?;
                OutgoingBody::finish(outgoing, None).map_err(from_code)?;
                future
            }
        };
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(code))) => return Err(from_code(code)),
            Some(Err(())) | None => return Err(transient("no response".into())),
        };
        let status = response.status();
        let headers = response.headers().entries().into_iter().collect::<Vec<_>>();
        let body = response
            .consume()
            .map_err(|()| transient("response body already taken".into()))?;
        let stream = body
            .stream()
            .map_err(|()| transient("response stream already taken".into()))?;
        let mut read = Vec::new();
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => {
                    if read.len() + chunk.len() > self.max_body {
                        return Err(fatal(format!(
                            "response body over the cap of {} bytes",
                            self.max_body
                        )));
                    }
                    read.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(transient(format!(
                        "reading the body: {}",
                        e.to_debug_string()
                    )));
                }
            }
        }
        drop(stream);
        Ok(Response {
            status,
            headers,
            body: read,
        })
    }
}

fn write_body(outgoing: &OutgoingBody, bytes: &[u8]) -> Result<()> {
    let stream = outgoing
        .write()
        .map_err(|()| fatal("request body stream already taken".into()))?;
    // `blocking-write-and-flush` takes at most 4096 bytes at a time.
    for chunk in bytes.chunks(4096) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| transient(format!("writing the body: {e:?}")))?;
    }
    Ok(())
}

fn fatal(message: String) -> Error {
    Error::Http {
        transient: false,
        code: None,
        message,
    }
}

fn transient(message: String) -> Error {
    Error::Http {
        transient: true,
        code: None,
        message,
    }
}

/// A URL or request line the SDK refuses before sending, coded as the host would.
fn invalid(code: &ErrorCode, message: String) -> Error {
    Error::Http {
        transient: false,
        code: Some(code.wit_name().into()),
        message,
    }
}

impl ErrorCode {
    /// The case as the WIT names it, lower-case: `HttpRequestDenied` is `http-request-denied`
    /// (the WIT's `HTTP-request-denied`), the code the Python and JavaScript SDKs report too.
    pub fn wit_name(&self) -> &'static str {
        match self {
            ErrorCode::DnsTimeout => "dns-timeout",
            ErrorCode::DnsError(_) => "dns-error",
            ErrorCode::DestinationNotFound => "destination-not-found",
            ErrorCode::DestinationUnavailable => "destination-unavailable",
            ErrorCode::DestinationIpProhibited => "destination-ip-prohibited",
            ErrorCode::DestinationIpUnroutable => "destination-ip-unroutable",
            ErrorCode::ConnectionRefused => "connection-refused",
            ErrorCode::ConnectionTerminated => "connection-terminated",
            ErrorCode::ConnectionTimeout => "connection-timeout",
            ErrorCode::ConnectionReadTimeout => "connection-read-timeout",
            ErrorCode::ConnectionWriteTimeout => "connection-write-timeout",
            ErrorCode::ConnectionLimitReached => "connection-limit-reached",
            ErrorCode::TlsProtocolError => "tls-protocol-error",
            ErrorCode::TlsCertificateError => "tls-certificate-error",
            ErrorCode::TlsAlertReceived(_) => "tls-alert-received",
            ErrorCode::HttpRequestDenied => "http-request-denied",
            ErrorCode::HttpRequestLengthRequired => "http-request-length-required",
            ErrorCode::HttpRequestBodySize(_) => "http-request-body-size",
            ErrorCode::HttpRequestMethodInvalid => "http-request-method-invalid",
            ErrorCode::HttpRequestUriInvalid => "http-request-uri-invalid",
            ErrorCode::HttpRequestUriTooLong => "http-request-uri-too-long",
            ErrorCode::HttpRequestHeaderSectionSize(_) => "http-request-header-section-size",
            ErrorCode::HttpRequestHeaderSize(_) => "http-request-header-size",
            ErrorCode::HttpRequestTrailerSectionSize(_) => "http-request-trailer-section-size",
            ErrorCode::HttpRequestTrailerSize(_) => "http-request-trailer-size",
            ErrorCode::HttpResponseIncomplete => "http-response-incomplete",
            ErrorCode::HttpResponseHeaderSectionSize(_) => "http-response-header-section-size",
            ErrorCode::HttpResponseHeaderSize(_) => "http-response-header-size",
            ErrorCode::HttpResponseBodySize(_) => "http-response-body-size",
            ErrorCode::HttpResponseTrailerSectionSize(_) => "http-response-trailer-section-size",
            ErrorCode::HttpResponseTrailerSize(_) => "http-response-trailer-size",
            ErrorCode::HttpResponseTransferCoding(_) => "http-response-transfer-coding",
            ErrorCode::HttpResponseContentCoding(_) => "http-response-content-coding",
            ErrorCode::HttpResponseTimeout => "http-response-timeout",
            ErrorCode::HttpUpgradeFailed => "http-upgrade-failed",
            ErrorCode::HttpProtocolError => "http-protocol-error",
            ErrorCode::LoopDetected => "loop-detected",
            ErrorCode::ConfigurationError => "configuration-error",
            ErrorCode::InternalError(_) => "internal-error",
        }
    }
}

/// Denials and malformed requests are the handler's own to fix; everything else may pass.
fn from_code(code: ErrorCode) -> Error {
    let denied = matches!(
        code,
        ErrorCode::HttpRequestDenied
            | ErrorCode::HttpRequestUriInvalid
            | ErrorCode::HttpRequestMethodInvalid
            | ErrorCode::HttpResponseBodySize(_)
    );
    Error::Http {
        transient: !denied,
        code: Some(code.wit_name().into()),
        message: format!("{code:?}"),
    }
}

/// `scheme`, `authority` and `path?query` of an absolute `http(s)://` URL.
fn split_url(url: &str) -> Result<(&str, &str, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(s, _)| *s == "http" || *s == "https")
        .ok_or_else(|| {
            invalid(
                &ErrorCode::HttpRequestUriInvalid,
                format!("not an http(s) URL: {url}"),
            )
        })?;
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    let path = match path.chars().next() {
        Some('/') => path.to_string(),
        _ => format!("/{path}"),
    };
    if authority.is_empty() || authority.contains(['@', ' ']) {
        return Err(invalid(
            &ErrorCode::HttpRequestUriInvalid,
            format!("invalid host in {url}"),
        ));
    }
    Ok((scheme, authority, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        assert_eq!(
            split_url("https://lb.example.com:8443/v1/x?y=1").unwrap(),
            ("https", "lb.example.com:8443", "/v1/x?y=1".to_string())
        );
        assert_eq!(
            split_url("http://h").unwrap(),
            ("http", "h", "/".to_string())
        );
        assert_eq!(
            split_url("http://h?q").unwrap(),
            ("http", "h", "/?q".to_string())
        );
        for bad in ["ftp://h/", "h/x", "http:///x", "http://u@h/"] {
            let e = split_url(bad).unwrap_err();
            assert_eq!(e.http_code(), Some("http-request-uri-invalid"), "{bad}");
            assert!(!e.is_retryable(), "{bad}");
        }
    }

    /// Every case of the WIT's `error-code`, in its order, with its payload (if any) empty.
    fn every_code() -> Vec<ErrorCode> {
        use crate::bindings::wasi::http::types::{DnsErrorPayload, TlsAlertReceivedPayload};
        let dns = DnsErrorPayload {
            rcode: None,
            info_code: None,
        };
        let tls = TlsAlertReceivedPayload {
            alert_id: None,
            alert_message: None,
        };
        let field = || crate::bindings::wasi::http::types::FieldSizePayload {
            field_name: None,
            field_size: None,
        };
        vec![
            ErrorCode::DnsTimeout,
            ErrorCode::DnsError(dns),
            ErrorCode::DestinationNotFound,
            ErrorCode::DestinationUnavailable,
            ErrorCode::DestinationIpProhibited,
            ErrorCode::DestinationIpUnroutable,
            ErrorCode::ConnectionRefused,
            ErrorCode::ConnectionTerminated,
            ErrorCode::ConnectionTimeout,
            ErrorCode::ConnectionReadTimeout,
            ErrorCode::ConnectionWriteTimeout,
            ErrorCode::ConnectionLimitReached,
            ErrorCode::TlsProtocolError,
            ErrorCode::TlsCertificateError,
            ErrorCode::TlsAlertReceived(tls),
            ErrorCode::HttpRequestDenied,
            ErrorCode::HttpRequestLengthRequired,
            ErrorCode::HttpRequestBodySize(None),
            ErrorCode::HttpRequestMethodInvalid,
            ErrorCode::HttpRequestUriInvalid,
            ErrorCode::HttpRequestUriTooLong,
            ErrorCode::HttpRequestHeaderSectionSize(None),
            ErrorCode::HttpRequestHeaderSize(None),
            ErrorCode::HttpRequestTrailerSectionSize(None),
            ErrorCode::HttpRequestTrailerSize(field()),
            ErrorCode::HttpResponseIncomplete,
            ErrorCode::HttpResponseHeaderSectionSize(None),
            ErrorCode::HttpResponseHeaderSize(field()),
            ErrorCode::HttpResponseBodySize(None),
            ErrorCode::HttpResponseTrailerSectionSize(None),
            ErrorCode::HttpResponseTrailerSize(field()),
            ErrorCode::HttpResponseTransferCoding(None),
            ErrorCode::HttpResponseContentCoding(None),
            ErrorCode::HttpResponseTimeout,
            ErrorCode::HttpUpgradeFailed,
            ErrorCode::HttpProtocolError,
            ErrorCode::LoopDetected,
            ErrorCode::ConfigurationError,
            ErrorCode::InternalError(None),
        ]
    }

    #[test]
    fn error_codes_are_named_as_the_wit_names_them_lower_case() {
        let wit = include_str!("../wit/deps/http.wit");
        let body = wit.split("variant error-code {").nth(1).unwrap();
        let body = &body[..body.find('}').unwrap()];
        let cases: Vec<String> = body
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('@'))
            .map(|l| l.split(['(', ',']).next().unwrap().to_lowercase())
            .collect();
        let names: Vec<&str> = every_code().iter().map(ErrorCode::wit_name).collect();
        assert_eq!(names, cases);
        assert_eq!(
            ErrorCode::HttpRequestDenied.wit_name(),
            "http-request-denied"
        );
        let denied = from_code(ErrorCode::HttpRequestDenied);
        assert_eq!(denied.http_code(), Some("http-request-denied"));
        assert!(!denied.is_retryable());
        let timeout = from_code(ErrorCode::ConnectionTimeout);
        assert_eq!(timeout.http_code(), Some("connection-timeout"));
        assert!(timeout.is_retryable());
    }

    #[test]
    fn statuses_map_to_errors_only_when_asked() {
        let r = |status| Response {
            status,
            headers: Vec::new(),
            body: b"{\"a\":1}".to_vec(),
        };
        assert!(r(204).error_for_status().is_ok());
        assert!(r(503).error_for_status().unwrap_err().is_retryable());
        assert!(!r(404).error_for_status().unwrap_err().is_retryable());
        assert_eq!(
            r(503).error_for_status().unwrap_err().http_code(),
            Some("status-503")
        );
        assert_eq!(r(200).json::<serde_json::Value>().unwrap()["a"], 1);
    }
}
