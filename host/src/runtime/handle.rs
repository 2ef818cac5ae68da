//! [`Runtime`]: the shared engine, linker and compile cache; turns bytes into
//! [`CompiledHandler`]s and those into [`HandlerInstance`]s.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings::{v1, v2};
use super::compile_cache::DiskCache;
use super::compile_child::{ChildOutcome, CompileGate, CompileLimits, compile_in_child};
use super::engine::{build_engine, spawn_epoch_ticker};
use super::error::{CallError, RuntimeError};
use super::http_bounds::OpenCount;
use super::instance::HandlerInstance;
use super::limits::Limits;
use super::metrics::RuntimeMetrics;
use super::observer::SharedObserver;
use super::pool::{InstanceSlots, PoolFull, PoolReservation};
use super::store::StoreState;
use super::types::{CacheReader, HandlerWorld};
use super::validate::{WorldPre, check_binary, check_world};

/// Threads of one compile's own pool (see `Runtime::compile_fresh`), or `None` (compile on the
/// shared pool) when they cannot be started. A larger component's threads run at a lower CPU
/// priority ([`compile_niceness`]), so when several compile at once (a start with an empty
/// cache) a small one finishes first instead of sharing the cores equally with an 18 MB one.
fn compile_pool(wasm_bytes: usize) -> Option<rayon::ThreadPool> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let nice = compile_niceness(wasm_bytes);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("kubewasm-compile-{i}"))
        .start_handler(move |_| lower_this_threads_priority(nice))
        .build()
        .map_err(|e| tracing::warn!(error = %e, "cannot start compile threads; compiling on the shared pool"))
        .ok()
}

/// Nice levels a compile runs below the host: 0 under 1 MiB, then one more per doubling (a 1.6 MB JavaScript
/// component 1, 4.6 MB Go 3, 18 MB Python 5), at most 10.
fn compile_niceness(wasm_bytes: usize) -> i32 {
    let mib = wasm_bytes >> 20;
    (usize::BITS - mib.leading_zeros()).min(10) as i32
}

/// Makes the calling thread `nice` levels nicer than it is (on Linux niceness is per thread);
/// a failure only leaves it at the process's priority.
fn lower_this_threads_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: plain system calls on this thread's own id, no memory passed.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, (current + nice).min(19));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Process-wide runtime settings; per-plugin settings are [`Limits`].
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Where compiled artifacts are kept across restarts; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Ceiling for any plugin's memory cap; sizes the pooling allocator's memory slots.
    pub max_memory_bytes: u64,
    /// Instances that may exist at once (pool size): plugins, plus their replacements during a
    /// hot swap, plus one-off checks. Each pooled instance reserves about 8 GiB of address space
    /// (not memory) up front.
    pub max_instances: u32,
    /// Sees what every guest does (see [`super::Observer`]); guest lines go to `tracing`
    /// whatever it does.
    pub observer: Option<SharedObserver>,
    /// Answers every granted outbound HTTP request instead of the network (`kubewasm test`).
    pub http_stub: Option<Arc<dyn super::HttpStub>>,
    /// Outgoing HTTP requests all plugins together may have open; `None` derives it from the
    /// soft file-descriptor limit ([`default_host_connections`](super::default_host_connections)).
    pub max_outgoing_connections: Option<usize>,
    /// Addresses of the cluster's own API service, which a plugin reaches only through a grant
    /// that names them (see `address.rs`); `KUBERNETES_SERVICE_HOST` is added when it is an
    /// address.
    pub cluster_api_addresses: Vec<std::net::IpAddr>,
    /// Answers name lookups of outgoing requests before the system resolver (tests point
    /// names at chosen addresses with it); every answer is still checked.
    pub resolver: Option<Arc<dyn super::Resolver>>,
    /// How fresh compiles are bounded: in a child process with a memory and time limit, and
    /// how many at once.
    pub compile: CompileLimits,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            max_memory_bytes: 256 << 20,
            max_instances: 256,
            observer: None,
            http_stub: None,
            max_outgoing_connections: None,
            cluster_api_addresses: Vec::new(),
            resolver: None,
            compile: CompileLimits::default(),
        }
    }
}

impl fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("cache_dir", &self.cache_dir)
            .field("max_memory_bytes", &self.max_memory_bytes)
            .field("max_instances", &self.max_instances)
            .field("http_stub", &self.http_stub.as_ref().map(|_| "<stub>"))
            .field("max_outgoing_connections", &self.max_outgoing_connections)
            .field("cluster_api_addresses", &self.cluster_api_addresses)
            .field("compile", &self.compile)
            .finish()
    }
}

