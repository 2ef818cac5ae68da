//! The harness of the active-active sharding tests (`tests/sharding/`) and benchmark
//! (`benches/sharding.rs`): replicas of `kubewasm run --sharding` as processes, the ring's member
//! Leases as a watch keeps them, and the overlap detector — an HTTP stub the `shard-fixture`
//! plugin posts every call to, which records who handled which object when and notices two
//! requests for one object in flight at once.
//!
//! Everything a test waits for (a stub request, a Lease change, a replica's log line) wakes one
//! shared [`Notify`]; [`eventually`] waits on it, re-checking every 100 ms as well for conditions
//! that time alone makes true (a dead replica's Lease expiring), and panics with a report after
//! its patience.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

use crate::PATIENCE;

/// The label every member Lease of a ring carries, valued with the ring's id.
pub const RING_LABEL: &str = "kubewasm.dev/ring";
/// The annotation listing the slots a member Lease holds (`"0,3,7"`).
pub const SLOTS_ANNOTATION: &str = "kubewasm.dev/slots";
/// The fixture every sharding test loads (`bash tests/fixtures/build.sh`).
pub const FIXTURE: &str = "rust-shard-fixture.wasm";

/// The slot of `S` (a power of two) that `value`'s FNV-1a 64 hash falls in: `(hash * S) >> 64`,
/// computed here from KEP-5866's hash, not by the host's code.
pub fn slot_of(value: &str, slots: u32) -> u32 {
    let hash = kubewasm_apimachinery::fnv1a64(value.as_bytes());
    ((u128::from(hash) * u128::from(slots)) >> 64) as u32
}

