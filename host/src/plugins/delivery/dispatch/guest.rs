//! The seam between delivery and a real instance: the dispatcher's rules see only this trait,
//! so they can be tested on a paused clock with scripted guests.

use std::future::Future;

use crate::informer::{Notification, SharedObject};
use crate::runtime::{CallError, HandlerInstance, HandlerOutcome, MemoryBudget, ObjectKey};

/// One version of a handler, as the dispatcher calls it.
pub trait Guest {
    /// Delivers one notification; dropping the future abandons the call.
    fn deliver(
        &mut self,
        n: &Notification,
    ) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send;

    /// Reconciles one key of a controller's primary kind; dropping the future abandons the
    /// call. Only controllers are asked.
    fn reconcile(
        &mut self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send {
        let _ = key;
        async { Ok(HandlerOutcome::Ok) }
    }

    /// Asks a controller which primaries an event of `obj` concerns (the `guest` mapping).
    fn keys_for(
        &mut self,
        obj: &SharedObject,
    ) -> impl Future<Output = Result<Vec<ObjectKey>, CallError>> + Send {
        let _ = obj;
        async { Ok(Vec::new()) }
    }

    /// Whether the handler exports `on-synced` (0.2.0 handlers).
    fn wants_synced(&self) -> bool {
        false
    }

    /// Calls `on-synced`; dropping the future abandons the call.
    fn synced(&mut self) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send {
        async { Ok(HandlerOutcome::Ok) }
    }

    /// Whether a host line about this guest's call (a retry, a failure) may be written: a guest
    /// fails or retries as often as it is called, so real instances draw on their plugin's
    /// [`GuestCausedLog`](crate::runtime::GuestCausedLog).
    fn admit_line(&self) -> bool {
        true
    }

    /// The plugin's memory budget, which all its instances share: the dispatcher creates
    /// another instance only while one more fits (`None`: no budget, always).
    fn memory_budget(&self) -> Option<MemoryBudget> {
        None
    }
}

impl Guest for HandlerInstance {
    fn admit_line(&self) -> bool {
        self.guest_caused_log().admit()
    }

    fn memory_budget(&self) -> Option<MemoryBudget> {
        Some(HandlerInstance::memory_budget(self).clone())
    }

    async fn deliver(&mut self, n: &Notification) -> Result<HandlerOutcome, CallError> {
        match n {
            Notification::Add { obj, initial } => self.on_add(&**obj, *initial).await,
            Notification::Update { old, new, is_sync } => {
                self.on_update(&**old, &**new, *is_sync).await
            }
            Notification::Delete {
                obj,
                final_state_unknown,
            } => self.on_delete(&**obj, *final_state_unknown).await,
        }
    }

    async fn reconcile(&mut self, key: &ObjectKey) -> Result<HandlerOutcome, CallError> {
        HandlerInstance::reconcile(self, key).await
    }

    async fn keys_for(&mut self, obj: &SharedObject) -> Result<Vec<ObjectKey>, CallError> {
        HandlerInstance::keys_for(self, &**obj).await
    }

    fn wants_synced(&self) -> bool {
        self.world().has_synced()
    }

    async fn synced(&mut self) -> Result<HandlerOutcome, CallError> {
        self.on_synced().await
    }
}
