//! The cloud's load-balancer API, spoken over `wasi:http/outgoing-handler`.
//!
//! `GET /lbs` lists every load balancer, `GET /lbs/{id}` reads one (404 when missing),
//! `PUT /lbs/{id}` creates or updates one and answers it with its address, `DELETE /lbs/{id}`
//! removes one (404 when there was none). A load balancer's id is its Service's uid, so the
//! cloud side needs no other index to find the load balancer of a Service.

use serde_json::{Value, json};

use crate::wasi::http::outgoing_handler;
use crate::wasi::http::types::{
    Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::wasi::io::streams::StreamError;

/// Largest response body read; the cloud's answers are a few hundred bytes per load balancer.
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// One load balancer as the cloud reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadBalancer {
    /// The Service uid it belongs to.
    pub id: String,
    /// `namespace/name` of the Service, as recorded when it was created (for logs).
    pub service: String,
    /// The ports it forwards, as this controller sent them.
    pub ports: Value,
    /// The address it was given: an IP address or a host name.
    pub address: String,
}

impl LoadBalancer {
    fn parse(v: &Value) -> Result<LoadBalancer, String> {
        let text = |field: &str| {
            v.get(field)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("load balancer without a string {field:?}"))
        };
        Ok(LoadBalancer {
            id: text("id")?,
            service: text("service")?,
            ports: v.get("ports").cloned().unwrap_or(Value::Null),
            address: text("address")?,
        })
    }
}

/// Whether `id` may go into a URL path as it is: a Service uid (a UUID) or anything else made
/// of letters, digits and dashes. Ids the cloud returns are checked too; they are not trusted.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Where the cloud API lives: `http[s]://host[:port][/prefix]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cloud {
    https: bool,
    authority: String,
    prefix: String,
}

