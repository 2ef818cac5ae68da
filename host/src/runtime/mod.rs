//! The WebAssembly side of kubewasm: one wasmtime [`Engine`](wasmtime::Engine) shared by every
//! plugin, compiled handlers cached on disk, and sandboxed instances of the `kubewasm:handler`
//! world with a per-call deadline and a memory cap.
//!
//! Knows nothing about informers or watches: callers hand in borrowed [`ObjectView`]s and a
//! [`CacheReader`], and get [`HandlerOutcome`]s or [`CallError`]s back. Calls are synchronous;
//! the plugins layer runs each plugin on its own thread.

mod bindings;
mod budget;
mod cluster;
mod compile_cache;
mod compile_child;
mod convert;
mod engine;
mod error;
mod guest_caused;
mod guest_log;
mod handle;
mod host_imports;
mod host_wait;
mod http_bounds;
mod http_client;
mod http_hooks;
mod http_policy;
mod http_stub;
mod instance;
mod limits;
mod line_budget;
mod metrics;
mod observer;
mod pool;
mod shard;
mod store;
mod types;
mod validate;
mod wasi;

#[cfg(test)]
mod tests;

pub(crate) use budget::EVENT_TREE_BYTES;
pub use budget::{BudgetExceeded, CallMemory, MemoryBudget};
pub use cluster::{
    ClusterAccess, EventCall, EventType, KubeAnswer, KubeCall, MAX_WRITE_BYTES, ObjectRef,
    PatchType, Regarding, WriteOptions,
};
pub(crate) use cluster::{KubeFuture, KubeResult};
pub use compile_child::{
    COMPILE_BASE_BYTES, COMPILE_BYTES_PER_WASM_BYTE, CompileAborted, CompileLimits,
};
pub(crate) use compile_child::{DEFAULT_COMPILE_MEMORY_BUDGET, DEFAULT_COMPILE_MEMORY_LIMIT};
pub(crate) use compile_child::{WORKER_SUBCOMMAND, compile_worker};
pub use engine::EPOCH_TICK;
pub use error::{CallError, RuntimeError};
pub use guest_caused::{GuestCausedLog, HOST_LINE_BURST, HOST_LINES_PER_SECOND};
pub use guest_log::{LOG_BURST, LOG_LINES_PER_SECOND};
pub use handle::{CompiledHandler, Runtime, RuntimeConfig};
pub use http_bounds::{DEFAULT_HTTP_MAX_INFLIGHT, default_host_connections};
pub use http_policy::{
    DEFAULT_HTTP_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, HttpGate, HttpPolicy, Resolver,
};
pub use http_stub::{HttpStub, StubRequest, StubResponse};
pub use instance::HandlerInstance;
pub use limits::Limits;
pub use metrics::RuntimeMetrics;
pub(crate) use observer::fan_out;
pub use observer::{
    CallEnded, CallKind, CallOutcome, CalledObject, HttpExchange, LoadFailed, Observer,
    Quarantined, SharedObserver, VersionLoaded,
};
pub use pool::{PoolFull, PoolReservation};
pub use shard::{NotSharded, ShardBy, ShardView, not_sharded};
pub use types::{
    ApiError, CacheError, CacheReader, GuestLogLevel, GuestObject, HandlerOutcome, HandlerWorld,
    KeyMapping, MAX_REQUEUE_AFTER, MIN_REQUEUE_AFTER, NoCache, ObjectKey, ObjectView, Permission,
    PluginInfo, PluginSettings, Role, Subscription,
};
// Only the unit tests name these.
#[cfg(test)]
pub(crate) use budget::BudgetKind;
