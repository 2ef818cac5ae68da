//! [`MemoryBudget`]: one plugin's memory, as one number across all its instances: their linear
//! memories and what the host holds for them (HTTP header sets, requests and their unsent
//! bodies, every other WASI resource). Each is charged before it is made and refused past the
//! plugin's `memory`:
//!
//! - **Linear memory** is charged by the store's limiter at every `memory.grow`, before the
//!   pages exist; a growth past the budget traps (`CallError::OutOfMemory`).
//! - **Host-side resources** are measured from the instance's resource table when the guest
//!   enters the host, before the host function runs ([`HostAccount::settle`]): the difference to
//!   what the instance was charged is charged (or given back). When the plugin is over its
//!   budget the host call is refused with a trap, so the allocation it would make never
//!   happens. What one host call can add before the next check is itself capped (a header set
//!   at [`MAX_HTTP_FIELDS_BYTES`](super::store::MAX_HTTP_FIELDS_BYTES), a path or authority by
//!   the `http` crate's 64 KiB, a body write at [`BODY_CHUNK_BYTES`]), and a body is charged
//!   its whole buffer ([`BODY_BYTES`]) from the moment it exists, so the write that would fill it
//!   is refused when the body does not fit.
//!
//! Everything an instance was charged is given back when its store is dropped (a failed call,
//! an idle instance released, an unload). The plugins layer reads [`MemoryBudget::used`] and
//! [`MemoryBudget::limit`] for `/plugins` and `kubewasm check`; the metrics are
//! `kubewasm_runtime_memory_budget_bytes{plugin,kind}` and
//! `kubewasm_runtime_memory_budget_refused_total{plugin,kind}`.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use wasmtime::component::ResourceTable;
use wasmtime_wasi_http::FieldMap;
use wasmtime_wasi_http::p2::body::HostOutgoingBody;
use wasmtime_wasi_http::p2::types::HostOutgoingRequest;

use super::metrics::RuntimeMetrics;

/// Largest write to an outgoing body's stream (wasmtime-wasi-http's `check-write` answer).
/// wasmtime-wasi-http's default is 1 MiB; a handler's request bodies are small, and every
/// unsent body holds up to two of these on the host.
pub(crate) const BODY_CHUNK_BYTES: usize = 64 << 10;
/// Writes an outgoing body buffers before the network takes them.
pub(crate) const BODY_BUFFER_CHUNKS: usize = 1;
/// What one outgoing body may hold on the host: its channel keeps `BODY_BUFFER_CHUNKS + 1`
/// writes.
pub const BODY_BYTES: u64 = ((BODY_BUFFER_CHUNKS + 1) * BODY_CHUNK_BYTES) as u64;
/// What any resource-table entry is charged at least: the slot, its box and the small state of
/// a pollable, stream or future.
pub const ENTRY_BYTES: u64 = 256;
/// Charged per header on top of its name and value (`http::HeaderMap`'s bucket and index).
const HEADER_OVERHEAD: u64 = 64;

/// What a charge is for, as the metrics and the refusal name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetKind {
    /// Linear memory of the plugin's instances.
    Linear,
    /// What the host holds for the guest: resources, header sets, request bodies.
    Host,
}

impl BudgetKind {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            BudgetKind::Linear => "linear",
            BudgetKind::Host => "host",
        }
    }
}

/// A charge that did not fit: traps the guest (it becomes `CallError::OutOfMemory`).
#[derive(Debug, thiserror::Error)]
#[error(
    "plugin {plugin}: {what} of {bytes} bytes refused: its instances would use {wanted} bytes, \
     over its memory budget of {limit} bytes"
)]
pub struct BudgetExceeded {
    /// The plugin charged.
    pub plugin: Arc<str>,
    /// `linear memory` or `host memory`.
    pub what: &'static str,
    /// The charge refused.
    pub bytes: u64,
    /// What the plugin's instances would have used with it.
    pub wanted: u64,
    /// The plugin's budget.
    pub limit: u64,
}

/// One plugin's memory account, shared by all its instances; clones share it.
#[derive(Clone)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    plugin: Arc<str>,
    limit: u64,
    used: AtomicU64,
    /// Largest total one instance has reached: what another instance is expected to need.
    instance_peak: AtomicU64,
    linear: Gauge,
    host: Gauge,
    refused_linear: Counter,
    refused_host: Counter,
}