/// The wasmtime machinery shared by all plugins; clones are cheap handles to the same engine.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    pub engine: Engine,
    pub linker: Linker<StoreState>,
    pub disk_cache: Option<DiskCache>,
    pub config: RuntimeConfig,
    pub metrics: RuntimeMetrics,
    /// Recently compiled handlers by wasm digest, so loading the same bytes again (several
    /// plugins from one file, a re-drop, a swap back) shares one copy of the machine code
    /// instead of mapping another.
    pub recent: parking_lot::Mutex<std::collections::VecDeque<CompiledHandler>>,
    /// The host-wide count of open outgoing HTTP requests.
    pub connections: OpenCount,
    /// [`RuntimeConfig::cluster_api_addresses`] with `KUBERNETES_SERVICE_HOST`.
    pub cluster_api: Arc<[std::net::IpAddr]>,
    /// The pool's instance slots, reserved per plugin at load.
    pub slots: InstanceSlots,
    /// Lets fresh compiles run at once while their memory limits fit the compile budget.
    pub compile_gate: CompileGate,
}

/// How many compiled handlers stay shared in memory after their last plugin is gone.
const RECENT_COMPILED: usize = 32;

/// A validated, compiled handler, ready to instantiate any number of times; cheap to clone.
#[derive(Clone)]
pub struct CompiledHandler {
    pub(crate) pre: WorldPre,
    wasm_sha256: [u8; 32],
    cache_hit: bool,
}

impl CompiledHandler {
    /// Whether the artifact came from the disk cache instead of Cranelift.
    pub fn cache_hit(&self) -> bool {
        self.cache_hit
    }

    /// Hex sha256 of the wasm bytes, identifying the handler version (e.g. to ignore a re-drop
    /// of an unchanged file).
    pub fn wasm_sha256(&self) -> String {
        hex::encode(self.wasm_sha256)
    }

    /// The underlying wasmtime component.
    pub fn component(&self) -> &Component {
        self.pre.component()
    }

    /// Which version of the `kubewasm:handler` world the component implements.
    pub fn world(&self) -> HandlerWorld {
        self.pre.world()
    }
}

impl Runtime {
    /// Who sees what this runtime's guests do (the one the runtime was built with).
    pub fn observer(&self) -> Option<&SharedObserver> {
        self.inner.config.observer.as_ref()
    }

