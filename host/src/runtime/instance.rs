//! [`HandlerInstance`]: one plugin's live instance, its per-call deadline and the
//! discard-and-recreate policy after a failed call.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::{CallHook, Store, Trap, UpdateDeadline};

use super::bindings::{v1, v2, v3, v3c};
use super::budget::{BudgetExceeded, MemoryBudget};
use super::cluster::{ClusterAccess, NoClusterAccess};
use super::convert;
use super::error::CallError;
use super::guest_caused::GuestCausedLog;
use super::guest_log::GuestLog;
use super::handle::{CompiledHandler, Runtime};
use super::host_wait::{CallBudget, Overrun, running};
use super::http_policy::HttpPolicy;
use super::limits::{Limits, MemoryCapExceeded};
use super::pool::PoolReservation;
use super::store::StoreState;
use super::types::{
    CacheReader, GuestObject, HandlerOutcome, ObjectKey, PluginInfo, PluginSettings,
};
use super::validate::WorldPre;

const RUNTIME_TARGET: &str = "kubewasm::runtime";

/// How much of a failed call's wasmtime error (trap, backtrace) reaches the log.
const MAX_FAILURE_DETAIL: usize = 4 << 10;

/// One plugin's sandbox. Calls are sequential (`&mut self`); after a trap, a deadline or memory
/// exhaustion the instance is dropped and the next call instantiates a fresh one, so guest state
/// never survives a failure.
///
/// Every call (and instantiation) is bounded by the plugin's deadline, whatever the guest does,
/// counting the call's own time (its future's time inside `poll` and its sleeps, not the time
/// other calls on the thread run nor the time the host waits on an external system for it; see
/// `host_wait.rs`), and by its wall-clock limit, host waits included. The store
/// yields to the executor at every epoch tick, so a busy loop returns control, and a guest
/// blocked in a WASI import (sleep, poll, an HTTP response) is just a pending future. When
/// either bound is reached the call future is dropped, which unwinds the guest's fiber; the
/// instance is discarded. Dropping a call future from outside (a host shutting down) discards
/// the instance the same way.
///
/// Calls are async but run the guest on the polling thread: drive them from a thread the
/// caller owns (the plugins layer gives each plugin a single-threaded runtime), not from a
/// shared executor whose other tasks would wait up to one [`EPOCH_TICK`](super::EPOCH_TICK)
/// for a busy guest to yield. The executor must have its time driver enabled.
pub struct HandlerInstance {
    runtime: Runtime,
    compiled: CompiledHandler,
    plugin: Arc<str>,
    limits: Limits,
    cache: Arc<dyn CacheReader>,
    cluster: Arc<dyn ClusterAccess>,
    /// The operator's settings, which 0.3.0 guests read.
    settings: Arc<PluginSettings>,
    /// Which objects are this replica's; also fences side effects.
    shard: Arc<dyn super::shard::ShardView>,
    http: HttpPolicy,
    log: GuestLog,
    lines: GuestCausedLog,
    /// The plugin's memory account, shared by every instance made from this one by `fresh`.
    budget: MemoryBudget,
    /// The plugin version's pool slots, held while any of its instances exists.
    pool: Option<Arc<PoolReservation>>,
    live: Option<Live>,
    consecutive_failures: u32,
    /// Counts each call's time inside `poll` (off only in benchmarks).
    poll_clock: bool,
}

struct Live {
    store: Store<StoreState>,
    handler: Bound,
}

/// A live instance's exports, for the world version it implements.
enum Bound {
    V1(v1::Handler),
    V2(v2::Handler),
    V3(v3::Handler),
    Controller(v3c::Controller),
}

/// What a controller is told when the host would hand it an event: a host bug, never a guest's.
const NOT_A_HANDLER: &str = "a controller receives keys to reconcile, not events";

