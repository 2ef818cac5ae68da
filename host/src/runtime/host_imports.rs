//! The world's imports answered by the host, for both world versions: `log` becomes a `tracing`
//! event, `cache` is forwarded to the plugin's [`CacheReader`](super::CacheReader). 0.2.0's
//! `kube` and `events` become [`KubeCall`]s and [`EventCall`]s for the plugin's
//! [`ClusterAccess`](super::ClusterAccess), which decides what is granted. 0.3.0's `settings`
//! answers from the plugin's [`PluginSettings`](super::PluginSettings). Outbound HTTP is
//! answered in `http_hooks.rs`.

use super::bindings::{v1, v2};
use super::budget::BudgetExceeded;
use super::convert;
use super::store::StoreState;
use super::types::{ApiError, GuestLogLevel};

const RUNTIME_TARGET: &str = "kubewasm::runtime";

/// `log` and `cache` are the same in both versions; one body answers both.
macro_rules! log_and_cache {
    ($world:ident) => {
        impl $world::kubewasm::handler::types::Host for StoreState {}

        impl $world::kubewasm::handler::log::Host for StoreState {
            fn log(&mut self, level: $world::kubewasm::handler::log::Level, message: String) {
                use $world::kubewasm::handler::log::Level;
                let level = match level {
                    Level::Trace => GuestLogLevel::Trace,
                    Level::Debug => GuestLogLevel::Debug,
                    Level::Info => GuestLogLevel::Info,
                    Level::Warn => GuestLogLevel::Warn,
                    Level::Error => GuestLogLevel::Error,
                };
                self.log.log(level, message);
            }
        }

        impl $world::kubewasm::handler::cache::Host for StoreState {
            fn get(
                &mut self,
                api_version: String,
                kind: String,
                namespace: Option<String>,
                name: String,
            ) -> Result<Option<$world::kubewasm::handler::types::ObjectResult>, String> {
                let memory = self.call_memory();
                let lifted = api_version.len()
                    + kind.len()
                    + namespace.as_ref().map_or(0, String::len)
                    + name.len();
                memory
                    .charge(lifted as u64)
                    .map_err(|e| cache_refused("get", &e))?;
                let found = self
                    .cache
                    .get(&api_version, &kind, namespace.as_deref(), &name)
                    .map_err(|e| e.to_string())?;
                let Some(o) = found else { return Ok(None) };
                memory
                    .charge(convert::owned_bytes(&o.view()))
                    .map_err(|e| cache_refused("get", &e))?;
                Ok(Some(convert::$world::owned_object(&*o)))
            }

            fn list(
                &mut self,
                api_version: String,
                kind: String,
                namespace: Option<String>,
                label_selector: Option<String>,
            ) -> Result<Vec<$world::kubewasm::handler::types::ObjectResult>, String> {
                let memory = self.call_memory();
                let lifted = api_version.len()
                    + kind.len()
                    + namespace.as_ref().map_or(0, String::len)
                    + label_selector.as_ref().map_or(0, String::len);
                memory
                    .charge(lifted as u64)
                    .map_err(|e| cache_refused("list", &e))?;
                let found = self
                    .cache
                    .list(
                        &api_version,
                        &kind,
                        namespace.as_deref(),
                        label_selector.as_deref(),
                    )
                    .map_err(|e| e.to_string())?;
                // The whole answer is charged before any copy of it is made, so a list too
                // large for what is left of the plugin's budget is refused without one.
                let copies = found
                    .iter()
                    .map(|o| convert::owned_bytes(&o.view()))
                    .sum::<u64>();
                memory
                    .charge(copies)
                    .map_err(|e| cache_refused("list", &e))?;
                Ok(found
                    .iter()
                    .map(|o| convert::$world::owned_object(&**o))
                    .collect())
            }
        }
    };
}

log_and_cache!(v1);
log_and_cache!(v2);

/// A `cache` read the plugin's memory budget refused, as the error string the guest gets.
fn cache_refused(what: &str, e: &BudgetExceeded) -> String {
    format!("cache.{what} refused: {e}")
}

use v2::kubewasm::handler::{events, kube, types as wit2};

use super::cluster::{
    EventCall, EventType, KubeCall, MAX_WRITE_BYTES, ObjectRef, PatchType, Regarding, WriteOptions,
};

