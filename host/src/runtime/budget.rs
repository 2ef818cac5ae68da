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
//! - **What one host call holds for the guest** ([`CallMemory`], kind `call`): a `kube` call's
//!   body (lifted out of guest memory, then moved or copied into the request) and the API
//!   server's answer (read, kept as text, copied out for the guest), a `cache` read's copies of
//!   the objects it returns, an Event's strings. Each is charged before the host makes it (the
//!   lifted arguments, which exist when the host function starts, as the first thing it does)
//!   and given back when the call's host work ends: once its result is lowered into guest
//!   memory (the store's `ReturningFromHost` hook), or when an Event waiting in the plugin's
//!   backlog is written or dropped. A refusal is the error the import already has (a `kube`
//!   error `429 TooManyRequests`, or `413 RequestEntityTooLarge` when the call could never fit;
//!   a `cache` error string; a dropped Event), never a trap of the host. The host never builds
//!   a `serde_json::Value` from a guest's body or an answer (bodies are scanned for the four
//!   fields naming their target, answers for their metadata, see `informer/object.rs`), so
//!   each copy of the text is charged at its size where the copy is made: the lifted body,
//!   an apply's or patch's serialised request body, an observer's copy, the answer's read
//!   buffer (by its capacity as it grows) and the text kept from it, the copy lowered into the
//!   guest. The one tree built for a guest is an Event's body, charged at its strings plus
//!   [`EVENT_TREE_BYTES`].
//!
//! Calls of one plugin at concurrency N all charge the one budget, so N calls holding large
//! bodies at once are refused past it like one. Everything an instance was charged is given back
//! when its store is dropped (a failed call, an idle instance released, an unload). The plugins
//! layer reads [`MemoryBudget::used`] and [`MemoryBudget::limit`] for `/plugins` and
//! `kubewasm check`; the metrics are `kubewasm_runtime_memory_budget_bytes{plugin,kind}` and
//! `kubewasm_runtime_memory_budget_refused_total{plugin,kind}` (kind `linear`, `host`, `call`).

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use wasmtime::component::ResourceTable;
use wasmtime_wasi_http::FieldMap;
use wasmtime_wasi_http::p2::body::HostOutgoingBody;
use wasmtime_wasi_http::p2::types::HostOutgoingRequest;

use super::metrics::RuntimeMetrics;
use super::types::ApiError;

/// Largest write to an outgoing body's stream (wasmtime-wasi-http's `check-write` answer).
/// wasmtime-wasi-http's default is 1 MiB; a handler's request bodies are small, and every
/// unsent body holds up to two of these on the host.
pub(crate) const BODY_CHUNK_BYTES: usize = 64 << 10;
/// Writes an outgoing body buffers before the network takes them.
pub(crate) const BODY_BUFFER_CHUNKS: usize = 1;
/// What one outgoing body may hold on the host: its channel keeps `BODY_BUFFER_CHUNKS + 1`
/// writes.
pub(crate) const BODY_BYTES: u64 = ((BODY_BUFFER_CHUNKS + 1) * BODY_CHUNK_BYTES) as u64;
/// What any resource-table entry is charged at least: the slot, its box and the small state of
/// a pollable, stream or future.
pub(crate) const ENTRY_BYTES: u64 = 256;
/// Charged per header on top of its name and value (`http::HeaderMap`'s bucket and index).
const HEADER_OVERHEAD: u64 = 64;
/// What the `serde_json::Value` tree of an Event's body takes on the heap besides its strings
/// (the one tree the host builds from a guest's text). Measured with a counting allocator on
/// serde_json 1.0.154 (its `Map` is a `BTreeMap`): an Event body of 551 bytes of text built a
/// tree of 3,686 bytes, one with a 1 KiB note 4,658 bytes, so about 3.1 KiB besides the
/// strings; 4 KiB leaves room. For comparison, parsing into a tree costs 8.5x the text for a
/// Deployment as served (3.7 KB, managedFields included), 1.02x for a ConfigMap of two long
/// values and 28x for an array of small objects, which is why no body or answer of a guest's
/// call is ever parsed into one (they are scanned, see the module doc).
pub(crate) const EVENT_TREE_BYTES: u64 = 4 << 10;

/// What a charge is for, as the metrics and the refusal name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BudgetKind {
    /// Linear memory of the plugin's instances.
    Linear,
    /// What the host holds for the guest: resources, header sets, request bodies.
    Host,
    /// What one host call holds while it runs: `kube` bodies and answers, `cache` read
    /// copies, Events until they are written ([`CallMemory`]).
    Call,
}