impl HandlerInstance {
    /// An instance that instantiates on first use ([`HandlerInstance::start`] does it eagerly).
    pub(crate) fn new(
        runtime: Runtime,
        compiled: CompiledHandler,
        plugin: &str,
        limits: Limits,
        cache: Arc<dyn CacheReader>,
    ) -> Self {
        let plugin: Arc<str> = plugin.into();
        let log = GuestLog::new(
            plugin.clone(),
            runtime.inner.config.observer.clone(),
            &runtime.inner.metrics,
        );
        let lines = GuestCausedLog::new(&plugin, &runtime.inner.metrics);
        let budget = MemoryBudget::new(&plugin, limits.memory_bytes, &runtime.inner.metrics);
        Self {
            budget,
            pool: None,
            cluster: Arc::new(NoClusterAccess::new(&plugin)),
            settings: Arc::new(PluginSettings::empty()),
            shard: super::shard::not_sharded(),
            runtime,
            compiled,
            plugin,
            limits,
            cache,
            http: HttpPolicy::deny_all(),
            log,
            lines,
            live: None,
            consecutive_failures: 0,
            poll_clock: true,
        }
    }

    /// Sets what the plugin's outbound HTTP may reach (the default refuses every request).
    /// Applies to instances created from now on: call it before the first call or `start`.
    pub fn with_http_policy(mut self, mut policy: HttpPolicy) -> Self {
        if policy.stub.is_none() {
            policy.stub = self.runtime.inner.config.http_stub.clone();
        }
        let inner = &self.runtime.inner;
        policy.host_connections = Some(inner.connections.clone());
        policy.cluster_api = inner.cluster_api.clone();
        if policy.resolver.is_none() {
            policy.resolver = inner.config.resolver.clone();
        }
        self.http = policy;
        self
    }

    /// Benchmarks only: leaves out what the grant boundary adds to every call and request (the
    /// call hook that keeps host waits exact and charges the instance's host-side resources to
    /// its plugin's memory budget before each host call, connection permits, failing a call's
    /// requests when it ends), so `cargo bench --bench http` can print what they cost in one
    /// run. The host never calls it; without the hook, host waits count as guest time and
    /// host-side resources go uncharged (linear memory is still charged, at `memory.grow`).
    #[doc(hidden)]
    pub fn without_bounds_for_benchmarks(mut self) -> Self {
        self.http.bounded = false;
        self.http.host_connections = None;
        self
    }

    /// Benchmarks only: leaves out the account of each call's time inside `poll`, so
    /// `cargo bench --bench runtime` can print what it costs in one run. The host never calls
    /// it; without it, a call's running time does not count against its deadline at all.
    #[doc(hidden)]
    pub fn without_poll_clock_for_benchmarks(mut self) -> Self {
        self.poll_clock = false;
        self
    }

    /// Another instance of the same handler, plugin, limits and cache, with no live instance
    /// yet (a restarted worker starts from this). It shares this one's per-plugin bounds: the
    /// guest log's rate, the host lines' budget and the memory budget, so N instances of a
    /// plugin together get what one plugin gets.
    pub fn fresh(&self) -> HandlerInstance {
        let mut fresh = HandlerInstance::new(
            self.runtime.clone(),
            self.compiled.clone(),
            &self.plugin,
            self.limits,
            self.cache.clone(),
        )
        .with_cluster(self.cluster.clone())
        .with_http_policy(self.http.clone())
        .with_guest_caused_log(self.lines.clone())
        .with_settings(self.settings.clone());
        fresh.log = self.log.clone();
        fresh.budget = self.budget.clone();
        fresh.pool = self.pool.clone();
        fresh
    }

    /// Makes this instance, and every one `fresh` makes from it, hold `reservation` (the
    /// plugin's pool slots), so the slots are given back only when the last of them is gone.
    pub fn with_pool_reservation(mut self, reservation: PoolReservation) -> Self {
        self.pool = Some(Arc::new(reservation));
        self
    }

    /// The plugin's memory budget, shared by every instance `fresh` made from this one.
    pub fn memory_budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Drops the live instance, if any, giving its memory back to the plugin's budget; the
    /// next call instantiates a fresh one.
    pub fn release(&mut self) {
        self.live = None;
    }

    /// Makes the host lines this instance's calls cause draw on `lines`, the plugin's one
    /// budget shared with its other instances and capabilities (by default each instance has
    /// its own). Applies from the next instantiation.
    pub fn with_guest_caused_log(mut self, lines: GuestCausedLog) -> Self {
        self.lines = lines;
        self
    }

    /// The plugin's budget for host lines its calls cause (handler errors and retries).
    pub fn guest_caused_log(&self) -> &GuestCausedLog {
        &self.lines
    }

