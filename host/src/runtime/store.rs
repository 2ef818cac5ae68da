//! Host state owned by one instance's `Store`: WASI and `wasi:http` contexts, memory limiter, log
//! sink and the plugin's cache reader.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::budget::{CallMemory, HostAccount, MemoryBudget};
use super::cluster::ClusterAccess;
use super::guest_caused::GuestCausedLog;
use super::guest_log::GuestLog;
use super::host_wait::HostWait;
use super::http_hooks::HttpHooks;
use super::http_policy::HttpPolicy;
use super::limits::MemoryLimiter;
use super::metrics::RuntimeMetrics;
use super::types::{CacheReader, PluginSettings};
use super::wasi::{GuestOutput, sandboxed_ctx};

pub(crate) struct StoreState {
    pub wasi: WasiCtx,
    /// Only a 0.2.0 handler can reach it; shares `table` with WASI.
    pub http: WasiHttpCtx,
    pub http_hooks: HttpHooks,
    pub table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub log: GuestLog,
    /// The plugin's budget for host lines its calls cause.
    pub lines: GuestCausedLog,
    pub output: GuestOutput,
    pub cache: Arc<dyn CacheReader>,
    /// Where `kube` and `events` calls go (0.2.0).
    pub cluster: Arc<dyn ClusterAccess>,
    /// The operator's settings for the plugin (0.3.0's `settings`).
    pub settings: Arc<PluginSettings>,
    /// Which objects are this replica's (0.3.0's `shard`), and whether it may act at all.
    pub shard: Arc<dyn super::shard::ShardView>,
    /// Time this instance's host calls spend waiting on external systems.
    host_wait: HostWait,
    /// What the host call in progress holds for the guest; dropped (given back) once its
    /// result is lowered into guest memory, or at the next host call, whichever comes first.
    call_memory: Option<CallMemory>,
}

impl StoreState {
    pub(crate) fn new(
        log: GuestLog,
        lines: GuestCausedLog,
        budget: MemoryBudget,
        cache: Arc<dyn CacheReader>,
        http: HttpPolicy,
        metrics: RuntimeMetrics,
        cluster: Arc<dyn ClusterAccess>,
    ) -> Self {
        let (wasi, output) = sandboxed_ctx(&log);
        let host_wait = HostWait::default();
        Self {
            wasi,
            http: http_ctx(),
            http_hooks: HttpHooks::new(
                log.plugin().into(),
                lines.clone(),
                http,
                host_wait.clone(),
                metrics,
                log.observer().cloned(),
            ),
            table: bounded_table(),
            // One instance's linear memory may use the whole of its plugin's budget.
            limiter: MemoryLimiter::new(budget.limit(), HostAccount::new(budget)),
            log,
            lines,
            output,
            cache,
            cluster,
            // The instance sets the plugin's own (see `HandlerInstance::with_settings`).
            settings: Arc::new(PluginSettings::empty()),
            shard: super::shard::not_sharded(),
            host_wait,
            call_memory: None,
        }
    }

    /// A fresh account for the host call being entered, charged to the plugin's budget and
    /// held until the call's result is lowered into guest memory ([`Self::end_host_call`]).
    pub(crate) fn call_memory(&mut self) -> CallMemory {
        let memory = CallMemory::new(self.limiter.account.budget().clone());
        self.call_memory = Some(memory.clone());
        memory
    }

    /// Gives back what the host call that just returned held for the guest (its result is in
    /// guest memory now).
    pub(crate) fn end_host_call(&mut self) {
        self.call_memory = None;
    }

    /// The account host calls enter while they wait on an external system for the guest
    /// (`host_wait().enter()`), so that time does not count against the guest's deadline.
    pub(crate) fn host_wait(&self) -> &HostWait {
        &self.host_wait
    }

    /// Charges what the instance's resources hold on the host now to its plugin's budget,
    /// before the host call the guest is entering can add to it; refuses the call (a trap)
    /// when the plugin is over its budget.
    pub(crate) fn settle_host_memory(&mut self) -> Result<(), super::budget::BudgetExceeded> {
        self.limiter.account.settle(&mut self.table)
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

/// Most bytes one `wasi:http` header set (`fields` resource) may take in host memory, overhead
/// included. wasmtime-wasi-http allows 128 KiB; a handler's requests need a few headers, and every
/// set a guest creates lives outside its memory cap (up to [`MAX_RESOURCES`] of them).
pub(crate) const MAX_HTTP_FIELDS_BYTES: usize = 32 << 10;

fn http_ctx() -> WasiHttpCtx {
    let mut ctx = WasiHttpCtx::new();
    ctx.set_field_size_limit(MAX_HTTP_FIELDS_BYTES);
    ctx
}

/// Most WASI resources (pollables, streams, handles) one instance may hold at once, whatever
/// its budget: each is also charged to the plugin's memory budget (see `budget.rs`), so a guest
/// creating resources in a loop is refused there or here, whichever comes first; a handler
/// needs a handful.
pub(crate) const MAX_RESOURCES: usize = 10_000;

fn bounded_table() -> ResourceTable {
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_RESOURCES);
    table
}
