//! The election state machine: [`Election`], driven by [`Election::step`].
//!
//! `step` does no I/O and reads no clock: it is given what just happened ([`Input`]) and the
//! time ([`Moment`]), and answers with the next state and the one thing to do next ([`Action`]).
//! The elector task performs the action and feeds its outcome back in.
//!
//! Times are measured on this process's monotonic clock only, never compared with timestamps
//! written by other replicas (client-go's rule, immune to clock skew):
//! - a standby may take the Lease over once it has seen no change of it (no new resourceVersion)
//!   for the lease duration the record states;
//! - a leader counts its renew deadline from the moment it *sent* its last successful write,
//!   which is no later than any moment another replica can have seen that write.
//!
//! Hence a leader that cannot renew steps down at `sent + renew_deadline`, strictly before any
//! standby may acquire at `seen + lease_duration >= sent + lease_duration`.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::config::ElectionConfig;
use super::lease_lock::{LeaderRecord, Versioned};

/// What this replica knows of the Lease.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Observation {
    /// The Lease as last read or written.
    pub lease: Versioned,
    /// When this replica first saw the Lease at its current resourceVersion.
    pub since: Instant,
}

/// The state of one elector.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Election {
    /// Not leading: trying to acquire the Lease every retry period. `observed` is `None` until
    /// the Lease was read once (or while it does not exist).
    Standby {
        /// The Lease as last seen.
        observed: Option<Observation>,
    },
    /// Holding the Lease and renewing it every retry period.
    Leading {
        /// The Lease as last written by us.
        observed: Observation,
        /// When the request of our last successful write was sent; leadership ends at
        /// `renewed + renew_deadline` unless renewed again.
        renewed: Instant,
    },
    /// Stepped down on request and clearing the holder so a standby can take over at once;
    /// gives up at `until` (the Lease then simply expires).
    Releasing {
        /// The Lease as last seen.
        observed: Observation,
        /// When to stop trying.
        until: Instant,
    },
    /// Done: released, or asked to release while not leading.
    Stopped,
}

/// What happened since the last step.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Input {
    /// The wait of [`Action::Wait`] is over.
    Tick,
    /// The Lease as read; `None` when it does not exist.
    Fetched(Option<Versioned>),
    /// The server accepted our write; `sent` is when the request left.
    Written {
        /// The Lease as stored.
        lease: Versioned,
        /// When the request was sent.
        sent: Instant,
    },
    /// Our write lost a race: the Lease changed since we read it.
    Conflict,
    /// A request failed or ran out of time.
    Failed,
    /// The owner asked to give the Lease up.
    Release,
}

/// The one thing the elector does next.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Action {
    /// Read the Lease.
    Fetch,
    /// Write `record`: replace `base` at its resourceVersion, or create the Lease when `None`.
    Write {
        /// The record to store.
        record: LeaderRecord,
        /// The Lease the write is based on.
        base: Option<Versioned>,
    },
    /// Do nothing until then.
    Wait(Instant),
    /// End the elector.
    Stop,
}

/// A change of leadership worth a log line and a metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Transition {
    /// Became the leader.
    Acquired,
    /// Stopped leading involuntarily, and why.
    Lost(String),
    /// Stopped leading on request.
    Released,
}

/// The time of a step, read once by the caller.
#[derive(Debug, Clone, Copy)]
pub(super) struct Moment {
    /// Monotonic time, for every duration.
    pub now: Instant,
    /// Wall-clock time, only written into the record for humans and other tools.
    pub wall: Timestamp,
    /// A random draw in `[0, 1)` that spreads the standbys' retries over the last fifth of the
    /// retry period (never later, so takeover stays within lease duration + retry period).
    pub jitter: f64,
}

impl Moment {
    /// The current moment with a fresh random draw.
    pub(super) fn now() -> Self {
        Self {
            now: Instant::now(),
            wall: Timestamp::now(),
            jitter: rand::random(),
        }
    }
}

/// The result of one step.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Step {
    /// The new state.
    pub state: Election,
    /// What to do next.
    pub action: Action,
    /// The leadership change this step made, if any.
    pub transition: Option<Transition>,
}

