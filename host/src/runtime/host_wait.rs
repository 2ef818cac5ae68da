//! [`HostWait`] and [`CallBudget`]: the rule that decides when a call has used up its time.
//!
//! A guest's deadline is a budget of the guest's *own* time, per call, however many calls of the
//! plugin share its thread. A call's time is counted while
//!
//! - its future is inside `poll` (see [`running`]): the guest's code, and whatever the host does
//!   synchronously for it (lifting and checking arguments, parsing a body, serialising a request),
//!   runs there and nowhere else;
//! - or it is blocked in a host call with no wait open: a WASI `sleep`, a clock or stdin
//!   pollable. Sleeping is the guest's choice, so it is the guest's time.
//!
//! It is not counted while the call is suspended at an epoch tick or ready and waiting for the
//! thread (other calls of the plugin run then), nor while it is blocked in a host call that waits
//! on an external system for it: an outbound HTTP exchange, a `kube` call (a [`HostWaitGuard`]
//! is open), or a response body that had no data ([`HostWait::blocked`], closed the moment the
//! guest runs again). Such waits have their own timeouts; counting them against the guest would
//! make a slow peer look like a runaway guest. A second, plain wall-clock bound
//! ([`Limits::wall_limit`](super::Limits::wall_limit)) ends the call however long they take.
//!
//! The store's call hook says when the guest enters and leaves a host call
//! ([`HostWait::entered_host`]); the account is per store, and a store serves one call at a time.
//! The hook runs on every host call, so it is atomics only while the guest runs: inside `poll`
//! the guest's time counts whatever the hook changes, and the flags it sets are read when the
//! poll ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Per-store account of the guest's own time (see the module documentation). Clones share the
/// account; a store's host calls [`enter`](HostWait::enter) it while they wait on the outside.
#[derive(Clone, Default)]
pub(crate) struct HostWait(Arc<Shared>);

/// The call hook runs on every host call and never takes the lock while the call's future is
/// inside `poll` (where the guest runs, so where the hook runs): the interval is counting then
/// whatever the hook changes, and `polling(false)` reads `in_host` and `blocked` under the lock
/// when the poll ends. Outside `poll` (an instance without the poll clock) the hook takes the
/// lock only while a wait is open or an interval counting: `in_host` and `active` are a
/// store-then-load pair on each side (sequentially consistent), so either the hook sees a wait
/// just opened or the opener sees the guest in its host call. `blocked` and `polling` are such a
/// pair too, for a read blocked on another thread while the poll ends.
#[derive(Default)]
struct Shared {
    /// The guest is inside a host call.
    in_host: AtomicBool,
    /// The call's future is inside `poll`; set and cleared only by the thread polling it.
    polling: AtomicBool,
    /// A response body found no data for the guest since it last left a host call.
    blocked: AtomicBool,
    /// A wait is open, a read blocked or an interval counting.
    active: AtomicBool,
    state: Mutex<WaitState>,
}

#[derive(Default)]
struct WaitState {
    /// Guards alive.
    open: u32,
    /// When the current counted interval began (`None`: not counting).
    since: Option<Instant>,
    /// Closed intervals of guest time so far.
    total: Duration,
}

impl WaitState {
    /// Opens or closes the counted interval after a change of state (the clock is read only
    /// when it does), and says whether the hook still needs the lock.
    fn update(&mut self, flags: &Shared) {
        let active = &flags.active;
        let waiting = self.open > 0 || flags.blocked.load(SeqCst);
        let counting = flags.polling.load(SeqCst) || (flags.in_host.load(SeqCst) && !waiting);
        match (counting, self.since) {
            (true, None) => self.since = Some(Instant::now()),
            (false, Some(since)) => {
                self.total += Instant::now().saturating_duration_since(since);
                self.since = None;
            }
            _ => {}
        }
        active.store(waiting || self.since.is_some(), SeqCst);
    }
}

/// Keeps its [`HostWait`] in the waiting state while alive; `Send`, so it can live in the task
/// that does the waiting.
pub(crate) struct HostWaitGuard(HostWait);

