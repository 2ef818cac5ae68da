//! [`HandlerInstance`]: one plugin's live instance, its per-call deadline and the
//! discard-and-recreate policy after a failed call.

use std::sync::Arc;

use wasmtime::{Store, Trap};

use super::bindings::Handler;
use super::bindings::kubewasm::handler::types as wit;
use super::engine::deadline_ticks;
use super::error::CallError;
use super::guest_log::{GuestLog, cap_guest_text};
use super::handle::{CompiledHandler, Runtime};
use super::limits::{Limits, MemoryCapExceeded};
use super::store::StoreState;
use super::types::{CacheReader, GuestObject, HandlerOutcome, PluginInfo, Subscription};

const RUNTIME_TARGET: &str = "kubewasm::runtime";

/// One plugin's sandbox. Calls are sequential (`&mut self`); after a trap, a deadline or memory
/// exhaustion the instance is dropped and the next call instantiates a fresh one, so guest state
/// never survives a failure.
///
/// Calls block: make them from a plain thread or `tokio::task::spawn_blocking`, never from an
/// async task (WASI's synchronous bindings enter a Tokio runtime and would panic there).
pub struct HandlerInstance {
    runtime: Runtime,
    compiled: CompiledHandler,
    plugin: Arc<str>,
    limits: Limits,
    deadline_ticks: u64,
    cache: Arc<dyn CacheReader>,
    log: GuestLog,
    live: Option<Live>,
    consecutive_failures: u32,
}

struct Live {
    store: Store<StoreState>,
    handler: Handler,
}

impl HandlerInstance {
    pub(crate) fn new(
        runtime: Runtime,
        compiled: CompiledHandler,
        plugin: &str,
        limits: Limits,
        cache: Arc<dyn CacheReader>,
    ) -> Result<Self, String> {
        let plugin: Arc<str> = plugin.into();
        let log = GuestLog::new(
            plugin.clone(),
            runtime.inner.config.log_observer.clone(),
            &runtime.inner.metrics,
        );
        let mut this = Self {
            runtime,
            compiled,
            plugin,
            limits,
            deadline_ticks: deadline_ticks(limits.deadline),
            cache,
            log,
            live: None,
            consecutive_failures: 0,
        };
        this.live = Some(this.instantiate_live()?);
        Ok(this)
    }

