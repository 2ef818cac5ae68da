//! The informer side of a dispatcher: listeners only queue, so an informer never waits for a
//! guest.

use std::sync::Arc;

use super::Dispatcher;
use crate::informer::{Notification, ResourceEventHandler, SharedObject};
use crate::plugins::capabilities::projected::ProjectionCache;

impl Dispatcher {
    /// The listener adapter for subscription number `subscription`; with a `projection`,
    /// what it queues is each object cut to it (shared with every plugin of that projection).
    pub fn handler(
        self: &Arc<Self>,
        subscription: u32,
        projection: Option<Arc<ProjectionCache>>,
    ) -> Arc<dyn ResourceEventHandler> {
        Arc::new(SubscriptionHandler {
            dispatcher: self.clone(),
            subscription,
            projection,
        })
    }
}

/// Adapts informer callbacks to a dispatcher: queueing (of the object or its projection) is
/// all it does, so the informer's listener never waits for a guest.
struct SubscriptionHandler {
    dispatcher: Arc<Dispatcher>,
    subscription: u32,
    projection: Option<Arc<ProjectionCache>>,
}

impl SubscriptionHandler {
    /// What the guest is to receive of `obj`: the cached version itself, or its projection.
    fn shown(&self, obj: &SharedObject) -> SharedObject {
        match &self.projection {
            Some(p) => p.project(obj),
            None => obj.clone(),
        }
    }
}

impl ResourceEventHandler for SubscriptionHandler {
    fn on_add(&self, obj: &SharedObject, is_in_initial_list: bool) {
        self.dispatcher.queue.push(
            self.subscription,
            Notification::Add {
                obj: self.shown(obj),
                initial: is_in_initial_list,
            },
        );
    }

    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool) {
        self.dispatcher.queue.push(
            self.subscription,
            Notification::Update {
                old: self.shown(old),
                new: self.shown(new),
                is_sync,
            },
        );
    }

    fn on_delete(&self, obj: &SharedObject, final_state_unknown: bool) {
        self.dispatcher.queue.push(
            self.subscription,
            Notification::Delete {
                obj: self.shown(obj),
                final_state_unknown,
            },
        );
    }
}