impl HostWait {
    /// Starts a wait on an external system (nested and concurrent guards count once).
    pub(crate) fn enter(&self) -> HostWaitGuard {
        let mut s = self.0.state.lock();
        s.open += 1;
        self.0.active.store(true, SeqCst);
        s.update(&self.0);
        HostWaitGuard(self.clone())
    }

    /// A response body had no data for the guest: the guest waits on the peer until it next
    /// runs (a non-blocking read returns at once, so its wait ends at once).
    pub(crate) fn blocked(&self) {
        let shared = &self.0;
        if shared.blocked.swap(true, SeqCst) {
            return;
        }
        shared.active.store(true, SeqCst);
        // Inside `poll` the interval counts anyway; the end of the poll reads `blocked`.
        if shared.polling.load(SeqCst) {
            return;
        }
        shared.state.lock().update(shared);
    }

    /// The store's call hook: the guest entered (`true`) or left (`false`) a host call.
    /// Leaving one ends every blocked read: the guest runs again. Atomics only while the
    /// call's future is inside `poll`, as it is whenever the guest runs.
    pub(crate) fn entered_host(&self, entered: bool) {
        let shared = &self.0;
        shared.in_host.store(entered, SeqCst);
        if !entered && shared.blocked.load(SeqCst) {
            shared.blocked.store(false, SeqCst);
        }
        if shared.polling.load(SeqCst) || !shared.active.load(SeqCst) {
            return;
        }
        shared.state.lock().update(shared);
    }

    /// The call's future entered (`true`) or left (`false`) `poll`.
    fn polling(&self, polling: bool) {
        let shared = &self.0;
        let mut s = shared.state.lock();
        shared.polling.store(polling, SeqCst);
        s.update(shared);
    }

    /// The guest's time so far, the open interval (if any) up to `now` included.
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
        s.update(shared);
    }
}