impl BudgetKind {
    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            BudgetKind::Linear => "linear",
            BudgetKind::Host => "host",
            BudgetKind::Call => "call",
        }
    }

    fn what(self) -> &'static str {
        match self {
            BudgetKind::Linear => "linear memory",
            BudgetKind::Host => "host memory",
            BudgetKind::Call => "host memory for a call",
        }
    }

    const ALL: [BudgetKind; 3] = [BudgetKind::Linear, BudgetKind::Host, BudgetKind::Call];
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
    /// `linear memory`, `host memory` or `host memory for a call`.
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
    /// The largest total each live instance has reached (by account), for what another
    /// instance is expected to need; an instance's entry goes with it, so one large moment
    /// does not outlive the instance that had it.
    peaks: Mutex<HashMap<u64, u64>>,
    next_account: AtomicU64,
    /// Gauges and refusal counters, in the order of [`BudgetKind::ALL`].
    gauges: [Gauge; 3],
    refused: [Counter; 3],
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
                peaks: Mutex::new(HashMap::new()),
                next_account: AtomicU64::new(0),
                gauges: BudgetKind::ALL.map(|k| metrics.budget_gauge(plugin, k.label())),
                refused: BudgetKind::ALL.map(|k| metrics.budget_refused_counter(plugin, k.label())),
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

    /// The most one of the plugin's live instances has used (0 with none): an instance's linear
    /// memory never shrinks, so this is what the largest instance alive needed at its peak. An
    /// instance released (idle, failed, unloaded) takes its figure with it.
    pub fn instance_peak(&self) -> u64 {
        self.inner.peaks.lock().values().copied().max().unwrap_or(0)
    }

    /// Whether another instance, as large as the largest alive, still fits: a plugin at
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
                inner.refused[kind as usize].inc();
                Err(BudgetExceeded {
                    plugin: inner.plugin.clone(),
                    what: kind.what(),
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

    /// Stands in for a live instance that reached `total` bytes (tests of the dispatcher, which
    /// have no store): it stays for the budget's lifetime.
    #[cfg(test)]
    pub(crate) fn instance_reached(&self, total: u64) {
        let account = self.inner.next_account.fetch_add(1, Ordering::Relaxed);
        self.account_reached(account, total);
    }

    /// Notes that the instance of `account` has reached `total` bytes, its largest so far.
    fn account_reached(&self, account: u64, total: u64) {
        self.inner.peaks.lock().insert(account, total);
    }

    /// Forgets the peak of an instance that is gone.
    fn instance_gone(&self, account: u64) {
        self.inner.peaks.lock().remove(&account);
    }

    fn gauge(&self, kind: BudgetKind) -> &Gauge {
        &self.inner.gauges[kind as usize]
    }
}

/// What one host call holds on the host for its guest, charged to the plugin's budget (kind
/// `call`) before each allocation and given back when the last clone is dropped: the runtime
/// drops its clone once the call's result is lowered into guest memory; the plugins layer keeps
/// one with whatever outlives the call (an Event in the backlog, see [`CallMemory::detached`]).
#[derive(Clone)]
pub struct CallMemory {
    inner: Arc<CallInner>,
}

struct CallInner {
    budget: MemoryBudget,
    held: AtomicU64,
}

impl CallMemory {
    /// An empty account on `budget`.
    pub fn new(budget: MemoryBudget) -> Self {
        Self {
            inner: Arc::new(CallInner {
                budget,
                held: AtomicU64::new(0),
            }),
        }
    }

    /// An account with no limit, for calls made outside a plugin's instance (tests, tools).
    pub fn unbounded() -> Self {
        Self::new(MemoryBudget::new(
            "unbounded",
            u64::MAX,
            &RuntimeMetrics::unregistered(),
        ))
    }

    /// Charges `bytes` the host is about to hold for this call, or refuses (counted).
    pub fn charge(&self, bytes: u64) -> Result<(), BudgetExceeded> {
        if bytes == 0 {
            return Ok(());
        }
        self.inner.budget.charge(BudgetKind::Call, bytes)?;
        self.inner.held.fetch_add(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// A new, empty account on the same budget, for what outlives the call (given back when
    /// that is dropped, not with the call).
    pub fn detached(&self) -> Self {
        Self::new(self.inner.budget.clone())
    }

    /// What this account holds now.
    pub fn held(&self) -> u64 {
        self.inner.held.load(Ordering::Acquire)
    }
}

impl Drop for CallInner {
    fn drop(&mut self) {
        self.budget.release(BudgetKind::Call, *self.held.get_mut());
    }
}

impl std::fmt::Debug for CallMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallMemory")
            .field("plugin", &self.inner.budget.plugin())
            .field("held", &self.held())
            .finish()
    }
}

impl CallMemory {
    /// Gives back `bytes` of what this account holds (a copy the call dropped early).
    pub fn give_back(&self, bytes: u64) {
        let held = &self.inner.held;
        let taken = held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                Some(h.saturating_sub(bytes))
            })
            .unwrap_or_default();
        self.inner
            .budget
            .release(BudgetKind::Call, taken.min(bytes));
    }
}

impl BudgetExceeded {
    /// Whether the charge could never fit, even with nothing else charged.
    pub fn never_fits(&self) -> bool {
        self.bytes > self.limit
    }