    /// Sends the handler's `kube` and `events` calls to `cluster` (by default every call is
    /// refused). Applies from the next instantiation.
    pub fn with_cluster(mut self, cluster: Arc<dyn ClusterAccess>) -> Self {
        self.cluster = cluster;
        self
    }

    /// Gives 0.3.0 guests the operator's `settings` (by default none). Applies from the next
    /// instantiation.
    pub fn with_settings(mut self, settings: Arc<PluginSettings>) -> Self {
        self.settings = settings;
        self
    }

    /// Answers the guest's `shard` import from `view` and fences its side effects by it (by
    /// default: not sharded, never fenced). Applies from the next instantiation.
    pub fn with_shard(mut self, view: Arc<dyn super::shard::ShardView>) -> Self {
        self.shard = view;
        self
    }

    /// The name this instance logs and counts under.
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }

    /// Failed calls since the last successful one (0 after a success).
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// The world version the handler implements.
    pub fn world(&self) -> super::HandlerWorld {
        self.compiled.world()
    }

    /// The limits this instance runs under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Instantiates now if there is no live instance, so a handler whose start-up code traps or
    /// does not fit its limits is rejected before its first event.
    pub async fn start(&mut self) -> Result<(), CallError> {
        if self.live.is_none() {
            let live = self.instantiate_live().await?;
            self.live = Some(live);
        }
        Ok(())
    }

    /// Asks the handler for its name, subscriptions and (0.2.0) what it asks to be granted.
    pub async fn describe(&mut self) -> Result<PluginInfo, CallError> {
        self.call(async |h, store| match h {
            Bound::V1(h) => h.call_describe(store).await.map(convert::v1::plugin_info),
            Bound::V2(h) => h.call_describe(store).await.map(convert::v2::plugin_info),
            Bound::V3(h) => h.call_describe(store).await.map(convert::v2::plugin_info),
            Bound::Controller(h) => h.call_describe(store).await.map(convert::v3c::plugin_info),
        })
        .await
    }

    /// Asks a 0.3.0 guest whether it accepts the operator's settings: `Ok(Err(message))` when
    /// it refuses them. Earlier worlds have no settings and accept without a call.
    pub async fn validate_settings(&mut self) -> Result<Result<(), String>, CallError> {
        if !self.compiled.world().has_settings() {
            return Ok(Ok(()));
        }
        let verdict = self
            .call(async |h, store| match h {
                Bound::V3(h) => h.call_validate_settings(store).await,
                Bound::Controller(h) => h.call_validate_settings(store).await,
                Bound::V1(_) | Bound::V2(_) => Ok(Ok(())),
            })
            .await?;
        Ok(verdict.map_err(crate::runtime::guest_log::cap_guest_text))
    }

    /// Asks a controller to reconcile `key`.
    pub async fn reconcile(&mut self, key: &ObjectKey) -> Result<HandlerOutcome, CallError> {
        self.call(async |h, store| match h {
            Bound::Controller(h) => {
                let r = h.call_reconcile(store, convert::v3c::key_param(key)).await;
                r.map(convert::v3c::outcome)
            }
            _ => Ok(HandlerOutcome::Fatal("only a controller reconciles".into())),
        })
        .await
    }

    /// Asks a controller which primaries an event of `obj` (a watched kind with the `guest`
    /// mapping) concerns.
    pub async fn keys_for(&mut self, obj: &dyn GuestObject) -> Result<Vec<ObjectKey>, CallError> {
        let labels = borrowed_labels(obj);
        self.call(async |h, store| match h {
            Bound::Controller(h) => {
                let obj = convert::v2::object_param(obj, &labels);
                h.call_keys_for(store, obj).await.map(convert::v3c::keys)
            }
            _ => Ok(Vec::new()),
        })
        .await
    }

    /// Delivers an add; `is_in_initial_list` as in client-go (also set for replays to a plugin
    /// that joined late or was hot-swapped in).
    pub async fn on_add(
        &mut self,
        obj: &dyn GuestObject,
        is_in_initial_list: bool,
    ) -> Result<HandlerOutcome, CallError> {
        let labels = borrowed_labels(obj);
        self.call(async |h, store| match h {
            Bound::V1(h) => {
                let obj = convert::v1::object_param(obj, &labels);
                let r = h.call_on_add(store, obj, is_in_initial_list).await;
                r.map(convert::v1::outcome)
            }
            Bound::V2(h) => {
                let obj = convert::v2::object_param(obj, &labels);
                let r = h.call_on_add(store, obj, is_in_initial_list).await;
                r.map(convert::v2::outcome)
            }
            Bound::V3(h) => {
                let obj = convert::v2::object_param(obj, &labels);
                let r = h.call_on_add(store, obj, is_in_initial_list).await;
                r.map(convert::v2::outcome)
            }
            Bound::Controller(_) => Ok(HandlerOutcome::Fatal(NOT_A_HANDLER.into())),
        })
        .await
    }

    /// Delivers an update; `is_sync` marks a resync or relist replay of an unchanged object.
    pub async fn on_update(
        &mut self,
        old: &dyn GuestObject,
        new: &dyn GuestObject,
        is_sync: bool,
    ) -> Result<HandlerOutcome, CallError> {
        let (old_labels, new_labels) = (borrowed_labels(old), borrowed_labels(new));
        self.call(async |h, store| match h {
            Bound::V1(h) => {
                let old = convert::v1::object_param(old, &old_labels);
                let new = convert::v1::object_param(new, &new_labels);
                let r = h.call_on_update(store, old, new, is_sync).await;
                r.map(convert::v1::outcome)
            }
            Bound::V2(h) => {
                let old = convert::v2::object_param(old, &old_labels);
                let new = convert::v2::object_param(new, &new_labels);
                let r = h.call_on_update(store, old, new, is_sync).await;
                r.map(convert::v2::outcome)
            }
            Bound::V3(h) => {
                let old = convert::v2::object_param(old, &old_labels);
                let new = convert::v2::object_param(new, &new_labels);
                let r = h.call_on_update(store, old, new, is_sync).await;
                r.map(convert::v2::outcome)
            }
            Bound::Controller(_) => Ok(HandlerOutcome::Fatal(NOT_A_HANDLER.into())),
        })
        .await
    }

    /// Delivers a delete; `final_state_unknown` marks a deletion inferred from a relist, with
    /// `obj` the last state the cache knew.
    pub async fn on_delete(
        &mut self,
        obj: &dyn GuestObject,
        final_state_unknown: bool,
    ) -> Result<HandlerOutcome, CallError> {
        let labels = borrowed_labels(obj);
        self.call(async |h, store| match h {
            Bound::V1(h) => {
                let obj = convert::v1::object_param(obj, &labels);
                let r = h.call_on_delete(store, obj, final_state_unknown).await;
                r.map(convert::v1::outcome)
            }
            Bound::V2(h) => {
                let obj = convert::v2::object_param(obj, &labels);
                let r = h.call_on_delete(store, obj, final_state_unknown).await;
                r.map(convert::v2::outcome)
            }
            Bound::V3(h) => {
                let obj = convert::v2::object_param(obj, &labels);
                let r = h.call_on_delete(store, obj, final_state_unknown).await;
                r.map(convert::v2::outcome)
            }
            Bound::Controller(_) => Ok(HandlerOutcome::Fatal(NOT_A_HANDLER.into())),
        })
        .await
    }

    /// Tells the handler that an initial replay is complete: it has now seen every object it
    /// subscribes to. 0.1.0 handlers have no such export; for them this is `Ok` without a call
    /// (and without instantiating).
    pub async fn on_synced(&mut self) -> Result<HandlerOutcome, CallError> {
        if self.compiled.world() == super::HandlerWorld::V0_1 {
            return Ok(HandlerOutcome::Ok);
        }
        self.call(async |h, store| match h {
            Bound::V1(_) => Ok(HandlerOutcome::Ok),
            Bound::V2(h) => h.call_on_synced(store).await.map(convert::v2::outcome),
            Bound::V3(h) => h.call_on_synced(store).await.map(convert::v2::outcome),
            Bound::Controller(h) => h.call_on_synced(store).await.map(convert::v2::outcome),
        })
        .await
    }

    /// A fresh store and instance; start-up code runs under the same deadline as a call.
    async fn instantiate_live(&mut self) -> Result<Live, CallError> {
        let mut state = StoreState::new(
            self.log.clone(),
            self.lines.clone(),
            self.budget.clone(),
            self.cache.clone(),
            self.http.clone(),
            self.runtime.inner.metrics.clone(),
            self.cluster.clone(),
        );
        state.settings = self.settings.clone();
        state.shard = self.shard.clone();
        state.http_hooks.set_shard(self.shard.clone());
        let mut store = Store::new(&self.runtime.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        if self.http.bounded {
            store.call_hook(|mut store, hook| {
                match hook {
                    CallHook::CallingHost => {
                        store.data().host_wait().entered_host(true);
                        // Charged before the host function can allocate more for the guest.
                        store.data_mut().settle_host_memory()?;
                    }
                    CallHook::ReturningFromHost => {
                        store.data().host_wait().entered_host(false);
                        // The result is lowered: what the call held for it is given back.
                        store.data_mut().end_host_call();
                    }
                    CallHook::CallingWasm | CallHook::ReturningFromWasm => {}
                }
                Ok(())
            });
        } else {
            // Without the hook the guest is taken to be in a host call whenever it is pending,
            // so a sleep still counts (host waits do not; an epoch yield does).
            store.data().host_wait().entered_host(true);
        }
        let budget = arm_yield(&mut store, self.limits);
        let clock = store.data().host_wait().clone();
        let instantiate = async {
            match &self.compiled.pre {
                WorldPre::V1(pre) => pre.instantiate_async(&mut store).await.map(Bound::V1),
                WorldPre::V2(pre) => pre.instantiate_async(&mut store).await.map(Bound::V2),
                WorldPre::V3(pre) => pre.instantiate_async(&mut store).await.map(Bound::V3),
                WorldPre::Controller(pre) => pre
                    .instantiate_async(&mut store)
                    .await
                    .map(Bound::Controller),
            }
        };
        let clock = self.poll_clock.then_some(&clock);
        let result = within(&budget, running(clock, instantiate)).await;
        store.data_mut().http_hooks.end_call();
        store.data().output.flush();
        let err = match result {
            Ok(Ok(handler)) => {
                self.runtime.inner.metrics.instantiated(&self.plugin);
                return Ok(Live { store, handler });
            }
            Ok(Err(e)) if is_pool_exhausted(&e) => CallError::PoolExhausted {
                message: e.root_cause().to_string(),
            },
            Ok(Err(e)) => CallError::Instantiate(describe_failure(&e, store.data()).to_string()),
            Err(overrun) => CallError::Instantiate(format!(
                "start-up code ran past the {}",
                self.overrun_text(overrun)
            )),
        };
        self.record_failure(&err, None);
        Err(err)
    }

    /// Runs one export under the deadline and the wall-clock limit; on failure discards the
    /// instance, logs and counts. The live instance is taken out for the call, so a call future dropped from
    /// outside leaves no half-run instance behind.
    async fn call<R>(
        &mut self,
        f: impl AsyncFnOnce(&Bound, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let mut live = match self.live.take() {
            Some(live) => live,
            None => self.instantiate_live().await?,
        };
        live.store.data().output.reset_tail();
        live.store.data_mut().limiter.cap_hit = false;
        live.store.data_mut().limiter.account.exceeded = false;
        let budget = arm_yield(&mut live.store, self.limits);
        let clock = live.store.data().host_wait().clone();
        let clock = self.poll_clock.then_some(&clock);
        let result = within(&budget, running(clock, f(&live.handler, &mut live.store))).await;
        live.store.data_mut().http_hooks.end_call();
        live.store.data().output.flush();
        let (err, detail) = match result {
            Ok(Ok(value)) => {
                self.consecutive_failures = 0;
                self.live = Some(live);
                return Ok(value);
            }
            Ok(Err(e)) => {
                let err = describe_failure(&e, live.store.data());
                // An epoch interrupt is the deadline's; say which bound it was.
                let detail = match (&err, budget.check(Instant::now())) {
                    (CallError::DeadlineExceeded, Err(overrun)) => self.overrun_text(overrun),
                    // A trap's backtrace names the guest's functions from its own name
                    // section: guest text, escaped and cut like any other.
                    _ => crate::text::foreign(&format!("{e:#}"), MAX_FAILURE_DETAIL),
                };
                (err, Some(detail))
            }
            Err(overrun) => (
                CallError::DeadlineExceeded,
                Some(self.overrun_text(overrun)),
            ),
        };
        drop(live);
        self.record_failure(&err, detail.as_deref());
        Err(err)
    }

    /// Which bound a call ran into, for the log.
    fn overrun_text(&self, overrun: Overrun) -> String {
        match overrun {
            Overrun::Deadline => format!(
                "deadline of {} ms of guest time",
                self.limits.deadline.as_millis()
            ),
            Overrun::WallLimit => format!(
                "wall-clock limit of {} ms (waiting on host calls included)",
                self.limits.wall_limit.max(self.limits.deadline).as_millis()
            ),
        }
    }

    fn record_failure(&mut self, err: &CallError, detail: Option<&str>) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.runtime.inner.metrics.failed(&self.plugin, err.cause());
        let plugin = &*self.plugin;
        let cause = err.cause();
        if !self.lines.admit() {
            return;
        }
        match detail {
            Some(detail) => tracing::warn!(target: RUNTIME_TARGET, plugin, cause, detail,
                "handler call failed: {err}; instance discarded"),
            None => tracing::warn!(target: RUNTIME_TARGET, plugin, cause,
                "handler call failed: {err}; instance discarded"),
        }
    }
}

