//! `as=Table` responses for `kubectl get`: server-side columns for the built-in kinds (a subset of the real
//! printers) and CRD `additionalPrinterColumns` (simple `.a.b[0].c` JSONPaths).

use serde_json::{Value, json};

use crate::registry::ResourceType;

/// Whether the Accept header asks for a `meta.k8s.io` Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|p| {
        let p = p.replace(' ', "");
        p.contains("as=Table") && p.contains("g=meta.k8s.io")
    })
}

/// One column: header, type, and how to compute the cell.
struct Column {
    name: String,
    kind: &'static str,
    priority: i64,
    cell: Cell,
}

enum Cell {
    Name,
    Age,
    Path(String, bool),
    Custom(fn(&Value) -> Value),
}

fn col(name: &str, kind: &'static str, cell: Cell) -> Column {
    Column {
        name: name.into(),
        kind,
        priority: 0,
        cell,
    }
}

fn get<'a>(v: &'a Value, path: &str) -> &'a Value {
    v.pointer(path).unwrap_or(&Value::Null)
}

fn count(v: &Value) -> usize {
    v.as_object()
        .map(|m| m.len())
        .or_else(|| v.as_array().map(Vec::len))
        .unwrap_or(0)
}

/// The columns `kubectl get` shows for `rt`: Name, the kind's own columns, then Age; Events,
/// CRDs and custom resources with printer columns have layouts of their own.
fn columns(rt: &ResourceType) -> Vec<Column> {
    let name = col("Name", "string", Cell::Name);
    let own = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "ConfigMap") => vec![col("Data", "integer", Cell::Custom(configmap_data))],
        ("", "Secret") => vec![
            col("Type", "string", path(".type")),
            col(
                "Data",
                "integer",
                Cell::Custom(|o| json!(count(get(o, "/data")))),
            ),
        ],
        ("", "Namespace") => vec![col("Status", "string", path(".status.phase"))],
        ("", "Pod") => vec![
            col("Ready", "string", Cell::Custom(pod_ready)),
            col("Status", "string", path(".status.phase")),
            col("Restarts", "integer", Cell::Custom(pod_restarts)),
        ],
        ("apps", "Deployment") => vec![
            col("Ready", "string", Cell::Custom(deployment_ready)),
            col(
                "Up-to-date",
                "integer",
                Cell::Custom(|o| int_or_zero(o, "/status/updatedReplicas")),
            ),
            col(
                "Available",
                "integer",
                Cell::Custom(|o| int_or_zero(o, "/status/availableReplicas")),
            ),
        ],
        ("", "Service") => vec![
            col(
                "Type",
                "string",
                Cell::Custom(|o| json!(get(o, "/spec/type").as_str().unwrap_or("ClusterIP"))),
            ),
            col(
                "Cluster-IP",
                "string",
                Cell::Custom(|o| json!(get(o, "/spec/clusterIP").as_str().unwrap_or("<none>"))),
            ),
            col("External-IP", "string", Cell::Custom(external_ip)),
            col("Port(s)", "string", Cell::Custom(service_ports)),
        ],
        ("" | "events.k8s.io", "Event") => return event_columns(name),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            return vec![
                name,
                col("Created At", "date", path(".metadata.creationTimestamp")),
            ];
        }
        _ if rt.custom && !rt.printer_columns.is_empty() => {
            return std::iter::once(name).chain(printer_columns(rt)).collect();
        }
        _ => Vec::new(),
    };
    let mut cols = vec![name];
    cols.extend(own);
    cols.push(col("Age", "string", Cell::Age));
    cols
}

/// As `kubectl get events`: newest activity first in mind, the name only with `-o wide`.
fn event_columns(mut name: Column) -> Vec<Column> {
    name.priority = 1;
    vec![
        col("Last Seen", "string", Cell::Custom(event_last_seen)),
        col("Type", "string", path(".type")),
        col("Reason", "string", path(".reason")),
        col("Object", "string", Cell::Custom(event_object)),
        col("Message", "string", Cell::Custom(event_message)),
        name,
    ]
}

/// A CRD's `additionalPrinterColumns` (an unknown type prints as a string).
fn printer_columns(rt: &ResourceType) -> impl Iterator<Item = Column> + '_ {
    rt.printer_columns
        .iter()
        .map(|(name, kind, path, priority)| {
            let kind: &'static str = match kind.as_str() {
                "integer" => "integer",
                "number" => "number",
                "boolean" => "boolean",
                "date" => "date",
                _ => "string",
            };
            Column {
                name: name.clone(),
                kind,
                priority: *priority,
                cell: Cell::Path(path.clone(), kind == "date"),
            }
        })
}

/// A cell read at a simple JSONPath (`.a.b[0]`), printed as it is.
fn path(p: &str) -> Cell {
    Cell::Path(p.into(), false)
}

fn int_or_zero(o: &Value, path: &str) -> Value {
    json!(get(o, path).as_i64().unwrap_or(0))
}

fn configmap_data(o: &Value) -> Value {
    json!(count(get(o, "/data")) + count(get(o, "/binaryData")))
}

/// `ready/total` containers.
fn pod_ready(o: &Value) -> Value {
    let total = count(get(o, "/spec/containers"));
    let ready = get(o, "/status/containerStatuses")
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|c| c.get("ready") == Some(&json!(true)))
                .count()
        })
        .unwrap_or(0);
    json!(format!("{ready}/{total}"))
}