    /// The refusal as a `kube` call's error: `413 RequestEntityTooLarge` when the call could
    /// never fit the plugin's budget, else `429 TooManyRequests` (it may fit once the plugin's
    /// other calls have ended). The message names the plugin's memory budget.
    pub fn api_error(&self) -> ApiError {
        let (code, reason) = if self.never_fits() {
            (413, "RequestEntityTooLarge")
        } else {
            (429, "TooManyRequests")
        };
        ApiError {
            code,
            reason: reason.into(),
            message: format!("the plugin's memory budget is exhausted: {self}"),
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
    /// This instance's key in the budget's live peaks.
    id: u64,
    linear: u64,
    host: u64,
    /// The largest `linear + host` so far.
    peak: u64,
    /// Set when a charge was refused; lets the caller classify the resulting failure.
    pub exceeded: bool,
}

impl HostAccount {
    pub(crate) fn new(budget: MemoryBudget) -> Self {
        let id = budget.inner.next_account.fetch_add(1, Ordering::Relaxed);
        Self {
            budget,
            id,
            linear: 0,
            host: 0,
            peak: 0,
            exceeded: false,
        }
    }

    /// The plugin's budget this instance is charged to.
    pub(crate) fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    fn reached(&mut self) {
        let total = self.linear + self.host;
        if total > self.peak {
            self.peak = total;
            self.budget.account_reached(self.id, total);
        }
    }

    /// Charges a linear-memory growth of `bytes`.
    pub(crate) fn grow_linear(&mut self, bytes: u64) -> Result<(), BudgetExceeded> {
        self.budget
            .charge(BudgetKind::Linear, bytes)
            .inspect_err(|_| self.exceeded = true)?;
        self.linear += bytes;
        self.reached();
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
            self.reached();
        } else {
            self.budget.release(BudgetKind::Host, self.host - now);
            self.host = now;
        }
        Ok(())
    }
}

impl Drop for HostAccount {
    fn drop(&mut self) {
        self.budget.instance_gone(self.id);
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

    #[test]
    fn the_expected_size_of_another_instance_decays_with_the_instance_that_set_it() {
        let metrics = RuntimeMetrics::unregistered();
        let budget = MemoryBudget::new("p", 100, &metrics);
        let mut big = HostAccount::new(budget.clone());
        big.grow_linear(60).unwrap();
        assert_eq!(budget.instance_peak(), 60);
        drop(big);
        let mut small = HostAccount::new(budget.clone());
        small.grow_linear(50).unwrap();
        // With the largest-ever figure (60) another instance would not fit next to this one
        // (50 + 60 > 100) although every instance alive needs 50: the plugin would never get
        // a second instance again.
        assert_eq!(
            budget.instance_peak(),
            50,
            "the released instance's peak is gone"
        );
        assert!(budget.room_for_another());
        let mut other = HostAccount::new(budget.clone());
        other.grow_linear(10).unwrap();
        assert_eq!(budget.instance_peak(), 50, "the largest of the live ones");
        assert!(!budget.room_for_another(), "60 used + 50 expected > 100");
        drop(small);
        assert_eq!(budget.instance_peak(), 10);
        drop(other);
        assert_eq!(budget.instance_peak(), 0);
    }

    #[test]
    fn a_call_charges_the_shared_budget_until_its_last_clone_is_dropped() {
        let metrics = RuntimeMetrics::unregistered();
        let budget = MemoryBudget::new("p", 1000, &metrics);
        let mut instance = HostAccount::new(budget.clone());
        instance.grow_linear(400).unwrap();
        // Two calls of the plugin at once, as at concurrency 2, share the one budget.
        let a = CallMemory::new(budget.clone());
        let b = CallMemory::new(budget.clone());
        a.charge(300).unwrap();
        let refused = b.charge(301).unwrap_err();
        assert!(!refused.never_fits());
        let e = refused.api_error();
        assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
        assert!(e.message.contains("memory budget"), "{}", e.message);
        let e = b.charge(1001).unwrap_err().api_error();
        assert_eq!(e.code, 413, "a charge over the whole budget never fits");
        b.charge(200).unwrap();
        assert_eq!(metrics.budget_bytes("p", "call"), 500);
        assert_eq!(metrics.budget_refused("p", "call"), 2);
        let kept = a.detached();
        kept.charge(100).unwrap();
        let a2 = a.clone();
        drop(a);
        assert_eq!(budget.used(), 1000, "a clone still holds the call's bytes");
        drop(a2);
        assert_eq!(budget.used(), 700);
        b.give_back(150);
        assert_eq!(b.held(), 50);
        b.give_back(1000);
        assert_eq!(b.held(), 0, "never more than held is given back");
        assert_eq!(budget.used(), 500);
        drop((b, kept));
        assert_eq!(budget.used(), 400);
        assert_eq!(metrics.budget_bytes("p", "call"), 0);
        assert_eq!(
            budget.instance_peak(),
            400,
            "a call's bytes are not an instance's"
        );
    }
}
