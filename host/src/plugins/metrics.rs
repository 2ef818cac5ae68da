//! Per-plugin Prometheus metrics: what operators alert on when a handler misbehaves.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::runtime::CallKind;

/// How a failed call failed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ErrorKind {
    /// The handler asked for redelivery.
    Retry,
    /// The handler reported a permanent failure.
    Fatal,
    /// The guest trapped (panic, unreachable, uncaught exception).
    Trap,
    /// The guest ran past its CPU deadline.
    Deadline,
    /// The guest hit its memory cap.
    OutOfMemory,
    /// A fresh instance could not be created.
    Instantiate,
}

/// Labels of per-call series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// The export called.
    pub call: CallKind,
}

/// Labels of per-error series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// The failure mode.
    pub kind: ErrorKind,
}

/// Labels of per-plugin series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
}

/// The plugin layer's metric families; cheap to clone (all handles are shared).
#[derive(Clone)]
pub struct PluginMetrics {
    /// Calls into handlers, by export.
    pub events: Family<CallLabels, Counter>,
    /// Failed calls, by failure mode.
    pub errors: Family<ErrorLabels, Counter>,
    /// Notifications scheduled again after a `retry`.
    pub retries: Family<PluginLabels, Counter>,
    /// Times a plugin was put in quarantine after consecutive traps.
    pub quarantines: Family<PluginLabels, Counter>,
    /// Wall time of one call into the guest.
    pub call_seconds: Family<PluginLabels, Histogram>,
    /// Notifications waiting for the plugin.
    pub queue_depth: Family<PluginLabels, Gauge>,
    /// Notifications folded into another at the queue cap (`max-queued`).
    pub coalesced: Family<PluginLabels, Counter>,
    /// Queued work a sharded plugin did not get because its object's slot was no longer this
    /// replica's when the call would have started (moved away, or the replica fenced).
    pub shard_refused: Family<PluginLabels, Counter>,
    /// Worker threads restarted after a panic.
    pub worker_restarts: Family<PluginLabels, Counter>,
    /// Calls in flight (at most the plugin's `concurrency`).
    pub calls_in_flight: Family<PluginLabels, Gauge>,
    /// Guest instances the plugin's worker holds (created lazily, at most `concurrency`).
    pub instances: Family<PluginLabels, Gauge>,
    /// Loads, swaps and failed loads.
    pub loads: Family<LoadLabels, Counter>,
    /// `cache.list` calls answered with an error instead of objects.
    pub cache_list_refused: Family<CacheRefusalLabels, Counter>,
    /// `kube` calls by verb and result code (403 for a call no grant covers, 429 for the
    /// plugin's own rate limit).
    pub kube_requests: Family<KubeRequestLabels, Counter>,
    /// Duration of one `kube` call, rate-limit wait included.
    pub kube_request_seconds: Family<VerbLabels, Histogram>,
    /// `kube` calls the plugin's read or write bucket delayed or refused (429).
    pub kube_rate_limited: Family<RateLimitLabels, Counter>,
    /// Events recorded (created or counted into a series), by type.
    pub events_recorded: Family<EventLabels, Counter>,
    /// Events not recorded, by reason.
    pub events_dropped: Family<EventDropLabels, Counter>,
    /// Projected object copies held for `metadata-only`/`fields` subscriptions (all
    /// projections; one per object version and distinct projection in use).
    pub projections_cached: Gauge,
    /// Bytes of projected JSON those copies hold.
    pub projection_bytes: Gauge,
    /// Projected copies made: one per object version and distinct projection, however many
    /// plugins share it.
    pub projections_made: Counter,
}

/// Labels of `kube` call series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeRequestLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// `get`, `create`, `apply`, `patch`, `update` or `delete`.
    pub verb: String,
    /// HTTP status code of the answer (the host's own for refusals).
    pub code: String,
}

/// Labels of rate-limited `kube` calls.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RateLimitLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// `read` (`kube.get`) or `write`.
    pub class: &'static str,
    /// `delayed` (waited for a token) or `refused` (429).
    pub outcome: &'static str,
}

/// Labels of per-verb latency series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// The verb.
    pub verb: String,
}

/// Labels of recorded Events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// `Normal` or `Warning`.
    pub r#type: &'static str,
}

/// Labels of dropped Events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventDropLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// `not_granted`, `outside_grants` (about an object or into a namespace the grants do not
    /// cover), `invalid`, `rate_limited`, `backlog` or `failed`.
    pub reason: &'static str,
}

