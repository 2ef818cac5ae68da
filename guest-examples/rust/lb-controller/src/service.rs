//! The few fields of a Service this controller decides on, read once from the object's JSON.

use serde_json::{Value, json};

/// The finalizer that keeps a Service (and so its delete) around until its load balancer is gone.
pub const FINALIZER: &str = "kubewasm.io/lb-controller";

/// A Service as far as load balancing is concerned.
#[derive(Debug)]
pub struct Service {
    /// `spec.type == "LoadBalancer"`.
    pub wants_lb: bool,
    /// `metadata.deletionTimestamp` is set: the Service waits for its finalizers.
    pub deleting: bool,
    /// `metadata.finalizers`, in order.
    pub finalizers: Vec<String>,
    /// The ports the load balancer forwards: `[{"port", "protocol"}]` (plus `name` when set).
    pub ports: Value,
    /// `status.loadBalancer.ingress`, `[]` when absent.
    pub ingress: Value,
}

impl Service {
    /// Parses the Service's JSON; the error says what is malformed.
    pub fn parse(json: &str) -> Result<Service, String> {
        let v: Value = serde_json::from_str(json).map_err(|e| format!("Service JSON: {e}"))?;
        let metadata = v.get("metadata").ok_or("Service JSON without metadata")?;
        let finalizers = match metadata.get("finalizers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|f| f.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or("metadata.finalizers holds a non-string")?,
            Some(_) => return Err("metadata.finalizers is not a list".into()),
        };
        let deleting = metadata
            .get("deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        let spec = v.get("spec");
        // The API server defaults an absent type to ClusterIP.
        let wants_lb =
            spec.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("LoadBalancer");
        let mut ports = Vec::new();
        if let Some(list) = spec.and_then(|s| s.get("ports")) {
            let list = list.as_array().ok_or("spec.ports is not a list")?;
            for p in list {
                let port = p
                    .get("port")
                    .and_then(Value::as_u64)
                    .ok_or("spec.ports[] without a numeric port")?;
                let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                let mut entry = json!({"port": port, "protocol": protocol});
                if let Some(name) = p.get("name").and_then(Value::as_str) {
                    entry["name"] = json!(name);
                }
                ports.push(entry);
            }
        }
        let ingress = v
            .pointer("/status/loadBalancer/ingress")
            .filter(|i| !i.is_null())
            .cloned()
            .unwrap_or_else(|| json!([]));
        if !ingress.is_array() {
            return Err("status.loadBalancer.ingress is not a list".into());
        }
        Ok(Service {
            wants_lb,
            deleting,
            finalizers,
            ports: Value::Array(ports),
            ingress,
        })
    }

    /// Where this controller's finalizer sits in `metadata.finalizers`.
    pub fn finalizer_index(&self) -> Option<usize> {
        self.finalizers.iter().position(|f| f == FINALIZER)
    }

    /// Whether the Service already shows an ingress address (it had a load balancer before).
    pub fn has_ingress(&self) -> bool {
        self.ingress.as_array().is_some_and(|a| !a.is_empty())
    }

    /// A JSON patch adding the finalizer, valid only against the finalizers this Service shows:
    /// a concurrent change of the list makes the `test` fail (422) instead of being overwritten.
    pub fn add_finalizer_patch(&self) -> String {
        let ops = if self.finalizers.is_empty() {
            // A `test` of null passes on an absent list, as on the real API server.
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        } else {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": self.finalizers},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ])
        };
        ops.to_string()
    }

    /// A JSON patch removing the finalizer at `index`, which fails (422) if the entry there is
    /// no longer ours because the list changed meanwhile.
    pub fn remove_finalizer_patch(index: usize) -> String {
        let path = format!("/metadata/finalizers/{index}");
        json!([
            {"op": "test", "path": path, "value": FINALIZER},
            {"op": "remove", "path": path},
        ])
        .to_string()
    }
}

/// `status.loadBalancer.ingress` for `address`: `ip` for an IP address, `hostname` otherwise.
pub fn ingress_for(address: &str) -> Value {
    if address.parse::<std::net::IpAddr>().is_ok() {
        json!([{"ip": address}])
    } else {
        json!([{"hostname": address}])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_load_balancer_service() {
        let s = Service::parse(
            r#"{"metadata":{"name":"web","finalizers":["a",  "kubewasm.io/lb-controller"],
                "deletionTimestamp":"2026-01-01T00:00:00Z"},
                "spec":{"type":"LoadBalancer","ports":[{"port":80,"name":"http"},{"port":53,"protocol":"UDP"}]},
                "status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.7"}]}}}"#,
        )
        .unwrap();
        assert!(s.wants_lb && s.deleting && s.has_ingress());
        assert_eq!(s.finalizer_index(), Some(1));
        assert_eq!(
            s.ports,
            json!([{"port":80,"protocol":"TCP","name":"http"},{"port":53,"protocol":"UDP"}])
        );
        assert_eq!(s.ingress, ingress_for("203.0.113.7"));
    }

    #[test]
    fn defaults_and_errors() {
        let s = Service::parse(r#"{"metadata":{"name":"db"},"spec":{}}"#).unwrap();
        assert!(!s.wants_lb && !s.deleting && !s.has_ingress());
        assert_eq!(s.finalizer_index(), None);
        assert!(Service::parse("{").is_err());
        assert!(Service::parse(r#"{"metadata":{"finalizers":"x"}}"#).is_err());
        assert!(Service::parse(r#"{"metadata":{},"spec":{"ports":[{"port":"x"}]}}"#).is_err());
    }

    #[test]
    fn finalizer_patches_test_what_they_change() {
        let none = Service::parse(r#"{"metadata":{}}"#).unwrap();
        let p: Value = serde_json::from_str(&none.add_finalizer_patch()).unwrap();
        assert_eq!(
            p[0],
            json!({"op":"test","path":"/metadata/finalizers","value":null})
        );
        let some = Service::parse(r#"{"metadata":{"finalizers":["a"]}}"#).unwrap();
        let p: Value = serde_json::from_str(&some.add_finalizer_patch()).unwrap();
        assert_eq!(p[0]["value"], json!(["a"]));
        assert_eq!(p[1]["path"], "/metadata/finalizers/-");
        let p: Value = serde_json::from_str(&Service::remove_finalizer_patch(2)).unwrap();
        assert_eq!(
            p[0],
            json!({"op":"test","path":"/metadata/finalizers/2","value":FINALIZER})
        );
        assert_eq!(p[1], json!({"op":"remove","path":"/metadata/finalizers/2"}));
    }

    #[test]
    fn hostname_addresses() {
        assert_eq!(
            ingress_for("lb-1.example.com"),
            json!([{"hostname":"lb-1.example.com"}])
        );
    }
}
