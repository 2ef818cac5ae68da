//! [`HostWait`] and [`CallBudget`]: the rule that decides when a call has used up its time.
//!
//! A guest's deadline is a budget of *guest* time: wall-clock time since the call began, minus
//! the time the host spent waiting on an external system for it (an outbound HTTP exchange, a
//! Kubernetes API call). Such waits have their own timeouts; counting them against the guest
//! would make a slow peer look like a runaway guest. A second, plain wall-clock bound
//! ([`Limits::wall_limit`](super::Limits::wall_limit)) ends the call however long its host
//! calls take.
//!
//! What counts as host wait: time during which at least one [`HostWaitGuard`] is alive, except
//! the time the guest's own code runs meanwhile (a guest may send a request and then compute
//! instead of blocking on it). The epoch callback sees the guest run: each tick it runs while a
//! guard is alive is charged back to guest time, at most one tick per callback, so the error
//! is at most one [`EPOCH_TICK`](super::EPOCH_TICK) per resumption. Sleeping in WASI
//! (`sleep`, a clock pollable) is guest time: nothing holds a guard for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::engine::EPOCH_TICK;

/// Per-store account of the time the host spends waiting on external systems for the guest.
/// Clones share the account; a store's host calls each [`enter`](HostWait::enter) it.
#[derive(Clone, Default)]
pub(crate) struct HostWait(Arc<Mutex<WaitState>>);

#[derive(Default)]
struct WaitState {
    /// Guards alive.
    open: u32,
    /// When `open` last went from 0 to 1.
    since: Option<Instant>,
    /// Closed intervals so far.
    total: Duration,
}

/// Keeps its [`HostWait`] in the waiting state while alive; `Send`, so it can live in the task
/// that does the waiting.
pub(crate) struct HostWaitGuard(HostWait);

impl HostWait {
    /// Starts counting host-wait time (nested and concurrent guards count once).
    pub(crate) fn enter(&self) -> HostWaitGuard {
        let mut s = self.0.lock();
        if s.open == 0 {
            s.since = Some(Instant::now());
        }
        s.open += 1;
        HostWaitGuard(self.clone())
    }

    /// Host-wait time so far, the open interval (if any) up to `now` included.
    fn total_at(&self, now: Instant) -> Duration {
        let s = self.0.lock();
        match s.since {
            Some(since) if s.open > 0 => s.total + now.saturating_duration_since(since),
            _ => s.total,
        }
    }

    fn is_waiting(&self) -> bool {
        self.0.lock().open > 0
    }
}

impl Drop for HostWaitGuard {
    fn drop(&mut self) {
        let mut s = self.0.0.lock();
        s.open -= 1;
        if s.open == 0
            && let Some(since) = s.since.take()
        {
            s.total += since.elapsed();
        }
    }
}

/// Why a call ran out of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overrun {
    /// The guest's own time reached the deadline.
    Deadline,
    /// The whole call, host waits included, reached the wall-clock limit.
    WallLimit,
}

/// One call's (or instantiation's) time budget: the single place the deadline rule lives. The
/// epoch callback and the caller's timer both ask [`CallBudget::check`].
pub(crate) struct CallBudget {
    started: Instant,
    deadline: Duration,
    wall_limit: Duration,
    wait: HostWait,
    waited_before: Duration,
    /// Guest run time that overlapped host waits, and the last epoch callback.
    overlap: Mutex<(Duration, Instant)>,
}