impl StoreState {
    /// Hands one `kube` call to the plugin's [`ClusterAccess`](super::ClusterAccess), after the
    /// one check that needs no grant: a body over the API server's request limit, refused
    /// before anything reads it.
    /// Answers the object as served (if any) and the status the server answered with.
    async fn kube(&mut self, call: KubeCall) -> Result<Served, wit2::ApiError> {
        let body = match &call {
            KubeCall::Create { json, .. }
            | KubeCall::Apply { json, .. }
            | KubeCall::Replace { json, .. } => json.len(),
            KubeCall::Patch { patch, .. } => patch.len(),
            KubeCall::Get(_) | KubeCall::Delete { .. } => 0,
        };
        // A fenced replica (it could not renew its shard Lease in time) writes nothing: a
        // process resumed after a pause must not act on objects another replica now holds.
        if !matches!(call, KubeCall::Get(_)) && !self.shard.may_act() {
            return Err(convert::v2::api_error(ApiError {
                code: 503,
                reason: "ServiceUnavailable".into(),
                message: "this replica is fenced: it could not renew its shard Lease in time"
                    .into(),
            }));
        }
        if body > MAX_WRITE_BYTES {
            if tracing::enabled!(target: RUNTIME_TARGET, tracing::Level::DEBUG)
                && self.lines.admit()
            {
                tracing::debug!(target: RUNTIME_TARGET, plugin = self.log.plugin(), verb = call.verb(),
                    bytes = body, "kube call refused: body over the request limit");
            }
            return Err(convert::v2::api_error(ApiError {
                code: 413,
                reason: "RequestEntityTooLarge".into(),
                message: format!(
                    "request body of {body} bytes is over the limit of {MAX_WRITE_BYTES} bytes"
                ),
            }));
        }
        // The body exists already (lifted out of guest memory, itself charged as linear
        // memory); it is charged as the host's from here until the call's result is lowered,
        // and whatever the call makes from it or for it is charged to the same account.
        let memory = self.call_memory();
        if let Err(e) = memory.charge(call.held_bytes() as u64) {
            return Err(convert::v2::api_error(e.api_error()));
        }
        let fut = self.cluster.call_within(call, memory.clone());
        // What the future does on this thread (checks, parsing, serialising) runs inside the
        // call's `poll` and is the guest's time; while it is pending on the API server a wait
        // is open, which is not (the call's own timeout and the wall-clock limit bound it).
        let waiting = self.host_wait().enter();
        let result = fut.await;
        drop(waiting);
        match result {
            Ok(answer) => {
                if let Some(o) = &answer.object {
                    memory
                        .charge(convert::owned_bytes(&o.view()))
                        .map_err(|e| convert::v2::api_error(e.api_error()))?;
                }
                Ok(Served {
                    object: answer.object.map(|o| convert::v2::owned_object(&*o)),
                    code: answer.code,
                })
            }
            Err(e) => Err(convert::v2::api_error(e)),
        }
    }
}

/// A successful `kube` call in the guest's types.
struct Served {
    object: Option<wit2::ObjectResult>,
    code: u16,
}

fn object_ref(
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
) -> ObjectRef {
    ObjectRef {
        api_version,
        kind,
        namespace,
        name,
    }
}

fn write_options(o: kube::WriteOptions) -> WriteOptions {
    WriteOptions {
        dry_run: o.dry_run,
        force: o.force,
    }
}

/// Every write answers with the object as the server stored (or, dry run, would store) it.
fn written(r: Result<Served, wit2::ApiError>) -> Result<wit2::ObjectResult, wit2::ApiError> {
    Ok(written_outcome(r)?.object)
}

/// A write's object with the status the server answered with (201 for a create).
fn written_outcome(
    r: Result<Served, wit2::ApiError>,
) -> Result<kube::WriteOutcome, wit2::ApiError> {
    let served = r?;
    let code = served.code;
    let object = served.object.ok_or_else(|| {
        convert::v2::api_error(ApiError {
            code: 500,
            reason: "InternalError".into(),
            message: "the API server answered a write without an object".into(),
        })
    })?;
    Ok(kube::WriteOutcome { object, code })
}

impl kube::Host for StoreState {
    async fn get(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<wit2::ObjectResult>, wit2::ApiError> {
        self.kube(KubeCall::Get(object_ref(
            api_version,
            kind,
            namespace,
            name,
        )))
        .await
        .map(|served| served.object)
    }

    async fn create(
        &mut self,
        json: String,
        opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        let opts = write_options(opts);
        written(self.kube(KubeCall::Create { json, opts }).await)
    }

    async fn apply(
        &mut self,
        json: String,
        opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        let opts = write_options(opts);
        written(self.kube(KubeCall::Apply { json, opts }).await)
    }

    async fn apply_outcome(
        &mut self,
        json: String,
        opts: kube::WriteOptions,
    ) -> Result<kube::WriteOutcome, wit2::ApiError> {
        let opts = write_options(opts);
        written_outcome(self.kube(KubeCall::Apply { json, opts }).await)
    }

    async fn patch(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        r#type: kube::PatchType,
        patch: String,
        subresource: Option<String>,
        opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        let patch_type = match r#type {
            kube::PatchType::Merge => PatchType::Merge,
            kube::PatchType::Json => PatchType::Json,
            kube::PatchType::Strategic => PatchType::Strategic,
        };
        let call = KubeCall::Patch {
            target: object_ref(api_version, kind, namespace, name),
            patch_type,
            patch,
            subresource,
            opts: write_options(opts),
        };
        written(self.kube(call).await)
    }

