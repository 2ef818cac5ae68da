//! [`HttpStub`]: answers a handler's outbound requests in place of the network.
//!
//! `kubewasm test` runs handlers against scripted HTTP answers: a request still passes every
//! check of [`super::http_hooks`] (granted origin, dry run), and only then, instead of a DNS
//! lookup and a connection, the stub answers. The runtime knows nothing of scenarios; it hands
//! the request over and returns what it is given.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use wasmtime_wasi_http::{Error, WasiBody};

use super::cluster::MAX_WRITE_BYTES;
use super::http_client::Exchange;

/// One request as the stub sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubRequest {
    /// Method, e.g. `GET`.
    pub method: String,
    /// The full URL the guest asked for.
    pub url: String,
    /// The request body (at most [`MAX_WRITE_BYTES`]).
    pub body: Bytes,
}

/// What the stub answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubResponse {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: Bytes,
}

/// Answers the outbound requests of every plugin of a runtime (see the module doc).
pub trait HttpStub: Send + Sync {
    /// The answer to `request` from `plugin`.
    fn respond(&self, plugin: &str, request: StubRequest) -> StubResponse;
}

/// Reads the guest's request and turns the stub's answer into the exchange the guest reads.
pub(crate) async fn answer(
    stub: Arc<dyn HttpStub>,
    plugin: &str,
    request: http::Request<WasiBody>,
) -> Result<Exchange, Error> {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_WRITE_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Err(Error::InternalError(Some(format!(
                "request body unreadable or over {MAX_WRITE_BYTES} bytes"
            ))));
        }
    };
    let answer = stub.respond(
        plugin,
        StubRequest {
            method: parts.method.as_str().to_owned(),
            url: parts.uri.to_string(),
            body,
        },
    );
    let mut response = http::Response::builder().status(answer.status);
    for (name, value) in &answer.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    let body: WasiBody = Full::new(answer.body)
        .map_err(|never| match never {})
        .boxed_unsync();
    let response = response
        .body(body)
        .map_err(|e| Error::InternalError(Some(format!("stubbed response: {e}"))))?;
    Ok((response, Box::new(async { Ok(()) })))
}
