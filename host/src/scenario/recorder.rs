//! [`Recorder`]: the runner's tap on everything a handler does, turned into transcript entries
//! as it happens, and the HTTP stub that answers its outbound requests.

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use super::file::{ObjectKey, Stub};
use super::transcript::{Entry, EntryKind};
use crate::runtime::{
    ApiError, CallEnded, CallKind, CallOutcome, EventCall, GuestLogLevel, HttpStub, KubeCall,
    ObjectRef, Observer, StubRequest, StubResponse,
};

/// Records one scenario's transcript; see the module doc.
#[derive(Default)]
pub struct Recorder {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    /// Where the call begun last began: a call's entry goes there when it ends, before what
    /// the guest did during it. With several calls in flight what they did interleaves, but
    /// each object's calls stay in order (they never overlap, and every insertion lands after
    /// the entries of calls already ended), which is all a transcript compares.
    mark: usize,
    stubs: Vec<(Stub, u32)>,
}

impl Recorder {
    /// Takes the entries recorded since the last take.
    pub fn take(&self) -> Vec<Entry> {
        let mut st = self.state.lock();
        st.mark = 0;
        std::mem::take(&mut st.entries)
    }

    /// Entries recorded since the last take.
    pub fn len(&self) -> usize {
        self.state.lock().entries.len()
    }

    /// Whether nothing was recorded since the last take.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces the HTTP stubs.
    pub fn set_stubs(&self, stubs: &[Stub]) {
        self.state.lock().stubs = stubs.iter().map(|s| (s.clone(), 0)).collect();
    }

    fn push(&self, e: Entry) {
        self.state.lock().entries.push(e);
    }
}

/// Calls, writes, Events and log lines, each as it happens. HTTP requests are recorded by the
/// stub that answers them ([`HttpStub`] below), which sees their bodies.
impl Observer for Recorder {
    fn call_started(&self, _plugin: &str, _call: CallKind) {
        let mut st = self.state.lock();
        st.mark = st.entries.len();
    }

    fn call_ended(&self, _plugin: &str, call: &CallEnded<'_>) {
        let entry = match &call.object {
            Some(o) => {
                let (name, flag_key) = match call.call {
                    CallKind::Add => ("on-add", "is-in-initial-list"),
                    CallKind::Update => ("on-update", "is-sync"),
                    CallKind::Delete => ("on-delete", "final-state-unknown"),
                    CallKind::Synced => ("on-synced", ""),
                    // The key of the primary kind; whether it is part of the first pass.
                    CallKind::Reconcile => ("reconcile", "initial"),
                    CallKind::KeysFor => ("keys-for", ""),
                };
                let mut e = Entry::new(EntryKind::Call, name)
                    .with("object", format!("{}/{} {}", o.api_version, o.kind, o.key));
                if !flag_key.is_empty() {
                    e = e.with(flag_key, o.flag);
                }
                with_outcome(e, call.outcome)
            }
            None => with_outcome(Entry::new(EntryKind::Call, "on-synced"), call.outcome),
        };
        let mut st = self.state.lock();
        let at = st.mark.min(st.entries.len());
        st.entries.insert(at, entry);
        st.mark = st.entries.len();
    }

    fn log_line(&self, _plugin: &str, level: GuestLogLevel, message: &str) {
        let level = format!("{level:?}").to_ascii_lowercase();
        self.push(Entry::new(EntryKind::Log, level).with("message", message));
    }

    fn kube_request(&self, _plugin: &str, call: &KubeCall, result: Result<u16, &ApiError>) {
        self.kube(call, result);
    }

    fn event(&self, _plugin: &str, ev: &EventCall) {
        let o = &ev.regarding.object;
        self.push(
            Entry::new(EntryKind::Event, ev.event_type.as_str())
                .with("regarding", reference(o))
                .with("reason", ev.reason.as_str())
                .with("action", ev.action.as_str())
                .with("note", ev.note.as_str()),
        );
    }
}

fn with_outcome(e: Entry, outcome: &CallOutcome) -> Entry {
    match outcome {
        CallOutcome::Ok => e.with("result", "ok"),
        CallOutcome::Retry(m) => e.with("result", "retry").with("message", m.as_str()),
        CallOutcome::Fatal(m) => e.with("result", "fatal").with("message", m.as_str()),
        CallOutcome::Failed(m) => e.with("result", "trap").with("message", m.as_str()),
        CallOutcome::RequeueAfter(after) => e
            .with("result", "requeue-after")
            .with("after-ms", after.as_millis() as u64),
    }
}

