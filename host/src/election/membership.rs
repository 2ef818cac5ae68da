//! The shard-ring state machine: [`Membership`], driven by [`Membership::step`].
//!
//! Like the election's `state`, `step` does no I/O and reads no clock: it is given what just
//! happened ([`Input`]) and the time ([`Moment`]) and answers with the next state, the request
//! to make next ([`Action`]), and what to publish or drain on the way ([`Step`]). The ring task
//! performs them and feeds the outcomes back in.
//!
//! A round, every retry period: write our Lease (the renewal, with the claims we keep), LIST
//! the ring, then decide. Each LIST follows our latest write, so it is also the confirmation
//! read of every claim that write made. Deciding, against the live Leases of that LIST:
//! - publish (never before) the slots we claim, the plan gives us, and no live rival lists;
//! - stop publishing, drain, then write out the slots we claim but the plan gives away, and
//!   the unpublished ones a live rival also lists (a lost race: back off, jittered);
//! - claim the slots the plan gives us that nobody claims, in one write; the next LIST
//!   confirms them.
//!
//! Drains run beside the rounds (they may take the whole grace, far longer than a renew
//! deadline): a drained slot leaves our Lease with the next write, which is made at once.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::config::RingConfig;
use super::member_lease::{Claims, MemberLease, MemberRecord};
use super::ownership::SlotOwnership;
use super::slots::assign;
pub(super) use super::state::Moment;

/// What this replica knows of another member's Lease.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    /// The Lease as last listed.
    lease: MemberLease,
    /// When this replica first saw it at its current resourceVersion: it is live until
    /// `since + its lease duration` (client-go's rule, on our own monotonic clock).
    since: Instant,
}

/// The ring as of the last LIST: who is live, what the plan gives us, what rivals claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct View {
    /// The slots the plan gives us.
    pub mine: u64,
    /// The slots some live rival lists.
    pub rivals: u64,
    /// Live members, ourselves included.
    pub members: usize,
}

/// Which request is outstanding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between rounds.
    Waiting,
    /// A write of our Lease.
    Writing,
    /// A LIST of the ring.
    Listing,
    /// Deleting our Lease, the last act of a release.
    Deleting,
    /// Done.
    Stopped,
}

/// The state of one member of a ring.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Membership {
    phase: Phase,
    /// Our Lease as last written or listed: the base of the next write (`None`: create it).
    own: Option<MemberLease>,
    /// The slots our Lease lists, as last written.
    claimed: u64,
    /// The slots published as held; always within `claimed`.
    published: u64,
    /// Send time of our last successful write plus the renew deadline.
    valid_until: Option<Instant>,
    /// Whether `valid_until` passed and the fence was published (cleared by a renewal).
    fenced: bool,
    /// Bumped on every change of `published`.
    epoch: u64,
    /// Unpublished slots whose drain is running.
    draining: u64,
    /// Drained slots still in our Lease: the next write leaves them out.
    drained: u64,
    /// The other Leases of the ring, by name.
    seen: BTreeMap<String, Seen>,
    /// The ring as of the last LIST.
    view: View,
    /// No claim before this (after losing a race).
    backoff_until: Option<Instant>,
    /// When the current round started (the next one starts a retry period later).
    round: Instant,
    /// No more writes this round (a 409: the next round's write uses the base just listed).
    hold_writes: bool,
    /// Set by a release: when to give up on it.
    stopping: Option<Instant>,
    /// Leases whose slot count differs, reported once each.
    reported: BTreeSet<String>,
}

/// What happened since the last step.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Input {
    /// The wait of [`Action::Wait`] is over: a new round.
    Tick,
    /// Our write was stored; `sent` is when the request left.
    Written {
        /// Our Lease as stored.
        lease: MemberLease,
        /// When the request was sent.
        sent: Instant,
    },
    /// The ring as listed.
    Listed(Vec<MemberLease>),
    /// Our write was based on a stale resourceVersion.
    Conflict,
    /// A request failed or ran out of time.
    Failed,
    /// Our Lease is gone.
    Deleted,
    /// The drain of these slots is over (their calls ended, or the grace passed).
    Drained(u64),
    /// `valid_until` passed (the fence timer).
    Expired,
    /// SIGTERM: give every slot up.
    Release,
}

/// The request the ring task makes next.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Action {
    /// Write our Lease: replace `base` at its resourceVersion, or create it when `None`.
    Write {
        /// What to write.
        record: MemberRecord,
        /// The Lease the write is based on.
        base: Option<MemberLease>,
    },
    /// LIST the ring.
    List,
    /// Delete our Lease at `base`'s resourceVersion.
    Delete {
        /// Our Lease as last written.
        base: MemberLease,
    },
    /// Do nothing until then.
    Wait(Instant),
    /// End the ring task.
    Stop,
}

