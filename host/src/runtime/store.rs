//! Host state owned by one instance's `Store`: WASI context, memory limiter, log sink and the
//! plugin's cache reader.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::guest_log::GuestLog;
use super::limits::MemoryLimiter;
use super::types::CacheReader;
use super::wasi::{GuestOutput, sandboxed_ctx};

pub(crate) struct StoreState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub log: GuestLog,
    pub output: GuestOutput,
    pub cache: Arc<dyn CacheReader>,
}

impl StoreState {
    pub fn new(log: GuestLog, memory_cap: u64, cache: Arc<dyn CacheReader>) -> Self {
        let (wasi, output) = sandboxed_ctx(&log);
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory_cap),
            log,
            output,
            cache,
        }
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
