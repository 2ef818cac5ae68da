//! Work queues with client-go semantics: dedup of queued items, dirty/processing sets (an item
//! is never processed twice at once), delayed adds, per-item rate limiting, drain on shutdown.
//! Uses tokio time throughout, so tests can run on a paused clock.

mod backoff;
mod delaying;
mod queue;
mod rate_limiter;
mod rate_limiting;

pub(crate) use backoff::ExponentialBackoff;
pub use rate_limiter::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, default_controller_rate_limiter,
};
pub use rate_limiting::RateLimitingQueue;

#[cfg(test)]
mod tests;