/// The result of one step.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Step {
    /// The new state.
    pub state: Membership,
    /// The request to make next; `None` keeps the outstanding one going (for inputs that do not
    /// end a request: [`Input::Drained`], [`Input::Expired`], [`Input::Release`]).
    pub action: Option<Action>,
    /// A new ownership to publish, before the action is performed.
    pub publish: Option<SlotOwnership>,
    /// Slots to start draining (they are unpublished already).
    pub drain: Option<u64>,
    /// Things worth an error log line.
    pub notices: Vec<String>,
}

fn bit_all(slots: u32) -> u64 {
    if slots >= 64 {
        u64::MAX
    } else {
        (1u64 << slots) - 1
    }
}

impl Membership {
    /// The state a member starts in, and its first request (a LIST, to learn our Lease's base
    /// and the ring before the first write).
    pub(super) fn start(now: Instant) -> (Membership, Action) {
        let state = Membership {
            phase: Phase::Listing,
            own: None,
            claimed: 0,
            published: 0,
            valid_until: None,
            fenced: false,
            epoch: 0,
            draining: 0,
            drained: 0,
            seen: BTreeMap::new(),
            view: View::default(),
            backoff_until: None,
            round: now,
            hold_writes: false,
            stopping: None,
            reported: BTreeSet::new(),
        };
        (state, Action::List)
    }

    /// When the fence timer must fire (`None` when it has, or nothing is at stake).
    pub(super) fn fence_at(&self) -> Option<Instant> {
        if self.fenced { None } else { self.valid_until }
    }

    /// The ownership as published now.
    pub(super) fn ownership(&self, cfg: &RingConfig) -> SlotOwnership {
        SlotOwnership {
            slots: cfg.slots,
            held: self.published,
            valid_until: self.valid_until,
            epoch: self.epoch,
        }
    }

    /// Whether the last renewal ran out without a successor.
    pub(super) fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The ring as of the last LIST.
    pub(super) fn view(&self) -> View {
        self.view
    }

    /// The slots our Lease lists.
    #[cfg(test)]
    pub(super) fn claimed(&self) -> u64 {
        self.claimed
    }

    /// Whether the outstanding request is a write of our Lease.
    pub(super) fn writing(&self) -> bool {
        self.phase == Phase::Writing
    }

    /// Advances the machine by one input.
    pub(super) fn step(mut self, input: Input, at: &Moment, cfg: &RingConfig) -> Step {
        let now = at.now;
        let before = self.ownership(cfg);
        let mut out = Out::default();
        if self.phase == Phase::Stopped {
            return self.finish(Some(Action::Stop), before, out, cfg);
        }
        let action = match input {
            Input::Release => {
                if self.stopping.is_none() {
                    let e = &cfg.election;
                    self.stopping = Some(now + cfg.drain_grace + e.renew_deadline + e.retry_period);
                    self.published = 0;
                    let all = self.claimed & !self.draining & !self.drained;
                    self.start_drain(all, &mut out);
                }
                self.when_waiting(at, cfg, &mut out)
            }
            Input::Expired => {
                if !self.fenced && self.valid_until.is_some_and(|t| now >= t) {
                    self.fenced = true;
                    self.published = 0;
                    // Past the deadline our slots may be a rival's by now: the next write lists
                    // none, so our Lease never names a slot beside its new owner's.
                    self.claimed = 0;
                }
                // Re-claim from scratch: renew now, then claim and confirm by the LISTs after.
                self.when_waiting(at, cfg, &mut out)
            }
            Input::Drained(slots) => {
                self.draining &= !slots;
                self.drained |= slots & self.claimed;
                self.when_waiting(at, cfg, &mut out)
            }
            Input::Tick => {
                self.round = now;
                self.hold_writes = false;
                Some(self.write(cfg, self.claimed & !self.drained))
            }
            Input::Written { lease, sent } => {
                self.claimed = lease.slots();
                self.drained &= self.claimed;
                let until = sent + cfg.election.renew_deadline;
                if now < until {
                    self.valid_until = Some(self.valid_until.map_or(until, |v| v.max(until)));
                    self.fenced = false;
                }
                let released = lease.holder.is_empty();
                self.own = Some(lease);
                if released && self.stopping.is_some() {
                    self.phase = Phase::Deleting;
                    let base = self.own.clone().expect("just set");
                    Some(Action::Delete { base })
                } else {
                    self.phase = Phase::Listing;
                    Some(Action::List)
                }
            }
            Input::Listed(leases) => {
                self.observe(leases, now, cfg, &mut out);
                self.decide(at, cfg, &mut out, true)
            }
            Input::Conflict => {
                // Someone wrote our Lease (or it was created or deleted behind our back): the
                // LIST brings its current version, the next round writes on it.
                self.hold_writes = true;
                self.phase = Phase::Listing;
                Some(Action::List)
            }
            Input::Failed => {
                if self.phase == Phase::Deleting {
                    self.phase = Phase::Stopped;
                    Some(Action::Stop)
                } else {
                    self.phase = Phase::Waiting;
                    let mut next = now + cfg.election.retry_period;
                    if let Some(t) = self.fence_at().filter(|t| *t > now) {
                        next = next.min(t);
                    }
                    Some(Action::Wait(next))
                }
            }
            Input::Deleted => {
                self.phase = Phase::Stopped;
                self.own = None;
                Some(Action::Stop)
            }
        };
        let action = match action {
            // A release out of time stops whatever it was doing (the Lease then just expires).
            _ if self.stopping.is_some_and(|t| now >= t) => {
                self.phase = Phase::Stopped;
                self.published = 0;
                Some(Action::Stop)
            }
            a => a,
        };
        self.finish(action, before, out, cfg)
    }