/// Labels of refused `cache.list` calls.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheRefusalLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// `too_many_objects`, `too_many_bytes` (over the per-call bound), `not_subscribed` or
    /// `invalid_selector`.
    pub reason: &'static str,
}

/// Labels of plugin lifecycle series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoadLabels {
    /// Plugin name (the file stem).
    pub plugin: String,
    /// `loaded`, `swapped`, `failed` or `unloaded`.
    pub result: &'static str,
}

impl PluginMetrics {
    /// Creates the families and registers them under the `kubewasm_plugin` prefix.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        let r = registry.sub_registry_with_prefix("kubewasm_plugin");
        r.register("calls", "Calls into handler exports", m.events.clone());
        r.register(
            "errors",
            "Failed handler calls by failure mode",
            m.errors.clone(),
        );
        r.register(
            "retries",
            "Notifications redelivered after a retry error",
            m.retries.clone(),
        );
        r.register(
            "quarantines",
            "Quarantines after consecutive traps",
            m.quarantines.clone(),
        );
        r.register(
            "call_duration_seconds",
            "Duration of one handler call",
            m.call_seconds.clone(),
        );
        r.register(
            "queue_depth",
            "Notifications waiting for the handler",
            m.queue_depth.clone(),
        );
        r.register(
            "queue_coalesced",
            "Notifications coalesced per object because the queue reached max-queued",
            m.coalesced.clone(),
        );
        r.register(
            "shard_refused",
            "Queued notifications dropped because their object's shard slot was no longer this replica's",
            m.shard_refused.clone(),
        );
        r.register(
            "worker_restarts",
            "Plugin worker threads restarted after a panic",
            m.worker_restarts.clone(),
        );
        r.register(
            "calls_in_flight",
            "Handler calls in flight (at most the plugin's concurrency)",
            m.calls_in_flight.clone(),
        );
        r.register(
            "instances",
            "Guest instances held by the plugin's worker (at most its concurrency)",
            m.instances.clone(),
        );
        r.register(
            "lifecycle",
            "Plugin loads, swaps, failures and unloads",
            m.loads.clone(),
        );
        r.register(
            "cache_list_refused",
            "cache.list calls refused, by reason (over the per-call bound, unsubscribed kind, bad selector)",
            m.cache_list_refused.clone(),
        );
        r.register(
            "kube_requests",
            "Kubernetes API calls of handlers, by verb and result code",
            m.kube_requests.clone(),
        );
        r.register(
            "kube_request_duration_seconds",
            "Duration of one Kubernetes API call of a handler",
            m.kube_request_seconds.clone(),
        );
        r.register(
            "kube_rate_limited",
            "Kubernetes API calls of handlers delayed or refused by the plugin's read or write rate limit",
            m.kube_rate_limited.clone(),
        );
        r.register(
            "events",
            "Events recorded by handlers, by type",
            m.events_recorded.clone(),
        );
        r.register(
            "events_dropped",
            "Events of handlers not recorded, by reason",
            m.events_dropped.clone(),
        );
        r.register(
            "projections_cached",
            "Projected object copies held for metadata-only/fields subscriptions",
            m.projections_cached.clone(),
        );
        r.register(
            "projection_bytes",
            "Bytes of projected object JSON held for metadata-only/fields subscriptions",
            m.projection_bytes.clone(),
        );
        r.register(
            "projections",
            "Projected object copies made, one per object version and distinct projection",
            m.projections_made.clone(),
        );
        m
    }

    /// Families not attached to any registry, for tests and benchmarks.
    pub fn unregistered() -> Self {
        PluginMetrics {
            events: Family::default(),
            errors: Family::default(),
            retries: Family::default(),
            quarantines: Family::default(),
            call_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_01, 4.0, 12))
            }),
            queue_depth: Family::default(),
            coalesced: Family::default(),
            shard_refused: Family::default(),
            worker_restarts: Family::default(),
            calls_in_flight: Family::default(),
            instances: Family::default(),
            loads: Family::default(),
            cache_list_refused: Family::default(),
            kube_requests: Family::default(),
            kube_request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_1, 4.0, 10))
            }),
            kube_rate_limited: Family::default(),
            events_recorded: Family::default(),
            events_dropped: Family::default(),
            projections_cached: Gauge::default(),
            projection_bytes: Gauge::default(),
            projections_made: Counter::default(),
        }
    }
}