/// Runs `f` until it finishes or `budget` runs out, whichever comes first. The guest gets the
/// first poll, as with a plain timeout.
async fn within<F: Future>(budget: &CallBudget, f: F) -> Result<F::Output, Overrun> {
    tokio::select! {
        biased;
        out = f => Ok(out),
        overrun = budget.exhausted() => Err(overrun),
    }
}

/// Starts the call's budget. At every epoch tick a running guest either traps (its budget has
/// run out) or yields to the executor, so a caller abandoning the call gets to run even while
/// the guest never leaves wasm code. Checking the budget here, rather than only through the
/// caller's timer, stops a busy loop at the first tick after the deadline however late the
/// executor would fire that timer; `yield_now` (not a plain self-wake) lets tokio poll its timer
/// driver before resuming the guest, which a blocked host call's deadline relies on. Time
/// suspended at a tick is not the call's: the plugin's other calls run then.
fn arm_yield(store: &mut Store<StoreState>, limits: Limits) -> Arc<CallBudget> {
    let budget = CallBudget::start(store.data().host_wait(), limits.deadline, limits.wall_limit);
    let ticks = budget.clone();
    store.epoch_deadline_callback(move |_| {
        Ok(if ticks.check(Instant::now()).is_err() {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now()))
        })
    });
    store.set_epoch_deadline(1);
    budget
}