    async fn replace(
        &mut self,
        json: String,
        subresource: Option<String>,
        opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        let opts = write_options(opts);
        let call = KubeCall::Replace {
            json,
            subresource,
            opts,
        };
        written(self.kube(call).await)
    }

    async fn delete(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        uid_precondition: Option<String>,
    ) -> Result<(), wit2::ApiError> {
        let call = KubeCall::Delete {
            target: object_ref(api_version, kind, namespace, name),
            uid_precondition,
        };
        self.kube(call).await.map(drop)
    }
}

impl events::Host for StoreState {
    /// Handed to the plugin's [`ClusterAccess`](super::ClusterAccess), which records it in the
    /// background (or drops it when not granted); `emit` has no result to wait for.
    fn emit(
        &mut self,
        regarding: wit2::ObjectMetaResult,
        r#type: events::EventType,
        reason: String,
        action: String,
        note: String,
    ) {
        if !self.shard.may_act() {
            return;
        }
        let event_type = match r#type {
            events::EventType::Normal => EventType::Normal,
            events::EventType::Warning => EventType::Warning,
        };
        let memory = self.call_memory();
        // The regarding object's labels were lifted too, though an Event does not use them.
        let labels: usize = regarding
            .labels
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        let event = EventCall {
            regarding: Regarding {
                object: object_ref(
                    regarding.api_version,
                    regarding.kind,
                    regarding.namespace,
                    regarding.name,
                ),
                uid: regarding.uid,
                resource_version: regarding.resource_version,
            },
            event_type,
            reason,
            action,
            note,
        };
        // An Event has no result: one the plugin's budget cannot hold is dropped (counted
        // in `kubewasm_runtime_memory_budget_refused_total{kind="call"}`).
        if memory.charge((event.held_bytes() + labels) as u64).is_err() {
            if tracing::enabled!(target: RUNTIME_TARGET, tracing::Level::DEBUG)
                && self.lines.admit()
            {
                tracing::debug!(target: RUNTIME_TARGET, plugin = self.log.plugin(),
                    "event dropped: over the plugin's memory budget");
            }
            return;
        }
        self.cluster.emit_within(event, &memory);
    }
}

use super::bindings::v3::kubewasm::handler0_3_0::settings;

impl settings::Host for StoreState {
    /// The operator's text, copied once per call; charged to the call's account, so a guest
    /// calling it in a loop holds at most one answer at a time.
    /// The key the guest sent is charged too: it was lifted into host memory for the call.
    fn get(&mut self, key: String) -> Option<String> {
        let memory = self.call_memory();
        memory.charge(key.len() as u64).ok()?;
        let settings = self.settings.clone();
        let value = settings.get(&key)?;
        memory.charge(value.len() as u64).ok()?;
        Some(value.to_owned())
    }

    fn get_all(&mut self) -> Vec<(String, String)> {
        let memory = self.call_memory();
        if memory.charge(self.settings.bytes() as u64).is_err() {
            return Vec::new();
        }
        self.settings.values.clone()
    }

    fn get_json(&mut self) -> String {
        let memory = self.call_memory();
        if memory.charge(self.settings.json.len() as u64).is_err() {
            return "{}".into();
        }
        self.settings.json.clone()
    }
}

use super::bindings::v3::kubewasm::handler0_3_0::shard;

impl shard::Host for StoreState {
    fn by(&mut self) -> shard::ShardBy {
        match self.shard.by() {
            super::shard::ShardBy::None => shard::ShardBy::None,
            super::shard::ShardBy::Uid => shard::ShardBy::Uid,
            super::shard::ShardBy::Namespace => shard::ShardBy::Namespace,
        }
    }

    /// At most 64 ranges (a ring has at most 64 slots): charged before it is built.
    fn ranges(&mut self) -> Vec<shard::HashRange> {
        let memory = self.call_memory();
        if memory.charge(64 * 24).is_err() {
            return Vec::new();
        }
        self.shard
            .ranges()
            .into_iter()
            .map(|(start, end)| shard::HashRange { start, end })
            .collect()
    }

    /// The value was lifted into host memory for the call: charged, then only hashed.
    fn owns(&mut self, value: String) -> bool {
        let memory = self.call_memory();
        if memory.charge(value.len() as u64).is_err() {
            return false;
        }
        self.shard.owns(&value)
    }
}