    fn finish(
        mut self,
        action: Option<Action>,
        before: SlotOwnership,
        out: Out,
        cfg: &RingConfig,
    ) -> Step {
        if self.published != before.held {
            self.epoch += 1;
        }
        let now = self.ownership(cfg);
        Step {
            publish: (now != before).then_some(now),
            state: self,
            action,
            drain: out.drain,
            notices: out.notices,
        }
    }

    /// Runs `f` when no request is outstanding; otherwise the outstanding one goes on and the
    /// change is acted on once it completes.
    fn when_waiting(&mut self, at: &Moment, cfg: &RingConfig, out: &mut Out) -> Option<Action> {
        if self.phase == Phase::Waiting {
            self.decide(at, cfg, out, false)
        } else {
            None
        }
    }

    fn start_drain(&mut self, slots: u64, out: &mut Out) {
        if slots != 0 {
            self.draining |= slots;
            *out.drain.get_or_insert(0) |= slots;
        }
    }

    /// A write of our Lease claiming `claims` (with an empty holder when a release is done).
    fn write(&mut self, cfg: &RingConfig, claims: u64) -> Action {
        let leaving = self.stopping.is_some() && claims == 0 && self.draining == 0;
        self.phase = Phase::Writing;
        Action::Write {
            record: MemberRecord {
                holder: if leaving {
                    String::new()
                } else {
                    cfg.election.identity.clone()
                },
                duration: cfg.election.lease_duration,
                claims,
            },
            base: self.own.clone(),
        }
    }

    /// Takes in a LIST: our own Lease becomes the base of the next write, the others' clocks
    /// restart when their resourceVersion changed.
    fn observe(&mut self, leases: Vec<MemberLease>, now: Instant, cfg: &RingConfig, out: &mut Out) {
        let own_name = cfg.lease_name();
        let mut seen = BTreeMap::new();
        self.own = None;
        let mut found = false;
        for lease in leases {
            if lease.name == own_name {
                found = true;
                if lease.holder == cfg.election.identity {
                    self.claimed = lease.slots();
                }
                self.own = Some(lease);
                continue;
            }
            let since = match self.seen.get(&lease.name) {
                Some(s) if s.lease.resource_version() == lease.resource_version() => s.since,
                _ => now,
            };
            if let Claims::Foreign { count } = lease.claims
                && !lease.holder.is_empty()
                && self.reported.insert(lease.name.clone())
            {
                let theirs = count.map_or_else(|| "unreadable".to_string(), |c| c.to_string());
                out.notices.push(format!(
                    "ring member Lease {} cuts the hash space into {theirs} slots, this replica into {}: \
                     taking it to claim every slot (set the same --shard-slots on every replica)",
                    lease.name, cfg.slots
                ));
            }
            seen.insert(lease.name.clone(), Seen { lease, since });
        }
        self.seen = seen;
        if !found {
            self.claimed = 0;
        }
        // Slots gone from our Lease (someone rewrote it) are no longer held.
        self.published &= self.claimed;
        self.draining &= self.claimed;
        self.drained &= self.claimed;
    }