/// Whether instantiation failed for want of a free slot in the pooling allocator (a table, memory,
/// stack or instance), whatever context wasmtime wrapped around it.
fn is_pool_exhausted(e: &wasmtime::Error) -> bool {
    e.chain()
        .any(|c| c.is::<wasmtime::PoolConcurrencyLimitError>())
}

/// Maps a wasmtime error to the caller-facing cause.
fn describe_failure(e: &wasmtime::Error, state: &StoreState) -> CallError {
    if state.limiter.cap_hit
        || state.limiter.account.exceeded
        || e.chain()
            .any(|c| c.is::<MemoryCapExceeded>() || c.is::<BudgetExceeded>())
    {
        return CallError::OutOfMemory;
    }
    if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return CallError::DeadlineExceeded;
    }
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallError::Trap(format!("guest called exit({})", exit.0));
    }
    // wasmtime's message may quote what the component names (an import, a function): guest
    // text, cut and escaped like the stderr tail (which is escaped line by line already).
    let mut msg = crate::text::foreign(&e.root_cause().to_string(), MAX_FAILURE_DETAIL);
    if let Some(tail) = state.output.stderr_tail() {
        msg.push_str(" (guest stderr: ");
        msg.push_str(&tail);
        msg.push(')');
    }
    CallError::Trap(msg)
}

fn borrowed_labels(obj: &dyn GuestObject) -> Vec<(&str, &str)> {
    obj.view()
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}
