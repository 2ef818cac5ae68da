//! The world's imports answered by the host, for both world versions: `log` becomes a `tracing`
//! event, `cache` is forwarded to the plugin's [`CacheReader`](super::CacheReader). 0.2.0's
//! `kube` and `events` are refused until the plugin has grants (none can be configured yet):
//! every `kube` call gets a 403 `Forbidden` [`ApiError`](super::ApiError) without reaching the
//! API server, and Events are dropped. Outbound HTTP is checked and sent in `http_hooks.rs`.

use super::bindings::{v1, v2};
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
                let found = self
                    .cache
                    .get(&api_version, &kind, namespace.as_deref(), &name)?;
                Ok(found.map(|o| convert::$world::owned_object(&*o)))
            }

            fn list(
                &mut self,
                api_version: String,
                kind: String,
                namespace: Option<String>,
                label_selector: Option<String>,
            ) -> Result<Vec<$world::kubewasm::handler::types::ObjectResult>, String> {
                let found = self.cache.list(
                    &api_version,
                    &kind,
                    namespace.as_deref(),
                    label_selector.as_deref(),
                )?;
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

use v2::kubewasm::handler::{events, kube, types as wit2};

impl StoreState {
    /// Refuses one `kube` call: logged without guest strings (they are not validated here), and
    /// answered as the API server would answer a forbidden request.
    fn deny_kube(&self, verb: &str) -> wit2::ApiError {
        let plugin = self.log.plugin();
        tracing::debug!(target: RUNTIME_TARGET, plugin, verb, code = 403u16,
            "kube call refused: not granted");
        convert::v2::api_error(ApiError::not_granted(
            plugin,
            &format!("{verb} this object"),
        ))
    }
}

impl kube::Host for StoreState {
    async fn get(
        &mut self,
        _api_version: String,
        _kind: String,
        _namespace: Option<String>,
        _name: String,
    ) -> Result<Option<wit2::ObjectResult>, wit2::ApiError> {
        Err(self.deny_kube("get"))
    }

    async fn create(
        &mut self,
        _json: String,
        _opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        Err(self.deny_kube("create"))
    }

    async fn apply(
        &mut self,
        _json: String,
        _opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        Err(self.deny_kube("apply"))
    }

    async fn patch(
        &mut self,
        _api_version: String,
        _kind: String,
        _namespace: Option<String>,
        _name: String,
        _type: kube::PatchType,
        _patch: String,
        _subresource: Option<String>,
        _opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        Err(self.deny_kube("patch"))
    }

    async fn replace(
        &mut self,
        _json: String,
        _subresource: Option<String>,
        _opts: kube::WriteOptions,
    ) -> Result<wit2::ObjectResult, wit2::ApiError> {
        Err(self.deny_kube("update"))
    }

    async fn delete(
        &mut self,
        _api_version: String,
        _kind: String,
        _namespace: Option<String>,
        _name: String,
        _uid_precondition: Option<String>,
    ) -> Result<(), wit2::ApiError> {
        Err(self.deny_kube("delete"))
    }
}

impl events::Host for StoreState {
    /// Dropped: no plugin holds the `events` grant yet. `emit` has no result, so the refusal is
    /// visible only in the host's debug log.
    fn emit(
        &mut self,
        _regarding: wit2::ObjectMetaResult,
        _type: events::EventType,
        _reason: String,
        _action: String,
        _note: String,
    ) {
        tracing::debug!(target: RUNTIME_TARGET, plugin = self.log.plugin(),
            "event dropped: not granted");
    }
}
