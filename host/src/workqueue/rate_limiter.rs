//! Rate limiters deciding how long an item waits before it is retried.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::backoff::ExponentialBackoff;

/// Decides retry delays per item (client-go `TypedRateLimiter`).
pub trait RateLimiter<T>: Send + Sync + 'static {
    /// Delay before `item` may be retried; counts as one failure.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item` (it succeeded).
    fn forget(&self, item: &T);
    /// Failures recorded for `item`.
    fn num_requeues(&self, item: &T) -> usize;
}

/// `base · 2^failures`, capped at `max`, per item (the host's one
/// backoff rule, `workqueue::ExponentialBackoff`).
pub struct ItemExponentialFailureRateLimiter<T> {
    backoff: ExponentialBackoff,
    failures: Mutex<HashMap<T, usize>>,
}

impl<T> ItemExponentialFailureRateLimiter<T> {
    /// Exponential per-item backoff from `base` up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            backoff: ExponentialBackoff::new(base, max),
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> RateLimiter<T>
    for ItemExponentialFailureRateLimiter<T>
{
    fn when(&self, item: &T) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(item.clone()).or_insert(0);
        let earlier = *n;
        *n += 1;
        self.backoff
            .delay(u32::try_from(earlier).unwrap_or(u32::MAX))
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// `fast` for the first `max_fast_attempts` failures, `slow` afterwards.
pub struct ItemFastSlowRateLimiter<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: usize,
    failures: Mutex<HashMap<T, usize>>,
}

impl<T> ItemFastSlowRateLimiter<T> {
    /// Two-speed per-item limiter.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: usize) -> Self {
        Self {
            fast,
            slow,
            max_fast_attempts,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut f = self.failures.lock();
        let n = f.entry(item.clone()).or_insert(0);
        *n += 1;
        if *n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// Overall token bucket (`qps`, `burst`) like Go's `rate.Limiter.Reserve().Delay()`: every call
/// takes a token, possibly from the future; `forget` refunds nothing.
pub struct BucketRateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Option<Instant>)>,
}

impl BucketRateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps`.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: burst as f64,
            state: Mutex::new((burst as f64, None)),
        }
    }

    /// Takes a token if one is available now, never from the future (Go's `rate.Limiter.Allow`):
    /// for callers that drop what they cannot afford instead of delaying it.
    pub fn try_acquire(&self) -> bool {
        let mut g = self.state.lock();
        let tokens = self.refill(&mut g);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes a token if one is available within `max` and returns how long to wait for it;
    /// `None` (nothing taken) when the wait would be longer (Go's `Reserve` then `Cancel`), so a
    /// caller that gives up does not push later callers further back.
    pub fn reserve_within(&self, max: Duration) -> Option<Duration> {
        let mut g = self.state.lock();
        let tokens = self.refill(&mut g);
        let wait = if *tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - *tokens) / self.qps)
        };
        if wait > max {
            return None;
        }
        *tokens -= 1.0;
        Some(wait)
    }

    /// Adds the tokens earned since the last call, up to `burst`; the one refill rule.
    fn refill<'a>(&self, state: &'a mut (f64, Option<Instant>)) -> &'a mut f64 {
        let now = Instant::now();
        let (tokens, last) = state;
        if let Some(l) = *last {
            let elapsed = now.saturating_duration_since(l).as_secs_f64();
            *tokens = (*tokens + elapsed * self.qps).min(self.burst);
        }
        *last = Some(now);
        tokens
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        let mut g = self.state.lock();
        let tokens = self.refill(&mut g);
        *tokens -= 1.0;
        if *tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-*tokens / self.qps)
        }
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> usize {
        0
    }
}

/// The largest delay of several limiters (client-go `MaxOfRateLimiter`).
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOfRateLimiter<T> {
    /// Combines `limiters`.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T: 'static> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .max()
            .unwrap_or_default()
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// client-go `DefaultControllerRateLimiter`: per item 5 ms → 1000 s, overall 10 qps / burst 100.
pub fn default_controller_rate_limiter<T: Clone + Eq + Hash + Send + Sync + 'static>()
-> MaxOfRateLimiter<T> {
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ])
}
