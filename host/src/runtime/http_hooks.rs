//! [`HttpHooks`]: the host's side of a 0.2.0 handler's outbound `wasi:http` requests.
//!
//! Deny by default: no origin can be granted yet, so every request the guest sends resolves to
//! `http-request-denied` before any connection is made. wasmtime-wasi-http still builds the
//! request (and rejects forbidden headers such as a `Host` override) first.

use std::future::Future;
use std::sync::Arc;

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

const RUNTIME_TARGET: &str = "kubewasm::runtime";

/// Per-instance `wasi:http` policy.
pub(crate) struct HttpHooks {
    plugin: Arc<str>,
}

impl HttpHooks {
    pub fn new(plugin: Arc<str>) -> Self {
        Self { plugin }
    }
}

/// What `send_request` hands back: the response and a future for errors after the headers.
type SendFuture = Box<
    dyn Future<
            Output = wasmtime_wasi_http::Result<(
                http::Response<WasiBody>,
                Box<dyn Future<Output = Result<(), Error>> + Send>,
            )>,
        > + Send,
>;

impl WasiHttpHooks for HttpHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
        // The request is dropped unsent; the guest's URL is not logged (it is not validated).
        drop(request);
        tracing::debug!(target: RUNTIME_TARGET, plugin = &*self.plugin,
            "outbound HTTP refused: no origin granted");
        Box::new(async { Err(Error::HttpRequestDenied) })
    }
}
