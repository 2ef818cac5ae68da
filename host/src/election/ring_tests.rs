//! Shard rings against the embedded API server: several rings in one process over real HTTP,
//! with short durations (lease 1 s, renew deadline 600 ms, retry 150 ms). Every published
//! ownership is recorded with the time it was seen on one monotonic clock, and at the end the
//! record is checked for any instant at which two rings held the same slot. Waits are on the
//! ownership channels, bounded by a patience that is a failure guard, never a synchronisation.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    ElectionConfig, NoCallsInFlight, RingConfig, RingMetrics, ShardRing, SlotOwnership, owned_slots,
};

const PATIENCE: Duration = Duration::from_secs(30);
const S: u32 = 16;
const ALL: u64 = 0xffff;

async fn server() -> apiserver::ApiServer {
    apiserver::ApiServer::start(apiserver::Config::default())
        .await
        .expect("embedded API server starts")
}

fn client_for(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client")
}

fn config(member: &str, lease_duration: Duration, renew_deadline: Duration) -> RingConfig {
    RingConfig {
        election: ElectionConfig {
            identity: format!("{member}/{:08x}", rand::random::<u32>()),
            lease_duration,
            renew_deadline,
            retry_period: Duration::from_millis(150),
            ..ElectionConfig::new("kubewasm", "default")
        },
        member: member.into(),
        slots: S,
        drain_grace: Duration::from_secs(2),
    }
}

/// Every ownership each ring published, as seen, in order.
type Log = Arc<Mutex<Vec<(Instant, usize, SlotOwnership)>>>;

struct Ring {
    ring: Option<ShardRing>,
    rx: watch::Receiver<SlotOwnership>,
    lease: String,
    metrics: RingMetrics,
}

struct Rings {
    client: kube::Client,
    rings: Vec<Ring>,
    log: Log,
}

impl Rings {
    fn new(client: kube::Client) -> Rings {
        Rings {
            client,
            rings: Vec::new(),
            log: Log::default(),
        }
    }

