//! The reflector's exponential backoff (client-go `ExponentialBackoffManager`, old reset rule).

use std::time::Duration;

use tokio::time::Instant;

/// Backoff parameters; defaults are client-go's 800 ms → 30 s, ×2, jitter 1.0, reset after 2 min.
#[derive(Clone, Debug, PartialEq)]
pub struct BackoffConfig {
    /// First interval.
    pub initial: Duration,
    /// Cap of the base interval.
    pub max: Duration,
    /// Without a backoff for this long the server is assumed healthy and the backoff restarts.
    pub reset_after: Duration,
    /// Growth per step.
    pub factor: f64,
    /// A sleep of base `d` is drawn from `[d, d + jitter·d)`.
    pub jitter: f64,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
            factor: 2.0,
            jitter: 1.0,
        }
    }
}

/// Stateful backoff shared by relists and watch retries, as in client-go.
#[derive(Debug)]
pub(crate) struct Backoff {
    cfg: BackoffConfig,
    current: Duration,
    last_start: Option<Instant>,
}

impl Backoff {
    pub(super) fn new(cfg: BackoffConfig) -> Self {
        Self {
            current: cfg.initial,
            cfg,
            last_start: None,
        }
    }

    /// The next sleep. Resets to the initial interval if the previous call was over
    /// `reset_after` ago (e.g. a long healthy watch).
    pub(super) fn next(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last_start
            .is_none_or(|t| now.duration_since(t) > self.cfg.reset_after)
        {
            self.current = self.cfg.initial;
        }
        self.last_start = Some(now);
        let base = self.current;
        self.current = base.mul_f64(self.cfg.factor).min(self.cfg.max);
        if self.cfg.jitter > 0.0 {
            base + base.mul_f64(self.cfg.jitter * rand::random::<f64>())
        } else {
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario 39: sleeps drawn from [d, 2d) with d = 0.8, 1.6, … capped at 30 s; reset after 2 min.
    #[tokio::test(start_paused = true)]
    async fn scenario_39_backoff_growth() {
        let mut b = Backoff::new(BackoffConfig::default());
        let bases = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0];
        for base in bases {
            let d = b.next().as_secs_f64();
            assert!(d >= base - 1e-9 && d < 2.0 * base + 1e-9, "{d} vs {base}");
        }
        tokio::time::advance(Duration::from_secs(121)).await;
        let d = b.next().as_secs_f64();
        assert!((0.8..1.6).contains(&d), "reset: {d}");

        // The scaled client-go test: 1 ms → 50 ms; 5 failures take 32–64 ms in total.
        let mut b = Backoff::new(BackoffConfig {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(50),
            reset_after: Duration::from_millis(100),
            factor: 2.0,
            jitter: 1.0,
        });
        let total: Duration = (0..5).map(|_| b.next()).sum();
        assert!(total >= Duration::from_millis(31) && total < Duration::from_millis(64));
    }
}
