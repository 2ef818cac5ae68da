//! The queue handed to controllers: dedup + processing discipline, delayed adds and rate-limited
//! retries in one cloneable handle.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::delaying;
use super::queue::QueueState;
use super::rate_limiter::{RateLimiter, default_controller_rate_limiter};

struct Inner<T> {
    state: Mutex<QueueState<T>>,
    /// Wakes getters (new item, earlier deadline, shutdown) and drain waiters (`done`).
    notify: Notify,
    limiter: Box<dyn RateLimiter<T>>,
}

/// A rate-limited work queue (client-go `TypedRateLimitingInterface`). Cheap to clone.
pub struct RateLimitingQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> RateLimitingQueue<T> {
    /// A queue whose `add_rate_limited` delays come from `limiter`.
    pub fn new(limiter: impl RateLimiter<T>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(QueueState::default()),
                notify: Notify::new(),
                limiter: Box::new(limiter),
            }),
        }
    }

    /// client-go's default controller limiter: max(5 ms → 1000 s per item, 10 qps / burst 100).
    pub fn with_default_limiter() -> Self {
        Self::new(default_controller_rate_limiter())
    }

    fn wake(&self) {
        self.inner.notify.notify_waiters();
    }

    /// Queues `item` unless it is already queued; an item being processed is re-queued once
    /// after `done`. Ignored after shutdown.
    pub fn add(&self, item: T) {
        if self.inner.state.lock().add(item) {
            self.wake();
        }
    }

    /// Queues `item` after `d`; if it is already waiting, the earlier time wins.
    pub fn add_after(&self, item: T, d: Duration) {
        let wake = delaying::add_after(&mut self.inner.state.lock(), item, d);
        if wake {
            self.wake();
        }
    }

    /// Queues `item` after the limiter's delay (counts one failure; call `forget` on success).
    pub fn add_rate_limited(&self, item: T) {
        let d = self.inner.limiter.when(&item);
        self.add_after(item, d);
    }

    /// Clears the failure history of `item`.
    pub fn forget(&self, item: &T) {
        self.inner.limiter.forget(item);
    }

    /// Failures recorded for `item`.
    pub fn num_requeues(&self, item: &T) -> usize {
        self.inner.limiter.num_requeues(item)
    }

    /// Takes a ready item without waiting; `None` if none is ready right now. Lets a worker on a
    /// plain thread drain a busy queue without a runtime round-trip per item.
    pub fn try_get(&self) -> Option<T> {
        let mut st = self.inner.state.lock();
        if st.shutting_down {
            return None;
        }
        st.promote(Instant::now());
        st.get()
    }

    /// Waits for the next item and marks it processing. Queued items are still handed out after
    /// shutdown; `None` once shut down and empty.
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_ready = {
                let mut st = self.inner.state.lock();
                let next = if st.shutting_down {
                    None
                } else {
                    st.promote(Instant::now()).1
                };
                if let Some(item) = st.get() {
                    return Some(item);
                }
                if st.shutting_down {
                    return None;
                }
                next
            };
            match next_ready {
                Some(t) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(t) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `item` finished; if it was re-added meanwhile it is queued again.
    pub fn done(&self, item: &T) {
        self.inner.state.lock().done(item);
        self.wake();
    }

    /// Items queued and ready (not those processing or still delayed).
    pub fn len(&self) -> usize {
        let mut st = self.inner.state.lock();
        if !st.shutting_down {
            st.promote(Instant::now());
        }
        st.queue.len()
    }

    /// True when no item is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items waiting for their delay to pass.
    pub fn waiting_len(&self) -> usize {
        self.inner.state.lock().waiting.len()
    }

    /// Stops accepting items; getters drain the queue, then receive `None`. Also forces a
    /// pending [`shut_down_with_drain`](Self::shut_down_with_drain) to return.
    pub fn shut_down(&self) {
        let mut st = self.inner.state.lock();
        st.drain = false;
        st.shutting_down = true;
        drop(st);
        self.wake();
    }

    /// Like [`shut_down`](Self::shut_down) but waits until every processing item is `done`.
    pub async fn shut_down_with_drain(&self) {
        {
            let mut st = self.inner.state.lock();
            st.drain = true;
            st.shutting_down = true;
        }
        self.wake();
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.inner.state.lock();
                if !st.drain || st.processing.is_empty() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// True once shut down.
    pub fn shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }
}
