//! # kubewasm-sdk
//!
//! Typed Kubernetes handlers and controllers for [kubewasm](https://github.com/kubewasm/kubewasm),
//! over the `kubewasm:handler@0.3.0` WIT package (this crate's version is the package's). A
//! handler is a type
//! implementing [`Handler`] for one kind of object (a `k8s-openapi` type such as
//! [`api::core::v1::Service`], or [`DynamicObject`] for custom kinds); [`handler!`] exports it
//! ([`handler_v0_1!`] as a `kubewasm:handler@0.1.0` component). Objects arrive as [`Lazy`]:
//! metadata reads are free, `get()?` decodes the typed object on first use.
//! Its one [`Describe`] declaration yields the subscriptions (its own kind, and any further kind
//! [`Describe::watch`] adds, whose events reach [`Handler::on_watched`] as [`Watched`]), the
//! permissions, the HTTP origins and whether it records Events. Inside a handler: [`kube`] (typed writes), [`events`],
//! [`http`] (over `wasi:http`), [`owner`] (owner references), [`cache`] and the logging macros ([`info!`] …). Every
//! failure is an [`Error`] that `?` carries up and the host turns into `retry` or `fatal`.
//! The operator's [`settings`] are readable everywhere and checked by
//! [`Handler::validate_settings`] before the plugin loads; [`shard`] says which objects are this
//! replica's when the plugin shards, for state kept outside the cluster.
//!
//! A [`Controller`] reconciles keys of one primary kind instead of receiving events: the host
//! maps every event of the primary kind, of the kinds it [`owns`](Controls::owns) and of those it
//! [`watches`](Controls::watches) to keys, and [`controller!`] exports it as the `controller`
//! world. A crate exports one world: a handler or a controller.
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

/// The raw bindings of what the SDK imports in a `kubewasm:handler@0.3.0` component (either
/// world), for what the typed layer does not cover: the interfaces 0.3.0 imports from 0.2.0
/// under `kubewasm::handler0_2_0` (`types`, `log`, `cache`, `kube`, `events`), 0.3.0's own
/// under `kubewasm::handler0_3_0` (`settings`, `shard`, `controller-types`), and `wasi`.
/// (wit-bindgen puts the version in the module name when it sees two versions of one package.) The world is the
/// SDK's own `kubewasm:sdk/imports` (`wit-sdk/sdk.wit`): imports only, no world-level types, so
/// that nothing of it but the functions a component calls reaches the component; each export
/// macro generates its world's export glue in the guest crate.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: ["wit", "wit-sdk"],
        world: "kubewasm:sdk/imports",
        generate_all,
    });
}

/// The raw `kubewasm:handler@0.1.0` imports (world `sdk-imports` of `wit-0.1.0/sdk.wit`: 0.1.0's
/// `handler` without exports or world-level types), which [`handler_v0_1!`] components call.
#[doc(hidden)]
#[allow(missing_docs, clippy::all)]
pub mod bindings_v0_1 {
    wit_bindgen::generate!({
        path: "wit-0.1.0",
        world: "sdk-imports",
    });
}

// `__kubewasm_generate_v0_3!` and `__kubewasm_generate_v0_1!`: `wit_bindgen::generate!` over this
// crate's WIT folders, for the export macros to expand in the guest crate (see build.rs).
include!(concat!(env!("OUT_DIR"), "/generate.rs"));

/// wit-bindgen, for the export macros' expansions in guest crates (which need not depend on it).
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

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
pub mod shard;
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

