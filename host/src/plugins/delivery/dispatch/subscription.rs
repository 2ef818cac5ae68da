//! The informer side of a dispatcher: listeners only queue, so an informer never waits for a
//! guest. A handler's listener queues each notification; a controller's turns it into keys of
//! its primary kind first (see [`keys`](crate::plugins::delivery::keys)) and hands them on at
//! the end of each burst the listener delivers, so a burst of events about one key (ten owned
//! objects changed at once) is one reconcile, as in kube-runtime, rather than one per event that
//! happens to land after the key's reconcile began.

use std::sync::Arc;

use parking_lot::Mutex;

use super::Dispatcher;
use crate::informer::{Notification, ResourceEventHandler, SharedObject};
use crate::plugins::capabilities::projected::ProjectionCache;
use crate::plugins::delivery::keys::{Routed, route};

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
            staged: Mutex::new(Vec::new()),
        })
    }
}

/// Most keys a controller's listener holds back for the end of its burst: under a stream that
/// never pauses they are handed on this many at a time, so nothing waits for a pause.
const MAX_STAGED: usize = 256;

/// Adapts informer callbacks to a dispatcher: queueing (of the object or its projection, or a
/// controller's keys) is all it does, so the informer's listener never waits for a guest.
struct SubscriptionHandler {
    dispatcher: Arc<Dispatcher>,
    subscription: u32,
    projection: Option<Arc<ProjectionCache>>,
    /// A controller's keys of the burst being delivered (not of the initial list, which
    /// readiness and `on-synced` count as it is queued).
    staged: Mutex<Vec<Arc<str>>>,
}

impl SubscriptionHandler {
    /// Hands the burst's keys to the queue, each once.
    fn flush(&self) {
        let keys = std::mem::take(&mut *self.staged.lock());
        for key in keys {
            self.dispatcher.queue.push_reconcile(key, false);
        }
    }

    /// What the guest is to receive of `obj`: the cached version itself, or its projection.
    fn shown(&self, obj: &SharedObject) -> SharedObject {
        match &self.projection {
            Some(p) => p.project(obj),
            None => obj.clone(),
        }
    }

    /// `n` as the guest is to receive it.
    fn projected(&self, n: Notification) -> Notification {
        if self.projection.is_none() {
            return n;
        }
        match n {
            Notification::Add { obj, initial } => Notification::Add {
                obj: self.shown(&obj),
                initial,
            },
            Notification::Update { old, new, is_sync } => Notification::Update {
                old: self.shown(&old),
                new: self.shown(&new),
                is_sync,
            },
            Notification::Delete {
                obj,
                final_state_unknown,
            } => Notification::Delete {
                obj: self.shown(&obj),
                final_state_unknown,
            },
        }
    }

    /// Queues `n` (whole objects, as cached): for a handler as it is shown to the guest, for a
    /// controller as the keys it names (mapped on the whole object, which a projection may
    /// have cut the mapped field from).
    fn queue(&self, n: Notification) {
        let d = &self.dispatcher;
        let Some(c) = &d.controller else {
            d.queue.push(self.subscription, self.projected(n));
            return;
        };
        let Some(role) = c.plan.roles.get(self.subscription as usize) else {
            return;
        };
        match route(role, &n, &c.plan.primary, c) {
            Routed::Keys(keys) if n.is_initial() => {
                for key in keys {
                    d.queue.push_reconcile(key, true);
                }
            }
            Routed::Keys(keys) => {
                let full = {
                    let mut staged = self.staged.lock();
                    for key in keys {
                        if !staged.contains(&key) {
                            staged.push(key);
                        }
                    }
                    staged.len() >= MAX_STAGED
                };
                if full {
                    self.flush();
                }
            }
            Routed::AskGuest => d.queue.push_map_keys(self.subscription, self.projected(n)),
        }
    }
}

impl ResourceEventHandler for SubscriptionHandler {
    fn on_add(&self, obj: &SharedObject, is_in_initial_list: bool) {
        self.queue(Notification::Add {
            obj: obj.clone(),
            initial: is_in_initial_list,
        });
    }

    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool) {
        self.queue(Notification::Update {
            old: old.clone(),
            new: new.clone(),
            is_sync,
        });
    }

    fn on_delete(&self, obj: &SharedObject, final_state_unknown: bool) {
        self.queue(Notification::Delete {
            obj: obj.clone(),
            final_state_unknown,
        });
    }

    fn drained(&self) {
        self.flush();
    }

    /// The informer followed a change of this replica's slots: what it gained arrived as
    /// initial adds, so `on-synced` is due again once they are handled (also for a gained slot
    /// without objects: a sweep of external state runs over it). A rescope that only gave
    /// slots up replayed nothing, and a replica that holds nothing calls nothing.
    fn rescoped(&self, gained: bool) {
        self.flush();
        if gained {
            self.dispatcher.replayed();
        }
    }
}
