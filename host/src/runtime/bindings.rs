//! Host bindings generated from every version of the `kubewasm:handler` world: `wit/handler.wit`
//! (0.1.0), `wit/0.2.0/` (0.2.0) and `wit/0.3.0/` (0.3.0: worlds `handler` and `controller`). A
//! component implements exactly one of them; validation finds out which (see `validate.rs`).
//!
//! Borrowing ownership makes export parameters (`ObjectParam<'a>`) borrow the host's strings,
//! so an object's JSON is copied once, straight into guest memory; objects the host returns from
//! imports use the owned twin (`ObjectResult`).

/// `kubewasm:handler@0.1.0`: log and cache imports only.
pub(crate) mod v1 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "handler",
        ownership: Borrowing { duplicate_if_necessary: true },
        // Exports are async so a call can be abandoned at its deadline even while the
        // guest is blocked in a WASI import (sleep, poll); the host imports stay synchronous.
        exports: { default: async },
    });
}

/// `kubewasm:handler@0.2.0`: adds the kube, events and `wasi:http` imports and the `on-synced`
/// export.
pub(crate) mod v2 {
    wasmtime::component::bindgen!({
        path: "../wit/0.2.0",
        world: "handler",
        ownership: Borrowing { duplicate_if_necessary: true },
        // API calls wait on the network: async, so a call still waiting at the plugin's deadline
        // is a pending future that the deadline drops, like a blocked WASI import.
        imports: { "kubewasm:handler/kube": async },
        exports: { default: async },
        // wasi:http and what it uses are wasmtime-wasi(-http)'s own bindings, linked from there.
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
        require_store_data_send: true,
    });
}

/// The 0.2.0 interfaces a 0.3.0 world imports unchanged, mapped onto [`v2`]'s bindings so one
/// implementation of each answers every version that uses it.
macro_rules! v3_bindgen {
    ($world:literal $(, $extra:literal => $path:path)*) => {
        wasmtime::component::bindgen!({
            path: "../wit/0.3.0",
            world: $world,
            ownership: Borrowing { duplicate_if_necessary: true },
            exports: { default: async },
            with: {
                "kubewasm:handler/types@0.2.0": crate::runtime::bindings::v2::kubewasm::handler::types,
                "kubewasm:handler/log@0.2.0": crate::runtime::bindings::v2::kubewasm::handler::log,
                "kubewasm:handler/cache@0.2.0": crate::runtime::bindings::v2::kubewasm::handler::cache,
                "kubewasm:handler/kube@0.2.0": crate::runtime::bindings::v2::kubewasm::handler::kube,
                "kubewasm:handler/events@0.2.0": crate::runtime::bindings::v2::kubewasm::handler::events,
                "wasi:http": wasmtime_wasi_http::p2::bindings::http,
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
                $($extra: $path,)*
            },
            require_store_data_send: true,
        });
    };
}

/// `kubewasm:handler@0.3.0`, world `handler`: 0.2.0's handler plus `settings` and the
/// `validate-settings` export.
pub(crate) mod v3 {
    v3_bindgen!("handler");
}

/// `kubewasm:handler@0.3.0`, world `controller`: reconciles keys of a primary kind.
pub(crate) mod v3c {
    v3_bindgen!("controller",
        "kubewasm:handler/settings@0.3.0" => crate::runtime::bindings::v3::kubewasm::handler0_3_0::settings,
        "kubewasm:handler/shard@0.3.0" => crate::runtime::bindings::v3::kubewasm::handler0_3_0::shard);
}
