//! # kubewasm-sdk
//!
//! Typed Kubernetes handlers for [kubewasm](https://github.com/kubewasm/kubewasm), over the
//! `kubewasm:handler@0.2.0` WIT world (this crate's version is the world's). A handler is a type
//! implementing [`Handler`] for one kind of object (a `k8s-openapi` type such as
//! [`api::core::v1::Service`], or [`DynamicObject`] for custom kinds); [`handler!`] exports it
//! ([`handler_v0_1!`] as a `kubewasm:handler@0.1.0` component). Objects arrive as [`Lazy`]:
//! metadata reads are free, `get()?` decodes the typed object on first use.
//! Its one [`Describe`] declaration yields the subscriptions (its own kind, and any further kind
//! [`Describe::watch`] adds, whose events reach [`Handler::on_watched`] as [`Watched`]), the
//! permissions, the HTTP origins and whether it records Events. Inside a handler: [`kube`] (typed writes), [`events`],
//! [`http`] (over `wasi:http`), [`owner`] (owner references), [`cache`] and the logging macros ([`info!`] …). Every
//! failure is an [`Error`] that `?` carries up and the host turns into `retry` or `fatal`.
//!
//! ```ignore
//! use kubewasm_sdk::{api::core::v1::ConfigMap, Describe, Handler, Lazy, Result, Init, info};
//!
//! struct Logger;
//! impl Handler for Logger {
//!     type Kind = ConfigMap;
//!     fn describe() -> Describe { Describe::new("logger") }
//!     fn on_add(cm: &Lazy<ConfigMap>, init: Init) -> Result<()> {
//!         let keys = cm.get()?.data.as_ref().map_or(0, |d| d.len());
//!         info!("add {} init={} keys={keys}", cm.key(), init.0);
//!         Ok(())
//!     }
//! }
//! kubewasm_sdk::handler!(Logger);
//! ```

/// The raw `kubewasm:handler@0.2.0` bindings, for what the typed layer does not cover.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "handler",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "export_raw",
        default_bindings_module: "kubewasm_sdk::bindings",
    });
}

/// The raw `kubewasm:handler@0.1.0` bindings, which [`handler_v0_1!`] exports (world
/// `sdk-v0-1` is 0.1.0's `handler` under a name whose macros do not collide with 0.2.0's).
#[doc(hidden)]
#[allow(missing_docs, clippy::all)]
pub mod bindings_v0_1 {
    wit_bindgen::generate!({
        path: "wit-0.1.0",
        world: "sdk-v0-1",
        pub_export_macro: true,
        export_macro_name: "export_raw",
        default_bindings_module: "kubewasm_sdk::bindings_v0_1",
    });
}

pub mod cache;
mod describe;
mod error;
pub mod events;
mod handler;
pub mod http;
pub mod kube;
mod lazy;
#[doc(hidden)]
pub mod log;
mod object;
pub mod owner;
pub mod patch;
#[doc(hidden)]
pub mod world;

/// The `k8s-openapi` types of every built-in kind (`latest` Kubernetes version).
pub use k8s_openapi::api;
pub use k8s_openapi::apimachinery;
pub use k8s_openapi::{self, Resource};
pub use serde_json::{self, json};

pub use describe::{Describe, Watch};
pub use error::{Error, Result};
pub use handler::{Event, FinalStateUnknown, Handler, Init, Sync, Watched, adapter, adapter_v0_1};
pub use lazy::Lazy;
pub use object::{DynamicObject, Named, Object, ObjectMeta, key, label};

/// Exports `$handler` (a type implementing [`Handler`]) as the component's `kubewasm:handler`
/// world; write it once, at the crate's top level.
#[macro_export]
macro_rules! handler {
    ($handler:ty) => {
        #[doc(hidden)]
        struct __KubewasmGuest;

        impl $crate::bindings::Guest for __KubewasmGuest {
            fn describe() -> $crate::bindings::kubewasm::handler::types::PluginInfo {
                $crate::adapter::describe::<$handler>()
            }
            fn on_add(
                obj: $crate::bindings::kubewasm::handler::types::Object,
                is_in_initial_list: bool,
            ) -> ::core::result::Result<(), $crate::bindings::kubewasm::handler::types::HandlerError>
            {
                $crate::adapter::on_add::<$handler>(obj, is_in_initial_list)
            }
            fn on_update(
                old: $crate::bindings::kubewasm::handler::types::Object,
                new: $crate::bindings::kubewasm::handler::types::Object,
                is_sync: bool,
            ) -> ::core::result::Result<(), $crate::bindings::kubewasm::handler::types::HandlerError>
            {
                $crate::adapter::on_update::<$handler>(old, new, is_sync)
            }
            fn on_delete(
                obj: $crate::bindings::kubewasm::handler::types::Object,
                final_state_unknown: bool,
            ) -> ::core::result::Result<(), $crate::bindings::kubewasm::handler::types::HandlerError>
            {
                $crate::adapter::on_delete::<$handler>(obj, final_state_unknown)
            }
            fn on_synced()
            -> ::core::result::Result<(), $crate::bindings::kubewasm::handler::types::HandlerError>
            {
                $crate::adapter::on_synced::<$handler>()
            }
        }

        $crate::bindings::export_raw!(__KubewasmGuest with_types_in $crate::bindings);
    };
}

/// Exports `$handler` as a `kubewasm:handler@0.1.0` component, for handlers that only watch,
/// log and read the cache and must load on hosts (or in conformance suites) that speak 0.1.0.
/// `on_synced` is never called; [`kube`], [`events`] and [`http`] are 0.2.0 imports and must
/// not be used (the host would refuse the component). Write it once, at the crate's top level.
#[macro_export]
macro_rules! handler_v0_1 {
    ($handler:ty) => {
        #[doc(hidden)]
        struct __KubewasmGuest;

        impl $crate::bindings_v0_1::Guest for __KubewasmGuest {
            fn describe() -> $crate::bindings_v0_1::kubewasm::handler::types::PluginInfo {
                $crate::adapter_v0_1::describe::<$handler>()
            }
            fn on_add(
                obj: $crate::bindings_v0_1::kubewasm::handler::types::Object,
                is_in_initial_list: bool,
            ) -> ::core::result::Result<(), $crate::bindings_v0_1::kubewasm::handler::types::HandlerError>
            {
                $crate::adapter_v0_1::on_add::<$handler>(obj, is_in_initial_list)
            }
            fn on_update(
                old: $crate::bindings_v0_1::kubewasm::handler::types::Object,
                new: $crate::bindings_v0_1::kubewasm::handler::types::Object,
                is_sync: bool,
            ) -> ::core::result::Result<(), $crate::bindings_v0_1::kubewasm::handler::types::HandlerError>
            {
                $crate::adapter_v0_1::on_update::<$handler>(old, new, is_sync)
            }
            fn on_delete(
                obj: $crate::bindings_v0_1::kubewasm::handler::types::Object,
                final_state_unknown: bool,
            ) -> ::core::result::Result<(), $crate::bindings_v0_1::kubewasm::handler::types::HandlerError>
            {
                $crate::adapter_v0_1::on_delete::<$handler>(obj, final_state_unknown)
            }
        }

        $crate::bindings_v0_1::export_raw!(__KubewasmGuest with_types_in $crate::bindings_v0_1);
    };
}
