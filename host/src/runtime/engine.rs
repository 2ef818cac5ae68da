//! The one wasmtime `Engine`: component model, pooling allocator sized from the runtime's
//! configuration, epoch interruption driven by a ticker thread.

use std::time::Duration;

use wasmtime::{Config, Engine, EngineWeak, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often a running guest yields to its executor: the ticker bumps the engine's epoch this
/// often and every store yields at each bump, so a busy guest is stopped at most this long after
/// its deadline.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

const WASM_PAGE: u64 = 64 << 10;
/// Most core instances, memories and tables one component may have.
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
const MEMORIES_PER_COMPONENT: u32 = 4;
const TABLES_PER_COMPONENT: u32 = 8;
const FOUR_GIB: u64 = 4 << 30;

/// Pool shape for `max_instances` handler instances whose memories may each reach
/// `max_memory_bytes`. Pooling makes instantiation a slot reuse instead of mmap/munmap, which
/// keeps the "fresh instance after a trap" path cheap.
pub(crate) fn build_engine(max_instances: u32, max_memory_bytes: u64) -> anyhow::Result<Engine> {
    // Whole wasm pages, at least one.
    let max_memory_bytes = max_memory_bytes
        .clamp(1, FOUR_GIB)
        .next_multiple_of(WASM_PAGE);
    let max_memory = usize::try_from(max_memory_bytes)?;
    let mut pool = PoolingAllocationConfig::new();
    // Every pool but the component instances' holds the per-component maximum for each
    // instance, so only the count of instances can run out, and that count is shared out per
    // plugin (see `pool.rs`): a component of 32 core instances then takes one slot like any
    // other instead of 32 of a shared 8-per-instance pool. The extra slots are address space
    // (and a little bookkeeping), not memory.
    pool.total_component_instances(max_instances)
        // A Rust wasip2 component has a handful of core instances, one or two memories and a
        // few tables (wit-component shims); leave headroom for other toolchains.
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .total_core_instances(max_instances.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .total_memories(max_instances.saturating_mul(MEMORIES_PER_COMPONENT))
        .max_tables_per_component(TABLES_PER_COMPONENT)
        .total_tables(max_instances.saturating_mul(TABLES_PER_COMPONENT))
        // Async calls run on fiber stacks: one per live instance.
        .total_stacks(max_instances)
        .max_memory_size(max_memory);

    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        // Handlers are WASI p2 components called one at a time; with the component-model-async
        // machinery on, every `call_async` goes through the concurrent task scheduler, which
        // measured several times the cost of a plain fiber call for a no-op export.
        .concurrency_support(false)
        // 4 GiB of address space (plus wasmtime's default guard) per memory slot lets Cranelift
        // drop bounds checks on 32-bit memories: measured ~1.5x faster calls and ~2x faster
        // compiles than reserving only `max_memory_bytes`. It is virtual memory only (about
        // 8 GiB per pooled instance); growth is still capped by `max_memory_size` and the
        // per-plugin limiter.
        .memory_reservation(FOUR_GIB)
        .memory_reservation_for_growth(0)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Ok(Engine::new(&config)?)
}

/// Bumps the epoch every [`EPOCH_TICK`] until the engine is dropped; holds only a weak
/// reference, so it never keeps the engine alive.
pub(crate) fn spawn_epoch_ticker(engine: &Engine) -> anyhow::Result<()> {
    let weak: EngineWeak = engine.weak();
    std::thread::Builder::new()
        .name("kubewasm-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => return,
                }
            }
        })?;
    Ok(())
}