/// Exports `$handler` (a type implementing [`Handler`]) as the component's
/// `kubewasm:handler@0.3.0` `handler` world; write it once, at the crate's top level. A crate
/// exports one world: a handler or a [`controller!`], never both.
#[macro_export]
macro_rules! handler {
    ($handler:ty) => {
        /// The `handler` world's export glue, generated here (see `kubewasm_sdk::bindings`).
        #[doc(hidden)]
        #[allow(missing_docs, unused, clippy::all)]
        mod __kubewasm_world {
            $crate::__kubewasm_generate_v0_3!(
                world: "kubewasm:handler/handler@0.3.0",
                with: {
                    "kubewasm:handler/types@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::types,
                    "kubewasm:handler/log@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::log,
                    "kubewasm:handler/cache@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::cache,
                    "kubewasm:handler/kube@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::kube,
                    "kubewasm:handler/events@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::events,
                    "kubewasm:handler/settings@0.3.0": ::kubewasm_sdk::bindings::kubewasm::handler0_3_0::settings,
                    "kubewasm:handler/shard@0.3.0": ::kubewasm_sdk::bindings::kubewasm::handler0_3_0::shard,
                    "wasi:http/types@0.2.12": ::kubewasm_sdk::bindings::wasi::http::types,
                    "wasi:http/outgoing-handler@0.2.12": ::kubewasm_sdk::bindings::wasi::http::outgoing_handler,
                    "wasi:io/error@0.2.12": ::kubewasm_sdk::bindings::wasi::io::error,
                    "wasi:io/poll@0.2.12": ::kubewasm_sdk::bindings::wasi::io::poll,
                    "wasi:io/streams@0.2.12": ::kubewasm_sdk::bindings::wasi::io::streams,
                    "wasi:clocks/monotonic-clock@0.2.12": ::kubewasm_sdk::bindings::wasi::clocks::monotonic_clock,
                },
                runtime_path: "::kubewasm_sdk::__wit_bindgen::rt",
            );
        }

        #[doc(hidden)]
        struct __KubewasmGuest;

        /// A component exports one world: `handler!` and `controller!` both define this.
        #[doc(hidden)]
        const __KUBEWASM_A_CRATE_EXPORTS_ONE_HANDLER_OR_ONE_CONTROLLER: () = ();

        impl __kubewasm_world::Guest for __KubewasmGuest {
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

        __kubewasm_world::export!(__KubewasmGuest with_types_in __kubewasm_world);
    };
}

/// Exports `$controller` (a type implementing [`Controller`]) as the component's
/// `kubewasm:handler@0.3.0` `controller` world; write it once, at the crate's top level. A crate
/// exports one world: a controller or a [`handler!`], never both.
#[macro_export]
macro_rules! controller {
    ($controller:ty) => {
        /// The `controller` world's export glue, generated here (see `kubewasm_sdk::bindings`).
        #[doc(hidden)]
        #[allow(missing_docs, unused, clippy::all)]
        mod __kubewasm_world {
            $crate::__kubewasm_generate_v0_3!(
                world: "kubewasm:handler/controller@0.3.0",
                with: {
                    "kubewasm:handler/types@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::types,
                    "kubewasm:handler/log@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::log,
                    "kubewasm:handler/cache@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::cache,
                    "kubewasm:handler/kube@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::kube,
                    "kubewasm:handler/events@0.2.0": ::kubewasm_sdk::bindings::kubewasm::handler0_2_0::events,
                    "kubewasm:handler/settings@0.3.0": ::kubewasm_sdk::bindings::kubewasm::handler0_3_0::settings,
                    "kubewasm:handler/shard@0.3.0": ::kubewasm_sdk::bindings::kubewasm::handler0_3_0::shard,
                    "kubewasm:handler/controller-types@0.3.0": ::kubewasm_sdk::bindings::kubewasm::handler0_3_0::controller_types,
                    "wasi:http/types@0.2.12": ::kubewasm_sdk::bindings::wasi::http::types,
                    "wasi:http/outgoing-handler@0.2.12": ::kubewasm_sdk::bindings::wasi::http::outgoing_handler,
                    "wasi:io/error@0.2.12": ::kubewasm_sdk::bindings::wasi::io::error,
                    "wasi:io/poll@0.2.12": ::kubewasm_sdk::bindings::wasi::io::poll,
                    "wasi:io/streams@0.2.12": ::kubewasm_sdk::bindings::wasi::io::streams,
                    "wasi:clocks/monotonic-clock@0.2.12": ::kubewasm_sdk::bindings::wasi::clocks::monotonic_clock,
                },
                runtime_path: "::kubewasm_sdk::__wit_bindgen::rt",
            );
        }

        #[doc(hidden)]
        struct __KubewasmGuest;

        /// A component exports one world: `handler!` and `controller!` both define this.
        #[doc(hidden)]
        const __KUBEWASM_A_CRATE_EXPORTS_ONE_HANDLER_OR_ONE_CONTROLLER: () = ();

        impl __kubewasm_world::Guest for __KubewasmGuest {
            fn validate_settings() -> ::core::result::Result<(), ::std::string::String> {
                $crate::controller_adapter::validate_settings::<$controller>()
            }
            fn describe()
            -> $crate::bindings::kubewasm::handler0_3_0::controller_types::ControllerInfo {
                $crate::controller_adapter::describe::<$controller>()
            }
            fn reconcile(
                key: $crate::bindings::kubewasm::handler0_3_0::controller_types::ObjectKey,
            ) -> ::core::result::Result<
                $crate::bindings::kubewasm::handler0_3_0::controller_types::Outcome,
                $crate::bindings::kubewasm::handler0_2_0::types::HandlerError,
            > {
                $crate::controller_adapter::reconcile::<$controller>(key)
            }
            fn keys_for(
                obj: $crate::bindings::kubewasm::handler0_2_0::types::Object,
            ) -> ::std::vec::Vec<$crate::bindings::kubewasm::handler0_3_0::controller_types::ObjectKey>
            {
                $crate::controller_adapter::keys_for::<$controller>(obj)
            }
            fn on_synced()
            -> ::core::result::Result<(), $crate::bindings::kubewasm::handler0_2_0::types::HandlerError>
            {
                $crate::controller_adapter::on_synced::<$controller>()
            }
        }

        __kubewasm_world::export!(__KubewasmGuest with_types_in __kubewasm_world);
    };
}

/// Exports `$handler` as a `kubewasm:handler@0.1.0` component, for handlers that only watch,
/// log and read the cache and must load on hosts (or in conformance suites) that speak 0.1.0.
/// `on_synced` and `validate_settings` are never called; [`kube`], [`events`], [`http`],
/// [`shard`] and [`settings`] are imports of later versions and must not be used (the host would
/// refuse the component; settings answer [`SettingsError::Unavailable`]). Write it once, at the
/// crate's top level.
#[macro_export]
macro_rules! handler_v0_1 {
    ($handler:ty) => {
        /// The 0.1.0 `handler` world's export glue, generated here.
        #[doc(hidden)]
        #[allow(missing_docs, unused, clippy::all)]
        mod __kubewasm_world {
            $crate::__kubewasm_generate_v0_1!(
                world: "kubewasm:handler/handler@0.1.0",
                with: {
                    "kubewasm:handler/types@0.1.0": ::kubewasm_sdk::bindings_v0_1::kubewasm::handler::types,
                    "kubewasm:handler/log@0.1.0": ::kubewasm_sdk::bindings_v0_1::kubewasm::handler::log,
                    "kubewasm:handler/cache@0.1.0": ::kubewasm_sdk::bindings_v0_1::kubewasm::handler::cache,
                },
                runtime_path: "::kubewasm_sdk::__wit_bindgen::rt",
            );
        }

        #[doc(hidden)]
        struct __KubewasmGuest;

        /// A component exports one world.
        #[doc(hidden)]
        const __KUBEWASM_A_CRATE_EXPORTS_ONE_HANDLER_OR_ONE_CONTROLLER: () = ();

        impl __kubewasm_world::Guest for __KubewasmGuest {
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

        __kubewasm_world::export!(__KubewasmGuest with_types_in __kubewasm_world);
    };
}
