//! The audit log, as kube-apiserver writes it with `--audit-log-path` at level `Metadata`.
//!
//! One JSON line per request, an `audit.k8s.io/v1` `Event`: who made it (`user`), whom it acted
//! as (`impersonatedUser`), what it asked (`verb`, `requestURI`, `objectRef`), how it ended
//! (`responseStatus.code`) and when. Never an object's content. Every string in a line is cut
//! to a bound, so a line is a few KiB at most whatever a client sends, and lines are written
//! as requests end, unbuffered, so the file is the operator's to rotate or read while it
//! grows. A watch is recorded once its response has started (stage `ResponseStarted`, as
//! kube-apiserver does for long-running requests), every other request at `ResponseComplete`.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::authz::{Identity, UserInfo, request_info};

/// Longest `requestURI` recorded, in bytes; longer ones are cut.
const MAX_URI: usize = 4096;
/// Longest user name, group, `userAgent` or `objectRef` field recorded, in bytes.
const MAX_FIELD: usize = 512;
/// Most groups recorded per user.
const MAX_GROUPS: usize = 16;

/// Where the audit log goes ([`crate::Config::audit`]): a file, stdout, or any writer.
#[derive(Clone)]
pub struct AuditSink {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
    /// Set once a write failed, so the failure is reported once, not per request.
    failed: Arc<AtomicBool>,
}

impl fmt::Debug for AuditSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuditSink")
    }
}

impl AuditSink {
    /// Lines go to `out` (a test's buffer, a pipe).
    pub fn writer(out: impl Write + Send + 'static) -> AuditSink {
        AuditSink {
            out: Arc::new(Mutex::new(Box::new(out))),
            failed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// kube-apiserver's `--audit-log-path`: `-` is stdout, anything else a file appended to
    /// (created if missing).
    pub fn open(path: &Path) -> std::io::Result<AuditSink> {
        if path.as_os_str() == "-" {
            return Ok(AuditSink::writer(std::io::stdout()));
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(AuditSink::writer(file))
    }

    fn write_line(&self, line: &[u8]) {
        let mut out = self.out.lock();
        if let Err(e) = out.write_all(line).and_then(|_| out.flush())
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            tracing::error!("apiserver: cannot write the audit log: {e}");
        }
    }
}

/// What the audit log records of one request, taken before the request is served.
pub(crate) struct Request {
    id: uuid::Uuid,
    received: chrono::DateTime<chrono::Utc>,
    method: http::Method,
    path: String,
    query: Option<String>,
    user_agent: Option<String>,
    identity: Identity,
}

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn user(u: &UserInfo) -> Value {
    let groups: Vec<String> = u
        .groups
        .iter()
        .take(MAX_GROUPS)
        .map(|g| cut(g, MAX_FIELD))
        .collect();
    json!({"username": cut(&u.name, MAX_FIELD), "groups": groups})
}

fn time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl Request {
    /// The request `req`, received at `received`, from `identity`.
    pub(crate) fn new(
        req: &axum::extract::Request,
        received: chrono::DateTime<chrono::Utc>,
        identity: Identity,
    ) -> Request {
        Request {
            id: uuid::Uuid::new_v4(),
            received,
            method: req.method().clone(),
            path: req.uri().path().to_string(),
            query: req
                .uri()
                .query()
                .filter(|q| !q.is_empty())
                .map(str::to_string),
            user_agent: req
                .headers()
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(|v| cut(v, MAX_FIELD)),
            identity,
        }
    }

    /// The `audit.k8s.io/v1` Event of this request, answered with `code`.
    pub(crate) fn event(&self, code: u16) -> Value {
        let a = request_info(&self.method, &self.path, self.query.as_deref());
        let uri = match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        };
        let stage = if a.verb == "watch" {
            "ResponseStarted"
        } else {
            "ResponseComplete"
        };
        let verb = if a.verb.is_empty() {
            self.method.as_str().to_ascii_lowercase()
        } else {
            a.verb.clone()
        };
        let mut e = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": self.id.to_string(),
            "stage": stage,
            "requestURI": cut(&uri, MAX_URI),
            "verb": verb,
            "user": user(&self.identity.user),
            "responseStatus": {"metadata": {}, "code": code},
            "requestReceivedTimestamp": time(self.received),
            "stageTimestamp": time(chrono::Utc::now()),
        });
        if let Some(ua) = &self.user_agent {
            e["userAgent"] = json!(ua);
        }
        if let Some(i) = &self.identity.impersonated {
            e["impersonatedUser"] = user(i);
        }
        if a.resource_request {
            let mut r = serde_json::Map::new();
            for (k, v) in [
                ("resource", &a.resource),
                ("namespace", &a.namespace),
                ("name", &a.name),
                ("apiGroup", &a.api_group),
                ("apiVersion", &a.api_version),
                ("subresource", &a.subresource),
            ] {
                if !v.is_empty() {
                    r.insert(k.into(), json!(cut(v, MAX_FIELD)));
                }
            }
            e["objectRef"] = Value::Object(r);
        }
        e
    }

    /// Writes this request's line, answered with `code`, to `sink`.
    pub(crate) fn record(&self, sink: &AuditSink, code: u16) {
        let mut line = serde_json::to_vec(&self.event(code)).unwrap_or_default();
        line.push(b'\n');
        sink.write_line(&line);
    }
}
