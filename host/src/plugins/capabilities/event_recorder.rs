//! [`EventRecorder`]: a plugin's `events.emit`, written as `events.k8s.io/v1` Events in the
//! background, as client-go's `EventRecorder` and `EventCorrelator` do.
//!
//! `emit` never waits: the Event goes into a bounded per-plugin backlog that one task drains in
//! order. A repeat of the same Event (same object, type, reason, action and note) within
//! [`SERIES_WINDOW`] of the first one counts up that Event's `series` instead of creating a new
//! object. Each plugin has a token bucket ([`EVENT_QPS`], [`EVENT_BURST`]); what it cannot
//! afford, what is not granted and what is malformed is dropped and counted in
//! `kubewasm_plugin_events_dropped_total{reason}`. No Event text reaches the host's log, and
//! every line about a dropped or refused Event takes a token of the plugin's
//! [`GuestCausedLog`] first.
//!
//! Events stay inside the grants: the `regarding` object must be one the plugin may read (kind
//! and namespace), and the namespace the Event is written to (the object's, `default` for a
//! cluster-scoped one) one its grants cover; anything else is refused as `outside_grants`, so
//! a plugin cannot write a note about Secret `admin-token` into `kube-system`.
//!
//! What a waiting Event holds (its body as a `serde_json::Value` tree and its series key) is
//! charged to the plugin's memory budget before the body is built, at its strings plus
//! [`EVENT_TREE_BYTES`], and given back once it is written or dropped; an Event the budget
//! cannot hold is dropped as `memory_budget`. The guest's note is copied at its cut length, so
//! a long note lifted out of guest memory is not kept. A series is remembered by a digest of
//! what makes Events the same (not their text): at most [`MAX_SERIES`] entries of a few hundred
//! bytes per plugin, a fixed bound of about 1.5 MiB that is the recorder's own, not charged.
//!
//! Events are written under the plugin's identity, as its `kube` calls are ([`ActingAs`]): with
//! per-plugin accounts the API server's RBAC judges them by the plugin's own Role and its audit
//! log names the plugin, not the host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kubewasm_apimachinery::validation::{
    validate_api_version, validate_dns1123_label, validate_dns1123_subdomain, validate_kind,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::acting_as::ActingAs;
use super::kube_client::ClusterContext;
use crate::plugins::grants::Grants;
use crate::plugins::metrics::{EventDropLabels, EventLabels};
use crate::runtime::{CallMemory, EVENT_TREE_BYTES, EventCall, EventType, GuestCausedLog};
use crate::workqueue::BucketRateLimiter;

/// Repeats within this window of an Event's first occurrence join its series (client-go's
/// correlator uses the same 10 minutes).
pub(crate) const SERIES_WINDOW: Duration = Duration::from_secs(600);
/// Events one plugin may record per second, sustained.
pub(crate) const EVENT_QPS: f64 = 1.0;
/// Events one plugin may record at once (client-go's spam filter burst).
pub(crate) const EVENT_BURST: u32 = 25;
/// Events waiting to be written per plugin; more are dropped.
pub(crate) const EVENT_BACKLOG: usize = 256;
/// Distinct Events remembered for series per plugin (client-go's LRU size).
pub(crate) const MAX_SERIES: usize = 4096;

const TARGET: &str = "kubewasm::plugins::events";
/// The API server's limits on Event fields.
const MAX_REASON: usize = 128;
const MAX_ACTION: usize = 128;
const MAX_NOTE: usize = 1024;

/// Records one plugin's Events.
pub(crate) struct EventRecorder {
    plugin: Arc<str>,
    lines: GuestCausedLog,
    ctx: Arc<ClusterContext>,
    grants: Arc<Grants>,
    limiter: BucketRateLimiter,
    /// `None` when not granted: nothing to drain.
    backlog: Option<tokio::sync::mpsc::Sender<Pending>>,
}

/// A validated Event waiting to be written.
struct Pending {
    namespace: String,
    event_type: EventType,
    body: Value,
    key: SeriesKey,
    /// What the Event is charged to the plugin's budget; given back when it is dropped.
    _held: CallMemory,
}

