//! Test fixture for the host's outbound-HTTP tests (`kubewasm:handler@0.2.0`). Each `on-add`
//! sends the request its object describes and reports what happened, so a test can assert what
//! the guest saw. The object's `data`:
//!
//! - `url` (required): `http://host:port/path?query` or `https://…`;
//! - `method`: `GET` (default), `HEAD`, `POST`, `PUT`, `DELETE`, `PATCH`;
//! - `body`: bytes to send;
//! - `host-header`: also try to set this `Host` header (the host must refuse it);
//! - `then`: `loop` busy-loops after sending instead of waiting for the response.
//!
//! On a 2xx response read to the end it returns ok and logs `status=N bytes=N`; anything else is
//! `retry(<what went wrong>)`.

wit_bindgen::generate!({
    path: "../../../wit/0.2.0",
    world: "handler",
    generate_all,
});

use kubewasm::handler::log::{Level, log};
use kubewasm::handler::types::Subscription;
use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

struct HttpFixture;

fn field<'a>(data: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    data.get(name).and_then(|v| v.as_str())
}

/// `scheme://authority/path` split into its parts.
fn split_url(url: &str) -> Result<(Scheme, &str, &str), String> {
    let (scheme, rest) = url.split_once("://").ok_or("url without scheme")?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Ok((scheme, authority, path))
}

fn method(name: &str) -> Method {
    match name {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_string()),
    }
}

fn code(e: &ErrorCode) -> String {
    format!("{e:?}")
}

fn exchange(data: &serde_json::Value) -> Result<String, String> {
    let url = field(data, "url").ok_or("no url")?;
    let (scheme, authority, path) = split_url(url)?;
    let headers = Fields::new();
    if let Some(host) = field(data, "host-header") {
        if let Err(e) = headers.append("host", host.as_bytes()) {
            return Err(format!("host header refused: {e:?}"));
        }
    }
    let request = OutgoingRequest::new(headers);
    request
        .set_method(&method(field(data, "method").unwrap_or("GET")))
        .map_err(|()| "bad method")?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| "bad scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "bad authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "bad path")?;
    // A request without a body (the usual GET) is sent with none, not with an empty stream,
    // so it needs no chunked framing.
    let future = match field(data, "body") {
        None => outgoing_handler::handle(request, None).map_err(|e| code(&e))?,
        Some(bytes) => {
            let body = request.body().map_err(|()| "body taken")?;
            let future = outgoing_handler::handle(request, None).map_err(|e| code(&e))?;
            {
                let out = body.write().map_err(|()| "body stream taken")?;
                for chunk in bytes.as_bytes().chunks(4096) {
                    out.blocking_write_and_flush(chunk)
                        .map_err(|e| format!("write failed: {e:?}"))?;
                }
            }
            OutgoingBody::finish(body, None).map_err(|e| code(&e))?;
            future
        }
    };

    if field(data, "then") == Some("loop") {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }

    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(r))) => r,
        Some(Ok(Err(e))) => return Err(code(&e)),
        Some(Err(())) => return Err("response taken twice".into()),
        None => return Err("response not ready".into()),
    };
    let status = response.status();
    let body = response.consume().map_err(|()| "body taken")?;
    let stream = body.stream().map_err(|()| "stream taken")?;
    let mut bytes = 0usize;
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => bytes += chunk.len(),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                let what = match wasi::http::types::http_error_code(&e) {
                    Some(c) => code(&c),
                    None => e.to_debug_string(),
                };
                return Err(format!("body failed after {bytes} bytes: {what}"));
            }
        }
    }
    if !(200..300).contains(&status) {
        return Err(format!("status={status} bytes={bytes}"));
    }
    Ok(format!("status={status} bytes={bytes}"))
}

impl Guest for HttpFixture {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "http-fixture".to_string(),
            subscriptions: vec![Subscription {
                api_version: "v1".to_string(),
                kind: "ConfigMap".to_string(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                resync_period_ms: 0,
                metadata_only: false,
                fields: Vec::new(),
            }],
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: false,
        }
    }

    fn on_add(obj: Object, _is_in_initial_list: bool) -> Result<(), HandlerError> {
        let parsed: serde_json::Value =
            serde_json::from_str(&obj.json).map_err(|e| HandlerError::Fatal(e.to_string()))?;
        let data = parsed.get("data").cloned().unwrap_or_default();
        // Objects that describe no request are not for this fixture (it shares hosts with
        // other handlers, e.g. in `kubewasm dev`).
        if field(&data, "url").is_none() {
            return Ok(());
        }
        match exchange(&data) {
            Ok(outcome) => {
                log(Level::Info, &outcome);
                Ok(())
            }
            Err(outcome) => Err(HandlerError::Retry(outcome)),
        }
    }

    fn on_update(_old: Object, _new: Object, _is_sync: bool) -> Result<(), HandlerError> {
        Ok(())
    }

    fn on_delete(_obj: Object, _final_state_unknown: bool) -> Result<(), HandlerError> {
        Ok(())
    }

    fn on_synced() -> Result<(), HandlerError> {
        Ok(())
    }
}

export!(HttpFixture);
