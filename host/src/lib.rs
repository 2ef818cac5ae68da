//! kubewasm: client-go-correct Kubernetes informers that deliver every event to sandboxed
//! WebAssembly component handlers.
//!
//! Layers, lowest first; a module never imports from a layer above it:
//! - [`identity`]: the host's User-Agent, field manager and replica name, used by every layer.
//! - `address` and `text`: rules shared by every layer (which addresses are internal, for guest
//!   HTTP and registries alike; text budgets and escaping).
//! - [`workqueue`] and [`informer`]: Kubernetes list/watch machinery, no knowledge of WASM.
//! - [`election`]: leader election on a Lease, no knowledge of informers or WASM.
//! - [`runtime`]: wasmtime engine and the `kubewasm:handler` world, no knowledge of watches.
//! - [`registry`]: handlers as OCI artifacts (push, pull, credentials), no knowledge of WASM
//!   beyond media types nor of plugins.
//! - [`plugins`]: glues informers to runtime instances (directory watching, lifecycle, dispatch).
//! - [`host`]: assembles a running host from those layers (the one builder every entry point
//!   uses) and serves its endpoints.
//! - [`scenario`]: runs a handler through scenario files on an in-process API server with a
//!   virtual clock (`kubewasm test`).
//! - [`cli`]: the `kubewasm` subcommands and HTTP endpoints.

// Every room chooses its surface: what is not re-exported is `pub(crate)` at most, and what is
// public says what it is for.
#![warn(missing_docs, unreachable_pub)]

mod address;
pub mod cli;
pub mod election;
pub mod host;
pub mod identity;
pub mod informer;
pub mod plugins;
pub mod registry;
pub mod runtime;
// Its unit tests run whatever the features: tests have tokio's test clock anyway.
#[cfg(any(test, feature = "scenario"))]
pub mod scenario;
mod text;
pub mod workqueue;

#[cfg(test)]
mod test_support;