/// Drives `f`, counting the time spent inside its `poll` in `wait`'s account: a call's own
/// running time, which stays its own however many other calls share the thread. `None` counts
/// nothing (benchmarks only, to measure what the account costs).
pub(crate) async fn running<F: Future>(wait: Option<&HostWait>, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let Some(wait) = wait else {
            return f.as_mut().poll(cx);
        };
        wait.polling(true);
        let out = f.as_mut().poll(cx);
        wait.polling(false);
        out
    })
    .await
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
    used_before: Duration,
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
            used_before: wait.total_at(now),
        })
    }

    /// Guest time used at `now`.
    fn guest_time(&self, now: Instant) -> Duration {
        self.wait.total_at(now).saturating_sub(self.used_before)
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

    const MS: Duration = Duration::from_millis(1);

    /// The hook used to take the lock on every host call while the guest ran (an interval is
    /// always counting inside `poll`); it must not wait on the lock however long another
    /// thread holds it.
    #[test]
    fn the_call_hook_never_waits_on_the_lock_while_the_guest_runs() {
        let wait = HostWait::default();
        let _g = wait.enter();
        wait.polling(true);
        let held = wait.0.state.lock();
        let (done, finished) = std::sync::mpsc::channel();
        let hook = wait.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..1000 {
                hook.entered_host(true);
                hook.blocked();
                hook.entered_host(false);
            }
            done.send(()).unwrap();
        });
        let ran = finished.recv_timeout(Duration::from_secs(10));
        drop(held);
        t.join().unwrap();
        assert!(ran.is_ok(), "the hook waited on the lock");
        // What the hook recorded is read when the poll ends: out of the host call, not blocked.
        wait.polling(false);
        let now = Instant::now();
        std::thread::sleep(MS * 5);
        assert_eq!(wait.total_at(now), wait.total_at(now + MS * 5));
    }

    #[test]
    fn only_time_inside_poll_is_the_guests_however_long_other_calls_run_between() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, MS * 1000, MS * 30_000);
        let t0 = budget.started;
        wait.polling(true);
        std::thread::sleep(MS * 20);
        wait.polling(false);
        // Suspended at an epoch tick: the plugin's other calls have the thread.
        let off = Instant::now();
        std::thread::sleep(MS * 40);
        let off = off.elapsed();
        wait.polling(true);
        std::thread::sleep(MS * 20);
        wait.polling(false);
        let now = Instant::now();
        let used = budget.guest_time(now);
        assert!(used >= MS * 40, "{used:?}");
        assert!(
            used <= now.duration_since(t0) - off,
            "{used:?} counts time outside poll"
        );
    }

    #[test]
    fn a_sleep_is_the_guests_and_a_wait_on_the_outside_is_not() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, MS * 1000, MS * 3000);
        let t0 = budget.started;
        // The guest enters a host call and the call's future returns pending in it.
        wait.polling(true);
        wait.entered_host(true);
        {
            let _g = wait.enter();
            let _nested = wait.enter();
            wait.polling(false);
            // Two seconds waiting on the API server: none of the guest's second is used.
            let at = t0 + MS * 2000;
            assert!(budget.guest_time(at) < MS * 100);
            assert!(budget.check(at).is_ok());
            assert_eq!(budget.check(t0 + MS * 3000), Err(Overrun::WallLimit));
        }
        // The wait closed, the guest still in its host call (a WASI sleep): its time runs.
        let later = Instant::now() + MS * 1500;
        assert!(budget.guest_time(later) >= MS * 1400);
        assert_eq!(budget.check(later), Err(Overrun::Deadline));
    }

    #[test]
    fn a_wait_open_while_the_guest_runs_its_own_code_is_guest_time() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, MS * 50, MS * 30_000);
        // A request in flight (its task holds the guard) while the guest computes.
        let _g = wait.enter();
        wait.polling(true);
        // Counting began when polling did, at the latest now.
        let polled = Instant::now();
        assert_eq!(
            budget.check(polled + MS * 50),
            Err(Overrun::Deadline),
            "computing while a request is in flight uses the guest's 50 ms"
        );
    }

    #[test]
    fn a_read_that_returns_at_once_closes_its_wait_at_once() {
        let wait = HostWait::default();
        let budget = CallBudget::start(&wait, MS * 50, MS * 30_000);
        wait.polling(true);
        // A non-blocking read on a stalled body: blocked, and back in the guest at once.
        wait.entered_host(true);
        wait.blocked();
        wait.entered_host(false);
        // Then a sleep: pending in a host call with no wait open.
        wait.entered_host(true);
        wait.polling(false);
        assert_eq!(
            budget.check(budget.started + MS * 60),
            Err(Overrun::Deadline),
            "the sleep after the read is guest time"
        );
        // While blocked in a read, the time is the peer's.
        wait.blocked();
        let during = wait.total_at(Instant::now());
        std::thread::sleep(MS * 5);
        assert_eq!(
            wait.total_at(Instant::now()),
            during,
            "blocked: not counted"
        );
        wait.polling(true);
        wait.entered_host(false);
        std::thread::sleep(MS * 5);
        assert!(
            wait.total_at(Instant::now()) >= during + MS * 5,
            "counted again once the guest runs"
        );
    }

    #[test]
    fn an_earlier_calls_time_does_not_count_for_this_one() {
        let wait = HostWait::default();
        wait.polling(true);
        std::thread::sleep(MS * 5);
        wait.polling(false);
        let budget = CallBudget::start(&wait, MS * 500, MS * 30_000);
        assert_eq!(budget.guest_time(Instant::now()), Duration::ZERO);
        wait.polling(true);
        assert_eq!(
            budget.check(Instant::now() + MS * 500),
            Err(Overrun::Deadline)
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn calls_interleaved_on_one_thread_each_count_their_own_polls() {
        // Two calls on one thread, each spinning 30 ms per poll and yielding between polls.
        let spin = async |wait: HostWait| {
            let budget = CallBudget::start(&wait, MS * 1000, MS * 30_000);
            running(Some(&wait), async {
                for _ in 0..3 {
                    let t = Instant::now();
                    while t.elapsed() < MS * 30 {}
                    tokio::task::yield_now().await;
                }
            })
            .await;
            budget.guest_time(Instant::now())
        };
        let started = Instant::now();
        let (a, b) = tokio::join!(spin(HostWait::default()), spin(HostWait::default()));
        let wall = started.elapsed();
        assert!(wall >= MS * 180, "{wall:?}");
        for used in [a, b] {
            assert!(used >= MS * 90, "{used:?}");
            assert!(
                used < wall - MS * 60,
                "{used:?} of {wall:?} counts the other call"
            );
        }
    }
}