/// What makes two Events the same occurrence (the object, type, reason, action and note),
/// as a digest: a series entry holds no guest text.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SeriesKey([u8; 32]);

impl SeriesKey {
    fn of(
        o: &crate::runtime::ObjectRef,
        uid: &str,
        event_type: EventType,
        texts: [&str; 3],
    ) -> Self {
        let mut h = Sha256::new();
        let ns = o.namespace.as_deref();
        let fields = [
            o.api_version.as_str(),
            o.kind.as_str(),
            ns.unwrap_or_default(),
            o.name.as_str(),
            uid,
            event_type.as_str(),
        ];
        // Length-prefixed, so no two different field lists hash the same text.
        for f in fields.into_iter().chain(texts) {
            h.update((f.len() as u64).to_le_bytes());
            h.update(f.as_bytes());
        }
        h.update([u8::from(ns.is_some())]);
        Self(h.finalize().into())
    }
}

/// What a validated Event holds while it waits: its tree's strings (the note at its cut
/// length) and the tree itself.
fn pending_bytes(e: &EventCall) -> u64 {
    let note = crate::text::truncate(&e.note, MAX_NOTE).len();
    let strings = e.held_bytes() - e.note.len() + note;
    EVENT_TREE_BYTES + strings as u64
}

/// An Event already written, counted up by repeats.
struct Series {
    name: String,
    first: Instant,
    count: u64,
}

impl EventRecorder {
    /// A recorder for `plugin` acting within `grants`; `dry_run` sends with `dryRun=All`,
    /// `lines` bounds the lines about its dropped Events, `acting` is whose identity they are
    /// written under.
    pub(crate) fn new(
        plugin: &str,
        ctx: Arc<ClusterContext>,
        grants: Arc<Grants>,
        dry_run: bool,
        lines: GuestCausedLog,
        acting: ActingAs,
    ) -> Self {
        let plugin: Arc<str> = plugin.into();
        let backlog = grants.events().then(|| {
            let (tx, rx) = tokio::sync::mpsc::channel(EVENT_BACKLOG);
            let writer = Writer {
                plugin: plugin.clone(),
                lines: lines.clone(),
                ctx: ctx.clone(),
                dry_run,
                acting,
                series: HashMap::new(),
            };
            ctx.host().spawn(writer.run(rx));
            tx
        });
        EventRecorder {
            plugin,
            lines,
            ctx,
            grants,
            limiter: BucketRateLimiter::new(EVENT_QPS, EVENT_BURST),
            backlog,
        }
    }

    /// Whether the grants let the plugin record `event` at all (its `events` grant, the
    /// object it is about and the namespace it would land in).
    pub(crate) fn permits(&self, event: &EventCall) -> bool {
        let o = &event.regarding.object;
        self.grants
            .allows_event_about(
                &o.api_version,
                &o.kind,
                o.namespace.as_deref(),
                event_namespace(o.namespace.as_deref()),
            )
            .is_ok()
    }

    /// Queues `event`, or drops and counts it. The checks run on the guest's strings, cheapest
    /// first, and the Event's body is built only for an Event that passed them all and that
    /// `held` (an account of its own on the plugin's budget) could be charged for.
    pub(crate) fn emit_within(&self, event: EventCall, held: CallMemory) {
        if !self.grants.events() {
            if tracing::enabled!(target: TARGET, tracing::Level::DEBUG) && self.lines.admit() {
                tracing::debug!(target: TARGET, plugin = &*self.plugin, "event dropped: not granted");
            }
            return self.drop_event("not_granted");
        }
        if let Err(why) = validate(&event) {
            if self.lines.admit() {
                tracing::warn!(target: TARGET, plugin = &*self.plugin, why, "event dropped: invalid");
            }
            return self.drop_event("invalid");
        }
        let o = &event.regarding.object;
        let namespace = event_namespace(o.namespace.as_deref());
        if let Err(why) = self.grants.allows_event_about(
            &o.api_version,
            &o.kind,
            o.namespace.as_deref(),
            namespace,
        ) {
            // Kind and namespaces only (validated above): they are what the grants are about,
            // and no text of the Event reaches the log.
            if self.lines.admit() {
                tracing::warn!(target: TARGET, plugin = &*self.plugin, why,
                    kind = %o.kind, regarding_namespace = o.namespace.as_deref().unwrap_or(""),
                    event_namespace = %namespace,
                    "event refused: outside the plugin's grants");
            }
            return self.drop_event("outside_grants");
        }
        if !self.limiter.try_acquire() {
            return self.drop_event("rate_limited");
        }
        let Some(backlog) = &self.backlog else { return };
        if held.charge(pending_bytes(&event)).is_err() {
            return self.drop_event("memory_budget");
        }
        if backlog.try_send(self.pending(event, held)).is_err() {
            self.drop_event("backlog");
        }
    }