    /// Builds the engine (pool sized by `config`), starts its epoch ticker and links WASI p2,
    /// `wasi:http` and the imports of both world versions once for all plugins (a 0.1.0
    /// component simply does not use the 0.2.0 ones).
    pub fn new(config: RuntimeConfig, metrics: RuntimeMetrics) -> anyhow::Result<Self> {
        let engine = build_engine(config.max_instances, config.max_memory_bytes)?;
        spawn_epoch_ticker(&engine)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        v1::Handler::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        link_v2_imports(&mut linker)?;
        let disk_cache = config
            .cache_dir
            .clone()
            .and_then(|d| DiskCache::open(d, &engine));
        Ok(Self {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                disk_cache,
                connections: OpenCount::new(
                    config
                        .max_outgoing_connections
                        .unwrap_or_else(super::default_host_connections),
                ),
                cluster_api: cluster_api_addresses(&config),
                slots: InstanceSlots::new(config.max_instances, metrics.clone()),
                compile_gate: CompileGate::new(config.compile.memory_budget_bytes),
                config,
                metrics,
                recent: parking_lot::Mutex::new(std::collections::VecDeque::new()),
            }),
        })
    }

    /// The runtime's counters, for per-plugin budgets created by the loader
    /// ([`GuestCausedLog::new`](super::GuestCausedLog::new)).
    pub fn metrics(&self) -> &RuntimeMetrics {
        &self.inner.metrics
    }

    /// Reserves pool slots for `wanted` instances of `plugin` running at once (its
    /// concurrency): fewer when fewer are left (see [`PoolReservation::granted`]), none at all
    /// is an error naming the plugin. Held by the plugin's instances
    /// ([`HandlerInstance::with_pool_reservation`]) and given back when the last is dropped.
    pub fn reserve_instances(
        &self,
        plugin: &str,
        wanted: usize,
    ) -> Result<PoolReservation, PoolFull> {
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        self.inner.slots.reserve(plugin, wanted)
    }

    /// Pool slots reserved by plugins now, and how many may be.
    pub fn reserved_instances(&self) -> (u32, u32) {
        self.inner.slots.usage()
    }

    /// The shared engine (e.g. for benchmarks comparing raw calls).
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Validates and compiles `wasm`, or loads it from the disk cache when configured (see
    /// [`CompiledHandler::cache_hit`]). A corrupted cache entry is recompiled, never loaded.
    pub fn compile(&self, wasm: &[u8]) -> Result<CompiledHandler, RuntimeError> {
        check_binary(wasm)?;
        let inner = &*self.inner;
        let wasm_sha256: [u8; 32] = Sha256::digest(wasm).into();
        if let Some(hit) = inner
            .recent
            .lock()
            .iter()
            .find(|c| c.wasm_sha256 == wasm_sha256)
        {
            inner.metrics.compiled("hit");
            return Ok(CompiledHandler {
                cache_hit: true,
                ..hit.clone()
            });
        }
        let compiled = self.compile_uncached_in_memory(wasm, wasm_sha256)?;
        let mut recent = inner.recent.lock();
        if recent.len() >= RECENT_COMPILED {
            recent.pop_front();
        }
        recent.push_back(compiled.clone());
        Ok(compiled)
    }

    fn compile_uncached_in_memory(
        &self,
        wasm: &[u8],
        wasm_sha256: [u8; 32],
    ) -> Result<CompiledHandler, RuntimeError> {
        let inner = &*self.inner;
        let Some(disk) = &inner.disk_cache else {
            let (pre, _) = self.compile_fresh(wasm)?;
            inner.metrics.compiled("uncached");
            return Ok(CompiledHandler {
                pre,
                wasm_sha256,
                cache_hit: false,
            });
        };
        let path = disk.path_for(&wasm_sha256);
        if let Some(component) = disk.load(&inner.engine, &wasm_sha256) {
            match check_world(&inner.engine, &inner.linker, &component) {
                Ok(pre) => {
                    inner.metrics.compiled("hit");
                    return Ok(CompiledHandler {
                        pre,
                        wasm_sha256,
                        cache_hit: true,
                    });
                }
                Err(e) => tracing::warn!(path = %path.display(), error = %e,
                    "cached artifact no longer validates; recompiling"),
            }
        }
        let (pre, artifact) = self.compile_fresh(wasm)?;
        match artifact {
            Some(artifact) => disk.store_artifact(&wasm_sha256, &artifact),
            None => disk.store(&wasm_sha256, pre.component()),
        }
        inner.metrics.compiled("miss");
        Ok(CompiledHandler {
            pre,
            wasm_sha256,
            cache_hit: false,
        })
    }

    /// Compiles with Cranelift once a place under the compile memory budget is free: in a child
    /// process when a worker binary is configured (then the artifact it sent comes back too, for
    /// the disk cache), else in this process.
    fn compile_fresh(&self, wasm: &[u8]) -> Result<(WorldPre, Option<Vec<u8>>), RuntimeError> {
        let inner = &*self.inner;
        let limits = &inner.config.compile;
        let memory = limits.limit_for(wasm.len());
        let _share = inner.compile_gate.enter(memory);
        let started = Instant::now();
        let (component, artifact) = match &limits.worker {
            Some(worker) => {
                let nice = compile_niceness(wasm.len());
                let artifact = match compile_in_child(worker, limits, memory, nice, wasm) {
                    Ok(ChildOutcome::Artifact(a)) => a,
                    Ok(ChildOutcome::Invalid(message)) => {
                        return Err(RuntimeError::Compile(message));
                    }
                    Err(aborted) => {
                        inner.metrics.compiled(aborted.metric());
                        tracing::warn!(target: "kubewasm::runtime", bytes = wasm.len(),
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            error = %aborted, "compile stopped");
                        return Err(aborted.into());
                    }
                };
                // SAFETY: the artifact is `Engine::precompile_component` output of this executable,
                // received over a pipe only this process holds (see `compile_child`); wasmtime
                // refuses one made by an engine of other settings or version.
                let component = unsafe { Component::deserialize(&inner.engine, &artifact) }
                    .map_err(|e| RuntimeError::Compile(format!("compiled artifact: {e:#}")))?;
                (component, Some(artifact))
            }
            None => {
                let compile = || Component::from_binary(&inner.engine, wasm);
                // Cranelift compiles functions on rayon's pool, and a thread outside a pool gets
                // a turn only when no worker has work left: a small component queued behind an
                // 18 MB one waited for all of it. A pool per compile lets the OS share the cores
                // between them.
                let component = match compile_pool(wasm.len()) {
                    Some(pool) => pool.install(compile),
                    None => compile(),
                }
                .map_err(|e| RuntimeError::Compile(format!("{e:#}")))?;
                (component, None)
            }
        };
        tracing::debug!(target: "kubewasm::runtime", bytes = wasm.len(),
            elapsed_ms = started.elapsed().as_millis() as u64, "compiled component");
        Ok((
            check_world(&inner.engine, &inner.linker, &component)?,
            artifact,
        ))
    }

    /// A handle for `plugin_name`'s instances that instantiates on first use; refuses limits the
    /// runtime cannot give.
    pub fn handler_instance(
        &self,
        compiled: &CompiledHandler,
        plugin_name: &str,
        limits: Limits,
        cache: Arc<dyn CacheReader>,
    ) -> Result<HandlerInstance, RuntimeError> {
        let ceiling = self.inner.config.max_memory_bytes;
        if limits.memory_bytes > ceiling {
            return Err(RuntimeError::Instantiate(format!(
                "memory cap of {} bytes exceeds the runtime's ceiling of {ceiling} bytes",
                limits.memory_bytes
            )));
        }
        Ok(HandlerInstance::new(
            self.clone(),
            compiled.clone(),
            plugin_name,
            limits,
            cache,
        ))
    }

    /// Creates `plugin_name`'s instance right away, so a handler whose start-up traps or does not
    /// fit its limits is rejected here rather than on its first event.
    pub async fn instantiate(
        &self,
        compiled: &CompiledHandler,
        plugin_name: &str,
        limits: Limits,
        cache: Arc<dyn CacheReader>,
    ) -> Result<HandlerInstance, RuntimeError> {
        let mut instance = self.handler_instance(compiled, plugin_name, limits, cache)?;
        instance.start().await.map_err(|e| match e {
            CallError::Instantiate(msg) => RuntimeError::Instantiate(msg),
            CallError::PoolExhausted { message } => RuntimeError::PoolExhausted(message),
            other => RuntimeError::Instantiate(other.to_string()),
        })?;
        Ok(instance)
    }
}