fn go(state: Election, action: Action) -> Step {
    Step {
        state,
        action,
        transition: None,
    }
}

impl Election {
    /// The state an elector starts in.
    pub(super) fn start() -> (Election, Action) {
        (Election::Standby { observed: None }, Action::Fetch)
    }

    /// Whether this replica may act as the leader now.
    pub(super) fn is_leader(&self) -> bool {
        matches!(self, Election::Leading { .. })
    }

    /// The latest moment the pending request may finish, if the state puts a bound on it.
    pub(super) fn deadline(&self, cfg: &ElectionConfig) -> Option<Instant> {
        match self {
            Election::Leading { renewed, .. } => Some(*renewed + cfg.renew_deadline),
            Election::Releasing { until, .. } => Some(*until),
            Election::Standby { .. } | Election::Stopped => None,
        }
    }

    /// Advances the machine by one input.
    pub(super) fn step(self, input: Input, at: &Moment, cfg: &ElectionConfig) -> Step {
        let now = at.now;
        let me = cfg.identity.as_str();
        let standby_wait = Action::Wait(now + cfg.retry_period.mul_f64(1.0 - 0.2 * at.jitter));
        match (self, input) {
            (Election::Stopped, _) => go(Election::Stopped, Action::Stop),

            (Election::Standby { .. }, Input::Release) => go(Election::Stopped, Action::Stop),
            (Election::Standby { observed }, Input::Tick) => {
                go(Election::Standby { observed }, Action::Fetch)
            }
            (Election::Standby { .. }, Input::Fetched(None)) => go(
                Election::Standby { observed: None },
                Action::Write {
                    record: acquire(None, me, at, cfg),
                    base: None,
                },
            ),
            (Election::Standby { observed }, Input::Fetched(Some(lease))) => {
                let seen = observe(observed.as_ref(), lease, now);
                let r = &seen.lease.record;
                let claimed_for = if r.lease_duration.is_zero() {
                    cfg.lease_duration
                } else {
                    r.lease_duration
                };
                let expires = seen.since + claimed_for;
                if !r.holder.is_empty() && r.holder != me && now < expires {
                    // Wake at the expiry itself when it comes before the next retry: the
                    // takeover then follows a silent leader's last renewal by at most the lease
                    // duration plus the one retry period it took to see that renewal.
                    let wait = match standby_wait {
                        Action::Wait(at) => Action::Wait(at.min(expires)),
                        other => other,
                    };
                    return go(
                        Election::Standby {
                            observed: Some(seen),
                        },
                        wait,
                    );
                }
                let record = acquire(Some(r), me, at, cfg);
                let base = Some(seen.lease.clone());
                go(
                    Election::Standby {
                        observed: Some(seen),
                    },
                    Action::Write { record, base },
                )
            }
            (Election::Standby { observed }, Input::Written { lease, sent }) => {
                if lease.record.holder == me && now < sent + cfg.renew_deadline {
                    Step {
                        state: Election::Leading {
                            observed: Observation { lease, since: now },
                            renewed: sent,
                        },
                        action: Action::Wait(now + cfg.retry_period),
                        transition: Some(Transition::Acquired),
                    }
                } else {
                    go(Election::Standby { observed }, standby_wait)
                }
            }
            (Election::Standby { observed }, Input::Conflict | Input::Failed) => {
                go(Election::Standby { observed }, standby_wait)
            }

            (Election::Leading { observed, .. }, Input::Release) => {
                let record = LeaderRecord {
                    holder: String::new(),
                    lease_duration: Duration::from_secs(1),
                    acquire_time: Some(at.wall),
                    renew_time: Some(at.wall),
                    transitions: observed.lease.record.transitions,
                };
                let base = Some(observed.lease.clone());
                Step {
                    state: Election::Releasing {
                        observed,
                        until: now + cfg.renew_deadline,
                    },
                    action: Action::Write { record, base },
                    transition: Some(Transition::Released),
                }
            }
            (Election::Leading { renewed, .. }, Input::Written { lease, sent })
                if lease.record.holder == me && now < sent.max(renewed) + cfg.renew_deadline =>
            {
                go(
                    Election::Leading {
                        observed: Observation { lease, since: now },
                        renewed: sent.max(renewed),
                    },
                    Action::Wait(now + cfg.retry_period),
                )
            }
            // Nothing that arrives after the deadline can extend leadership.
            (Election::Leading { observed, renewed }, _) if now >= renewed + cfg.renew_deadline => {
                lost(
                    observed,
                    "could not renew the Lease before the renew deadline",
                    standby_wait,
                )
            }
            (Election::Leading { observed, renewed }, Input::Tick) => {
                let mut record = observed.lease.record.clone();
                record.renew_time = Some(at.wall);
                record.lease_duration = cfg.lease_duration;
                let base = Some(observed.lease.clone());
                go(
                    Election::Leading { observed, renewed },
                    Action::Write { record, base },
                )
            }
            (Election::Leading { observed, renewed }, Input::Conflict) => {
                go(Election::Leading { observed, renewed }, Action::Fetch)
            }
            (Election::Leading { observed, renewed }, Input::Failed) => {
                let retry = (now + cfg.retry_period).min(renewed + cfg.renew_deadline);
                go(Election::Leading { observed, renewed }, Action::Wait(retry))
            }
            (Election::Leading { observed, renewed }, Input::Fetched(None)) => {
                // Someone deleted the Lease: put our claim back while we still may.
                let record = acquire(Some(&observed.lease.record), me, at, cfg);
                go(
                    Election::Leading { observed, renewed },
                    Action::Write { record, base: None },
                )
            }
            (Election::Leading { observed, renewed }, Input::Fetched(Some(lease))) => {
                let seen = observe(Some(&observed), lease, now);
                if seen.lease.record.holder != me {
                    let why = format!("the Lease is now held by {:?}", seen.lease.record.holder);
                    return lost(seen, &why, standby_wait);
                }
                let record = acquire(Some(&seen.lease.record), me, at, cfg);
                let base = Some(seen.lease.clone());
                go(
                    Election::Leading {
                        observed: seen,
                        renewed,
                    },
                    Action::Write { record, base },
                )
            }
            // A Written that names someone else cannot come from our own write; re-read.
            (Election::Leading { observed, renewed }, Input::Written { .. }) => {
                go(Election::Leading { observed, renewed }, Action::Fetch)
            }

            (Election::Releasing { observed, until }, Input::Conflict) if now < until => {
                go(Election::Releasing { observed, until }, Action::Fetch)
            }
            (Election::Releasing { observed, until }, Input::Fetched(Some(lease)))
                if now < until && lease.record.holder == me =>
            {
                let seen = observe(Some(&observed), lease, now);
                let record = LeaderRecord {
                    holder: String::new(),
                    lease_duration: Duration::from_secs(1),
                    acquire_time: Some(at.wall),
                    renew_time: Some(at.wall),
                    transitions: seen.lease.record.transitions,
                };
                let base = Some(seen.lease.clone());
                go(
                    Election::Releasing {
                        observed: seen,
                        until,
                    },
                    Action::Write { record, base },
                )
            }
            // Released, no longer ours, gone, or out of time: nothing left to do.
            (Election::Releasing { .. }, _) => go(Election::Stopped, Action::Stop),
        }
    }
}