    /// The ring as of the last LIST, at `now`.
    fn survey(&self, now: Instant, cfg: &RingConfig) -> View {
        let own_name = cfg.lease_name();
        let mut members: Vec<&str> = vec![&own_name];
        let mut rivals = 0u64;
        for (name, s) in &self.seen {
            let duration = if s.lease.duration.is_zero() {
                cfg.election.lease_duration
            } else {
                s.lease.duration
            };
            if s.lease.holder.is_empty() || now >= s.since + duration {
                continue;
            }
            members.push(name);
            rivals |= match s.lease.claims {
                Claims::Slots(m) => m,
                Claims::Foreign { .. } => bit_all(cfg.slots),
            };
        }
        let (names, plan) = assign(cfg.slots, &members);
        let me = names.iter().position(|m| *m == own_name);
        let mine = if self.stopping.is_some() {
            0
        } else {
            plan.iter()
                .enumerate()
                .filter(|(_, owner)| Some(**owner) == me)
                .fold(0u64, |m, (s, _)| m | (1u64 << s))
        };
        View {
            mine,
            rivals: rivals & bit_all(cfg.slots),
            members: names.len(),
        }
    }

    /// Acts on the last LIST: publish, drain, claim, or wait for the next round. Only a LIST
    /// just made (`fresh`) may confirm or start a claim: between LISTs a rival's renewal is
    /// unknown, and its Lease would only seem to expire.
    fn decide(
        &mut self,
        at: &Moment,
        cfg: &RingConfig,
        out: &mut Out,
        fresh: bool,
    ) -> Option<Action> {
        let now = at.now;
        let view = self.survey(now, cfg);
        self.view = view;
        let valid = !self.fenced && self.valid_until.is_some_and(|t| now < t);
        let leaving = self.draining | self.drained;
        let unpublished = self.claimed & !self.published;
        let lost = unpublished & view.rivals & !leaving;
        if lost != 0 {
            let wait = cfg.election.retry_period.mul_f64(1.0 + at.jitter);
            self.backoff_until = Some(now + wait);
        }
        let release = ((self.claimed & !view.mine) | lost) & !leaving;
        let confirmed = if valid && fresh {
            unpublished & view.mine & !view.rivals & !leaving
        } else {
            0
        };
        self.published = (self.published & !release) | confirmed;
        self.start_drain(release, out);
        let claim = if valid
            && fresh
            && self.stopping.is_none()
            && !self.hold_writes
            && self.backoff_until.is_none_or(|t| now >= t)
        {
            view.mine & !self.claimed & !view.rivals & !self.draining & !self.drained
        } else {
            0
        };
        let want = (self.claimed & !self.drained) | claim;
        let leave = self.stopping.is_some()
            && self.draining == 0
            && want == 0
            && self.own.as_ref().is_some_and(|o| !o.holder.is_empty());
        let renew = !valid && self.stopping.is_none();
        if !self.hold_writes && (want != self.claimed || leave || renew) {
            return Some(self.write(cfg, want));
        }
        if self.stopping.is_some() && self.draining == 0 && want == 0 && !leave {
            // Nothing of ours is left in the ring (never written, or already released).
            return match self.own.clone() {
                Some(base) if !self.hold_writes => {
                    self.phase = Phase::Deleting;
                    Some(Action::Delete { base })
                }
                Some(_) => self.wait(at, cfg),
                None => {
                    self.phase = Phase::Stopped;
                    Some(Action::Stop)
                }
            };
        }
        self.wait(at, cfg)
    }

    fn wait(&mut self, at: &Moment, cfg: &RingConfig) -> Option<Action> {
        self.phase = Phase::Waiting;
        let period = cfg.election.retry_period.mul_f64(1.0 - 0.2 * at.jitter);
        let mut next = (self.round + period).max(at.now);
        if let Some(t) = self.fence_at().filter(|t| *t > at.now) {
            // Renew before the deadline even if the round ran late.
            next = next.min(t);
        }
        Some(Action::Wait(next))
    }
}

/// What a step produces besides the next action.
#[derive(Default)]
struct Out {
    drain: Option<u64>,
    notices: Vec<String>,
}

#[cfg(test)]
mod tests {
    //! A ring of members stepped against an in-memory API server on a simulated clock (every
    //! request answers at once; time moves in 10 ms ticks), checking after every tick that no
    //! slot is held by two members.

    use super::*;
    use std::time::Duration;

    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::jiff::Timestamp;

    use crate::election::config::ElectionConfig;
    use crate::election::member_lease::{
        RING_LABEL, SLOT_COUNT_ANNOTATION, SLOTS_ANNOTATION, format_slots, render,
    };
    use crate::election::slots::owned;

    const RING: &str = "r";
    const S: u32 = 16;
    const ALL: u64 = 0xffff;
    const TICK: Duration = Duration::from_millis(10);

