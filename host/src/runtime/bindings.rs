//! Host bindings generated from `wit/handler.wit`.
//!
//! Borrowing ownership makes export parameters (`ObjectParam<'a>`) borrow the host's strings,
//! so an object's JSON is copied once, straight into guest memory; objects the host returns from
//! `cache` imports use the owned twin (`ObjectResult`).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "handler",
    ownership: Borrowing { duplicate_if_necessary: true },
    // Exports are async so a call can be abandoned at its wall-clock deadline even while the
    // guest is blocked in a WASI import (sleep, poll); the host imports stay synchronous.
    exports: { default: async },
});