/// Our claim on a Lease whose record is `prev`: a renewal when we hold it already, a takeover
/// (new acquire time, one more transition) otherwise. As in client-go, any takeover of an
/// existing Lease counts, a released one (no holder, count 0) included; only creating the Lease
/// starts at 0, so tools reading `leaseTransitions` see every change of hands.
fn acquire(
    prev: Option<&LeaderRecord>,
    me: &str,
    at: &Moment,
    cfg: &ElectionConfig,
) -> LeaderRecord {
    let ours = prev.is_some_and(|p| p.holder == me);
    LeaderRecord {
        holder: me.to_string(),
        lease_duration: cfg.lease_duration,
        acquire_time: match prev {
            Some(p) if ours => p.acquire_time.or(Some(at.wall)),
            _ => Some(at.wall),
        },
        renew_time: Some(at.wall),
        transitions: match prev {
            Some(p) if ours => p.transitions,
            Some(p) => p.transitions.saturating_add(1),
            None => 0,
        },
    }
}

/// Records a read; the clock of `since` restarts only when the resourceVersion changed.
fn observe(prev: Option<&Observation>, lease: Versioned, now: Instant) -> Observation {
    let since = match prev {
        Some(p) if p.lease.resource_version() == lease.resource_version() => p.since,
        _ => now,
    };
    Observation { lease, since }
}

