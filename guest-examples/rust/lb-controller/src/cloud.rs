//! The cloud's load-balancer API, spoken over `wasi:http` through the SDK's HTTP client.
//!
//! `GET /lbs` lists every load balancer, `GET /lbs/{id}` reads one (404 when missing),
//! `PUT /lbs/{id}` creates or updates one and answers it with its address, `DELETE /lbs/{id}`
//! removes one (404 when there was none). A load balancer's id is its Service's uid, so the
//! cloud side needs no other index to find the load balancer of a Service.

use kubewasm_sdk::http::Request;
use kubewasm_sdk::serde_json::{Value, json};
use serde::Deserialize;

/// Largest response body read; the cloud's answers are a few hundred bytes per load balancer.
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// One load balancer as the cloud reports it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct LoadBalancer {
    /// The Service uid it belongs to.
    pub id: String,
    /// `namespace/name` of the Service, as recorded when it was created (for logs).
    pub service: String,
    /// The ports it forwards, as this controller sent them.
    #[serde(default)]
    pub ports: Value,
    /// The address it was given: an IP address or a host name.
    pub address: String,
}

/// Whether `id` may go into a URL path as it is: a Service uid (a UUID) or anything else made
/// of letters, digits and dashes. Ids the cloud returns are checked too; they are not trusted.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Where the cloud API lives: `http[s]://host[:port][/prefix]`, without a trailing `/`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cloud {
    base: String,
}

impl Cloud {
    /// Parses the endpoint an operator configured; the error quotes it and says what is wrong.
    pub fn parse(endpoint: &str) -> Result<Cloud, String> {
        let bad = |why: &str| format!("invalid cloud endpoint {endpoint:?}: {why}");
        let rest = ["http://", "https://"]
            .iter()
            .find_map(|s| endpoint.strip_prefix(s))
            .ok_or_else(|| bad("expected http://host[:port] or https://host[:port]"))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let authority_ok = !authority.is_empty()
            && authority
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
        if !authority_ok {
            return Err(bad(
                "the host must be a DNS name or an IP address, with an optional port",
            ));
        }
        let prefix_ok = path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b));
        if !prefix_ok {
            return Err(bad("the path may only hold letters, digits and - . _ ~ /"));
        }
        let base = endpoint.trim_end_matches('/').to_string();
        Ok(Cloud { base })
    }

    /// The load balancer `id`, or `None` when the cloud has none.
    pub fn get(&self, id: &str) -> Result<Option<LoadBalancer>, String> {
        match self.send("GET", &lb_path(id)?, None)? {
            (200, body) => parse(id, &body).map(Some),
            (404, _) => Ok(None),
            (code, _) => Err(format!("cloud GET /lbs/{id}: HTTP {code}")),
        }
    }

    /// Creates or updates the load balancer `id` for `service` forwarding `ports`.
    pub fn put(&self, id: &str, service: &str, ports: &Value) -> Result<LoadBalancer, String> {
        let body = json!({"service": service, "ports": ports});
        match self.send("PUT", &lb_path(id)?, Some(&body))? {
            (200 | 201, body) => parse(id, &body),
            (code, _) => Err(format!("cloud PUT /lbs/{id}: HTTP {code}")),
        }
    }

    /// Deletes the load balancer `id`; `false` when there was none.
    pub fn delete(&self, id: &str) -> Result<bool, String> {
        match self.send("DELETE", &lb_path(id)?, None)? {
            (200 | 204, _) => Ok(true),
            (404, _) => Ok(false),
            (code, _) => Err(format!("cloud DELETE /lbs/{id}: HTTP {code}")),
        }
    }

    /// Every load balancer the cloud holds.
    pub fn list(&self) -> Result<Vec<LoadBalancer>, String> {
        match self.send("GET", "/lbs", None)? {
            (200, body) => parse("", &body),
            (code, _) => Err(format!("cloud GET /lbs: HTTP {code}")),
        }
    }

    /// One request, answered with its status and body. Blocking: the host bounds how long a
    /// request may take, and a call into a handler is sequential anyway.
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Vec<u8>), String> {
        let fail = |e: kubewasm_sdk::Error| format!("cloud {method} {path}: {e}");
        let mut request = Request::new(method, &format!("{}{path}", self.base))
            .header("accept", "application/json")
            .max_body(MAX_RESPONSE_BYTES);
        if let Some(b) = body {
            request = request.json(b).map_err(fail)?;
        }
        let response = request.send().map_err(fail)?;
        Ok((response.status, response.body))
    }
}

fn lb_path(id: &str) -> Result<String, String> {
    if !valid_id(id) {
        return Err(format!("refusing load balancer id {id:?}: not a uid"));
    }
    Ok(format!("/lbs/{id}"))
}

/// Parses a response body; errors name the load balancer (`""` for the list).
fn parse<T: serde::de::DeserializeOwned>(id: &str, body: &[u8]) -> Result<T, String> {
    kubewasm_sdk::serde_json::from_slice(body)
        .map_err(|e| format!("cloud /lbs/{id}: unexpected response: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let c = Cloud::parse("http://127.0.0.1:34567").unwrap();
        assert_eq!(c.base, "http://127.0.0.1:34567");
        let c = Cloud::parse("https://lb.example.com/api/v1/").unwrap();
        assert_eq!(c.base, "https://lb.example.com/api/v1");
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
