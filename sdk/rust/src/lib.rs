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

/// The raw bindings of the `kubewasm:handler@0.3.0` `handler` world, for what the typed layer
/// does not cover. The interfaces 0.3.0 imports from 0.2.0 are under `kubewasm::handler0_2_0`
/// (`types`, `log`, `cache`, `kube`, `events`), 0.3.0's own under `kubewasm::handler0_3_0`
/// (`settings`): wit-bindgen puts the version in the module name when a world sees two
/// versions of one package.
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

/// The raw bindings of the `kubewasm:handler@0.3.0` `controller` world, which [`controller!`]
/// exports. Every import is the `handler` world's (the same interfaces, so the same Rust types
/// and functions in [`bindings`]); only `controller-types` and the exports are its own.
#[doc(hidden)]
#[allow(missing_docs, clippy::all)]
pub mod bindings_controller {
    wit_bindgen::generate!({
        path: "wit",
        world: "controller",
        with: {
            "kubewasm:handler/types@0.2.0": crate::bindings::kubewasm::handler0_2_0::types,
            "kubewasm:handler/log@0.2.0": crate::bindings::kubewasm::handler0_2_0::log,
            "kubewasm:handler/cache@0.2.0": crate::bindings::kubewasm::handler0_2_0::cache,
            "kubewasm:handler/kube@0.2.0": crate::bindings::kubewasm::handler0_2_0::kube,
            "kubewasm:handler/events@0.2.0": crate::bindings::kubewasm::handler0_2_0::events,
            "kubewasm:handler/settings@0.3.0": crate::bindings::kubewasm::handler0_3_0::settings,
            "wasi:http/types@0.2.12": crate::bindings::wasi::http::types,
            "wasi:http/outgoing-handler@0.2.12": crate::bindings::wasi::http::outgoing_handler,
            "wasi:io/error@0.2.12": crate::bindings::wasi::io::error,
            "wasi:io/poll@0.2.12": crate::bindings::wasi::io::poll,
            "wasi:io/streams@0.2.12": crate::bindings::wasi::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": crate::bindings::wasi::clocks::monotonic_clock,
        },
        pub_export_macro: true,
        export_macro_name: "export_raw",
        default_bindings_module: "kubewasm_sdk::bindings_controller",
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
mod controller;
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
pub mod settings;
#[doc(hidden)]
pub mod world;

/// The `k8s-openapi` types of every built-in kind (`latest` Kubernetes version).
pub use k8s_openapi::api;
pub use k8s_openapi::apimachinery;
pub use k8s_openapi::{self, Resource};
pub use serde_json::{self, json};

#[doc(hidden)]
pub use controller::adapter as controller_adapter;
pub use controller::{Controller, Controls, Mapping, ObjectKey, Outcome};
pub use describe::{Describe, Watch};
pub use error::{Error, Result};
pub use handler::{Event, FinalStateUnknown, Handler, Init, Sync, Watched, adapter, adapter_v0_1};
pub use lazy::Lazy;
pub use object::{DynamicObject, Named, Object, ObjectMeta, key, label};
pub use settings::SettingsError;

/// Exports `$handler` (a type implementing [`Handler`]) as the component's `kubewasm:handler`
/// world; write it once, at the crate's top level.
#[macro_export]
macro_rules! handler {
    ($handler:ty) => {
        #[doc(hidden)]
        struct __KubewasmGuest;

        /// A component exports one world: `handler!` and `controller!` both define this.
        #[doc(hidden)]
        const __KUBEWASM_A_CRATE_EXPORTS_ONE_HANDLER_OR_ONE_CONTROLLER: () = ();

        impl $crate::bindings::Guest for __KubewasmGuest {
            fn validate_settings() -> ::core::result::Result<(), ::std::string::String> {
                $crate::adapter::validate_settings::<$handler>()
            }
            fn describe() -> $crate::bindings::kubewasm::handler0_2_0::types::PluginInfo {
                $crate::adapter::describe::<$handler>()
            }
            fn on_add(
                obj: $crate::bindings::kubewasm::handler0_2_0::types::Object,
                is_in_initial_list: bool,
            ) -> ::core::result::Result<(), $crate::bindings::kubewasm::handler0_2_0::types::HandlerError>
            {
                $crate::adapter::on_add::<$handler>(obj, is_in_initial_list)
            }
            fn on_update(
                old: $crate::bindings::kubewasm::handler0_2_0::types::Object,
                new: $crate::bindings::kubewasm::handler0_2_0::types::Object,
                is_sync: bool,
            ) -> ::core::result::Result<(), $crate::bindings::kubewasm::handler0_2_0::types::HandlerError>
            {
                $crate::adapter::on_update::<$handler>(old, new, is_sync)
            }
            fn on_delete(
                obj: $crate::bindings::kubewasm::handler0_2_0::types::Object,
                final_state_unknown: bool,
            ) -> ::core::result::Result<(), $crate::bindings::kubewasm::handler0_2_0::types::HandlerError>
            {
                $crate::adapter::on_delete::<$handler>(obj, final_state_unknown)
            }
            fn on_synced()
            -> ::core::result::Result<(), $crate::bindings::kubewasm::handler0_2_0::types::HandlerError>
            {
                $crate::adapter::on_synced::<$handler>()
            }
        }

        $crate::bindings::export_raw!(__KubewasmGuest with_types_in $crate::bindings);
    };
}

/// Exports `$controller` (a type implementing [`Controller`]) as the component's
/// `kubewasm:handler@0.3.0` `controller` world; write it once, at the crate's top level. A crate
/// exports one world: a handler ([`handler!`]) or a controller, never both.
#[macro_export]
macro_rules! controller {
    ($controller:ty) => {
        #[doc(hidden)]
        struct __KubewasmGuest;

        /// A component exports one world: `handler!` and `controller!` both define this.
        #[doc(hidden)]
        const __KUBEWASM_A_CRATE_EXPORTS_ONE_HANDLER_OR_ONE_CONTROLLER: () = ();

        impl $crate::bindings_controller::Guest for __KubewasmGuest {
            fn validate_settings() -> ::core::result::Result<(), ::std::string::String> {
                $crate::controller_adapter::validate_settings::<$controller>()
            }
            fn describe()
            -> $crate::bindings_controller::kubewasm::handler0_3_0::controller_types::ControllerInfo
            {
                $crate::controller_adapter::describe::<$controller>()
            }
            fn reconcile(
                key: $crate::bindings_controller::kubewasm::handler0_3_0::controller_types::ObjectKey,
            ) -> ::core::result::Result<
                $crate::bindings_controller::kubewasm::handler0_3_0::controller_types::Outcome,
                $crate::bindings::kubewasm::handler0_2_0::types::HandlerError,
            > {
                $crate::controller_adapter::reconcile::<$controller>(key)
            }
            fn keys_for(
                obj: $crate::bindings::kubewasm::handler0_2_0::types::Object,
            ) -> ::std::vec::Vec<
                $crate::bindings_controller::kubewasm::handler0_3_0::controller_types::ObjectKey,
            > {
                $crate::controller_adapter::keys_for::<$controller>(obj)
            }
            fn on_synced()
            -> ::core::result::Result<(), $crate::bindings::kubewasm::handler0_2_0::types::HandlerError>
            {
                $crate::controller_adapter::on_synced::<$controller>()
            }
        }

        $crate::bindings_controller::export_raw!(__KubewasmGuest with_types_in $crate::bindings_controller);
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

        /// A component exports one world.
        #[doc(hidden)]
        const __KUBEWASM_A_CRATE_EXPORTS_ONE_HANDLER_OR_ONE_CONTROLLER: () = ();

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