    fn drop_event(&self, reason: &'static str) {
        self.ctx
            .metrics()
            .events_dropped
            .get_or_create(&EventDropLabels {
                plugin: self.plugin.to_string(),
                reason,
            })
            .inc();
    }

    /// The Event body (without name and series) of an Event [`validate`] accepted.
    fn pending(&self, e: EventCall, held: CallMemory) -> Pending {
        let o = &e.regarding.object;
        // A new string at the cut length: truncating the guest's in place would keep its
        // whole allocation.
        let note = crate::text::truncate(&e.note, MAX_NOTE).to_owned();
        let namespace = event_namespace(o.namespace.as_deref()).to_string();
        let mut regarding = json!({
            "apiVersion": o.api_version, "kind": o.kind, "name": o.name,
        });
        if let Some(ns) = &o.namespace {
            regarding["namespace"] = json!(ns);
        }
        if !e.regarding.uid.is_empty() {
            regarding["uid"] = json!(e.regarding.uid);
        }
        if !e.regarding.resource_version.is_empty() {
            regarding["resourceVersion"] = json!(e.regarding.resource_version);
        }
        let body = json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"namespace": namespace},
            "regarding": regarding,
            "type": e.event_type.as_str(),
            "reason": e.reason,
            "action": e.action,
            "note": note,
            "reportingController": format!("kubewasm/{}", self.plugin),
            "reportingInstance": self.ctx.instance(),
        });
        let key = SeriesKey::of(
            o,
            &e.regarding.uid,
            e.event_type,
            [&e.reason, &e.action, &note],
        );
        Pending {
            namespace,
            event_type: e.event_type,
            body,
            key,
            _held: held,
        }
    }
}

/// Checks the guest's strings of an Event: names by Kubernetes' syntax, the texts by the API
/// server's length limits (a longer note is cut when the body is built); `Err` names the field.
fn validate(e: &EventCall) -> Result<(), &'static str> {
    let o = &e.regarding.object;
    validate_api_version(&o.api_version).map_err(|_| "regarding.apiVersion")?;
    validate_kind(&o.kind).map_err(|_| "regarding.kind")?;
    if let Some(ns) = &o.namespace {
        validate_dns1123_label(ns).map_err(|_| "regarding.namespace")?;
    }
    let short = |s: &str, max: usize| !s.is_empty() && s.len() <= max;
    validate_dns1123_subdomain(&o.name).map_err(|_| "regarding.name")?;
    if e.regarding.uid.len() > 128 || e.regarding.resource_version.len() > 128 {
        return Err("regarding.uid");
    }
    if !short(&e.reason, MAX_REASON) {
        return Err("reason");
    }
    if !short(&e.action, MAX_ACTION) {
        return Err("action");
    }
    Ok(())
}

/// Drains one plugin's backlog in order, so repeats of one Event never race its creation.
struct Writer {
    plugin: Arc<str>,
    lines: GuestCausedLog,
    ctx: Arc<ClusterContext>,
    dry_run: bool,
    acting: ActingAs,
    series: HashMap<SeriesKey, Series>,
}

