//! Prometheus figures of the runtime: instantiations and discarded instances per plugin,
//! guest log lines and guest-caused host lines dropped by the rate limits, compile cache effectiveness, plugins' outbound
//! HTTP requests.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    plugin: String,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    plugin: String,
    /// A granted origin (`scheme://host:port`), `denied`, or `other` past the per-plugin bound.
    origin: String,
    /// The response status, or what ended the exchange without one.
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    plugin: String,
    /// The bound that refused: `plugin` (`http-max-inflight`) or `host` (host-wide).
    bound: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    plugin: String,
    /// `linear` (instances' linear memory), `host` (what the host holds for them) or `limit`.
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CompileLabels {
    result: &'static str,
}

/// Handles to the runtime's counters; clones share the same series.
#[derive(Clone, Debug)]
pub struct RuntimeMetrics {
    instantiations: Family<PluginLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    compiles: Family<CompileLabels, Counter>,
    guest_log_dropped: Family<PluginLabels, Counter>,
    host_log_dropped: Family<PluginLabels, Counter>,
    http_requests: Family<HttpLabels, Counter>,
    http_seconds: Family<PluginLabels, Histogram>,
    http_open: Family<PluginLabels, Gauge>,
    http_refused: Family<RefusalLabels, Counter>,
    budget: Family<BudgetLabels, Gauge>,
    budget_refused: Family<BudgetLabels, Counter>,
    pool_slots: Family<PluginLabels, Gauge>,
    pool_short: Family<PluginLabels, Counter>,
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        Self {
            instantiations: Family::default(),
            failures: Family::default(),
            compiles: Family::default(),
            guest_log_dropped: Family::default(),
            host_log_dropped: Family::default(),
            http_requests: Family::default(),
            // 1 ms to about 33 s.
            http_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            http_open: Family::default(),
            http_refused: Family::default(),
            budget: Family::default(),
            budget_refused: Family::default(),
            pool_slots: Family::default(),
            pool_short: Family::default(),
        }
    }
}

