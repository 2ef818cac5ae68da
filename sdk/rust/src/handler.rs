//! [`Handler`]: the trait a handler implements for its kind, and the adapters the [`handler!`]
//! and [`handler_v0_1!`] macros export, which wrap objects as [`Lazy`] and map errors.
//!
//! [`handler!`]: crate::handler
//! [`handler_v0_1!`]: crate::handler_v0_1

use crate::describe::Describe;
use crate::error::Result;
use crate::lazy::Lazy;
use crate::object::Object;

/// `on_add`'s flag: true while the informer replays its initial list (or a late join).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Init(pub bool);

/// `on_update`'s flag: true when nothing changed on the server (a resync replay).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sync(pub bool);

/// `on_delete`'s flag: true when the deletion was inferred from a relist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalStateUnknown(pub bool);

/// A handler of one kind of object. Every notification method defaults to doing nothing.
/// Objects arrive as [`Lazy`]: metadata (name, namespace, uid, labels …) is free to read, the
/// typed object is decoded by the first `get()?`. A returned error becomes `retry` or `fatal`
/// by [`Error::is_retryable`](crate::Error::is_retryable).
pub trait Handler {
    /// The kind handled: a `k8s-openapi` type or [`DynamicObject`](crate::DynamicObject).
    type Kind: Object;

    /// What the handler watches and asks to be granted.
    fn describe() -> Describe;

    /// An object appeared.
    fn on_add(obj: &Lazy<Self::Kind>, init: Init) -> Result<()> {
        let _ = (obj, init);
        Ok(())
    }

    /// An object changed (or, `Sync(true)`, was replayed unchanged).
    fn on_update(old: &Lazy<Self::Kind>, new: &Lazy<Self::Kind>, sync: Sync) -> Result<()> {
        let _ = (old, new, sync);
        Ok(())
    }

    /// An object is gone.
    fn on_delete(obj: &Lazy<Self::Kind>, unknown: FinalStateUnknown) -> Result<()> {
        let _ = (obj, unknown);
        Ok(())
    }

    /// Every object has been seen since load or leadership: clean up orphans (0.2.0 only).
    fn on_synced() -> Result<()> {
        Ok(())
    }
}

/// What [`handler!`](crate::handler) calls; not for handlers themselves. Nothing is decoded
/// here and a success allocates nothing.
#[doc(hidden)]
pub mod adapter {
    use super::*;
    use crate::bindings::kubewasm::handler::types::{
        HandlerError, Object as RawObject, PluginInfo,
    };
    use crate::world::{V0_2, select};

    type Raw = std::result::Result<(), HandlerError>;

    pub fn describe<H: Handler>() -> PluginInfo {
        select(&V0_2);
        H::describe().into_info::<H::Kind>()
    }

    pub fn on_add<H: Handler>(obj: RawObject, init: bool) -> Raw {
        select(&V0_2);
        Ok(H::on_add(&Lazy::new(obj), Init(init))?)
    }

    pub fn on_update<H: Handler>(old: RawObject, new: RawObject, sync: bool) -> Raw {
        select(&V0_2);
        Ok(H::on_update(&Lazy::new(old), &Lazy::new(new), Sync(sync))?)
    }

    pub fn on_delete<H: Handler>(obj: RawObject, unknown: bool) -> Raw {
        select(&V0_2);
        Ok(H::on_delete(&Lazy::new(obj), FinalStateUnknown(unknown))?)
    }

    pub fn on_synced<H: Handler>() -> Raw {
        select(&V0_2);
        Ok(H::on_synced()?)
    }
}

/// What [`handler_v0_1!`](crate::handler_v0_1) calls: the same handler exported as a
/// `kubewasm:handler@0.1.0` component (no `on_synced`, no writes, Events or HTTP).
#[doc(hidden)]
pub mod adapter_v0_1 {
    use super::*;
    use crate::bindings_v0_1::kubewasm::handler::types::{
        HandlerError, Object as RawObject, PluginInfo,
    };
    use crate::world::{V0_1, from_v0_1, select};

    type Raw = std::result::Result<(), HandlerError>;

    fn raw(r: Result<()>) -> Raw {
        r.map_err(|e| {
            if e.is_retryable() {
                HandlerError::Retry(e.to_string())
            } else {
                HandlerError::Fatal(e.to_string())
            }
        })
    }

    pub fn describe<H: Handler>() -> PluginInfo {
        select(&V0_1);
        H::describe().into_info_v0_1::<H::Kind>()
    }

    pub fn on_add<H: Handler>(obj: RawObject, init: bool) -> Raw {
        select(&V0_1);
        raw(H::on_add(&Lazy::new(from_v0_1(obj)), Init(init)))
    }

    pub fn on_update<H: Handler>(old: RawObject, new: RawObject, sync: bool) -> Raw {
        select(&V0_1);
        raw(H::on_update(
            &Lazy::new(from_v0_1(old)),
            &Lazy::new(from_v0_1(new)),
            Sync(sync),
        ))
    }

    pub fn on_delete<H: Handler>(obj: RawObject, unknown: bool) -> Raw {
        select(&V0_1);
        raw(H::on_delete(
            &Lazy::new(from_v0_1(obj)),
            FinalStateUnknown(unknown),
        ))
    }
}
