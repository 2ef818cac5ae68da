//! The seam between delivery and a real instance: the dispatcher's rules see only this trait,
//! so they can be tested on a paused clock with scripted guests.

use std::future::Future;

use crate::informer::Notification;
use crate::runtime::{CallError, HandlerInstance, HandlerOutcome, HandlerWorld, MemoryBudget};

/// One version of a handler, as the dispatcher calls it.
pub trait Guest {
    /// Delivers one notification; dropping the future abandons the call.
    fn deliver(
        &mut self,
        n: &Notification,
    ) -> impl Future<Output = Result<HandlerOutcome, CallError>> + Send;

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

    fn wants_synced(&self) -> bool {
        self.world() == HandlerWorld::V0_2
    }

    async fn synced(&mut self) -> Result<HandlerOutcome, CallError> {
        self.on_synced().await
    }
}
