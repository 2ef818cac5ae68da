//! Assembling a running host: the one place where informers, runtime, plugins, the directory
//! watcher, the endpoints and leader election are put together.
//!
//! `kubewasm run`, `kubewasm dev`, the scenario runner (`kubewasm test`), the end-to-end tests
//! and the benchmarks all build a host through [`HostBuilder`]; they differ only in what they
//! ask of it (a plugins folder or none, endpoints or none, leader election or leadership
//! given from outside, [`Observer`](crate::runtime::Observer)s, where calls run). A [`Host`]
//! stops in order: watcher, plugins, Lease, informers, endpoints.
//!
//! Knows what each layer needs to start, nothing of how any of them works; it is the top of
//! the library, below only `cli` and `scenario`.

mod builder;
mod endpoints;
mod host_pod;
mod running;

pub use builder::HostBuilder;
pub use running::Host;