/// Restarts summed over the containers.
fn pod_restarts(o: &Value) -> Value {
    let restarts = get(o, "/status/containerStatuses")
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum::<i64>()
        })
        .unwrap_or(0);
    json!(restarts)
}

/// `ready/wanted` replicas (`spec.replicas` defaults to 1).
fn deployment_ready(o: &Value) -> Value {
    let want = get(o, "/spec/replicas").as_i64().unwrap_or(1);
    let ready = get(o, "/status/readyReplicas").as_i64().unwrap_or(0);
    json!(format!("{ready}/{want}"))
}

/// `port/protocol` for each port, comma-separated, or `<none>`.
fn service_ports(o: &Value) -> Value {
    let ports: Vec<String> = get(o, "/spec/ports")
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.get("port").unwrap_or(&Value::Null),
                        p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    json!(if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    })
}

/// An Event's text: `note` (events.k8s.io/v1) or `message` (core v1).
fn event_message(o: &Value) -> Value {
    let note = get(o, "/note");
    if note.is_null() {
        get(o, "/message")
    } else {
        note
    }
    .clone()
}

/// A Service's EXTERNAL-IP: its load balancer's addresses (`<pending>` until there are some), else
/// `spec.externalIPs`.
fn external_ip(o: &Value) -> Value {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut ips = strings(get(o, "/spec/externalIPs"));
    if get(o, "/spec/type").as_str() == Some("LoadBalancer") {
        let ingress: Vec<String> = get(o, "/status/loadBalancer/ingress")
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| {
                        i.get("ip")
                            .or_else(|| i.get("hostname"))
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default();
        if ingress.is_empty() && ips.is_empty() {
            return json!("<pending>");
        }
        ips.extend(ingress);
    }
    json!(if ips.is_empty() {
        "<none>".to_string()
    } else {
        ips.join(",")
    })
}

/// When an Event last happened: its series, else its (deprecated) last timestamp, else when it was made.
fn event_last_seen(o: &Value) -> Value {
    [
        "/series/lastObservedTime",
        "/deprecatedLastTimestamp",
        "/lastTimestamp",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .find_map(|p| get(o, p).as_str().filter(|s| !s.is_empty()))
    .map(|t| json!(age(t)))
    .unwrap_or(json!("<unknown>"))
}

/// `kind/name` of the object an Event is about.
fn event_object(o: &Value) -> Value {
    let r = match get(o, "/regarding") {
        Value::Null => get(o, "/involvedObject"),
        r => r,
    };
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = r.get("name").and_then(Value::as_str).unwrap_or("");
    json!(format!("{}/{name}", kind.to_lowercase()))
}

/// Evaluate a simple JSONPath (`.a.b`, `.a[0].b`, optional `{}` braces).
fn json_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = v;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (field, rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        for idx in rest.split('[').filter(|s| !s.is_empty()) {
            let n: usize = idx.trim_end_matches(']').parse().ok()?;
            cur = cur.get(n)?;
        }
    }
    Some(cur)
}

/// `kubectl`-style short age: 42s, 5m, 3h, 2d, 1y.
fn age(ts: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 365 * 86400 => format!("{}d", s / 86400),
        s => format!("{}y", s / (365 * 86400)),
    }
}

fn cell(c: &Column, o: &Value) -> Value {
    match &c.cell {
        Cell::Name => get(o, "/metadata/name").clone(),
        Cell::Age => json!(age(get(o, "/metadata/creationTimestamp")
            .as_str()
            .unwrap_or(""))),
        Cell::Path(p, as_age) => match json_path(o, p) {
            None | Some(Value::Null) => Value::Null,
            Some(Value::String(s)) if *as_age => json!(age(s)),
            Some(v) => v.clone(),
        },
        Cell::Custom(f) => f(o),
    }
}

fn row(cols: &[Column], o: &Value) -> Value {
    let cells: Vec<Value> = cols.iter().map(|c| cell(c, o)).collect();
    json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": o.get("metadata").cloned().unwrap_or(json!({}))}})
}

/// A Table for `items`; `headers == false` omits the column definitions (watch events after the first).
pub fn table<'a>(
    rt: &ResourceType,
    meta: Value,
    items: impl Iterator<Item = &'a Value>,
    headers: bool,
) -> Value {
    let cols = columns(rt);
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| json!({"name": c.name, "type": c.kind, "format": if matches!(c.cell, Cell::Name) { "name" } else { "" },
            "description": c.name, "priority": c.priority}))
        .collect();
    let rows: Vec<Value> = items.map(|o| row(&cols, o)).collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
        "columnDefinitions": if headers { json!(defs) } else { json!([]) }, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn configmap_table_and_paths() {
        let reg = Registry::with_builtins();
        let rt = reg.find("", "v1", "configmaps").unwrap();
        let o = json!({"metadata": {"name": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}, "data": {"x": "1", "y": "2"}});
        let t = table(
            &rt,
            json!({"resourceVersion": "5"}),
            std::iter::once(&o),
            true,
        );
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert_eq!(t["rows"][0]["cells"][1], 2);
        assert!(t["rows"][0]["cells"][2].as_str().unwrap().ends_with('y'));
        assert_eq!(
            json_path(&json!({"a": [{"b": 3}]}), ".a[0].b"),
            Some(&json!(3))
        );
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