impl CallBudget {
    /// Starts the budget now. `wall_limit` below `deadline` is raised to it.
    pub(super) fn start(wait: &HostWait, deadline: Duration, wall_limit: Duration) -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Self {
            started: now,
            deadline,
            wall_limit: wall_limit.max(deadline),
            wait: wait.clone(),
            waited_before: wait.total_at(now),
            overlap: Mutex::new((Duration::ZERO, now)),
        })
    }

    /// Guest time used at `now`.
    fn guest_time(&self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.started);
        let waited = self.wait.total_at(now).saturating_sub(self.waited_before);
        elapsed.saturating_sub(waited) + self.overlap.lock().0
    }

    /// `Ok(d)`: the budget cannot run out before `d` from `now` (it may last longer, if host
    /// waits happen meanwhile); `Err` once it has run out.
    pub(super) fn check(&self, now: Instant) -> Result<Duration, Overrun> {
        let elapsed = now.saturating_duration_since(self.started);
        let Some(wall_left) = self
            .wall_limit
            .checked_sub(elapsed)
            .filter(|d| !d.is_zero())
        else {
            return Err(Overrun::WallLimit);
        };
        let Some(guest_left) = self
            .deadline
            .checked_sub(self.guest_time(now))
            .filter(|d| !d.is_zero())
        else {
            return Err(Overrun::Deadline);
        };
        Ok(wall_left.min(guest_left))
    }

    /// Called from the epoch callback, i.e. while guest code runs: charges the time since the
    /// previous callback (at most one tick) back to the guest if a host wait is open.
    pub(super) fn guest_ran(&self, now: Instant) {
        let mut o = self.overlap.lock();
        let (charged, last) = &mut *o;
        if self.wait.is_waiting() {
            *charged += now.saturating_duration_since(*last).min(EPOCH_TICK);
        }
        *last = now;
    }

    /// Resolves when the budget has run out (for the caller's side: a guest blocked in a host
    /// call never reaches the epoch callback).
    pub(super) async fn exhausted(&self) -> Overrun {
        loop {
            match self.check(Instant::now()) {
                Err(overrun) => return overrun,
                Ok(left) => tokio::time::sleep(left).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_time_excludes_host_waits_and_wall_limit_does_not() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, Duration::from_secs(1), Duration::from_secs(3));
        let t0 = budget.started;
        {
            let _g = wait.enter();
            let _nested = wait.enter();
            // Two seconds in a host call: the guest has used none of its second.
            let at = t0 + Duration::from_secs(2);
            assert!(budget.guest_time(at) < Duration::from_millis(100));
            assert!(budget.check(at).is_ok());
            assert_eq!(
                budget.check(t0 + Duration::from_secs(3)),
                Err(Overrun::WallLimit)
            );
        }
        assert!(!wait.is_waiting());
        // After the wait closed, guest time runs again.
        let later = Instant::now() + Duration::from_millis(1500);
        assert!(budget.guest_time(later) >= Duration::from_millis(1400));
    }

    #[test]
    fn without_host_waits_the_deadline_is_wall_clock() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, Duration::from_millis(500), Duration::from_secs(30));
        let t0 = budget.started;
        assert_eq!(
            budget.check(t0 + Duration::from_millis(200)),
            Ok(Duration::from_millis(300))
        );
        assert_eq!(
            budget.check(t0 + Duration::from_millis(500)),
            Err(Overrun::Deadline)
        );
    }

    #[test]
    fn guest_code_running_during_a_wait_is_charged_to_the_guest() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, Duration::from_millis(50), Duration::from_secs(30));
        let _g = wait.enter();
        let t0 = budget.started;
        for i in 1..=10 {
            budget.guest_ran(t0 + EPOCH_TICK * i);
        }
        assert_eq!(
            budget.check(t0 + EPOCH_TICK * 10),
            Err(Overrun::Deadline),
            "ten ticks of computing while a request is in flight use the guest's 50 ms"
        );
    }

    #[test]
    fn an_earlier_calls_waits_do_not_count_for_this_one() {
        let wait = HostWait::default();
        drop(wait.enter());
        let budget = CallBudget::start(&wait, Duration::from_millis(500), Duration::from_secs(30));
        assert_eq!(
            budget.check(budget.started + Duration::from_millis(500)),
            Err(Overrun::Deadline)
        );
    }
}
