//! kubewasm: client-go-correct Kubernetes informers that deliver every event to sandboxed
//! WebAssembly component handlers.
//!
//! Layers, lowest first; a module never imports from a layer above it:
//! - [`workqueue`] and [`informer`]: Kubernetes list/watch machinery, no knowledge of WASM.
//! - [`election`]: leader election on a Lease, no knowledge of informers or WASM.
//! - [`runtime`]: wasmtime engine and the `kubewasm:handler` world, no knowledge of watches.
//! - [`plugins`]: glues informers to runtime instances (directory watching, lifecycle, dispatch).
//! - [`scenario`]: runs a handler through scenario files on an in-process API server with a
//!   virtual clock (`kubewasm test`).
//! - [`cli`]: the `kubewasm` subcommands and HTTP endpoints.

pub mod cli;
pub mod election;
pub mod informer;
pub mod plugins;
pub mod runtime;
pub mod scenario;
pub mod workqueue;

#[cfg(test)]
mod test_support;
