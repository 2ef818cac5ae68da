//! `on-synced` as a pure state machine, so its ordering against the replay and its backoff
//! can be reasoned about (and changed) apart from the worker loop that drives it.

use super::{SYNCED_POLL, SYNCED_RETRY_BASE, SYNCED_RETRY_MAX};
use crate::runtime::CallOutcome;

/// Where one delivery stands with `on-synced`; changed only by [`SyncedState::step`].
///
/// `on-synced` is one of the plugin's concurrent calls: it waits for the replay (so for every
/// initial-list call to end), then takes a free slot like any notification, ahead of them (at
/// concurrency 1 that is client-go's order: `HasSynced` turns true after the initial list was
/// handled, before anything newer), and never holds up the other slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SyncedState {
    /// The replay is not handled yet: due once every subscription's informer has synced and
    /// every initial add has been handled.
    Waiting,
    /// In flight, after `attempts` earlier tries.
    Calling { attempts: u32 },
    /// Called and answered `retry`, or the call failed: due again at the instant, after
    /// `attempts` tries.
    Backoff {
        until: tokio::time::Instant,
        attempts: u32,
    },
    /// Called and ended (ok or fatal), or the handler has no such export.
    Done,
}

/// What happened to `on-synced`: the input of [`SyncedState::step`].
#[derive(Clone, Copy, Debug)]
pub(super) enum SyncedEvent<'a> {
    /// A call started.
    Started,
    /// The call ended with the outcome, at the instant.
    Ended(&'a CallOutcome, tokio::time::Instant),
    /// The informers replayed more objects as initial adds (a sharded plugin's replica gained
    /// slots): `on-synced` is due again once they are handled.
    Replayed,
}

impl SyncedState {
    /// The next state after `event`. Pure: the clock comes with the event.
    pub(super) fn step(self, event: SyncedEvent<'_>) -> SyncedState {
        match (self, event) {
            (SyncedState::Waiting, SyncedEvent::Started) => SyncedState::Calling { attempts: 0 },
            (SyncedState::Backoff { attempts, .. }, SyncedEvent::Started) => {
                SyncedState::Calling { attempts }
            }
            (SyncedState::Calling { attempts }, SyncedEvent::Ended(outcome, now)) => {
                match outcome {
                    CallOutcome::Ok | CallOutcome::Fatal(_) | CallOutcome::RequeueAfter(_) => {
                        SyncedState::Done
                    }
                    CallOutcome::Retry(_) | CallOutcome::Failed(_) => {
                        let attempts = attempts + 1;
                        let pause = crate::workqueue::ExponentialBackoff::new(
                            SYNCED_RETRY_BASE,
                            SYNCED_RETRY_MAX,
                        )
                        .after_failures(attempts);
                        SyncedState::Backoff {
                            until: now + pause,
                            attempts,
                        }
                    }
                }
            }
            (SyncedState::Done, SyncedEvent::Replayed) => SyncedState::Waiting,
            // A call starts only when due and ends only when started: nothing else happens.
            (state, _) => state,
        }
    }

    /// Whether to call now, given whether the replay has been handled.
    pub(super) fn due(self, replay_handled: impl FnOnce() -> bool) -> bool {
        match self {
            SyncedState::Waiting => replay_handled(),
            SyncedState::Backoff { until, .. } => tokio::time::Instant::now() >= until,
            SyncedState::Calling { .. } | SyncedState::Done => false,
        }
    }

    /// Whether the call is still to come or in flight (the worker is not idle for it).
    pub(super) fn pending(self) -> bool {
        matches!(self, SyncedState::Waiting | SyncedState::Calling { .. })
    }

    /// When an idle worker should look again.
    pub(super) fn wake_at(self) -> Option<tokio::time::Instant> {
        match self {
            SyncedState::Waiting => Some(tokio::time::Instant::now() + SYNCED_POLL),
            SyncedState::Backoff { until, .. } => Some(until),
            SyncedState::Calling { .. } | SyncedState::Done => None,
        }
    }
}