impl MemoryBudget {
    /// A budget of `limit` bytes for `plugin`, reported in `metrics`.
    pub fn new(plugin: &str, limit: u64, metrics: &RuntimeMetrics) -> Self {
        metrics
            .budget_gauge(plugin, "limit")
            .set(gauge_bytes(limit));
        Self {
            inner: Arc::new(Inner {
                plugin: plugin.into(),
                limit,
                used: AtomicU64::new(0),
                instance_peak: AtomicU64::new(0),
                linear: metrics.budget_gauge(plugin, BudgetKind::Linear.label()),
                host: metrics.budget_gauge(plugin, BudgetKind::Host.label()),
                refused_linear: metrics.budget_refused_counter(plugin, BudgetKind::Linear.label()),
                refused_host: metrics.budget_refused_counter(plugin, BudgetKind::Host.label()),
            }),
        }
    }

    /// The plugin's budget in bytes: the most all its instances may use together.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// What its instances use now (linear memory and host-side resources).
    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Acquire)
    }

    /// The most one instance of the plugin has used so far (0 before the first).
    pub fn instance_peak(&self) -> u64 {
        self.inner.instance_peak.load(Ordering::Acquire)
    }

    /// Whether another instance, as large as the largest so far, still fits: a plugin at
    /// concurrency N runs fewer calls at once rather than failing them when N do not fit.
    pub fn room_for_another(&self) -> bool {
        let peak = self.instance_peak();
        self.used().saturating_add(peak) <= self.inner.limit
    }

    /// The plugin these bytes are charged to.
    pub fn plugin(&self) -> &str {
        &self.inner.plugin
    }

    /// Charges `bytes` of `kind`, or refuses (counted) when the plugin would exceed its budget.
    pub(crate) fn charge(&self, kind: BudgetKind, bytes: u64) -> Result<(), BudgetExceeded> {
        let inner = &*self.inner;
        let taken = inner
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= inner.limit)
            });
        match taken {
            Ok(_) => {
                self.gauge(kind).inc_by(gauge_bytes(bytes));
                Ok(())
            }
            Err(used) => {
                match kind {
                    BudgetKind::Linear => inner.refused_linear.inc(),
                    BudgetKind::Host => inner.refused_host.inc(),
                };
                Err(BudgetExceeded {
                    plugin: inner.plugin.clone(),
                    what: match kind {
                        BudgetKind::Linear => "linear memory",
                        BudgetKind::Host => "host memory",
                    },
                    bytes,
                    wanted: used.saturating_add(bytes),
                    limit: inner.limit,
                })
            }
        }
    }

    /// Gives back `bytes` of `kind` charged before.
    pub(crate) fn release(&self, kind: BudgetKind, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.inner.used.fetch_sub(bytes, Ordering::AcqRel);
        self.gauge(kind).dec_by(gauge_bytes(bytes));
    }

    /// Notes that one instance has reached `total` bytes.
    pub(crate) fn instance_reached(&self, total: u64) {
        self.inner.instance_peak.fetch_max(total, Ordering::AcqRel);
    }

    fn gauge(&self, kind: BudgetKind) -> &Gauge {
        match kind {
            BudgetKind::Linear => &self.inner.linear,
            BudgetKind::Host => &self.inner.host,
        }
    }
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("plugin", &self.plugin())
            .field("limit", &self.limit())
            .field("used", &self.used())
            .finish()
    }
}