    fn start(&mut self, cfg: RingConfig) -> usize {
        let metrics = RingMetrics::unregistered();
        let ring = ShardRing::start(
            self.client.clone(),
            cfg,
            Arc::new(NoCallsInFlight),
            metrics.clone(),
        )
        .expect("valid config");
        let i = self.rings.len();
        let mut rx = ring.ownership();
        let log = self.log.clone();
        tokio::spawn(async move {
            loop {
                let o = rx.borrow_and_update().clone();
                log.lock().push((Instant::now(), i, o));
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        self.rings.push(Ring {
            rx: ring.ownership(),
            lease: ring.lease_name().to_string(),
            ring: Some(ring),
            metrics,
        });
        i
    }

    fn held(&self, i: usize) -> u64 {
        let o = self.rings[i].rx.borrow();
        if o.valid(Instant::now()) { o.held } else { 0 }
    }

    /// Waits until every ring of `which` holds exactly its slots of `want(i)`.
    async fn until(&self, what: &str, mut done: impl FnMut(&Rings) -> bool) {
        let mut rxs: Vec<_> = self.rings.iter().map(|r| r.rx.clone()).collect();
        tokio::time::timeout(PATIENCE, async {
            loop {
                if done(self) {
                    return;
                }
                let changes = rxs.iter_mut().map(|rx| Box::pin(rx.changed()));
                let _ = futures::future::select_all(changes).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
    }

    /// Whether every ring of `which` holds exactly its plan among them (a partition).
    fn settled(&self, which: &[usize]) -> bool {
        which.iter().all(|&i| self.held(i) == self.plan(which, i)) && self.partition(which)
    }

    /// Whether the rings of `which` hold every slot between them, each one once.
    fn partition(&self, which: &[usize]) -> bool {
        let mut seen = 0u64;
        for &i in which {
            let h = self.held(i);
            if seen & h != 0 {
                return false;
            }
            seen |= h;
        }
        seen == ALL
    }

    /// The plan's slots for ring `i` among the rings `which`.
    fn plan(&self, which: &[usize], i: usize) -> u64 {
        let names: Vec<&str> = which
            .iter()
            .map(|&j| self.rings[j].lease.as_str())
            .collect();
        owned_slots(S, &names, &self.rings[i].lease)
            .into_iter()
            .fold(0, |m, s| m | (1 << s))
    }

    /// Fails if, at any instant of the record, two rings held one slot.
    fn assert_never_two_holders(&self) {
        let log = self.log.lock().clone();
        let end = Instant::now();
        // Per ring: the intervals during which it held something, cut at `valid_until`.
        let mut spans: Vec<(usize, Instant, Instant, u64)> = Vec::new();
        for i in 0..self.rings.len() {
            let mine: Vec<_> = log.iter().filter(|(_, r, _)| *r == i).collect();
            for (k, (t, _, o)) in mine.iter().enumerate() {
                let next = mine.get(k + 1).map_or(end, |n| n.0);
                let until = o.valid_until.map_or(*t, |v| v.min(next));
                if o.held != 0 && until > *t {
                    spans.push((i, *t, until, o.held));
                }
            }
        }
        for a in &spans {
            for b in &spans {
                if a.0 < b.0 && a.3 & b.3 != 0 && a.1 < b.2 && b.1 < a.2 {
                    panic!(
                        "rings {} and {} both held slots {:#x} during {:?}..{:?}",
                        a.0,
                        b.0,
                        a.3 & b.3,
                        a.1.max(b.1),
                        a.2.min(b.2)
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_rings_hold_every_slot_once_and_a_crashed_ones_slots_move_after_its_lease() {
    let server = server().await;
    let lease = Duration::from_secs(1);
    let mut rings = Rings::new(client_for(&server.url()));
    for m in ["a", "b", "c"] {
        rings.start(config(m, lease, Duration::from_millis(600)));
    }
    rings
        .until("three rings hold their plans", |r| r.settled(&[0, 1, 2]))
        .await;
    for i in 0..3 {
        assert_eq!(
            rings.held(i),
            rings.plan(&[0, 1, 2], i),
            "ring {i} holds its plan"
        );
        assert_eq!(
            rings.rings[i].metrics.held(),
            u64::from(rings.held(i).count_ones())
        );
    }

    // A crash: nothing is written, the survivors wait out c's Lease.
    let gone = rings.held(2);
    let crashed = Instant::now();
    rings.rings[2].ring = None;
    assert_eq!(
        rings.rings[2].rx.borrow().held,
        0,
        "a dropped ring holds nothing"
    );
    rings
        .until("the survivors hold every slot", |r| r.partition(&[0, 1]))
        .await;
    let took = crashed.elapsed();
    // c renewed at most one retry period (plus a request) before the drop.
    assert!(
        took >= lease - Duration::from_millis(300),
        "took c's slots {took:?} after the crash, before its lease could expire"
    );
    assert!(
        took <= lease + Duration::from_millis(300) + Duration::from_secs(2),
        "{took:?}"
    );
    assert_ne!(gone, 0);
    rings.assert_never_two_holders();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_ring_takes_about_a_quarter_and_a_released_one_is_taken_over_at_once() {
    let server = server().await;
    // A long lease: a takeover faster than it can only come from the release.
    let lease = Duration::from_secs(6);
    let renew = Duration::from_secs(3);
    let mut rings = Rings::new(client_for(&server.url()));
    for m in ["a", "b", "c"] {
        rings.start(config(m, lease, renew));
    }
    rings
        .until("three rings hold their plans", |r| r.settled(&[0, 1, 2]))
        .await;
    let before: Vec<u64> = (0..3).map(|i| rings.held(i)).collect();

    let d = rings.start(config("d", lease, renew));
    let all4 = [0, 1, 2, d];
    let want: Vec<u64> = all4.iter().map(|&i| rings.plan(&all4, i)).collect();
    rings
        .until("four rings hold their plan", |r| {
            all4.iter().zip(&want).all(|(&i, w)| r.held(i) == *w)
        })
        .await;
    // About S/4 moved: d's share, plus what the tighter load bound shifts between the others.
    let moved: u32 = (0..3).map(|i| (before[i] & !want[i]).count_ones()).sum();
    assert!(
        (2..=6).contains(&want[3].count_ones()),
        "d holds {:#x}",
        want[3]
    );
    assert!(
        moved <= 8,
        "{moved} of 16 slots moved when a 4th ring joined"
    );

    let released = Instant::now();
    let b = rings.rings[1].ring.take().unwrap();
    b.release().await;
    assert_eq!(rings.rings[1].rx.borrow().held, 0);
    rings
        .until("the rest hold every slot", |r| r.partition(&[0, 2, d]))
        .await;
    let took = released.elapsed();
    assert!(
        took < lease / 2,
        "takeover after a release took {took:?}; it must not wait for the {lease:?} lease"
    );
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(rings.client.clone(), "default");
    assert!(
        api.get_opt(&rings.rings[1].lease).await.unwrap().is_none(),
        "a released ring deletes its Lease"
    );
    assert!(rings.rings[1].metrics.releases() >= before[1].count_ones().into());
    rings.assert_never_two_holders();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_slot_counts_are_refused_naming_the_flag() {
    let server = server().await;
    let mut cfg = config("a", Duration::from_secs(1), Duration::from_millis(600));
    cfg.slots = 12;
    let err = ShardRing::start(
        client_for(&server.url()),
        cfg,
        Arc::new(NoCallsInFlight),
        RingMetrics::unregistered(),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("--shard-slots"), "{err}");
}
