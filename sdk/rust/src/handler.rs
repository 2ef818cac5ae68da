//! [`Handler`]: the trait a handler implements for its kind, and the adapter the [`handler!`]
//! macro exports, which decodes objects and maps errors so a handler never sees raw JSON.
//!
//! [`handler!`]: crate::handler

use crate::describe::Describe;
use crate::error::Result;
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
/// A returned error becomes `retry` or `fatal` by [`Error::is_retryable`](crate::Error::is_retryable).
pub trait Handler {
    /// The kind handled: a `k8s-openapi` type or [`DynamicObject`](crate::DynamicObject).
    type Kind: Object;

    /// What the handler watches and asks to be granted.
    fn describe() -> Describe;

    /// An object appeared.
    fn on_add(obj: &Self::Kind, init: Init) -> Result<()> {
        let _ = (obj, init);
        Ok(())
    }

    /// An object changed (or, `Sync(true)`, was replayed unchanged).
    fn on_update(old: &Self::Kind, new: &Self::Kind, sync: Sync) -> Result<()> {
        let _ = (old, new, sync);
        Ok(())
    }

    /// An object is gone.
    fn on_delete(obj: &Self::Kind, unknown: FinalStateUnknown) -> Result<()> {
        let _ = (obj, unknown);
        Ok(())
    }

    /// Every object has been seen since load or leadership: clean up orphans.
    fn on_synced() -> Result<()> {
        Ok(())
    }
}

/// What [`handler!`](crate::handler) calls; not for handlers themselves.
#[doc(hidden)]
pub mod adapter {
    use super::*;
    use crate::bindings::kubewasm::handler::types::{
        HandlerError, Object as RawObject, PluginInfo,
    };

    type Raw = std::result::Result<(), HandlerError>;

    /// An object whose JSON does not decode as the kind cannot decode later either: fatal.
    fn decode<K: Object>(obj: &RawObject) -> std::result::Result<K, HandlerError> {
        serde_json::from_str(&obj.json).map_err(|e| {
            HandlerError::Fatal(format!(
                "cannot decode {} {}: {e}",
                obj.meta.kind, obj.meta.name
            ))
        })
    }

    pub fn describe<H: Handler>() -> PluginInfo {
        H::describe().into_info::<H::Kind>()
    }

    pub fn on_add<H: Handler>(obj: RawObject, init: bool) -> Raw {
        Ok(H::on_add(&decode(&obj)?, Init(init))?)
    }

    pub fn on_update<H: Handler>(old: RawObject, new: RawObject, sync: bool) -> Raw {
        Ok(H::on_update(&decode(&old)?, &decode(&new)?, Sync(sync))?)
    }

    pub fn on_delete<H: Handler>(obj: RawObject, unknown: bool) -> Raw {
        Ok(H::on_delete(&decode(&obj)?, FinalStateUnknown(unknown))?)
    }

    pub fn on_synced<H: Handler>() -> Raw {
        Ok(H::on_synced()?)
    }
}