/// Waits until `pred` holds, waking on `changed` and every 100 ms; panics after `patience` with
/// `what` and `report()`.
pub async fn eventually(
    changed: &Notify,
    patience: Duration,
    what: &str,
    mut pred: impl FnMut() -> bool,
    report: impl Fn() -> String,
) {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let notified = changed.notified();
        let checked = tokio::time::Instant::now();
        if pred() {
            return;
        }
        if checked >= deadline {
            panic!(
                "timed out after {patience:?} waiting for: {what}\n{}",
                report()
            );
        }
        let tick = (checked + Duration::from_millis(100)).min(deadline);
        let _ = tokio::time::timeout_at(tick, notified).await;
        // Not a synchronisation: the stub wakes this on every request, and a predicate over
        // thousands of records need not run hundreds of times a second.
        tokio::time::sleep_until((checked + Duration::from_millis(20)).min(deadline)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The overlap detector.

/// One request the fixture made: one handler call of one replica.
#[derive(Clone, Debug)]
pub struct Record {
    /// The stub path's prefix: which plugin posted (`shard`, `warm`).
    pub plugin: String,
    /// `add`, `update`, `delete` or `synced`.
    pub op: String,
    /// The `replica` setting of the plugin that posted.
    pub replica: String,
    /// The object's uid (empty for `synced`).
    pub uid: String,
    /// The object's name.
    pub name: String,
    /// The object's resourceVersion as delivered.
    pub rv: String,
    /// `is-in-initial-list` (add), `is-sync` (update), `final-state-unknown` (delete).
    pub flag: bool,
    /// When the request arrived.
    pub start: DateTime<Utc>,
    /// When it was answered (or its connection dropped); `None` while in flight.
    pub end: Option<DateTime<Utc>>,
}

impl Record {
    /// `end`, or the far future while in flight.
    pub fn end_or_max(&self) -> DateTime<Utc> {
        self.end.unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// Two requests for one object in flight at once: the invariant broken.
#[derive(Clone, Debug)]
pub struct Overlap {
    /// The object.
    pub uid: String,
    /// Its name.
    pub name: String,
    /// The replicas (and ops) of the requests in flight when the second arrived.
    pub in_flight: Vec<String>,
    /// The replica and op of the request that arrived.
    pub arrived: String,
    /// When.
    pub at: DateTime<Utc>,
}

#[derive(Default)]
struct StubState {
    records: Vec<Record>,
    /// Record indices in flight, per uid.
    in_flight: HashMap<String, Vec<usize>>,
    overlaps: Vec<Overlap>,
    /// Most requests ever in flight for one uid.
    peak_per_uid: usize,
}

/// The stub: `POST /{plugin}/{op}` with the fixture's JSON body, answered `200` after the hold;
/// on a thread and runtime of its own, so the replicas' load cannot delay its clock.
pub struct Stub {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<StubState>>,
    changed: Arc<Notify>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Ends a request's record when the handler finishes or is dropped (its client went away).
struct InFlight {
    state: Arc<Mutex<StubState>>,
    changed: Arc<Notify>,
    index: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        {
            let mut s = self.state.lock();
            let uid = s.records[self.index].uid.clone();
            s.records[self.index].end = Some(Utc::now());
            if let Some(v) = s.in_flight.get_mut(&uid) {
                v.retain(|&i| i != self.index);
                if v.is_empty() {
                    s.in_flight.remove(&uid);
                }
            }
        }
        self.changed.notify_waiters();
    }
}

#[derive(Clone)]
struct StubApp {
    state: Arc<Mutex<StubState>>,
    changed: Arc<Notify>,
    hold: Duration,
}

/// One request: recorded as it arrives (from the fixture's headers, so a request counts as in
/// flight from its first bytes), completed from its JSON body, answered after the hold.
async fn stub_request(
    axum::extract::State(app): axum::extract::State<StubApp>,
    request: axum::extract::Request,
) -> http::StatusCode {
    let start = Utc::now();
    // Owned before the first await: a borrow of the request (its body is not `Sync`) held
    // across it would make the handler's future not `Send`.
    let record = {
        let header = |k: &str| {
            request
                .headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let mut segments: Vec<&str> = request.uri().path().trim_matches('/').split('/').collect();
        let op = segments.pop().unwrap_or_default().to_string();
        Record {
            plugin: segments.join("/"),
            op,
            replica: header("x-replica"),
            uid: header("x-uid"),
            name: String::new(),
            rv: header("x-rv"),
            flag: false,
            start,
            end: None,
        }
    };
    let index = {
        let mut s = app.state.lock();
        let index = s.records.len();
        let uid = record.uid.clone();
        if !uid.is_empty() {
            let others: Vec<String> = s
                .in_flight
                .get(&uid)
                .map(|v| {
                    v.iter()
                        .map(|&i| format!("{} {}", s.records[i].replica, s.records[i].op))
                        .collect()
                })
                .unwrap_or_default();
            if !others.is_empty() {
                let overlap = Overlap {
                    uid: uid.clone(),
                    name: record.name.clone(),
                    in_flight: others,
                    arrived: format!("{} {}", record.replica, record.op),
                    at: record.start,
                };
                s.overlaps.push(overlap);
            }
            let entry = s.in_flight.entry(uid).or_default();
            entry.push(index);
            let n = entry.len();
            s.peak_per_uid = s.peak_per_uid.max(n);
        }
        s.records.push(record);
        index
    };
    app.changed.notify_waiters();
    let _end = InFlight {
        state: app.state.clone(),
        changed: app.changed.clone(),
        index,
    };
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    {
        let mut s = app.state.lock();
        let r = &mut s.records[index];
        r.name = v["name"].as_str().unwrap_or_default().to_string();
        r.flag = v["flag"].as_bool().unwrap_or(false);
    }
    // Holding widens the windows in which two replicas could meet on one object.
    tokio::time::sleep(app.hold).await;
    http::StatusCode::OK
}

impl Stub {
    /// A stub on a free loopback port that holds every request for `hold` before answering,
    /// waking `changed` on every arrival and answer.
    pub fn start(hold: Duration, changed: Arc<Notify>) -> Stub {
        let state = Arc::new(Mutex::new(StubState::default()));
        let app = StubApp {
            state: state.clone(),
            changed: changed.clone(),
            hold,
        };
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the stub's runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("the stub binds");
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let router = axum::Router::new()
                    .route("/{*path}", axum::routing::post(stub_request))
                    .with_state(app);
                let _ = axum::serve(listener, router)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        let addr = addr_rx.recv().expect("the stub's address");
        Stub {
            addr,
            state,
            changed,
            stop: Some(stop),
        }
    }

    /// The `stub` setting for `plugin`: `http://127.0.0.1:PORT/{plugin}`.
    pub fn url(&self, plugin: &str) -> String {
        format!("http://{}/{plugin}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn records(&self) -> Vec<Record> {
        self.state.lock().records.clone()
    }

    /// Requests of `plugin` so far, in arrival order.
    pub fn records_of(&self, plugin: &str) -> Vec<Record> {
        self.state
            .lock()
            .records
            .iter()
            .filter(|r| r.plugin == plugin)
            .cloned()
            .collect()
    }

    /// How many requests so far.
    pub fn len(&self) -> usize {
        self.state.lock().records.len()
    }

    /// Whether no request came yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.state.lock().in_flight.values().map(Vec::len).sum()
    }

    /// Every time two requests for one object were in flight at once.
    pub fn overlaps(&self) -> Vec<Overlap> {
        self.state.lock().overlaps.clone()
    }

    /// The most requests ever in flight for one object (1 when the invariant held).
    pub fn peak_per_uid(&self) -> usize {
        self.state.lock().peak_per_uid
    }

    /// Panics, naming the first few, if two requests for one object were ever in flight at once.
    pub fn assert_no_overlap(&self) {
        let overlaps = self.overlaps();
        assert!(
            overlaps.is_empty(),
            "{} times two requests for one object were in flight at once (peak {} per uid), \
             first: {:#?}",
            overlaps.len(),
            self.peak_per_uid(),
            &overlaps[..overlaps.len().min(5)]
        );
    }

    /// Requests per replica of `plugin`, for failure reports.
    pub fn summary(&self, plugin: &str) -> String {
        let mut per: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for r in self.records_of(plugin) {
            *per.entry(r.replica).or_default().entry(r.op).or_default() += 1;
        }
        format!(
            "stub requests of {plugin} per replica: {per:?}; in flight {}; overlaps {}",
            self.in_flight(),
            self.overlaps().len()
        )
    }

    /// Wakes on every request.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Over records of one plugin: per slot, every change of the replica handling the slot's objects
/// is a handover — all requests of the old owner's run ended before the new owner's first began.
/// Returns the violations (`slot s: A's request … ended at … after B's began at …`).
pub fn handover_violations(records: &[Record], slots: u32) -> Vec<String> {
    let mut per_slot: BTreeMap<u32, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| !r.uid.is_empty()) {
        per_slot.entry(slot_of(&r.uid, slots)).or_default().push(r);
    }
    let mut bad = Vec::new();
    for (slot, mut rs) in per_slot {
        rs.sort_by_key(|r| r.start);
        // The replica of the current run, the latest end among its requests, and that request.
        let mut run: Option<(&str, DateTime<Utc>, &Record)> = None;
        for r in rs {
            if let Some((name, last_end, last)) = run.as_mut()
                && *name == r.replica
            {
                if r.end_or_max() > *last_end {
                    *last_end = r.end_or_max();
                    *last = r;
                }
                continue;
            }
            if let Some((name, last_end, last)) = run
                && last_end >= r.start
            {
                bad.push(format!(
                    "slot {slot}: {name}'s {} of {} ended at {last_end} (or is in flight) after \
                     {}'s {} of {} began at {}",
                    last.op, last.name, r.replica, r.op, r.name, r.start
                ));
            }
            run = Some((r.replica.as_str(), r.end_or_max(), r));
        }
    }
    bad
}

// ---------------------------------------------------------------------------------------------
// The ring's member Leases.

/// One member Lease of a ring, as one version of it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The Lease's name (`{ring}-{pod}`).
    pub lease: String,
    /// The replica's `POD_NAME` (the name without the ring's prefix).
    pub pod: String,
    /// `spec.holderIdentity` (empty when released).
    pub holder: String,
    /// The slots its annotation lists.
    pub slots: BTreeSet<u32>,
    /// `spec.renewTime`.
    pub renew: Option<DateTime<Utc>>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// The Lease's resourceVersion.
    pub rv: String,
}

impl Member {
    fn from_lease(lease: &Lease, ring: &str) -> Option<Member> {
        let name = lease.metadata.name.clone()?;
        let pod = name.strip_prefix(&format!("{ring}-"))?.to_string();
        let spec = lease.spec.clone().unwrap_or_default();
        let slots = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SLOTS_ANNOTATION))
            .map(|s| {
                s.split(',')
                    .filter(|p| !p.trim().is_empty())
                    .filter_map(|p| p.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        Some(Member {
            lease: name,
            pod,
            holder: spec.holder_identity.unwrap_or_default(),
            slots,
            renew: spec
                .renew_time
                .and_then(|t| DateTime::from_timestamp_micros(t.0.as_microsecond())),
            duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            rv: lease.metadata.resource_version.clone().unwrap_or_default(),
        })
    }

    /// Whether the Lease is held and its last renewal has not expired at `at`.
    pub fn live_at(&self, at: DateTime<Utc>) -> bool {
        !self.holder.is_empty()
            && self.renew.is_some_and(|r| {
                r + chrono::Duration::from_std(self.duration).unwrap_or_default() > at
            })
    }
}

/// One version of a member Lease, and when the harness's watch saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// When the watch delivered it.
    pub at: DateTime<Utc>,
    /// The version (`None`: the Lease was deleted).
    pub member: Option<Member>,
    /// The Lease's name.
    pub lease: String,
}

#[derive(Default)]
struct LeaseState {
    current: BTreeMap<String, Member>,
    history: Vec<Seen>,
    /// Leases seen since the watch's last (re)list began.
    relisting: Option<BTreeSet<String>>,
}

/// A watch on a ring's member Leases: the current version of each and every version seen.
pub struct LeaseLog {
    ring: String,
    slots: u32,
    state: Arc<Mutex<LeaseState>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseLog {
    /// Watches the Leases labelled with `ring` in `namespace`, waking `changed` on every change.
    pub fn start(
        client: kube::Client,
        namespace: &str,
        ring: &str,
        slots: u32,
        changed: Arc<Notify>,
    ) -> LeaseLog {
        use kube::runtime::WatchStreamExt as _;
        use kube::runtime::watcher::{Config, Event, watcher};
        let api: Api<Lease> = Api::namespaced(client, namespace);
        let state = Arc::new(Mutex::new(LeaseState::default()));
        let config = Config::default().labels(&format!("{RING_LABEL}={ring}"));
        let task = {
            let (state, ring) = (state.clone(), ring.to_string());
            tokio::spawn(async move {
                let mut events = watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    let Ok(event) = event else { continue };
                    let at = Utc::now();
                    let mut s = state.lock();
                    match event {
                        Event::Init => s.relisting = Some(BTreeSet::new()),
                        Event::InitApply(l) | Event::Apply(l) => {
                            if let Some(m) = Member::from_lease(&l, &ring) {
                                if let Some(seen) = &mut s.relisting {
                                    seen.insert(m.lease.clone());
                                }
                                if s.current.get(&m.lease) != Some(&m) {
                                    s.history.push(Seen {
                                        at,
                                        lease: m.lease.clone(),
                                        member: Some(m.clone()),
                                    });
                                    s.current.insert(m.lease.clone(), m);
                                }
                            }
                        }
                        Event::InitDone => {
                            if let Some(seen) = s.relisting.take() {
                                let gone: Vec<String> = s
                                    .current
                                    .keys()
                                    .filter(|k| !seen.contains(*k))
                                    .cloned()
                                    .collect();
                                for lease in gone {
                                    s.current.remove(&lease);
                                    s.history.push(Seen {
                                        at,
                                        lease,
                                        member: None,
                                    });
                                }
                            }
                        }
                        Event::Delete(l) => {
                            if let Some(name) = l.metadata.name.clone() {
                                s.current.remove(&name);
                                s.history.push(Seen {
                                    at,
                                    lease: name,
                                    member: None,
                                });
                            }
                        }
                    }
                    drop(s);
                    changed.notify_waiters();
                }
            })
        };
        LeaseLog {
            ring: ring.to_string(),
            slots,
            state,
            task,
        }
    }

    /// The ring's id.
    pub fn ring(&self) -> &str {
        &self.ring
    }

    /// The number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Every member Lease's current version.
    pub fn members(&self) -> Vec<Member> {
        self.state.lock().current.values().cloned().collect()
    }

    /// The current version of `pod`'s Lease.
    pub fn member(&self, pod: &str) -> Option<Member> {
        self.members().into_iter().find(|m| m.pod == pod)
    }

    /// Every version seen so far, in order.
    pub fn history(&self) -> Vec<Seen> {
        self.state.lock().history.clone()
    }

    /// Versions of `pod`'s Lease seen so far, in order.
    pub fn history_of(&self, pod: &str) -> Vec<(DateTime<Utc>, Member)> {
        let lease = format!("{}-{pod}", self.ring);
        self.history()
            .into_iter()
            .filter(|s| s.lease == lease)
            .filter_map(|s| s.member.map(|m| (s.at, m)))
            .collect()
    }

    /// The slots each live member holds now, by pod.
    pub fn held(&self) -> BTreeMap<String, BTreeSet<u32>> {
        let now = Utc::now();
        self.members()
            .into_iter()
            .filter(|m| m.live_at(now))
            .map(|m| (m.pod, m.slots))
            .collect()
    }

    /// The live owner (pod) of `slot` now, if exactly one live Lease lists it.
    pub fn owner_of_slot(&self, slot: u32) -> Option<String> {
        let owners: Vec<String> = self
            .held()
            .into_iter()
            .filter(|(_, s)| s.contains(&slot))
            .map(|(p, _)| p)
            .collect();
        (owners.len() == 1).then(|| owners[0].clone())
    }

    /// `Ok` when the live members are exactly `pods` and their slots are the deterministic
    /// plan for them: disjoint, together every slot, as the host's rule assigns them (checked
    /// under each name a member may be known by: the pod, the holder, the Lease); else why not.
    pub fn settled(&self, pods: &[&str]) -> Result<(), String> {
        let now = Utc::now();
        let members: Vec<Member> = self
            .members()
            .into_iter()
            .filter(|m| m.live_at(now))
            .collect();
        let live: BTreeSet<&str> = members.iter().map(|m| m.pod.as_str()).collect();
        let want: BTreeSet<&str> = pods.iter().copied().collect();
        if live != want {
            return Err(format!("live members {live:?}, want {want:?}"));
        }
        let mut union = BTreeSet::new();
        for m in &members {
            for s in &m.slots {
                if !union.insert(*s) {
                    return Err(format!("slot {s} listed twice: {:?}", self.held()));
                }
            }
        }
        if union.len() != self.slots as usize {
            return Err(format!("slots held: {union:?} of {}", self.slots));
        }
        let names: [fn(&Member) -> String; 4] = [
            |m| m.pod.clone(),
            |m| m.holder.clone(),
            |m| m.holder.split('/').next().unwrap_or_default().to_string(),
            |m| m.lease.clone(),
        ];
        for name in names {
            let named: Vec<(String, &Member)> = members.iter().map(|m| (name(m), m)).collect();
            let keys: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
            let (sorted, plan) = kubewasm::election::assign_slots(self.slots, &keys);
            let matches = named.iter().all(|(n, m)| {
                let Some(i) = sorted.iter().position(|s| *s == n.as_str()) else {
                    return false;
                };
                let planned: BTreeSet<u32> = (0..self.slots)
                    .filter(|&s| plan.get(s as usize) == Some(&i))
                    .collect();
                planned == m.slots
            });
            if matches {
                return Ok(());
            }
        }
        Err(format!(
            "held {:?} is not the plan for {pods:?}",
            self.held()
        ))
    }

    /// A report of the current Leases, for failures.
    pub fn report(&self) -> String {
        let now = Utc::now();
        self.members()
            .iter()
            .map(|m| {
                format!(
                    "{} holder={:?} live={} renew={:?} slots={:?}",
                    m.lease,
                    m.holder,
                    m.live_at(now),
                    m.renew,
                    m.slots
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for LeaseLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// Replica processes.

/// Election timings of the tests: lease 3 s, renew deadline 2 s, retry 500 ms.
#[derive(Clone, Debug)]
pub struct Timings {
    /// `--leader-election-lease-duration`.
    pub lease: Duration,
    /// `--leader-election-renew-deadline`.
    pub renew: Duration,
    /// `--leader-election-retry-period`.
    pub retry: Duration,
}

impl Default for Timings {
    fn default() -> Timings {
        Timings {
            lease: Duration::from_secs(3),
            renew: Duration::from_secs(2),
            retry: Duration::from_millis(500),
        }
    }
}

/// One plugin of a replica: the shard fixture under `name`, watching ConfigMaps of `namespace`.
#[derive(Clone, Debug)]
pub struct Plugin {
    /// The file stem (`shard` → `shard.wasm`, `shard.toml`); also the stub's path prefix.
    pub name: String,
    /// The `namespace` setting.
    pub namespace: String,
    /// `concurrency` in the manifest.
    pub concurrency: u32,
    /// `shard` in the manifest (`uid`, `namespace`, `none`; `None` leaves the key out).
    pub shard: Option<String>,
}

impl Plugin {
    /// The fixture sharded by uid, at concurrency 8.
    pub fn sharded(name: &str, namespace: &str) -> Plugin {
        Plugin {
            name: name.to_string(),
            namespace: namespace.to_string(),
            concurrency: 8,
            shard: Some("uid".to_string()),
        }
    }
}

/// One JSON log line of a replica.
#[derive(Clone, Debug)]
pub struct Line {
    /// `timestamp`.
    pub at: Option<DateTime<Utc>>,
    /// `target`.
    pub target: String,
    /// `message`.
    pub message: String,
    /// The whole line.
    pub json: Value,
}

/// What the replicas of one ring share.
pub struct Ring {
    /// The `kubewasm` entry point (`env!("CARGO_BIN_EXE_kubewasm-replica")`).
    pub binary: PathBuf,
    /// The server's kubeconfig.
    pub kubeconfig: PathBuf,
    /// Namespace of the member Leases.
    pub namespace: String,
    /// The ring's id (`--leader-election-id`).
    pub id: String,
    /// `--shard-slots`.
    pub slots: u32,
    /// Election timings.
    pub timings: Timings,
    /// Whether replicas run with `--sharding` (off: one unsharded replica, for the benchmark's
    /// baseline).
    pub sharding: bool,
    /// Where each replica's plugins directory lives.
    pub dir: PathBuf,
    /// The stub URL base (`http://127.0.0.1:PORT`) the plugins post to (the plugin's name is
    /// appended).
    pub stub: String,
    /// Woken by every replica's log lines.
    pub changed: Arc<Notify>,
}

/// One replica process and everything it logged.
pub struct Replica {
    /// Its `POD_NAME` and `replica` setting.
    pub name: String,
    /// Its plugins directory.
    pub plugins: PathBuf,
    child: Option<tokio::process::Child>,
    pid: u32,
    lines: Arc<Mutex<Vec<Line>>>,
    closed: Arc<AtomicBool>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Ring {
    /// Writes `plugin` (manifest first, then the component by rename) into `dir` for `replica`.
    pub fn install(&self, dir: &Path, replica: &str, plugin: &Plugin) {
        let mut manifest = String::new();
        if let Some(shard) = &plugin.shard {
            manifest.push_str(&format!("shard = \"{shard}\"\n"));
        }
        manifest.push_str(&format!(
            "concurrency = {}\n\n[settings]\nstub = \"{}/{}\"\nreplica = \"{replica}\"\n\
             namespace = \"{}\"\n\n[grants]\nwatch = [{{ api-version = \"v1\", kind = \"ConfigMap\" }}]\n\
             http = [\"http://127.0.0.1:*\"]\n",
            plugin.concurrency, self.stub, plugin.name, plugin.namespace
        ));
        std::fs::write(dir.join(format!("{}.toml", plugin.name)), manifest).unwrap();
        let tmp = dir.join(format!(".{}.wasm.part", plugin.name));
        std::fs::copy(crate::guest(FIXTURE), &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(format!("{}.wasm", plugin.name))).unwrap();
    }

    /// Starts replica `name` (`POD_NAME=name`) with `plugins` in a plugins directory of its own.
    pub fn spawn(&self, name: &str, plugins: &[Plugin]) -> Replica {
        let dir = self.dir.join(format!("plugins-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        for p in plugins {
            self.install(&dir, name, p);
        }
        let mut args: Vec<String> = vec![
            "run".into(),
            "--plugins".into(),
            dir.display().to_string(),
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
            "--cache-dir".into(),
            crate::shared_compile_cache().display().to_string(),
            "--log-format=json".into(),
            "--metrics-bind-address=127.0.0.1:0".into(),
            "--health-probe-bind-address=127.0.0.1:0".into(),
            "--plugin-identity=host".into(),
            "--shutdown-grace-ms=2000".into(),
        ];
        if self.sharding {
            let t = &self.timings;
            args.extend([
                "--sharding".into(),
                format!("--shard-slots={}", self.slots),
                format!("--leader-election-namespace={}", self.namespace),
                format!("--leader-election-id={}", self.id),
                format!("--leader-election-lease-duration={}ms", t.lease.as_millis()),
                format!("--leader-election-renew-deadline={}ms", t.renew.as_millis()),
                format!("--leader-election-retry-period={}ms", t.retry.as_millis()),
            ]);
        }
        let mut child = tokio::process::Command::new(&self.binary)
            .args(&args)
            .env("RUST_LOG", "info")
            .env("POD_NAME", name)
            .env_remove("POD_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("replica starts");
        let pid = child.id().expect("running");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(AtomicBool::new(false));
        let reader = {
            let (lines, closed, changed) = (lines.clone(), closed.clone(), self.changed.clone());
            let name = name.to_string();
            tokio::spawn(async move {
                let mut r = BufReader::new(stderr).lines();
                while let Ok(Some(text)) = r.next_line().await {
                    let json = serde_json::from_str::<Value>(&text)
                        .unwrap_or_else(|_| json!({"message": text, "target": "unparsed"}));
                    let line = Line {
                        at: json["timestamp"]
                            .as_str()
                            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                            .map(|t| t.to_utc()),
                        target: json["target"].as_str().unwrap_or("").to_string(),
                        message: json["message"].as_str().unwrap_or("").to_string(),
                        json,
                    };
                    if line.target == "unparsed" {
                        eprintln!("[{name}] {}", line.message);
                    }
                    lines.lock().push(line);
                    changed.notify_waiters();
                }
                closed.store(true, Ordering::Release);
                changed.notify_waiters();
            })
        };
        Replica {
            name: name.to_string(),
            plugins: dir,
            child: Some(child),
            pid,
            lines,
            closed,
            reader: Some(reader),
        }
    }
}

impl Replica {
    /// Every line so far.
    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().clone()
    }

    /// Whether it logged that `plugin` loaded.
    pub fn loaded(&self, plugin: &str) -> bool {
        self.lines
            .lock()
            .iter()
            .any(|l| l.message == "plugin loaded" && l.json["plugin"] == plugin)
    }

    /// Whether the process exited (its stderr closed).
    pub fn exited(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its resident memory now (`VmRSS`), 0 once gone.
    pub fn rss_bytes(&self) -> u64 {
        crate::cgroup::rss_bytes(self.pid)
    }

    /// The last 40 lines, for failure reports.
    pub fn dump(&self) -> String {
        let lines = self.lines.lock();
        let from = lines.len().saturating_sub(40);
        lines[from..]
            .iter()
            .map(|l| {
                let fields: Vec<String> = l
                    .json
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .filter(|(k, _)| {
                                !["timestamp", "target", "message", "level"].contains(&k.as_str())
                            })
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect()
                    })
                    .unwrap_or_default();
                format!(
                    "{} {} {} {}",
                    l.at.map(|t| t.format("%T%.3f").to_string())
                        .unwrap_or_default(),
                    l.target,
                    l.message,
                    fields.join(" ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Sends `signal` (a `libc::SIG*`) to the process.
    pub fn signal(&self, signal: i32) {
        assert!(
            !self.exited(),
            "{} exited already:\n{}",
            self.name,
            self.dump()
        );
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(self.pid as i32, signal) };
        assert_eq!(rc, 0, "kill -{signal} {}", self.name);
    }

    /// Sends `signal` and waits for the exit and the end of its log; the time it exited.
    pub async fn signal_and_wait(&mut self, signal: i32) -> DateTime<Utc> {
        self.signal(signal);
        self.wait_exit().await
    }

    /// Waits for the process to exit and its log to be read to the end; when it was reaped.
    pub async fn wait_exit(&mut self) -> DateTime<Utc> {
        let mut child = self.child.take().expect("running replica");
        tokio::time::timeout(PATIENCE, child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit:\n{}", self.name, self.dump()))
            .unwrap();
        let at = Utc::now();
        if let Some(r) = self.reader.take() {
            let _ = r.await;
        }
        at
    }

    /// Whether the process is still ours to stop.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }
}

// ---------------------------------------------------------------------------------------------
// Objects.

/// Creates namespace `name` (an existing one is fine).
pub async fn ensure_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create namespace {name}: {e}"),
    }
}

/// Creates `count` ConfigMaps `cm-00000…` in `api`'s namespace, each with `payload` bytes of
/// data beside `v`, 16 at a time; uid → name.
pub async fn create_configmaps(
    api: &Api<ConfigMap>,
    count: usize,
    payload: usize,
) -> BTreeMap<String, String> {
    let made: Vec<(String, String)> = futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:05}")},
                    "data": {"v": "0", "payload": "x".repeat(payload)}}))
                .unwrap();
                let cm = api
                    .create(&PostParams::default(), &cm)
                    .await
                    .unwrap_or_else(|e| panic!("create cm-{i:05}: {e}"));
                (cm.metadata.uid.unwrap(), cm.metadata.name.unwrap())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    made.into_iter().collect()
}

/// The server's ConfigMaps in `api`'s namespace: uid → (name, resourceVersion).
pub async fn server_state(api: &Api<ConfigMap>) -> BTreeMap<String, (String, String)> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|cm| {
            let m = cm.metadata;
            (
                m.uid.unwrap(),
                (m.name.unwrap(), m.resource_version.unwrap()),
            )
        })
        .collect()
}

/// Writes at a steady rate in the background: merge patches of `data.v` to ConfigMaps picked
/// at random, until stopped.
pub struct Churn {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Churn {
    /// Starts `per_second` writes a second over `names`.
    pub fn start(api: Api<ConfigMap>, names: Vec<String>, per_second: u32) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let task = {
            let (stop, writes) = (stop.clone(), writes.clone());
            tokio::spawn(async move {
                use rand::Rng as _;
                let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second.max(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::Acquire) {
                    tick.tick().await;
                    let name = &names[rand::rng().random_range(0..names.len())];
                    let n = writes.fetch_add(1, Ordering::AcqRel) + 1;
                    let patch = Patch::Merge(json!({"data": {"v": n.to_string()}}));
                    if let Err(e) = api.patch(name, &PatchParams::default(), &patch).await {
                        eprintln!("churn: patch {name}: {e}");
                    }
                }
            })
        };
        Churn {
            stop,
            writes,
            task: Some(task),
        }
    }

    /// Writes sent so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    /// Stops after the write in progress; the writes sent.
    pub async fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
        self.writes()
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