fn lost(observed: Observation, why: &str, wait: Action) -> Step {
    Step {
        state: Election::Standby {
            observed: Some(observed),
        },
        action: wait,
        transition: Some(Transition::Lost(why.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cfg(identity: &str) -> ElectionConfig {
        ElectionConfig {
            identity: identity.into(),
            ..ElectionConfig::new("l", "ns")
        }
    }

    fn at(now: Instant) -> Moment {
        Moment {
            now,
            wall: Timestamp::UNIX_EPOCH,
            jitter: 0.0,
        }
    }

    fn lease(holder: &str, rv: &str) -> Versioned {
        Versioned {
            record: LeaderRecord {
                holder: holder.into(),
                lease_duration: Duration::from_secs(15),
                ..LeaderRecord::default()
            },
            lease: Box::new(Lease {
                metadata: ObjectMeta {
                    resource_version: Some(rv.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec::default()),
            }),
        }
    }

    fn leading(t0: Instant) -> Election {
        Election::Leading {
            observed: Observation {
                lease: lease("me", "5"),
                since: t0,
            },
            renewed: t0,
        }
    }

    #[test]
    fn standby_waits_out_a_live_lease_measured_from_its_own_observation() {
        let c = cfg("me");
        let t0 = Instant::now();
        let (s, a) = Election::start();
        assert_eq!(a, Action::Fetch);
        let step = s.step(Input::Fetched(Some(lease("other", "7"))), &at(t0), &c);
        assert!(matches!(step.action, Action::Wait(_)));
        // Same RV 14 s later: still live (the clock runs from our first sight of RV 7).
        let t1 = t0 + Duration::from_secs(14);
        let step = step
            .state
            .step(Input::Fetched(Some(lease("other", "7"))), &at(t1), &c);
        assert!(matches!(step.action, Action::Wait(_)));
        // A renewal (new RV) restarts the clock.
        let t2 = t0 + Duration::from_secs(16);
        let step = step
            .state
            .step(Input::Fetched(Some(lease("other", "8"))), &at(t2), &c);
        assert!(matches!(step.action, Action::Wait(_)));
        // 15 s after RV 8 was first seen: take over, one more transition.
        let t3 = t2 + Duration::from_secs(15);
        let step = step
            .state
            .step(Input::Fetched(Some(lease("other", "8"))), &at(t3), &c);
        let Action::Write { record, base } = step.action else {
            panic!("expected a takeover write, got {:?}", step.action)
        };
        assert_eq!(record.holder, "me");
        assert_eq!(record.transitions, 1);
        assert_eq!(base.unwrap().resource_version(), Some("8"));
        assert_eq!(
            step.transition, None,
            "not leading until the write succeeds"
        );
    }

    #[test]
    fn a_standby_wakes_at_the_expiry_rather_than_a_retry_period_later() {
        let c = cfg("me");
        let t0 = Instant::now();
        let (s, _) = Election::start();
        let step = s.step(Input::Fetched(Some(lease("other", "7"))), &at(t0), &c);
        assert_eq!(step.action, Action::Wait(t0 + c.retry_period));
        // 14 s after first sight, 1 s before expiry: wake at the expiry, not 2 s later.
        let t1 = t0 + Duration::from_secs(14);
        let step = step
            .state
            .step(Input::Fetched(Some(lease("other", "7"))), &at(t1), &c);
        assert_eq!(step.action, Action::Wait(t0 + c.lease_duration));
    }

    #[test]
    fn a_free_or_missing_lease_is_taken_at_once_and_the_write_makes_a_leader() {
        let c = cfg("me");
        let t0 = Instant::now();
        let s = Election::Standby { observed: None };
        let step = s.clone().step(Input::Fetched(None), &at(t0), &c);
        assert!(matches!(step.action, Action::Write { base: None, .. }));
        let Action::Write { record, .. } = &step.action else {
            panic!("expected a create")
        };
        assert_eq!(record.transitions, 0, "creating the Lease is no transition");
        // A released Lease (no holder, count 0): client-go counts taking it as a transition.
        let step = s.step(Input::Fetched(Some(lease("", "3"))), &at(t0), &c);
        let Action::Write { record, base } = &step.action else {
            panic!("expected a takeover write, got {:?}", step.action)
        };
        assert!(base.is_some());
        assert_eq!(record.transitions, 1);
        let step = step.state.step(
            Input::Written {
                lease: lease("me", "4"),
                sent: t0,
            },
            &at(t0 + Duration::from_millis(5)),
            &c,
        );
        assert_eq!(step.transition, Some(Transition::Acquired));
        assert!(step.state.is_leader());
        assert_eq!(step.state.deadline(&c), Some(t0 + c.renew_deadline));
    }

    #[test]
    fn a_leader_steps_down_at_the_renew_deadline_before_a_standby_may_acquire() {
        let c = cfg("me");
        let t0 = Instant::now();
        let s = leading(t0);
        // Renewals keep failing; just before the deadline it is still the leader.
        let step = s.step(Input::Failed, &at(t0 + Duration::from_secs(9)), &c);
        assert!(step.state.is_leader());
        assert_eq!(step.action, Action::Wait(t0 + c.renew_deadline));
        // At the deadline it stands down, whatever arrives.
        let step = step.state.step(Input::Tick, &at(t0 + c.renew_deadline), &c);
        assert!(!step.state.is_leader());
        assert!(matches!(step.transition, Some(Transition::Lost(_))));
        // A standby that saw our last write no earlier than we sent it may acquire only later.
        assert!(c.renew_deadline < c.lease_duration);
        // A late success cannot revive it either.
        let late = leading(t0).step(
            Input::Written {
                lease: lease("me", "6"),
                sent: t0,
            },
            &at(t0 + c.renew_deadline),
            &c,
        );
        assert!(!late.state.is_leader());
    }

    #[test]
    fn a_leader_renews_at_its_version_and_notices_a_takeover() {
        let c = cfg("me");
        let t0 = Instant::now();
        let step = leading(t0).step(Input::Tick, &at(t0 + c.retry_period), &c);
        let Action::Write { record, base } = &step.action else {
            panic!("expected a renewal")
        };
        assert_eq!(record.holder, "me");
        assert_eq!(base.as_ref().unwrap().resource_version(), Some("5"));
        let step = step
            .state
            .step(Input::Conflict, &at(t0 + c.retry_period), &c);
        assert_eq!(step.action, Action::Fetch);
        let step = step.state.step(
            Input::Fetched(Some(lease("other", "9"))),
            &at(t0 + c.retry_period),
            &c,
        );
        assert!(!step.state.is_leader());
        assert!(matches!(step.transition, Some(Transition::Lost(w)) if w.contains("other")));
    }

    #[test]
    fn release_stops_leading_before_the_write_that_frees_the_lease() {
        let c = cfg("me");
        let t0 = Instant::now();
        let step = leading(t0).step(Input::Release, &at(t0), &c);
        assert!(!step.state.is_leader());
        assert_eq!(step.transition, Some(Transition::Released));
        let Action::Write { record, .. } = &step.action else {
            panic!("expected the release write")
        };
        assert!(record.holder.is_empty());
        // A conflict (our in-flight renewal landed) re-reads and releases the newer version.
        let step = step.state.step(Input::Conflict, &at(t0), &c);
        assert_eq!(step.action, Action::Fetch);
        let step = step
            .state
            .step(Input::Fetched(Some(lease("me", "6"))), &at(t0), &c);
        assert!(
            matches!(&step.action, Action::Write { base: Some(b), .. } if b.resource_version() == Some("6"))
        );
        let step = step.state.step(
            Input::Written {
                lease: lease("", "7"),
                sent: t0,
            },
            &at(t0),
            &c,
        );
        assert_eq!((step.state, step.action), (Election::Stopped, Action::Stop));
        let idle = Election::Standby { observed: None }.step(Input::Release, &at(t0), &c);
        assert_eq!(idle.action, Action::Stop);
        assert_eq!(idle.transition, None);
    }
}