impl RuntimeMetrics {
    /// Registers `kubewasm_runtime_*` series in `registry` (pass the root registry: names are
    /// already prefixed).
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "kubewasm_runtime_instantiations",
            "Handler instances created, including fresh ones after a failed call",
            m.instantiations.clone(),
        );
        registry.register(
            "kubewasm_runtime_instance_failures",
            "Calls that discarded their instance, by cause (trap, deadline, oom, instantiate)",
            m.failures.clone(),
        );
        registry.register(
            "kubewasm_runtime_compiles",
            "Component loads by result: hit (disk cache), miss (compiled, cached), uncached",
            m.compiles.clone(),
        );
        registry.register(
            "kubewasm_runtime_guest_log_dropped",
            "Guest log, stdout and stderr lines dropped by the per-plugin rate limit",
            m.guest_log_dropped.clone(),
        );
        registry.register(
            "kubewasm_runtime_host_log_dropped",
            "Host log lines caused by a plugin (refusals, retries, failures) dropped by the \
             per-plugin rate limit",
            m.host_log_dropped.clone(),
        );
        registry.register(
            "kubewasm_plugin_http_requests",
            "Outbound HTTP requests of plugins by origin and result: the status code, or denied, \
             ip_denied, limit, dry_run, invalid, timeout, too_large, connect, tls or error",
            m.http_requests.clone(),
        );
        registry.register(
            "kubewasm_plugin_http_request_duration_seconds",
            "Time from a plugin's HTTP request until its response headers (or its failure)",
            m.http_seconds.clone(),
        );
        registry.register(
            "kubewasm_plugin_http_open_connections",
            "Outgoing HTTP requests of a plugin open now (connecting, waiting or streaming a body)",
            m.http_open.clone(),
        );
        registry.register(
            "kubewasm_plugin_http_connections_refused",
            "Outgoing HTTP requests refused for want of a connection, by bound: plugin \
             (http-max-inflight) or host (the host-wide bound)",
            m.http_refused.clone(),
        );
        registry.register(
            "kubewasm_runtime_memory_budget_bytes",
            "A plugin's memory budget (kind=limit) and what its instances use of it now: linear \
             memory (kind=linear) and what the host holds for them (kind=host)",
            m.budget.clone(),
        );
        registry.register(
            "kubewasm_runtime_memory_budget_refused",
            "Memory growths and host calls refused because the plugin's instances would exceed \
             its memory budget, by kind (linear, host)",
            m.budget_refused.clone(),
        );
        registry.register(
            "kubewasm_runtime_pool_slots",
            "Instance slots of the engine's pool reserved by a plugin (one per call it may run at \
             once)",
            m.pool_slots.clone(),
        );
        registry.register(
            "kubewasm_runtime_pool_short",
            "Loads of a plugin that got fewer pool slots than its concurrency, or none (refused)",
            m.pool_short.clone(),
        );
        m
    }

    /// Counters that go nowhere, for tests and one-shot tools such as `kubewasm check`.
    pub fn unregistered() -> Self {
        Self::default()
    }

    pub(crate) fn instantiated(&self, plugin: &str) {
        self.instantiations
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    pub(crate) fn failed(&self, plugin: &str, cause: &'static str) {
        self.failures
            .get_or_create(&FailureLabels {
                plugin: plugin.to_owned(),
                cause,
            })
            .inc();
    }

    /// The dropped-lines counter of `plugin`, looked up once per instance rather than per line.
    pub(crate) fn guest_log_dropped_counter(&self, plugin: &str) -> Counter {
        self.guest_log_dropped
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .clone()
    }

    /// The counter of host lines `plugin` caused that were dropped, looked up once per load.
    pub(crate) fn host_log_dropped_counter(&self, plugin: &str) -> Counter {
        self.host_log_dropped
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .clone()
    }

    pub(crate) fn compiled(&self, result: &'static str) {
        self.compiles.get_or_create(&CompileLabels { result }).inc();
    }

    /// Counts one outbound HTTP exchange that ended with `code`.
    pub(crate) fn http_request(&self, plugin: &str, origin: &str, code: &str) {
        self.http_requests
            .get_or_create(&HttpLabels {
                plugin: plugin.to_owned(),
                origin: origin.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    /// Records how long an exchange took to its response headers (or failure).
    pub(crate) fn http_latency(&self, plugin: &str, seconds: f64) {
        self.http_seconds
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .observe(seconds);
    }

    /// The open-connections gauge of `plugin`, looked up once per instance.
    pub(crate) fn http_open_gauge(&self, plugin: &str) -> Gauge {
        self.http_open
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .clone()
    }

    /// Counts a request refused by `bound` (`plugin` or `host`).
    pub(crate) fn http_refused(&self, plugin: &str, bound: &'static str) {
        self.http_refused
            .get_or_create(&RefusalLabels {
                plugin: plugin.to_owned(),
                bound,
            })
            .inc();
    }

    /// Outgoing requests of `plugin` open now (tests and diagnostics).
    pub fn http_open_connections(&self, plugin: &str) -> i64 {
        self.http_open_gauge(plugin).get()
    }

    /// Requests of `plugin` refused by `bound` (`plugin` or `host`) so far.
    pub fn http_connections_refused(&self, plugin: &str, bound: &'static str) -> u64 {
        self.http_refused
            .get_or_create(&RefusalLabels {
                plugin: plugin.to_owned(),
                bound,
            })
            .get()
    }

    /// Outbound HTTP exchanges of `plugin` to `origin` that ended with `code` (tests).
    pub fn http_requests(&self, plugin: &str, origin: &str, code: &str) -> u64 {
        self.http_requests
            .get_or_create(&HttpLabels {
                plugin: plugin.to_owned(),
                origin: origin.to_owned(),
                code: code.to_owned(),
            })
            .get()
    }

    /// Instances created for `plugin` so far (for tests and diagnostics).
    pub fn instantiations(&self, plugin: &str) -> u64 {
        self.instantiations
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .get()
    }

    /// Calls of `plugin` that discarded the instance for `cause` (`trap`, `deadline`, `oom`,
    /// `instantiate`).
    pub fn failures(&self, plugin: &str, cause: &'static str) -> u64 {
        self.failures
            .get_or_create(&FailureLabels {
                plugin: plugin.to_owned(),
                cause,
            })
            .get()
    }

    /// Guest output lines of `plugin` dropped by the rate limit so far.
    pub fn guest_log_dropped(&self, plugin: &str) -> u64 {
        self.guest_log_dropped_counter(plugin).get()
    }

    /// Host lines caused by `plugin` that its rate limit dropped so far.
    pub fn host_log_dropped(&self, plugin: &str) -> u64 {
        self.host_log_dropped_counter(plugin).get()
    }

    /// The budget gauge of `plugin` for `kind` (`linear`, `host`, `limit`), looked up once per
    /// load.
    pub(crate) fn budget_gauge(&self, plugin: &str, kind: &'static str) -> Gauge {
        self.budget
            .get_or_create(&BudgetLabels {
                plugin: plugin.to_owned(),
                kind,
            })
            .clone()
    }

    /// The counter of `plugin`'s charges of `kind` refused by its budget.
    pub(crate) fn budget_refused_counter(&self, plugin: &str, kind: &'static str) -> Counter {
        self.budget_refused
            .get_or_create(&BudgetLabels {
                plugin: plugin.to_owned(),
                kind,
            })
            .clone()
    }

    /// Charges of `kind` (`linear`, `host`) that `plugin`'s memory budget refused so far.
    pub fn budget_refused(&self, plugin: &str, kind: &'static str) -> u64 {
        self.budget_refused_counter(plugin, kind).get()
    }

    /// Sets the pool slots `plugin` holds now.
    pub(crate) fn set_pool_slots(&self, plugin: &str, slots: u32) {
        self.pool_slots
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .set(i64::from(slots));
    }

    /// Counts a load of `plugin` that got fewer pool slots than it asked for.
    pub(crate) fn pool_short(&self, plugin: &str) {
        self.pool_short
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    /// Pool slots `plugin` holds now.
    pub fn pool_slots(&self, plugin: &str) -> i64 {
        self.pool_slots
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .get()
    }

    /// Bytes of `kind` (`linear`, `host`, `limit`) in `plugin`'s memory budget now.
    pub fn budget_bytes(&self, plugin: &str, kind: &'static str) -> i64 {
        self.budget_gauge(plugin, kind).get()
    }
}