/// JSON text as a value (a string when it is not JSON).
fn json_or_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// An object a call named, as transcripts write it.
fn reference(o: &ObjectRef) -> String {
    ObjectKey {
        api_version: o.api_version.clone(),
        kind: o.kind.clone(),
        namespace: o.namespace.clone(),
        name: o.name.clone(),
    }
    .to_string()
}

impl Recorder {
    /// A write as a transcript entry (reads are not recorded).
    fn kube(&self, call: &KubeCall, result: Result<u16, &ApiError>) {
        let of_json = |json: &str| {
            let v = json_or_text(json);
            let r =
                ObjectKey::of(&v).map_or_else(|| "(unnamed object)".to_string(), |k| k.to_string());
            (r, v)
        };
        let mut e = match call {
            KubeCall::Get(_) => return,
            KubeCall::Create { json, opts } | KubeCall::Apply { json, opts } => {
                let verb = if matches!(call, KubeCall::Create { .. }) {
                    "create"
                } else {
                    "apply"
                };
                let (r, body) = of_json(json);
                let mut e = Entry::new(EntryKind::Write, verb).with("object", r);
                if opts.dry_run {
                    e = e.with("dry-run", true);
                }
                if opts.force {
                    e = e.with("force", true);
                }
                e.with("body", body)
            }
            KubeCall::Replace {
                json,
                subresource,
                opts,
            } => {
                let (r, body) = of_json(json);
                let mut e = Entry::new(EntryKind::Write, "replace").with("object", r);
                if let Some(s) = subresource {
                    e = e.with("subresource", s.as_str());
                }
                if opts.dry_run {
                    e = e.with("dry-run", true);
                }
                e.with("body", body)
            }
            KubeCall::Patch {
                target,
                patch_type,
                patch,
                subresource,
                opts,
            } => {
                let t = target;
                let mut e = Entry::new(EntryKind::Write, "patch").with("object", reference(t));
                if let Some(s) = subresource {
                    e = e.with("subresource", s.as_str());
                }
                let pt = match patch_type {
                    crate::runtime::PatchType::Merge => "merge",
                    crate::runtime::PatchType::Json => "json",
                    crate::runtime::PatchType::Strategic => "strategic",
                };
                e = e.with("patch-type", pt);
                if opts.dry_run {
                    e = e.with("dry-run", true);
                }
                e.with("body", json_or_text(patch))
            }
            KubeCall::Delete { target, .. } => {
                let t = target;
                Entry::new(EntryKind::Write, "delete").with("object", reference(t))
            }
        };
        e = match result {
            Ok(code) => e.with("code", code),
            Err(err) => e
                .with("code", err.code)
                .with("message", err.message.as_str()),
        };
        self.push(e);
    }
}

impl HttpStub for Recorder {
    fn respond(&self, _plugin: &str, request: StubRequest) -> StubResponse {
        let mut st = self.state.lock();
        let found = st.stubs.iter_mut().find(|(s, used)| {
            s.times.is_none_or(|t| *used < t)
                && s.method.as_deref().is_none_or(|m| m == request.method)
                && match s.url.strip_suffix('*') {
                    Some(prefix) => request.url.starts_with(prefix),
                    None => request.url == s.url,
                }
        });
        let response = match found {
            Some((stub, used)) => {
                *used += 1;
                StubResponse {
                    status: stub.status,
                    headers: stub.headers.clone(),
                    body: Bytes::from(stub.body.clone()),
                }
            }
            None => StubResponse {
                status: 502,
                headers: vec![("content-type".into(), "text/plain".into())],
                body: Bytes::from(format!(
                    "kubewasm test: no stub answers {} {}",
                    request.method, request.url
                )),
            },
        };
        let mut e = Entry::new(EntryKind::Http, request.method.as_str())
            .with("url", request.url.as_str())
            .with("status", response.status);
        if !request.body.is_empty() {
            e = e.with(
                "body",
                json_or_text(&String::from_utf8_lossy(&request.body)),
            );
        }
        st.entries.push(e);
        response
    }
}
