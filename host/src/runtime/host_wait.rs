//! [`HostWait`] and [`CallBudget`]: the rule that decides when a call has used up its time.
//!
//! A guest's deadline is a budget of *guest* time: wall-clock time since the call began, minus
//! the time the guest spent blocked in a host call that waits on an external system for it (an
//! outbound HTTP exchange, a Kubernetes API call). Such waits have their own timeouts; counting
//! them against the guest would make a slow peer look like a runaway guest. A second, plain
//! wall-clock bound ([`Limits::wall_limit`](super::Limits::wall_limit)) ends the call however
//! long its host calls take.
//!
//! What counts as host wait, exactly: time during which the guest is inside a host call (the
//! store's call hook says when it enters and leaves one, see [`HostWait::entered_host`]) *and*
//! a wait is open. Two kinds of wait exist: a [`HostWaitGuard`] (a request until its response
//! headers, a `kube` call), open while its task waits; and a *blocked read*
//! ([`HostWait::blocked`]), opened by a response body that had no data for the guest and
//! closed the moment the guest runs again, so a non-blocking `read()` that returns at once
//! closes its account at once. Time the guest's own code runs is never host wait, nor is a
//! WASI `sleep` or clock pollable while no wait is open.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Per-store account of the time the host spends waiting on external systems for the guest.
/// Clones share the account; a store's host calls each [`enter`](HostWait::enter) it.
#[derive(Clone, Default)]
pub(crate) struct HostWait(Arc<Shared>);

/// The call hook runs on every host call and most happen with no wait open, so it takes the
/// lock only while one is: `in_host` and `active` are a store-then-load pair on each side
/// (sequentially consistent), so either the hook sees a wait just opened or the opener sees the
/// guest in its host call.
#[derive(Default)]
struct Shared {
    /// The guest is inside a host call.
    in_host: AtomicBool,
    /// A wait is open, a read blocked or an interval counting.
    active: AtomicBool,
    state: Mutex<WaitState>,
}

#[derive(Default)]
struct WaitState {
    /// Guards alive.
    open: u32,
    /// A response body found no data for the guest since it last left a host call.
    blocked: bool,
    /// When the current counted interval began (`None`: not counting).
    since: Option<Instant>,
    /// Closed intervals so far.
    total: Duration,
}

impl WaitState {
    /// Opens or closes the counted interval after a change of state (the clock is read only
    /// when it does), and says whether the hook still needs the lock.
    fn update(&mut self, in_host: bool, active: &AtomicBool) {
        let counting = in_host && (self.open > 0 || self.blocked);
        match (counting, self.since) {
            (true, None) => self.since = Some(Instant::now()),
            (false, Some(since)) => {
                self.total += Instant::now().saturating_duration_since(since);
                self.since = None;
            }
            _ => {}
        }
        active.store(
            self.open > 0 || self.blocked || self.since.is_some(),
            SeqCst,
        );
    }
}

/// Keeps its [`HostWait`] in the waiting state while alive; `Send`, so it can live in the task
/// that does the waiting.
pub(crate) struct HostWaitGuard(HostWait);

impl HostWait {
    /// Starts counting host-wait time (nested and concurrent guards count once).
    pub(crate) fn enter(&self) -> HostWaitGuard {
        let mut s = self.0.state.lock();
        s.open += 1;
        self.0.active.store(true, SeqCst);
        s.update(self.0.in_host.load(SeqCst), &self.0.active);
        HostWaitGuard(self.clone())
    }

    /// A response body had no data for the guest: the guest waits on the peer until it next
    /// runs (a non-blocking read returns at once, so its wait ends at once).
    pub(crate) fn blocked(&self) {
        let mut s = self.0.state.lock();
        if !s.blocked {
            s.blocked = true;
            self.0.active.store(true, SeqCst);
            s.update(self.0.in_host.load(SeqCst), &self.0.active);
        }
    }

    /// The store's call hook: the guest entered (`true`) or left (`false`) a host call.
    /// Leaving one ends every blocked read: the guest runs again.
    pub(crate) fn entered_host(&self, entered: bool) {
        self.0.in_host.store(entered, SeqCst);
        if !self.0.active.load(SeqCst) {
            return;
        }
        let mut s = self.0.state.lock();
        if !entered {
            s.blocked = false;
        }
        s.update(entered, &self.0.active);
    }

    /// Host-wait time so far, the open interval (if any) up to `now` included.
    fn total_at(&self, now: Instant) -> Duration {
        let s = self.0.state.lock();
        match s.since {
            Some(since) => s.total + now.saturating_duration_since(since),
            None => s.total,
        }
    }
}

impl Drop for HostWaitGuard {
    fn drop(&mut self) {
        let shared = &self.0.0;
        let mut s = shared.state.lock();
        s.open -= 1;
        s.update(shared.in_host.load(SeqCst), &shared.active);
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
        })
    }

    /// Guest time used at `now`.
    fn guest_time(&self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.started);
        let waited = self.wait.total_at(now).saturating_sub(self.waited_before);
        elapsed.saturating_sub(waited)
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
        wait.entered_host(true);
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
        wait.entered_host(false);
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
    fn a_wait_open_while_the_guest_runs_its_own_code_is_guest_time() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, Duration::from_millis(50), Duration::from_secs(30));
        // A request in flight (its task holds the guard) while the guest computes.
        let _g = wait.enter();
        assert_eq!(
            budget.check(budget.started + Duration::from_millis(50)),
            Err(Overrun::Deadline),
            "computing while a request is in flight uses the guest's 50 ms"
        );
    }

    #[test]
    fn a_read_that_returns_at_once_closes_its_account_at_once() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, Duration::from_millis(50), Duration::from_secs(30));
        // A non-blocking read on a stalled body: blocked, and back in the guest at once.
        wait.entered_host(true);
        wait.blocked();
        wait.entered_host(false);
        // Then a sleep: a host call with no wait open.
        wait.entered_host(true);
        assert_eq!(
            budget.check(budget.started + Duration::from_millis(60)),
            Err(Overrun::Deadline),
            "the sleep after the read is guest time"
        );
        // While blocked in a read, the time is the peer's.
        wait.blocked();
        std::thread::sleep(Duration::from_millis(5));
        let during = wait.total_at(Instant::now());
        assert!(during >= Duration::from_millis(5), "{during:?}");
        wait.entered_host(false);
        let after = wait.total_at(Instant::now());
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            wait.total_at(Instant::now()),
            after,
            "closed when the guest runs"
        );
    }

    #[test]
    fn an_earlier_calls_waits_do_not_count_for_this_one() {
        let wait = HostWait::default();
        wait.entered_host(true);
        drop(wait.enter());
        wait.entered_host(false);
        let budget = CallBudget::start(&wait, Duration::from_millis(500), Duration::from_secs(30));
        assert_eq!(
            budget.check(budget.started + Duration::from_millis(500)),
            Err(Overrun::Deadline)
        );
    }
}