fn gauge_bytes(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// One instance's charges: its linear memory (by the limiter) and its host-side resources (by
/// [`HostAccount::settle`]); everything is given back when it is dropped with the store.
pub(crate) struct HostAccount {
    budget: MemoryBudget,
    linear: u64,
    host: u64,
    /// Set when a charge was refused; lets the caller classify the resulting failure.
    pub exceeded: bool,
}

impl HostAccount {
    pub(crate) fn new(budget: MemoryBudget) -> Self {
        Self {
            budget,
            linear: 0,
            host: 0,
            exceeded: false,
        }
    }

    /// Charges a linear-memory growth of `bytes`.
    pub(crate) fn grow_linear(&mut self, bytes: u64) -> Result<(), BudgetExceeded> {
        self.budget
            .charge(BudgetKind::Linear, bytes)
            .inspect_err(|_| self.exceeded = true)?;
        self.linear += bytes;
        self.budget.instance_reached(self.linear + self.host);
        Ok(())
    }

    /// Brings the host-side charge to what `table` holds now: charges the growth since the last
    /// settle (refusing it past the budget) or gives back what was freed.
    pub(crate) fn settle(&mut self, table: &mut ResourceTable) -> Result<(), BudgetExceeded> {
        let now = table_bytes(table);
        if now > self.host {
            let more = now - self.host;
            self.budget
                .charge(BudgetKind::Host, more)
                .inspect_err(|_| self.exceeded = true)?;
            self.host = now;
            self.budget.instance_reached(self.linear + self.host);
        } else {
            self.budget.release(BudgetKind::Host, self.host - now);
            self.host = now;
        }
        Ok(())
    }
}

impl Drop for HostAccount {
    fn drop(&mut self) {
        self.budget.release(BudgetKind::Linear, self.linear);
        self.budget.release(BudgetKind::Host, self.host);
    }
}

/// What the host holds for the entries of `table`, by the worst case of each kind it can tell
/// apart: header sets by their content, requests by their strings, headers and body buffer,
/// bodies by their buffer, anything else at [`ENTRY_BYTES`].
pub(crate) fn table_bytes(table: &mut ResourceTable) -> u64 {
    table.iter_mut().map(|e| entry_bytes(&*e)).sum()
}

fn entry_bytes(entry: &(dyn Any + Send)) -> u64 {
    let entry: &dyn Any = entry;
    if let Some(fields) = entry.downcast_ref::<FieldMap>() {
        return ENTRY_BYTES + fields_bytes(fields);
    }
    if let Some(req) = entry.downcast_ref::<HostOutgoingRequest>() {
        let strings = [req.authority.as_ref(), req.path_with_query.as_ref()]
            .into_iter()
            .flatten()
            .map(|s| s.len() as u64)
            .sum::<u64>();
        let method = match &req.method {
            wasmtime_wasi_http::p2::bindings::http::types::Method::Other(s) => s.len() as u64,
            _ => 0,
        };
        let body = if req.body.is_some() { BODY_BYTES } else { 0 };
        return ENTRY_BYTES + strings + method + fields_bytes(&req.headers) + body;
    }
    if entry.is::<HostOutgoingBody>() {
        return ENTRY_BYTES + BODY_BYTES;
    }
    ENTRY_BYTES
}

fn fields_bytes(fields: &FieldMap) -> u64 {
    fields
        .iter()
        .map(|(name, value)| name.as_str().len() as u64 + value.len() as u64 + HEADER_OVERHEAD)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_share_one_account_and_give_back_on_drop() {
        let metrics = RuntimeMetrics::unregistered();
        let budget = MemoryBudget::new("p", 100, &metrics);
        let mut a = HostAccount::new(budget.clone());
        let mut b = HostAccount::new(budget.clone());
        a.grow_linear(60).unwrap();
        let refused = b.grow_linear(50).unwrap_err();
        assert_eq!((refused.wanted, refused.limit), (110, 100));
        assert!(b.exceeded && !a.exceeded);
        b.grow_linear(40).unwrap();
        assert_eq!(budget.used(), 100);
        assert!(
            !budget.room_for_another(),
            "another 60-byte instance does not fit"
        );
        drop(a);
        assert_eq!(budget.used(), 40);
        assert!(budget.room_for_another());
        drop(b);
        assert_eq!(budget.used(), 0);
        assert_eq!(metrics.budget_refused("p", "linear"), 1);
    }

    #[test]
    fn host_side_entries_are_charged_when_settled_and_refused_past_the_budget() {
        let metrics = RuntimeMetrics::unregistered();
        let budget = MemoryBudget::new("p", 4 * ENTRY_BYTES + 1100, &metrics);
        let mut account = HostAccount::new(budget.clone());
        let mut table = ResourceTable::new();
        let body = table.push(0u8).unwrap();
        account.settle(&mut table).unwrap();
        assert_eq!(budget.used(), ENTRY_BYTES);
        let mut fields = FieldMap::new_mutable(1 << 20);
        fields
            .append_raw(
                http::HeaderName::from_static("x-big"),
                http::HeaderValue::from_bytes(&[b'a'; 1000]).unwrap(),
            )
            .unwrap();
        let f = table.push(fields).unwrap();
        account.settle(&mut table).unwrap();
        assert_eq!(budget.used(), 2 * ENTRY_BYTES + 5 + 1000 + HEADER_OVERHEAD);
        for _ in 0..3 {
            table.push(1u8).unwrap();
        }
        assert!(account.settle(&mut table).is_err(), "{budget:?}");
        assert!(account.exceeded);
        table.delete(f).unwrap();
        table.delete(body).unwrap();
        account.settle(&mut table).unwrap();
        assert_eq!(
            budget.used(),
            3 * ENTRY_BYTES,
            "freed entries are given back"
        );
        drop(account);
        assert_eq!(budget.used(), 0);
        assert_eq!(metrics.budget_refused("p", "host"), 1);
    }
}
