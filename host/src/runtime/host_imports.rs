//! The world's imports answered by the host: `log` becomes a `tracing` event, `cache` is
//! forwarded to the plugin's [`CacheReader`](super::CacheReader).

use super::bindings::v1::kubewasm::handler::{cache, log, types};
use super::store::StoreState;
use super::types::{GuestLogLevel, GuestObject};

impl types::Host for StoreState {}

impl log::Host for StoreState {
    fn log(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => GuestLogLevel::Trace,
            log::Level::Debug => GuestLogLevel::Debug,
            log::Level::Info => GuestLogLevel::Info,
            log::Level::Warn => GuestLogLevel::Warn,
            log::Level::Error => GuestLogLevel::Error,
        };
        self.log.log(level, message);
    }
}

impl cache::Host for StoreState {
    fn get(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<types::ObjectResult>, String> {
        let found = self
            .cache
            .get(&api_version, &kind, namespace.as_deref(), &name)?;
        Ok(found.map(|o| owned_object(&*o)))
    }

    fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<types::ObjectResult>, String> {
        let found = self.cache.list(
            &api_version,
            &kind,
            namespace.as_deref(),
            label_selector.as_deref(),
        )?;
        Ok(found.iter().map(|o| owned_object(&**o)).collect())
    }
}

/// Owned copy for an import result; wasmtime lowers it into guest memory right after.
fn owned_object(obj: &dyn GuestObject) -> types::ObjectResult {
    let v = obj.view();
    types::ObjectResult {
        meta: types::ObjectMetaResult {
            api_version: v.api_version.to_owned(),
            kind: v.kind.to_owned(),
            namespace: v.namespace.map(str::to_owned),
            name: v.name.to_owned(),
            uid: v.uid.to_owned(),
            resource_version: v.resource_version.to_owned(),
            generation: v.generation,
            labels: v.labels.to_vec(),
        },
        json: v.json.to_owned(),
    }
}