    /// The name this instance logs and counts under.
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }

    /// Failed calls since the last successful one (0 after a success); feeds
    /// [`QuarantinePolicy::backoff`](super::QuarantinePolicy::backoff).
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// The limits this instance runs under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Asks the handler for its name and subscriptions.
    pub fn describe(&mut self) -> Result<PluginInfo, CallError> {
        let info = self.call(|h, store| h.call_describe(store))?;
        Ok(PluginInfo {
            name: info.name,
            subscriptions: info
                .subscriptions
                .into_iter()
                .map(|s| Subscription {
                    api_version: s.api_version,
                    kind: s.kind,
                    namespace: s.namespace,
                    label_selector: s.label_selector,
                    field_selector: s.field_selector,
                    resync_period_ms: s.resync_period_ms,
                })
                .collect(),
        })
    }

    /// Delivers an add; `is_in_initial_list` as in client-go (also set for replays to a plugin
    /// that joined late or was hot-swapped in).
    pub fn on_add(
        &mut self,
        obj: &dyn GuestObject,
        is_in_initial_list: bool,
    ) -> Result<HandlerOutcome, CallError> {
        let labels = borrowed_labels(obj);
        let obj = object_param(obj, &labels);
        self.call(|h, store| h.call_on_add(store, obj, is_in_initial_list))
            .map(outcome)
    }

    /// Delivers an update; `is_sync` marks a resync or relist replay of an unchanged object.
    pub fn on_update(
        &mut self,
        old: &dyn GuestObject,
        new: &dyn GuestObject,
        is_sync: bool,
    ) -> Result<HandlerOutcome, CallError> {
        let (old_labels, new_labels) = (borrowed_labels(old), borrowed_labels(new));
        let (old, new) = (
            object_param(old, &old_labels),
            object_param(new, &new_labels),
        );
        self.call(|h, store| h.call_on_update(store, old, new, is_sync))
            .map(outcome)
    }

    /// Delivers a delete; `final_state_unknown` marks a deletion inferred from a relist, with
    /// `obj` the last state the cache knew.
    pub fn on_delete(
        &mut self,
        obj: &dyn GuestObject,
        final_state_unknown: bool,
    ) -> Result<HandlerOutcome, CallError> {
        let labels = borrowed_labels(obj);
        let obj = object_param(obj, &labels);
        self.call(|h, store| h.call_on_delete(store, obj, final_state_unknown))
            .map(outcome)
    }

    fn instantiate_live(&self) -> Result<Live, String> {
        let state = StoreState::new(
            self.log.clone(),
            self.limits.memory_bytes,
            self.cache.clone(),
        );
        let mut store = Store::new(&self.runtime.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        // Start-up code runs under the same deadline as a call.
        store.set_epoch_deadline(self.deadline_ticks);
        let result = self.compiled.pre.instantiate(&mut store);
        store.data().output.flush();
        let handler = result.map_err(|e| describe_failure(&e, store.data()).to_string())?;
        self.runtime.inner.metrics.instantiated(&self.plugin);
        Ok(Live { store, handler })
    }

    /// Runs one export under the deadline; on failure discards the instance, logs and counts.
    fn call<R>(
        &mut self,
        f: impl FnOnce(&Handler, &mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let live = match &mut self.live {
            Some(live) => live,
            None => match self.instantiate_live() {
                Ok(live) => self.live.insert(live),
                Err(msg) => {
                    let err = CallError::Instantiate(msg);
                    self.record_failure(&err, None);
                    return Err(err);
                }
            },
        };
        live.store.data().output.reset_tail();
        live.store.data_mut().limiter.cap_hit = false;
        live.store.set_epoch_deadline(self.deadline_ticks);
        let result = f(&live.handler, &mut live.store);
        live.store.data().output.flush();
        match result {
            Ok(value) => {
                self.consecutive_failures = 0;
                Ok(value)
            }
            Err(e) => {
                let err = describe_failure(&e, live.store.data());
                self.live = None;
                self.record_failure(&err, Some(&e));
                Err(err)
            }
        }
    }

    fn record_failure(&mut self, err: &CallError, detail: Option<&wasmtime::Error>) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.runtime.inner.metrics.failed(&self.plugin, err.cause());
        let plugin = &*self.plugin;
        let cause = err.cause();
        match detail {
            Some(detail) => tracing::warn!(target: RUNTIME_TARGET, plugin, cause,
                detail = %format!("{detail:#}"), "handler call failed: {err}; instance discarded"),
            None => tracing::warn!(target: RUNTIME_TARGET, plugin, cause,
                "handler call failed: {err}"),
        }
    }
}

/// Maps a wasmtime error to the caller-facing cause.
fn describe_failure(e: &wasmtime::Error, state: &StoreState) -> CallError {
    if state.limiter.cap_hit || e.chain().any(|c| c.is::<MemoryCapExceeded>()) {
        return CallError::OutOfMemory;
    }
    if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return CallError::DeadlineExceeded;
    }
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallError::Trap(format!("guest called exit({})", exit.0));
    }
    let mut msg = e.root_cause().to_string();
    if let Some(tail) = state.output.stderr_tail() {
        msg.push_str(" (guest stderr: ");
        msg.push_str(&tail);
        msg.push(')');
    }
    CallError::Trap(msg)
}

fn outcome(result: Result<(), wit::HandlerError>) -> HandlerOutcome {
    match result {
        Ok(()) => HandlerOutcome::Ok,
        Err(wit::HandlerError::Retry(msg)) => HandlerOutcome::Retry(cap_guest_text(msg)),
        Err(wit::HandlerError::Fatal(msg)) => HandlerOutcome::Fatal(cap_guest_text(msg)),
    }
}

fn borrowed_labels(obj: &dyn GuestObject) -> Vec<(&str, &str)> {
    obj.view()
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Borrows the object's strings; wasmtime copies them straight into guest memory.
fn object_param<'a>(
    obj: &'a dyn GuestObject,
    labels: &'a [(&'a str, &'a str)],
) -> wit::ObjectParam<'a> {
    let v = obj.view();
    wit::ObjectParam {
        meta: wit::ObjectMetaParam {
            api_version: v.api_version,
            kind: v.kind,
            namespace: v.namespace,
            name: v.name,
            uid: v.uid,
            resource_version: v.resource_version,
            generation: v.generation,
            labels,
        },
        json: v.json,
    }
}
