//! Which world the component exports decides which `log` and `cache` imports the SDK calls:
//! a 0.1.0 component must import `kubewasm:handler/log@0.1.0`, never 0.2.0's. The export
//! adapter ([`handler!`](crate::handler) or [`handler_v0_1!`](crate::handler_v0_1)) selects the
//! set on every entry, so only the selected world's functions are referenced and the other
//! world's imports are left out of the component.

use std::sync::OnceLock;

use crate::bindings::kubewasm::handler::types::{Object as RawObject, ObjectMeta as RawMeta};

/// The imports every world has, as functions over the 0.2.0 types.
#[doc(hidden)]
pub struct Imports {
    pub(crate) log: fn(u8, &str),
    pub(crate) cache_get: CacheGet,
    pub(crate) cache_list: CacheList,
}

type CacheGet = fn(&str, &str, Option<&str>, &str) -> Result<Option<RawObject>, String>;
type CacheList = fn(&str, &str, Option<&str>, Option<&str>) -> Result<Vec<RawObject>, String>;

static SELECTED: OnceLock<&'static Imports> = OnceLock::new();

/// Records the world's imports (the first call wins: a component exports one world).
#[doc(hidden)]
pub fn select(imports: &'static Imports) {
    let _ = SELECTED.set(imports);
}

/// The selected imports; none before the first export call, which only native code (unit
/// tests) can reach, where there are no imports at all.
pub(crate) fn imports() -> &'static Imports {
    SELECTED
        .get()
        .expect("kubewasm imports used outside a component exported with handler!")
}

/// `kubewasm:handler@0.2.0`'s imports.
#[doc(hidden)]
pub static V0_2: Imports = Imports {
    log: |level, message| {
        use crate::bindings::kubewasm::handler::log::{Level, log};
        log(
            [Level::Trace, Level::Debug, Level::Info, Level::Warn][..]
                .get(level as usize)
                .copied()
                .unwrap_or(Level::Error),
            message,
        )
    },
    cache_get: crate::bindings::kubewasm::handler::cache::get,
    cache_list: crate::bindings::kubewasm::handler::cache::list,
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