/// The 0.2.0 world's own interfaces and 0.3.0's `settings`, plus `wasi:http` from wasmtime-wasi-http (whose requests
/// [`HttpHooks`](super::http_hooks::HttpHooks) checks against the plugin's grants and sends).
fn link_v2_imports(linker: &mut Linker<StoreState>) -> anyhow::Result<()> {
    use v2::kubewasm::handler::{cache, events, kube, log, types};
    types::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    log::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    cache::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    kube::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    events::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    // 0.3.0 imports 0.2.0's interfaces unchanged and adds only `settings`.
    super::bindings::v3::kubewasm::handler0_3_0::settings::add_to_linker::<_, HasSelf<_>>(
        linker,
        |s| s,
    )?;
    super::bindings::v3::kubewasm::handler0_3_0::shard::add_to_linker::<_, HasSelf<_>>(
        linker,
        |s| s,
    )?;
    Ok(())
}

/// The configured API service addresses, and the in-cluster one from the environment.
fn cluster_api_addresses(config: &RuntimeConfig) -> Arc<[std::net::IpAddr]> {
    let mut addrs = config.cluster_api_addresses.clone();
    if let Some(ip) = std::env::var("KUBERNETES_SERVICE_HOST")
        .ok()
        .and_then(|h| h.parse().ok())
    {
        addrs.push(ip);
    }
    addrs.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_components_compile_at_lower_priority() {
        assert_eq!(compile_niceness(82_841), 0, "a Rust handler");
        assert_eq!(compile_niceness(1_625_541), 1, "the QuickJS logger");
        assert_eq!(compile_niceness(4_638_710), 3, "the Go logger");
        assert_eq!(compile_niceness(18_467_459), 5, "the Python logger");
        assert_eq!(compile_niceness(usize::MAX), 10);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_compile_thread_runs_at_its_nice_level() {
        let nice = std::thread::spawn(|| {
            lower_this_threads_priority(3);
            // SAFETY: a plain system call on this thread's own id.
            unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::getpriority(libc::PRIO_PROCESS, tid)
            }
        })
        .join()
        .unwrap();
        // SAFETY: as above, for the process.
        let base = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(nice, (base + 3).min(19));
    }
}