impl Writer {
    async fn run(mut self, mut rx: tokio::sync::mpsc::Receiver<Pending>) {
        while let Some(p) = rx.recv().await {
            let event_type = p.event_type;
            match self.write(p).await {
                Ok(()) => self.counted("recorded", event_type),
                Err(e) => {
                    if self.lines.admit() {
                        tracing::warn!(target: TARGET, plugin = &*self.plugin, error = %e,
                            "event not recorded: the API server refused it");
                    }
                    self.counted("failed", event_type);
                }
            }
        }
    }

    fn counted(&self, what: &'static str, event_type: EventType) {
        let m = self.ctx.metrics();
        if what == "recorded" {
            m.events_recorded
                .get_or_create(&EventLabels {
                    plugin: self.plugin.to_string(),
                    r#type: event_type.as_str(),
                })
                .inc();
        } else {
            m.events_dropped
                .get_or_create(&EventDropLabels {
                    plugin: self.plugin.to_string(),
                    reason: "failed",
                })
                .inc();
        }
    }

    /// Counts `p` into its series when one is open, else creates a new Event.
    async fn write(&mut self, p: Pending) -> Result<(), kube::Error> {
        let now = Instant::now();
        self.series
            .retain(|_, s| now.duration_since(s.first) < SERIES_WINDOW);
        let query = self.write_query();
        if let Some(s) = self.series.get_mut(&p.key) {
            s.count += 1;
            let patch = json!({"series": {"count": s.count, "lastObservedTime": micro_time()}});
            let path = format!(
                "/apis/events.k8s.io/v1/namespaces/{}/events/{}{query}",
                p.namespace, s.name
            );
            let req = http::Request::patch(path)
                .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
                .body(serde_json::to_vec(&patch).unwrap_or_default())
                .map_err(kube::Error::HttpError)?;
            match self.send(req).await {
                // The Event expired or was deleted: start a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                other => return other,
            }
        }
        let regarding_name = p.body["regarding"]["name"].as_str().unwrap_or("event");
        // client-go's naming: the object's name and a timestamp, unique per replica and time.
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let stem = crate::text::truncate(regarding_name, 236);
        let name = format!("{stem}.{nanos:x}");
        let mut body = p.body;
        body["metadata"]["name"] = json!(name);
        body["eventTime"] = json!(micro_time());
        let path = format!(
            "/apis/events.k8s.io/v1/namespaces/{}/events{}",
            p.namespace,
            self.write_query()
        );
        let req = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).unwrap_or_default())
            .map_err(kube::Error::HttpError)?;
        self.send(req).await?;
        if self.series.len() >= MAX_SERIES {
            // Forget the oldest series rather than grow: a later repeat starts a new Event.
            if let Some(oldest) = self
                .series
                .iter()
                .min_by_key(|(_, s)| s.first)
                .map(|(k, _)| *k)
            {
                self.series.remove(&oldest);
            }
        }
        self.series.insert(
            p.key,
            Series {
                name,
                first: now,
                count: 1,
            },
        );
        Ok(())
    }

    /// The query of every Event write: the host's field manager (the Event is the host's
    /// record of what the plugin reported, written as the plugin), and `dryRun=All` on a
    /// dry-run host.
    fn write_query(&self) -> String {
        let dry = if self.dry_run { "&dryRun=All" } else { "" };
        format!("?fieldManager={}{dry}", crate::identity::FIELD_MANAGER)
    }

    /// Sends `req` as the plugin; one that cannot carry its identity is not sent.
    async fn send(&self, mut req: http::Request<Vec<u8>>) -> Result<(), kube::Error> {
        self.acting
            .mark(&mut req)
            .map_err(|e| kube::Error::Service(e.into()))?;
        tokio::time::timeout(
            super::kube_client::KUBE_CALL_TIMEOUT,
            self.ctx.client().request_text(req),
        )
        .await
        .map_err(|_| kube::Error::Service("timed out".into()))?
        .map(drop)
    }
}

/// The namespace an Event about an object in `regarding` (`None`: cluster-scoped) is written
/// to: the object's own, and `default` for cluster-scoped objects, as client-go puts them.
fn event_namespace(regarding: Option<&str>) -> &str {
    regarding.unwrap_or("default")
}

/// Now as a Kubernetes `MicroTime`.
fn micro_time() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}