    fn cfg(member: &str) -> RingConfig {
        RingConfig {
            election: ElectionConfig {
                identity: format!("{member}/boot"),
                lease_duration: Duration::from_secs(1),
                renew_deadline: Duration::from_millis(600),
                retry_period: Duration::from_millis(150),
                ..ElectionConfig::new(RING, "ns")
            },
            member: member.into(),
            slots: S,
            drain_grace: Duration::from_secs(5),
        }
    }

    fn mask(slots: &[u32]) -> u64 {
        slots.iter().fold(0, |m, s| m | (1u64 << s))
    }

    /// The plan's slots for `member` among `members`.
    fn plan(members: &[&str], member: &str) -> u64 {
        let names: Vec<String> = members.iter().map(|m| format!("{RING}-{m}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        mask(&owned(S, &refs, &format!("{RING}-{member}")))
    }

    #[derive(Default)]
    struct Server {
        leases: BTreeMap<String, Lease>,
        rv: u64,
    }

    impl Server {
        fn list(&self) -> Vec<MemberLease> {
            self.leases
                .values()
                .map(|l| MemberLease::from_lease(l.clone(), S))
                .collect()
        }

        fn store(&mut self, mut lease: Lease) -> Lease {
            self.rv += 1;
            lease.metadata.resource_version = Some(self.rv.to_string());
            let name = lease.metadata.name.clone().unwrap();
            self.leases.insert(name, lease.clone());
            lease
        }

        fn write(
            &mut self,
            own: &str,
            record: &MemberRecord,
            base: Option<&MemberLease>,
        ) -> Option<MemberLease> {
            let current = self
                .leases
                .get(own)
                .and_then(|l| l.metadata.resource_version.as_deref());
            if current != base.and_then(|b| b.resource_version()) {
                return None;
            }
            let lease = render(RING, own, S, record, base, Timestamp::UNIX_EPOCH);
            Some(MemberLease::from_lease(self.store(lease), S))
        }

        /// A Lease written by someone outside the simulation.
        fn put(&mut self, name: &str, holder: &str, slots: u64, count: u32) {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(format!("{RING}-{name}")),
                    labels: Some([(RING_LABEL.to_string(), RING.to_string())].into()),
                    annotations: Some(
                        [
                            (SLOTS_ANNOTATION.to_string(), format_slots(slots)),
                            (SLOT_COUNT_ANNOTATION.to_string(), count.to_string()),
                        ]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(holder.into()),
                    lease_duration_seconds: Some(1),
                    ..LeaseSpec::default()
                }),
            };
            self.store(lease);
        }
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Event {
        Publish(u64),
        Drain(u64),
        Write(u64),
        Delete,
    }

    struct Member {
        cfg: RingConfig,
        state: Membership,
        action: Action,
        /// Drains started and not yet reported over.
        drains: u64,
        /// Keep drains running until the test lets go.
        hold_drains: bool,
        /// Requests fail (a partition).
        cut: bool,
        /// Not stepped at all (SIGKILL, SIGSTOP).
        frozen: bool,
        stopped: bool,
        events: Vec<(Instant, Event)>,
        owned: SlotOwnership,
        notices: Vec<String>,
    }

    impl Member {
        fn new(name: &str, now: Instant) -> Member {
            let (state, action) = Membership::start(now);
            Member {
                cfg: cfg(name),
                state,
                action,
                drains: 0,
                hold_drains: false,
                cut: false,
                frozen: false,
                stopped: false,
                events: Vec::new(),
                owned: SlotOwnership::none(S),
                notices: Vec::new(),
            }
        }

        fn apply(&mut self, input: Input, now: Instant) {
            let at = Moment {
                now,
                wall: Timestamp::UNIX_EPOCH,
                jitter: 0.5,
            };
            let state = std::mem::replace(&mut self.state, Membership::start(now).0);
            let step = state.step(input, &at, &self.cfg);
            self.state = step.state;
            if let Some(o) = step.publish {
                if o.held != self.owned.held {
                    self.events.push((now, Event::Publish(o.held)));
                }
                self.owned = o;
            }
            if let Some(d) = step.drain {
                self.events.push((now, Event::Drain(d)));
                self.drains |= d;
            }
            self.notices.extend(step.notices);
            if let Some(a) = step.action {
                self.action = a;
            }
        }

        /// Steps until the member waits for the clock (or for a held drain).
        fn run(&mut self, server: &mut Server, now: Instant) {
            for _ in 0..100 {
                if !self.once(server, now) {
                    return;
                }
            }
            panic!("{} does not settle: {:?}", self.cfg.member, self.action);
        }

        /// One step, if one is due: the fence timer, a finished drain, or the reply to the
        /// outstanding request.
        fn once(&mut self, server: &mut Server, now: Instant) -> bool {
            {
                if self.stopped || self.frozen {
                    return false;
                }
                if self.state.fence_at().is_some_and(|t| now >= t) {
                    self.apply(Input::Expired, now);
                    return true;
                }
                if !self.hold_drains && self.drains != 0 {
                    let d = std::mem::take(&mut self.drains);
                    self.apply(Input::Drained(d), now);
                    return true;
                }
                let input = match self.action.clone() {
                    Action::Wait(t) if now < t => return false,
                    Action::Wait(_) => Input::Tick,
                    Action::List | Action::Write { .. } | Action::Delete { .. } if self.cut => {
                        Input::Failed
                    }
                    Action::List => Input::Listed(server.list()),
                    Action::Write { record, base } => {
                        self.events.push((now, Event::Write(record.claims)));
                        match server.write(&self.cfg.lease_name(), &record, base.as_ref()) {
                            Some(lease) => Input::Written { lease, sent: now },
                            None => Input::Conflict,
                        }
                    }
                    Action::Delete { .. } => {
                        server.leases.remove(&self.cfg.lease_name());
                        self.events.push((now, Event::Delete));
                        Input::Deleted
                    }
                    Action::Stop => {
                        self.stopped = true;
                        return false;
                    }
                };
                self.apply(input, now);
                true
            }
        }

        fn held(&self, now: Instant) -> u64 {
            if self.owned.valid(now) {
                self.owned.held
            } else {
                0
            }
        }

        /// When this member first published a set containing `slot`, after `since`.
        fn first_held(&self, slot: u32, since: Instant) -> Option<Instant> {
            self.events.iter().find_map(|(t, e)| {
                matches!(e, Event::Publish(h) if *t >= since && h & (1 << slot) != 0).then_some(*t)
            })
        }
    }

    struct World {
        server: Server,
        members: Vec<Member>,
        now: Instant,
    }

    impl World {
        fn new(names: &[&str]) -> World {
            let now = Instant::now();
            World {
                server: Server::default(),
                members: names.iter().map(|n| Member::new(n, now)).collect(),
                now,
            }
        }

        fn member(&mut self, name: &str) -> &mut Member {
            self.members
                .iter_mut()
                .find(|m| m.cfg.member == name)
                .expect("member")
        }

        fn held(&self, name: &str) -> u64 {
            let m = self.members.iter().find(|m| m.cfg.member == name).unwrap();
            m.held(self.now)
        }

        fn join(&mut self, name: &str) {
            let m = Member::new(name, self.now);
            self.members.push(m);
        }

        /// Moves the clock, stepping every member, and checks the one invariant at each tick.
        fn run_for(&mut self, d: Duration) {
            let end = self.now + d;
            while self.now < end {
                self.now += TICK;
                for m in &mut self.members {
                    m.run(&mut self.server, self.now);
                }
                let mut seen = 0u64;
                for m in &self.members {
                    let h = m.held(self.now);
                    assert_eq!(
                        seen & h,
                        0,
                        "{} holds a slot another member holds",
                        m.cfg.member
                    );
                    seen |= h;
                }
            }
        }

        fn union(&self) -> u64 {
            self.members.iter().fold(0, |u, m| u | m.held(self.now))
        }
    }

    #[test]
    fn members_split_every_slot_and_a_join_or_leave_moves_only_the_plans_slots() {
        let mut w = World::new(&["a", "b", "c"]);
        w.run_for(Duration::from_secs(2));
        for m in ["a", "b", "c"] {
            assert_eq!(w.held(m), plan(&["a", "b", "c"], m), "{m}");
        }
        assert_eq!(w.union(), ALL);

        let joined = w.now;
        w.join("d");
        w.run_for(Duration::from_secs(2));
        for m in ["a", "b", "c", "d"] {
            assert_eq!(w.held(m), plan(&["a", "b", "c", "d"], m), "{m}");
        }
        assert_eq!(w.union(), ALL);
        for m in ["a", "b", "c"] {
            // A slot the plan leaves where it was never leaves its holder.
            let stays = plan(&["a", "b", "c"], m) & plan(&["a", "b", "c", "d"], m);
            for (t, e) in &w.member(m).events {
                if let Event::Publish(h) = e
                    && *t >= joined
                {
                    assert_eq!(h & stays, stays, "{m} dropped a slot it keeps");
                }
            }
        }

        // d crashes: its slots stay with it until its Lease has expired in the others' eyes.
        let crashed = w.now;
        let gone = plan(&["a", "b", "c", "d"], "d");
        w.member("d").frozen = true;
        w.run_for(Duration::from_millis(800));
        assert_eq!(w.union() & gone, 0, "taken before d's lease expired");
        w.run_for(Duration::from_millis(1200));
        for m in ["a", "b", "c"] {
            assert_eq!(w.held(m), plan(&["a", "b", "c"], m), "{m}");
            let took = (0..S)
                .filter(|s| gone & (1 << s) != 0)
                .filter_map(|s| w.member(m).first_held(s, crashed))
                .min();
            if let Some(t) = took {
                // d's last renewal is at most one retry period before the crash.
                assert!(
                    t - crashed >= Duration::from_millis(850),
                    "{:?}",
                    t - crashed
                );
            }
        }
        assert_eq!(w.union(), ALL);
    }

    #[test]
    fn no_slot_is_taken_while_a_live_rival_lists_it_and_all_are_once_it_expires() {
        let mut w = World::new(&["a"]);
        w.server.put("ghost", "ghost/1", ALL, S);
        let start = w.now;
        w.run_for(Duration::from_millis(900));
        assert_eq!(w.held("a"), 0);
        assert_eq!(w.member("a").state.view().members, 2);
        w.run_for(Duration::from_millis(400));
        assert_eq!(w.held("a"), ALL, "the ghost's lease expired");
        let first = w.member("a").first_held(0, start).unwrap();
        assert!(first - start >= Duration::from_secs(1));
        assert_eq!(w.member("a").state.view().members, 1);
    }

    #[test]
    fn a_claim_the_confirmation_read_contradicts_is_withdrawn_and_retried_after_a_back_off() {
        let mut w = World::new(&["a"]);
        let both = plan(&["a", "ghost"], "a");
        let contested = both.trailing_zeros();
        // The ghost is a member already, claiming nothing.
        w.server.put("ghost", "ghost/1", 0, S);
        // Let a read the ring, create its Lease, read again and decide to claim.
        let m = &mut w.members[0];
        for _ in 0..10 {
            if matches!(m.action, Action::Write { ref record, .. } if record.claims != 0) {
                break;
            }
            assert!(m.once(&mut w.server, w.now), "{:?}", m.action);
        }
        let Action::Write { record, .. } = m.action.clone() else {
            panic!("a should be about to claim: {:?}", m.action)
        };
        assert_eq!(record.claims, both);
        // The rival claims the contested slot between a's check and a's write.
        w.server.put("ghost", "ghost/1", 1 << contested, S);
        let raced = w.now;
        w.members[0].run(&mut w.server, w.now);
        let m = &w.members[0];
        assert_eq!(
            m.owned.held,
            both & !(1 << contested),
            "published only the confirmed"
        );
        assert!(m.events.contains(&(raced, Event::Drain(1 << contested))));
        assert_eq!(
            m.state.claimed(),
            both & !(1 << contested),
            "withdrawn at once"
        );
        // The rival lets go: a claims it again, but only after backing off.
        w.server.put("ghost", "ghost/1", 0, S);
        w.run_for(Duration::from_millis(600));
        let again = w.members[0]
            .events
            .iter()
            .find(|(t, e)| *t > raced && matches!(e, Event::Write(c) if c & (1 << contested) != 0))
            .map(|(t, _)| *t)
            .expect("claimed again");
        assert!(
            again - raced >= Duration::from_millis(150),
            "{:?}",
            again - raced
        );
        assert_eq!(w.held("a"), both);
    }

    #[test]
    fn a_member_that_cannot_renew_fences_itself_at_the_renew_deadline_and_reclaims() {
        let mut w = World::new(&["a", "b"]);
        w.run_for(Duration::from_secs(2));
        let a_slots = plan(&["a", "b"], "a");
        assert_eq!(w.held("a"), a_slots);
        let valid_until = w.member("a").owned.valid_until.unwrap();
        w.member("a").cut = true;
        let snapshot = w.member("a").owned.clone();
        w.run_for(Duration::from_millis(700));
        // A snapshot kept past the deadline answers false by itself …
        assert!(snapshot.valid(valid_until - TICK) && !snapshot.valid(valid_until));
        // … and the fence timer published nothing held.
        let m = w.member("a");
        assert!(m.state.is_fenced());
        assert_eq!(m.owned.held, 0);
        let fenced_at = m
            .events
            .iter()
            .rev()
            .find(|(_, e)| *e == Event::Publish(0))
            .unwrap()
            .0;
        assert!(fenced_at >= valid_until && fenced_at < valid_until + 2 * TICK);
        w.run_for(Duration::from_millis(1500));
        assert_eq!(w.held("b"), ALL, "b took a's slots once a's lease expired");
        // Back: a renews, and takes its plan's slots back through b's release.
        w.member("a").cut = false;
        w.run_for(Duration::from_secs(2));
        assert_eq!(w.held("a"), a_slots);
        assert_eq!(w.held("b"), ALL & !a_slots);
        assert!(!w.member("a").state.is_fenced());
    }

    #[test]
    fn a_paused_member_resumes_holding_nothing_until_it_has_reclaimed() {
        let mut w = World::new(&["a", "b"]);
        w.run_for(Duration::from_secs(2));
        let stale = w.member("a").owned.clone();
        w.member("a").frozen = true;
        w.run_for(Duration::from_secs(2));
        assert_eq!(w.held("b"), ALL);
        assert!(!stale.valid(w.now), "the old snapshot is no longer valid");
        w.member("a").frozen = false;
        // The first thing it does on resuming is to fence (its timer is long past).
        let now = w.now;
        assert!(w.members[0].once(&mut w.server, now));
        assert_eq!(w.members[0].events.last().unwrap().1, Event::Publish(0));
        assert_eq!(
            w.members[0].state.claimed, 0,
            "a fenced member's next write lists no slot"
        );
        w.run_for(Duration::from_secs(2));
        assert_eq!(w.held("a"), plan(&["a", "b"], "a"));
    }

    #[test]
    fn a_release_publishes_then_drains_then_writes_and_only_then_the_slot_moves() {
        let mut w = World::new(&["a", "b"]);
        w.run_for(Duration::from_secs(2));
        w.member("a").hold_drains = true;
        w.member("b").hold_drains = true;
        let joined = w.now;
        w.join("c");
        w.run_for(Duration::from_secs(1));
        let to_c = plan(&["a", "b", "c"], "c");
        assert_eq!(w.held("c"), 0, "nothing moves while the drains run");
        for m in ["a", "b"] {
            let before = plan(&["a", "b"], m);
            let given = before & to_c;
            assert_eq!(w.held(m), before & !given, "{m} stopped publishing at once");
            let events = &w.member(m).events;
            let drain = events
                .iter()
                .position(|(t, e)| *t >= joined && matches!(e, Event::Drain(_)));
            if given == 0 {
                assert!(drain.is_none());
                continue;
            }
            let drain = drain.expect("drain started");
            let publish = events
                .iter()
                .position(|(t, e)| *t >= joined && matches!(e, Event::Publish(_)))
                .unwrap();
            assert!(publish < drain, "{m}: publish before drain");
            assert!(
                events[drain..]
                    .iter()
                    .all(|(_, e)| !matches!(e, Event::Write(c) if c & given != given)),
                "{m} wrote the slots out before they drained"
            );
        }
        w.member("a").hold_drains = false;
        w.member("b").hold_drains = false;
        w.run_for(Duration::from_secs(1));
        assert_eq!(w.held("c"), to_c);
        assert_eq!(w.union(), ALL);
    }

    #[test]
    fn sigterm_releases_everything_and_a_survivor_takes_over_within_rounds() {
        let mut w = World::new(&["a", "b"]);
        w.run_for(Duration::from_secs(2));
        let released = w.now;
        let now = w.now;
        w.member("a").apply(Input::Release, now);
        assert_eq!(w.member("a").owned.held, 0, "held = 0 at once");
        w.run_for(Duration::from_millis(400));
        let a = w.member("a");
        assert!(a.stopped);
        let kinds: Vec<&Event> = a
            .events
            .iter()
            .filter(|(t, _)| *t >= released)
            .map(|(_, e)| e)
            .collect();
        assert!(matches!(kinds[0], Event::Publish(0)), "{kinds:?}");
        assert!(matches!(kinds[1], Event::Drain(_)), "{kinds:?}");
        assert!(
            kinds.ends_with(&[&Event::Write(0), &Event::Delete]),
            "{kinds:?}"
        );
        assert!(!w.server.leases.contains_key("r-a"));
        assert_eq!(
            w.held("b"),
            ALL,
            "taken over well within the lease duration"
        );
    }

    #[test]
    fn a_member_with_another_slot_count_is_taken_to_claim_every_slot_and_reported_once() {
        let mut w = World::new(&["a"]);
        w.server.put("odd", "odd/1", 1, 32);
        w.run_for(Duration::from_millis(800));
        let m = w.member("a");
        assert_eq!(m.owned.held, 0);
        assert_eq!(m.notices.len(), 1, "{:?}", m.notices);
        assert!(m.notices[0].contains("r-odd") && m.notices[0].contains("32"));
        w.run_for(Duration::from_millis(600));
        assert_eq!(w.held("a"), ALL);
        assert_eq!(w.member("a").notices.len(), 1);
    }
}
