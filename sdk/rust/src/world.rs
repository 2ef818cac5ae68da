//! Which world the component exports decides which `log` and `cache` imports the SDK calls:
//! a 0.1.0 component must import `kubewasm:handler/log@0.1.0`, never 0.2.0's. The export
//! adapter ([`handler!`](crate::handler), [`controller!`](crate::controller) or
//! [`handler_v0_1!`](crate::handler_v0_1)) selects the set on every entry, so only the selected
//! world's functions are referenced and the other world's imports are left out of the component.
//! Both 0.3.0 worlds (`handler` and `controller`) import the same interfaces.

use std::sync::OnceLock;

use crate::bindings::kubewasm::handler0_2_0::types::{Object as RawObject, ObjectMeta as RawMeta};

/// The imports every world has, as functions over the 0.2.0 types, and the settings of the
/// worlds that have them (`None` in 0.1.0).
#[doc(hidden)]
pub struct Imports {
    pub(crate) log: fn(u8, &str),
    pub(crate) cache_get: CacheGet,
    pub(crate) cache_list: CacheList,
    pub(crate) settings_get: Option<fn(&str) -> Option<String>>,
    pub(crate) settings_all: Option<SettingsAll>,
    pub(crate) settings_json: Option<fn() -> String>,
}

type CacheGet = fn(&str, &str, Option<&str>, &str) -> Result<Option<RawObject>, String>;
type CacheList = fn(&str, &str, Option<&str>, Option<&str>) -> Result<Vec<RawObject>, String>;
type SettingsAll = fn() -> Vec<(String, String)>;

static SELECTED: OnceLock<&'static Imports> = OnceLock::new();

#[cfg(test)]
thread_local! {
    /// A test's stand-in for the host (natively there are no imports), per test thread.
    static FAKE: std::cell::Cell<Option<&'static Imports>> = const { std::cell::Cell::new(None) };
}

/// Makes `imports` the host for the calling test thread, whatever the adapters select.
#[cfg(test)]
pub(crate) fn fake(imports: &'static Imports) {
    FAKE.with(|f| f.set(Some(imports)));
}

/// Records the world's imports (the first call wins: a component exports one world).
#[doc(hidden)]
pub fn select(imports: &'static Imports) {
    let _ = SELECTED.set(imports);
}

/// The selected imports; none before the first export call, which only native code (unit
/// tests) can reach, where there are no imports at all.
pub(crate) fn imports() -> &'static Imports {
    #[cfg(test)]
    if let Some(fake) = FAKE.with(|f| f.get()) {
        return fake;
    }
    SELECTED
        .get()
        .expect("kubewasm imports used outside a component exported with handler! or controller!")
}

/// The imports of both `kubewasm:handler@0.3.0` worlds: 0.2.0's interfaces and 0.3.0's
/// settings.
#[doc(hidden)]
pub static V0_3: Imports = Imports {
    log: |level, message| {
        use crate::bindings::kubewasm::handler0_2_0::log::{Level, log};
        log(
            [Level::Trace, Level::Debug, Level::Info, Level::Warn][..]
                .get(level as usize)
                .copied()
                .unwrap_or(Level::Error),
            message,
        )
    },
    cache_get: crate::bindings::kubewasm::handler0_2_0::cache::get,
    cache_list: crate::bindings::kubewasm::handler0_2_0::cache::list,
    settings_get: Some(crate::bindings::kubewasm::handler0_3_0::settings::get),
    settings_all: Some(crate::bindings::kubewasm::handler0_3_0::settings::get_all),
    settings_json: Some(crate::bindings::kubewasm::handler0_3_0::settings::get_json),
};

/// `kubewasm:handler@0.1.0`'s imports, answering the 0.2.0 types (the records are the same).
#[doc(hidden)]
pub static V0_1: Imports = Imports {
    log: |level, message| {
        use crate::bindings_v0_1::kubewasm::handler::log::{Level, log};
        log(
            [Level::Trace, Level::Debug, Level::Info, Level::Warn][..]
                .get(level as usize)
                .copied()
                .unwrap_or(Level::Error),
            message,
        )
    },
    cache_get: |a, k, ns, name| {
        crate::bindings_v0_1::kubewasm::handler::cache::get(a, k, ns, name)
            .map(|o| o.map(from_v0_1))
    },
    cache_list: |a, k, ns, labels| {
        crate::bindings_v0_1::kubewasm::handler::cache::list(a, k, ns, labels)
            .map(|l| l.into_iter().map(from_v0_1).collect())
    },
    settings_get: None,
    settings_all: None,
    settings_json: None,
};

/// A 0.1.0 object as the 0.2.0 record: the fields move, nothing is copied.
#[doc(hidden)]
pub fn from_v0_1(o: crate::bindings_v0_1::kubewasm::handler::types::Object) -> RawObject {
    let m = o.meta;
    RawObject {
        meta: RawMeta {
            api_version: m.api_version,
            kind: m.kind,
            namespace: m.namespace,
            name: m.name,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            labels: m.labels,
        },
        json: o.json,
    }
}