impl Cloud {
    /// Parses the endpoint an operator configured; the error quotes it and says what is wrong.
    pub fn parse(endpoint: &str) -> Result<Cloud, String> {
        let bad = |why: &str| format!("invalid cloud endpoint {endpoint:?}: {why}");
        let (https, rest) = if let Some(r) = endpoint.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = endpoint.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(bad("expected http://host[:port] or https://host[:port]"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let authority_ok = !authority.is_empty()
            && authority
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
        if !authority_ok {
            return Err(bad(
                "the host must be a DNS name or an IP address, with an optional port",
            ));
        }
        let prefix = path.trim_end_matches('/');
        let prefix_ok = prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b));
        if !prefix_ok {
            return Err(bad("the path may only hold letters, digits and - . _ ~ /"));
        }
        Ok(Cloud {
            https,
            authority: authority.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// The load balancer `id`, or `None` when the cloud has none.
    pub fn get(&self, id: &str) -> Result<Option<LoadBalancer>, String> {
        let path = self.lb_path(id)?;
        match self.send(Method::Get, &path, None)? {
            (200, body) => Ok(Some(parse_body(&path, &body, LoadBalancer::parse)?)),
            (404, _) => Ok(None),
            (code, _) => Err(format!("cloud GET {path}: HTTP {code}")),
        }
    }

    /// Creates or updates the load balancer `id` for `service` forwarding `ports`.
    pub fn put(&self, id: &str, service: &str, ports: &Value) -> Result<LoadBalancer, String> {
        let path = self.lb_path(id)?;
        let body = json!({"service": service, "ports": ports}).to_string();
        match self.send(Method::Put, &path, Some(body.as_bytes()))? {
            (200 | 201, body) => parse_body(&path, &body, LoadBalancer::parse),
            (code, _) => Err(format!("cloud PUT {path}: HTTP {code}")),
        }
    }

    /// Deletes the load balancer `id`; `false` when there was none.
    pub fn delete(&self, id: &str) -> Result<bool, String> {
        let path = self.lb_path(id)?;
        match self.send(Method::Delete, &path, None)? {
            (200 | 204, _) => Ok(true),
            (404, _) => Ok(false),
            (code, _) => Err(format!("cloud DELETE {path}: HTTP {code}")),
        }
    }

    /// Every load balancer the cloud holds.
    pub fn list(&self) -> Result<Vec<LoadBalancer>, String> {
        let path = format!("{}/lbs", self.prefix);
        match self.send(Method::Get, &path, None)? {
            (200, body) => parse_body(&path, &body, |v| {
                v.as_array()
                    .ok_or_else(|| "expected a JSON array".to_string())?
                    .iter()
                    .map(LoadBalancer::parse)
                    .collect()
            }),
            (code, _) => Err(format!("cloud GET {path}: HTTP {code}")),
        }
    }

    fn lb_path(&self, id: &str) -> Result<String, String> {
        if !valid_id(id) {
            return Err(format!("refusing load balancer id {id:?}: not a uid"));
        }
        Ok(format!("{}/lbs/{id}", self.prefix))
    }

    /// One request, answered with its status and body. Blocking: the host bounds how long a
    /// request may take, and a call into a handler is sequential anyway.
    fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, Vec<u8>), String> {
        let verb = match method {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            _ => "request",
        };
        let fail = |what: String| format!("cloud {verb} {path}: {what}");
        let mut headers = vec![("accept".to_string(), b"application/json".to_vec())];
        if let Some(b) = body {
            // A declared length, not chunked encoding: simple servers (Python's http.server)
            // read exactly Content-Length bytes.
            headers.push(("content-type".to_string(), b"application/json".to_vec()));
            headers.push((
                "content-length".to_string(),
                b.len().to_string().into_bytes(),
            ));
        }
        let fields = Fields::from_list(&headers).map_err(|e| fail(format!("header: {e:?}")))?;
        let request = OutgoingRequest::new(fields);
        let scheme = if self.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        request
            .set_method(&method)
            .and_then(|()| request.set_scheme(Some(&scheme)))
            .and_then(|()| request.set_authority(Some(&self.authority)))
            .and_then(|()| request.set_path_with_query(Some(path)))
            .map_err(|()| fail("invalid request line".to_string()))?;
        // A request without a body is sent without one: taking the body stream would make it
        // a chunked upload, which the server would have to drain.
        let future = match body {
            None => outgoing_handler::handle(request, None).map_err(|e| fail(format!("{e:?}")))?,
            Some(b) => {
                let outgoing = request
                    .body()
                    .map_err(|()| fail("request body taken".to_string()))?;
                let future =
                    outgoing_handler::handle(request, None).map_err(|e| fail(format!("{e:?}")))?;
                {
                    // The body streams out once the request is under way. The stream is a
                    // child of the body: dropped at the end of this block, before `finish`.
                    let stream = outgoing
                        .write()
                        .map_err(|()| fail("request stream taken".to_string()))?;
                    // blocking-write-and-flush takes at most 4096 bytes per call.
                    for chunk in b.chunks(4096) {
                        stream
                            .blocking_write_and_flush(chunk)
                            .map_err(|e| fail(format!("writing the body: {e:?}")))?;
                    }
                }
                OutgoingBody::finish(outgoing, None).map_err(|e| fail(format!("{e:?}")))?;
                future
            }
        };
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(r))) => r,
            Some(Ok(Err(e))) => return Err(fail(format!("{e:?}"))),
            Some(Err(())) | None => return Err(fail("no response".to_string())),
        };
        let status = response.status();
        let incoming = response
            .consume()
            .map_err(|()| fail("response body taken".to_string()))?;
        let mut data = Vec::new();
        {
            // The stream is a child of the body: it must be dropped before the body finishes.
            let stream = incoming
                .stream()
                .map_err(|()| fail("response stream taken".to_string()))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => data.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err(fail(format!("reading the body: {}", e.to_debug_string())));
                    }
                }
                if data.len() > MAX_RESPONSE_BYTES {
                    return Err(fail(format!(
                        "response larger than {MAX_RESPONSE_BYTES} bytes"
                    )));
                }
            }
        }
        drop(IncomingBody::finish(incoming));
        Ok((status, data))
    }
}

/// Parses a response body as JSON and then with `parse`; errors name the request path.
fn parse_body<T>(
    path: &str,
    body: &[u8],
    parse: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<T, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("cloud {path}: response is not JSON: {e}"))?;
    parse(&v).map_err(|e| format!("cloud {path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let c = Cloud::parse("http://127.0.0.1:34567").unwrap();
        assert_eq!(
            (c.https, c.authority.as_str(), c.prefix.as_str()),
            (false, "127.0.0.1:34567", "")
        );
        let c = Cloud::parse("https://lb.example.com/api/v1/").unwrap();
        assert_eq!(
            (c.https, c.authority.as_str(), c.prefix.as_str()),
            (true, "lb.example.com", "/api/v1")
        );
        for bad in [
            "ftp://x",
            "127.0.0.1:80",
            "http://",
            "http://a b",
            "http://a/?q",
            "http://u@h",
        ] {
            assert!(Cloud::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids() {
        assert!(valid_id("5f0c1d9e-6a7b-4c3d-9e8f-0a1b2c3d4e5f"));
        for bad in ["", "../x", "a/b", "a?b", "a b", "a%2f"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
