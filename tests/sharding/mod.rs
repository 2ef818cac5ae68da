//! Active-active sharding across real processes (issue 35's acceptance, on one machine):
//! replicas of `kubewasm run --sharding` (this crate's `kubewasm-replica`) against one embedded
//! API server, each with a plugins directory of its own holding the `shard-fixture` (`shard =
//! "uid"`, concurrency 8) whose every call is one POST to the overlap detector
//! ([`kubewasm_e2e::ring::Stub`]), which holds each request 20 ms and records who handled which
//! object when. Ownership is read from the ring's member Leases (`{ring}-{POD_NAME}`, label
//! `kubewasm.dev/ring`, annotation `kubewasm.dev/slots`) through a watch, and each object's slot
//! is computed here from FNV-1a 64 of its uid.
//!
//! Judged over the stub's records: two requests for one object never in flight at once (in every
//! test); per slot, the old owner's last request ended before the new owner's first began; every
//! object handled at its final resourceVersion by the replica that owns it. Waits are on the
//! stub's requests, the Leases and the replicas' log lines, bounded by [`PATIENCE`]; the only
//! timed pause is the SIGSTOP itself (two lease durations, the scenario's length).
//!
//! Part of the real-cluster suite, except the two tests that need the embedded server's switch
//! or fault: with `KUBEWASM_E2E_KUBECONFIG` set, the replicas run against that cluster, in
//! namespaces of their own (the member Leases too); a cluster before 1.36, or with the
//! `ShardedListAndWatch` gate off, ignores `shardSelector` and the hosts filter.
//!
//! Run alone: `target/release/deps/leader-<hash> sharding`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kubewasm_e2e::ring::{
    Churn, LeaseLog, Plugin, Record, Replica, Ring, Stub, Timings, create_configmaps, eventually,
    handover_violations, server_state, slot_of,
};
use kubewasm_e2e::{PATIENCE, Target, TestNamespace, start_server_with};
use serde_json::json;
use tokio::sync::Notify;

/// Slots of the ring (the default).
const SLOTS: u32 = 16;
/// The plugin under test.
const SHARD: &str = "shard";
/// The plugin loaded from the start, watching an empty namespace.
const WARM: &str = "warm";
/// How long the stub holds each request.
const HOLD: Duration = Duration::from_millis(20);
/// Background writes a second while replicas come and go.
const CHURN: u32 = 100;
/// Objects of the churn tests.
const CHURNED: usize = 300;

/// Where a world's API server comes from.
enum Server {
    /// [`Target::from_env`]: the embedded server, or the cluster `KUBEWASM_E2E_KUBECONFIG`
    /// names.
    Target,
    /// The embedded server, configured so: a switch or a fault only it has.
    Embedded(fn(apiserver::Config) -> apiserver::Config),
}

/// A server, the stub, the ring's Leases and its replicas.
struct World {
    /// The namespace of the ConfigMaps the shard plugin handles, and of the member Leases.
    objects_ns: TestNamespace,
    /// What the warm plugin watches: nothing, so that a sharded plugin runs while the ring forms.
    empty_ns: TestNamespace,
    target: Target,
    api: Api<ConfigMap>,
    /// uid → name of the ConfigMaps made at the start.
    objects: BTreeMap<String, String>,
    stub: Stub,
    leases: LeaseLog,
    ring: Ring,
    changed: Arc<Notify>,
    replicas: Vec<Replica>,
    _tmp: tempfile::TempDir,
}

impl World {
    /// A server (from `server`) with `objects` ConfigMaps in a namespace of their own, a stub,
    /// and a watch on ring `ring`'s Leases; no replica yet.
    async fn new(server: Server, objects: usize) -> World {
        let target = match server {
            Server::Target => Target::from_env().await,
            Server::Embedded(customise) => Target::Embedded(start_server_with(customise).await),
        };
        let c = target.client();
        let objects_ns = target.namespace("e2e-shard").await;
        let empty_ns = target.namespace("e2e-shard-empty").await;
        let api: Api<ConfigMap> = Api::namespaced(c.clone(), &objects_ns.name);
        let objects = create_configmaps(&api, objects, 0).await;
        let changed = Arc::new(Notify::new());
        let stub = Stub::start(HOLD, changed.clone());
        let ring_id = "ring";
        let leases = LeaseLog::start(c, &objects_ns.name, ring_id, SLOTS, changed.clone());
        let tmp = tempfile::tempdir().unwrap();
        let kubeconfig = target.kubeconfig(tmp.path());
        let ring = Ring {
            binary: env!("CARGO_BIN_EXE_kubewasm-replica").into(),
            kubeconfig,
            namespace: objects_ns.name.clone(),
            id: ring_id.into(),
            slots: SLOTS,
            timings: Timings::default(),
            sharding: true,
            dir: tmp.path().into(),
            stub: stub.url("").trim_end_matches('/').to_string(),
            changed: changed.clone(),
        };
        World {
            objects_ns,
            empty_ns,
            target,
            api,
            objects,
            stub,
            leases,
            ring,
            changed,
            replicas: Vec::new(),
            _tmp: tmp,
        }
    }

    /// Starts replica `name` with the warm plugin, and the shard plugin too when `shard`.
    fn spawn(&mut self, name: &str, shard: bool) {
        let mut plugins = vec![Plugin::sharded(WARM, &self.empty_ns.name)];
        if shard {
            plugins.push(Plugin::sharded(SHARD, &self.objects_ns.name));
        }
        let r = self.ring.spawn(name, &plugins);
        self.replicas.push(r);
    }

    fn replica(&mut self, name: &str) -> &mut Replica {
        self.replicas
            .iter_mut()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no replica {name}"))
    }

    /// The embedded server, for the switch and the faults only it has.
    fn server(&self) -> &apiserver::ApiServer {
        self.target
            .embedded()
            .expect("a test of the embedded server's faults runs on it")
    }

    /// Deletes the test's namespaces (a real cluster's), then stops an embedded server.
    async fn shutdown(self) {
        let World {
            objects_ns,
            empty_ns,
            target,
            leases,
            ..
        } = self;
        drop(leases);
        drop((objects_ns, empty_ns));
        target.shutdown().await;
    }

    /// Installs the shard plugin in every running replica's plugins directory.
    fn load_shard(&self) {
        for r in self.replicas.iter().filter(|r| r.running()) {
            self.ring.install(
                &r.plugins,
                &r.name,
                &Plugin::sharded(SHARD, &self.objects_ns.name),
            );
        }
    }

    /// The stub's, the Leases' and the replicas' state, for failure reports.
    fn report(&self) -> String {
        let logs: Vec<String> = self
            .replicas
            .iter()
            .map(|r| format!("--- {} (exited: {}):\n{}", r.name, r.exited(), r.dump()))
            .collect();
        format!(
            "{}\nLeases:\n{}\n{}",
            self.stub.summary(SHARD),
            self.leases.report(),
            logs.join("\n")
        )
    }

    /// Waits until the live members are exactly `pods`, holding the plan's slots; returns when.
    async fn settle(&self, pods: &[&str]) -> DateTime<Utc> {
        let why = parking_lot::Mutex::new(String::new());
        eventually(
            &self.changed,
            PATIENCE,
            &format!("the ring settles on {pods:?}"),
            || {
                // A replica that exited will not join: fail now, with its log.
                let gone: Vec<&str> = self
                    .replicas
                    .iter()
                    .filter(|r| pods.contains(&r.name.as_str()) && r.exited())
                    .map(|r| r.name.as_str())
                    .collect();
                assert!(gone.is_empty(), "{gone:?} exited\n{}", self.report());
                match self.leases.settled(pods) {
                    Ok(()) => true,
                    Err(e) => {
                        *why.lock() = e;
                        false
                    }
                }
            },
            || format!("last: {}\n{}", why.lock(), self.report()),
        )
        .await;
        Utc::now()
    }

    /// Waits until every object of `want` (uid → (name, rv)) was handled at its rv by the
    /// replica owning its slot now, and every live member's shard plugin called `on-synced`.
    async fn converge(&self, want: &BTreeMap<String, (String, String)>, what: &str) {
        let missing = parking_lot::Mutex::new(Vec::<String>::new());
        eventually(
            &self.changed,
            PATIENCE,
            what,
            || {
                let records = self.stub.records_of(SHARD);
                let mut seen: BTreeSet<(&str, &str, &str)> = BTreeSet::new();
                let mut synced: BTreeSet<&str> = BTreeSet::new();
                for r in &records {
                    if r.op == "synced" {
                        synced.insert(&r.replica);
                    } else if r.end.is_some() {
                        seen.insert((r.replica.as_str(), r.uid.as_str(), r.rv.as_str()));
                    }
                }
                let held = self.leases.held();
                let owner = |slot: u32| {
                    held.iter()
                        .find(|(_, s)| s.contains(&slot))
                        .map(|(p, _)| p.clone())
                };
                let mut m = Vec::new();
                for pod in held.keys() {
                    if !synced.contains(pod.as_str()) {
                        m.push(format!("{pod} never synced"));
                    }
                }
                for (uid, (name, rv)) in want {
                    let Some(o) = owner(slot_of(uid, SLOTS)) else {
                        m.push(format!("{name}: slot {} unowned", slot_of(uid, SLOTS)));
                        continue;
                    };
                    if !seen.contains(&(o.as_str(), uid.as_str(), rv.as_str())) {
                        m.push(format!("{name} at rv {rv} by {o}"));
                    }
                }
                let done = m.is_empty();
                *missing.lock() = m;
                done
            },
            || {
                let m = missing.lock();
                format!(
                    "{} missing, first: {:?}\n{}",
                    m.len(),
                    &m[..m.len().min(10)],
                    self.report()
                )
            },
        )
        .await;
    }

    /// Starts the background writes over the objects.
    fn churn(&self) -> Churn {
        Churn::start(
            self.api.clone(),
            self.objects.values().cloned().collect(),
            CHURN,
        )
    }

    /// Waits until the stub has `n` more update requests than now: churn is being handled.
    async fn wait_updates(&self, n: usize, what: &str) {
        let base = self.updates();
        eventually(
            &self.changed,
            PATIENCE,
            what,
            || self.updates() >= base + n,
            || self.report(),
        )
        .await;
    }

    fn updates(&self) -> usize {
        self.stub
            .records_of(SHARD)
            .iter()
            .filter(|r| r.op == "update")
            .count()
    }

    /// Stops churn, waits until every object converged at its owner, and checks the stub's
    /// records: no overlap, every moved slot handed over in order.
    async fn finish(&mut self, churn: Churn) {
        let writes = churn.stop().await;
        eprintln!("churn: {writes} writes");
        let want = server_state(&self.api).await;
        self.converge(&want, "every object converges at its owner after churn")
            .await;
        self.stub.assert_no_overlap();
        let bad = handover_violations(&self.stub.records_of(SHARD), SLOTS);
        assert!(
            bad.is_empty(),
            "{} slots changed hands while the old owner was still calling, first: {:#?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );
        for r in &mut self.replicas {
            if r.running() {
                r.signal_and_wait(libc::SIGTERM).await;
            }
        }
    }

    /// Three replicas with both plugins, settled and converged, and churn running and handled.
    async fn churning(objects: usize) -> (World, Churn) {
        let mut w = World::new(Server::Target, objects).await;
        for name in ["r1", "r2", "r3"] {
            w.spawn(name, true);
        }
        w.settle(&["r1", "r2", "r3"]).await;
        let want = server_state(&w.api).await;
        w.converge(&want, "three replicas replay their slots").await;
        let churn = w.churn();
        w.wait_updates(100, "churn is handled").await;
        (w, churn)
    }

    /// The first request of a replica other than `not` for an object of `slots`, starting
    /// after `after`, per object (uid → record).
    fn first_takeovers(
        &self,
        slots: &BTreeSet<u32>,
        not: &str,
        after: DateTime<Utc>,
    ) -> BTreeMap<String, Record> {
        let mut first = BTreeMap::new();
        for r in self.stub.records_of(SHARD) {
            if r.uid.is_empty()
                || r.replica == not
                || r.start <= after
                || !slots.contains(&slot_of(&r.uid, SLOTS))
            {
                continue;
            }
            first.entry(r.uid.clone()).or_insert(r);
        }
        first
    }

    /// The objects whose slot is in `slots`.
    fn objects_in(&self, slots: &BTreeSet<u32>) -> BTreeSet<String> {
        self.objects
            .keys()
            .filter(|uid| slots.contains(&slot_of(uid, SLOTS)))
            .cloned()
            .collect()
    }
}

/// Issue 35's first case: `objects` ConfigMaps, three replicas whose ring settled before the
/// shard plugin loads; every object's initial add made exactly once across the replicas, by
/// the one whose own member Lease lists the object's slot, the three together covering every
/// object, each replica's `on-synced` after its replay, and no Lease changing meanwhile.
/// Returns the uids each replica handled.
async fn initial_list_split(server: Server, objects: usize) -> BTreeMap<String, BTreeSet<String>> {
    let mut w = World::new(server, objects).await;
    let pods = ["r1", "r2", "r3"];
    for name in pods {
        w.spawn(name, false);
    }
    w.settle(&pods).await;
    let plan = w.leases.held();
    w.load_shard();
    eventually(
        &w.changed,
        PATIENCE,
        "every replica replays its slots and calls on-synced",
        || {
            let records = w.stub.records_of(SHARD);
            let synced: BTreeSet<&str> = records
                .iter()
                .filter(|r| r.op == "synced")
                .map(|r| r.replica.as_str())
                .collect();
            let added: BTreeSet<&str> = records
                .iter()
                .filter(|r| r.op == "add")
                .map(|r| r.uid.as_str())
                .collect();
            synced.len() == pods.len() && added.len() >= objects
        },
        || w.report(),
    )
    .await;

    let records = w.stub.records_of(SHARD);
    let mut handled: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut per_uid: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.op != "synced") {
        assert!(
            r.op == "add" && r.flag,
            "only initial adds were due, {} got {} {} (flag {})",
            r.replica,
            r.op,
            r.name,
            r.flag
        );
        let slot = slot_of(&r.uid, SLOTS);
        assert!(
            plan.get(&r.replica).is_some_and(|s| s.contains(&slot)),
            "{} handled {} (slot {slot}) but its Lease lists {:?}",
            r.replica,
            r.name,
            plan.get(&r.replica)
        );
        per_uid.entry(&r.uid).or_default().push(r);
        handled
            .entry(r.replica.clone())
            .or_default()
            .insert(r.uid.clone());
    }
    let twice: Vec<String> = per_uid
        .iter()
        .filter(|(_, rs)| rs.len() > 1)
        .map(|(_, rs)| {
            let by: Vec<&str> = rs.iter().map(|r| r.replica.as_str()).collect();
            format!("{} by {by:?}", rs[0].name)
        })
        .collect();
    assert!(
        twice.is_empty(),
        "{} objects got more than one initial add, first: {:?}",
        twice.len(),
        &twice[..twice.len().min(10)]
    );
    let all: BTreeSet<String> = per_uid.keys().map(|u| u.to_string()).collect();
    let want: BTreeSet<String> = w.objects.keys().cloned().collect();
    assert_eq!(
        all.len(),
        want.len(),
        "together the replicas handled {} of {} objects",
        all.len(),
        want.len()
    );
    assert_eq!(
        all, want,
        "the replicas handled other objects than the server's"
    );
    for pod in pods {
        let n = handled.get(pod).map_or(0, BTreeSet::len);
        assert!(n > 0, "{pod} handled nothing: {:?}", plan);
        let last_add = records
            .iter()
            .filter(|r| r.replica == pod && r.op == "add")
            .map(Record::end_or_max)
            .max()
            .unwrap();
        assert!(
            records
                .iter()
                .any(|r| r.replica == pod && r.op == "synced" && r.start >= last_add),
            "{pod}'s on-synced came before the end of its replay"
        );
    }
    assert_eq!(
        w.leases.held(),
        plan,
        "the settled ring's Leases changed while nothing joined or left"
    );
    w.stub.assert_no_overlap();
    let shares: Vec<String> = pods
        .iter()
        .map(|p| {
            format!(
                "{p}: {} slots, {} objects",
                plan[*p].len(),
                handled[*p].len()
            )
        })
        .collect();
    eprintln!("initial list split: {}", shares.join("; "));
    for r in &mut w.replicas {
        r.signal_and_wait(libc::SIGTERM).await;
    }
    w.shutdown().await;
    handled
}

/// (a) 10,000 ConfigMaps, three replicas: each initial add exactly once, inside the slots of
/// the handling replica's own Lease, all 10,000 together (the server filtering by
/// `shardSelector`; on a real cluster before 1.36, the hosts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_ten_thousand_objects() {
    initial_list_split(Server::Target, 10_000).await;
}

/// (e) The same ring against a server that honours `shardSelector` and one that ignores it (a
/// server before 1.36, or with the gate off: the hosts filter): with the same (deterministic)
/// uids, each replica handles exactly the same objects, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_filtering_gives_the_server_filtered_outcome() {
    let filtered = initial_list_split(
        Server::Embedded(|c| apiserver::Config {
            deterministic_uids: true,
            ..c
        }),
        1_000,
    )
    .await;
    let unfiltered = initial_list_split(
        Server::Embedded(|c| apiserver::Config {
            deterministic_uids: true,
            shard_selector: false,
            ..c
        }),
        1_000,
    )
    .await;
    for (pod, uids) in &filtered {
        let other = unfiltered.get(pod).cloned().unwrap_or_default();
        assert!(
            *uids == other,
            "{pod} handled {} objects server-filtered, {} host-filtered, {} in common",
            uids.len(),
            other.len(),
            uids.intersection(&other).count()
        );
    }
    assert_eq!(filtered.len(), unfiltered.len());
}

/// (e) The fault of a watch that reached a server ignoring `shardSelector` (every replica's
/// watches restarted with the selector ignored): the foreign events are dropped by the hosts —
/// every update is handled once, by the owner of the object's slot only — and every replica
/// still syncs its own objects to their final versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_ignore_the_selector_are_filtered_by_the_hosts() {
    let mut w = World::new(Server::Embedded(|c| c), CHURNED).await;
    let pods = ["r1", "r2", "r3"];
    for name in pods {
        w.spawn(name, true);
    }
    w.settle(&pods).await;
    let plan = w.leases.held();
    let want = server_state(&w.api).await;
    w.converge(&want, "three replicas replay their slots").await;

    // Two sharded watches per replica (the shard and warm plugins): all of them restart and
    // are served every object.
    let watches = w.server().stats().watches_of("configmaps");
    let unfiltered = 2 * pods.len();
    w.server().faults().ignore_shard_selector(unfiltered);
    w.server().faults().end_watches();
    eventually(
        &w.changed,
        PATIENCE,
        "every replica watches ConfigMaps again",
        || w.server().stats().watches_of("configmaps") >= watches + unfiltered as u64,
        || w.report(),
    )
    .await;
    // An index into the shard plugin's records (the warm plugin's are in the stub too).
    let from = w.stub.records_of(SHARD).len();

    // One update of every object.
    let names: Vec<String> = w.objects.values().cloned().collect();
    futures::stream::iter(names)
        .for_each_concurrent(8, |name| {
            let api = w.api.clone();
            async move {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"v": "updated"}})),
                )
                .await
                .unwrap_or_else(|e| panic!("patch {name}: {e}"));
            }
        })
        .await;
    let want = server_state(&w.api).await;
    w.converge(
        &want,
        "every replica syncs its objects through unfiltered watches",
    )
    .await;

    let records = w.stub.records_of(SHARD);
    let mut updates: BTreeMap<&str, usize> = BTreeMap::new();
    for r in records[from..].iter().filter(|r| !r.uid.is_empty()) {
        let slot = slot_of(&r.uid, SLOTS);
        assert!(
            plan.get(&r.replica).is_some_and(|s| s.contains(&slot)),
            "{} handled a foreign event: {} {} (slot {slot}, its slots {:?})",
            r.replica,
            r.op,
            r.name,
            plan.get(&r.replica)
        );
        if r.op == "update" && !r.flag {
            *updates.entry(&r.uid).or_default() += 1;
        }
    }
    let not_once: Vec<_> = w
        .objects
        .iter()
        .filter(|(uid, _)| updates.get(uid.as_str()) != Some(&1))
        .map(|(uid, name)| format!("{name}: {:?}", updates.get(uid.as_str())))
        .collect();
    assert!(
        not_once.is_empty(),
        "{} objects not updated exactly once, first: {:?}",
        not_once.len(),
        &not_once[..not_once.len().min(10)]
    );
    for pod in pods {
        assert!(
            records[from..]
                .iter()
                .any(|r| r.replica == pod && r.op == "update"),
            "{pod} handled no update"
        );
    }
    assert_eq!(w.leases.held(), plan, "the Leases changed");
    w.stub.assert_no_overlap();
    for r in &mut w.replicas {
        r.signal_and_wait(libc::SIGTERM).await;
    }
    w.shutdown().await;
}

/// (b) With churn and the overlap detector on, kill -9 of a replica: its Lease is waited out,
/// then its objects are handled by the survivors within lease + 2 × retry + 2 s of the kill;
/// every object converges to its final resourceVersion at its owner; no overlap, every slot
/// handed over in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_slots_are_taken_over_in_time() {
    let (mut w, churn) = World::churning(CHURNED).await;
    let victim = w.leases.member("r2").expect("r2's Lease");
    let lost = victim.slots.clone();
    assert!(!lost.is_empty(), "r2 holds slots: {}", w.leases.report());
    let killed_at = Utc::now();
    w.replica("r2").signal_and_wait(libc::SIGKILL).await;
    w.settle(&["r1", "r3"]).await;
    let orphans = w.objects_in(&lost);
    eventually(
        &w.changed,
        PATIENCE,
        "the survivors handle every object of r2's slots",
        || w.first_takeovers(&lost, "r2", killed_at).len() == orphans.len(),
        || w.report(),
    )
    .await;

    let t = &w.ring.timings;
    let bound = t.lease + 2 * t.retry + Duration::from_secs(2);
    let last_renew = w
        .leases
        .history_of("r2")
        .iter()
        .filter_map(|(_, m)| m.renew)
        .max()
        .expect("r2 renewed its Lease");
    let expiry = last_renew + chrono::Duration::from_std(t.lease).unwrap();
    let takeovers = w.first_takeovers(&lost, "r2", killed_at);
    let slowest = takeovers
        .values()
        .map(|r| (r.start - killed_at).to_std().unwrap_or_default())
        .max()
        .unwrap();
    for r in takeovers.values() {
        assert!(
            r.start >= expiry,
            "{} handled {} at {} while r2's Lease (renewed {last_renew}) was live until {expiry}",
            r.replica,
            r.name,
            r.start
        );
    }
    assert!(
        slowest <= bound,
        "the last of r2's {} objects was taken over {slowest:?} after the kill (bound {bound:?})",
        orphans.len()
    );
    eprintln!(
        "kill -9: r2's {} slots ({} objects) taken over within {slowest:?} (bound {bound:?})",
        lost.len(),
        orphans.len()
    );
    assert!(
        w.stub
            .records_of(SHARD)
            .iter()
            .all(|r| r.replica != "r2" || r.start < killed_at),
        "r2 made a request after it was killed"
    );
    w.wait_updates(50, "the survivors handle churn").await;
    w.finish(churn).await;
    w.shutdown().await;
}

/// (c) With churn, SIGSTOP of a replica for two lease durations, then SIGCONT: the survivors take
/// its slots meanwhile; once resumed its first write lists no slot (it fenced itself), and it
/// makes no request (no side effect) before its member Lease lists slots again with a renewal
/// after the resume; no overlap, every slot handed over in
/// order, every object converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_acts_only_after_it_reclaims() {
    let (mut w, churn) = World::churning(CHURNED).await;
    let lease = w.ring.timings.lease;
    let stopped_at = tokio::time::Instant::now();
    w.replica("r2").signal(libc::SIGSTOP);
    w.settle(&["r1", "r3"]).await;
    // The pause is the scenario (two lease durations), not a synchronisation.
    tokio::time::sleep_until(stopped_at + 2 * lease).await;
    let resumed_at = Utc::now();
    w.replica("r2").signal(libc::SIGCONT);
    w.settle(&["r1", "r2", "r3"]).await;
    eventually(
        &w.changed,
        PATIENCE,
        "r2 handles objects again",
        || {
            w.stub
                .records_of(SHARD)
                .iter()
                .any(|r| r.replica == "r2" && r.start > resumed_at && !r.uid.is_empty())
        },
        || w.report(),
    )
    .await;

    let first_write = w
        .leases
        .history_of("r2")
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m.renew.is_some_and(|t| t > resumed_at))
        .expect("r2 renewed after the resume");
    assert!(
        first_write.slots.is_empty(),
        "r2's first write after the resume lists {:?}: slots its rivals hold by now",
        first_write.slots
    );
    let reclaimed = w
        .leases
        .history_of("r2")
        .into_iter()
        .filter_map(|(_, m)| m.renew.filter(|t| *t > resumed_at && !m.slots.is_empty()))
        .min()
        .unwrap_or_else(|| panic!("r2 never re-claimed slots:\n{}", w.report()));
    let early: Vec<Record> = w
        .stub
        .records_of(SHARD)
        .into_iter()
        .filter(|r| r.replica == "r2" && r.start >= resumed_at && r.start <= reclaimed)
        .collect();
    assert!(
        early.is_empty(),
        "r2 made {} requests after the resume at {resumed_at} before it re-claimed at \
         {reclaimed}, first: {:?}",
        early.len(),
        early.first()
    );
    eprintln!(
        "SIGSTOP: r2 re-claimed {} after the resume",
        (reclaimed - resumed_at)
            .to_std()
            .map(|d| format!("{d:?}"))
            .unwrap_or_default()
    );
    w.finish(churn).await;
    w.shutdown().await;
}

/// (d) With churn, scaling 3 → 4 → 2: a fourth replica joins (slots move, most to it), then two leave
/// by SIGTERM — each releases at once: its slots are handled by others before its Lease would
/// have expired — and per moved slot the old owner's last request ends before the new owner's
/// first begins; no overlap; every object converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_up_and_down_hands_slots_over_in_order() {
    let (mut w, churn) = World::churning(CHURNED).await;
    let before = w.leases.held();
    w.spawn("r4", true);
    w.settle(&["r1", "r2", "r3", "r4"]).await;
    let joined = w.leases.held();
    let gained = joined.get("r4").cloned().unwrap_or_default();
    assert!(!gained.is_empty(), "r4 got no slot: {joined:?}");
    // Under the load bound a join may pass a slot on between the old members too (the plan
    // `settle` checked is the host's rule); what must hold is that it moves about a member's
    // share, within the bound the rule documents for a join where `ceil(S / N)` drops exactly.
    let moved = (0..SLOTS)
        .filter(|s| {
            let owner = |plan: &BTreeMap<String, BTreeSet<u32>>| {
                plan.iter()
                    .find(|(_, h)| h.contains(s))
                    .map(|(p, _)| p.clone())
            };
            owner(&before) != owner(&joined)
        })
        .count();
    let ideal = f64::from(SLOTS) / 4.0;
    assert!(
        moved as f64 <= ideal * 2.6,
        "the join moved {moved} slots (ideal {ideal}): {before:?} → {joined:?}"
    );
    eprintln!(
        "join 3 → 4: {moved} of {SLOTS} slots moved, {} to r4",
        gained.len()
    );
    let r4_objects = w.objects_in(&gained);
    w.wait_updates(50, "churn is handled by four").await;
    eventually(
        &w.changed,
        PATIENCE,
        "r4 replays its slots",
        || {
            let handled: BTreeSet<String> = w
                .stub
                .records_of(SHARD)
                .iter()
                .filter(|r| r.replica == "r4" && !r.uid.is_empty())
                .map(|r| r.uid.clone())
                .collect();
            r4_objects.is_subset(&handled)
        },
        || w.report(),
    )
    .await;

    let mut members = vec!["r1", "r2", "r3", "r4"];
    for leaver in ["r2", "r3"] {
        let held = w.leases.member(leaver).expect("its Lease").slots;
        let last_renew = w
            .leases
            .history_of(leaver)
            .iter()
            .filter(|(_, m)| !m.slots.is_empty())
            .filter_map(|(_, m)| m.renew)
            .max()
            .expect("a renewal listing slots");
        let term_at = Utc::now();
        w.replica(leaver).signal_and_wait(libc::SIGTERM).await;
        members.retain(|m| *m != leaver);
        w.settle(&members).await;
        let orphans = w.objects_in(&held);
        eventually(
            &w.changed,
            PATIENCE,
            &format!("the others handle every object of {leaver}'s slots"),
            || w.first_takeovers(&held, leaver, term_at).len() == orphans.len(),
            || w.report(),
        )
        .await;
        let expiry = last_renew + chrono::Duration::from_std(w.ring.timings.lease).unwrap();
        let takeovers = w.first_takeovers(&held, leaver, term_at);
        let first = takeovers.values().map(|r| r.start).min().unwrap();
        assert!(
            first < expiry,
            "{leaver}'s slots were first handled by another at {first}, not before its Lease \
             (renewed {last_renew}) would have expired at {expiry}: not released at SIGTERM"
        );
        let last = takeovers.values().map(|r| r.start).max().unwrap();
        eprintln!(
            "SIGTERM {leaver}: {} slots handled by others from {} to {} after the signal",
            held.len(),
            (first - term_at).num_milliseconds(),
            (last - term_at).num_milliseconds()
        );
        w.wait_updates(30, "churn is handled after the leave").await;
    }
    w.finish(churn).await;
    w.shutdown().await;
}

/// The checkers themselves, without replicas: they must be able to fail.
mod checkers {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// `POST /shard/{op}` as the fixture sends it, answered once the stub lets it go.
    async fn post(stub: &Stub, replica: &str, uid: &str) {
        let addr = stub
            .url("")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let body = format!(r#"{{"name":"cm-{uid}","flag":true}}"#);
        let head = format!(
            "POST /shard/add HTTP/1.1\r\nhost: {addr}\r\nx-replica: {replica}\r\nx-uid: {uid}\r\n\
             x-rv: 1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// Two requests for one object at once are an overlap; for two objects, or one after the
    /// other, they are not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_overlap_detector_sees_two_requests_for_one_object() {
        let stub = Stub::start(Duration::from_millis(200), Arc::new(Notify::new()));
        tokio::join!(post(&stub, "a", "u1"), post(&stub, "b", "u2"));
        post(&stub, "b", "u1").await;
        assert!(stub.overlaps().is_empty(), "{:?}", stub.overlaps());
        tokio::join!(post(&stub, "a", "u3"), post(&stub, "b", "u3"));
        let overlaps = stub.overlaps();
        assert_eq!(overlaps.len(), 1, "{overlaps:?}");
        assert_eq!(overlaps[0].uid, "u3");
        assert_eq!(stub.peak_per_uid(), 2);
        let records = stub.records_of(SHARD);
        assert_eq!(records.len(), 5);
        assert!(
            records
                .iter()
                .all(|r| r.end.is_some() && r.flag && r.op == "add")
        );
        assert_eq!(records[0].name.trim_start_matches("cm-"), records[0].uid);
    }

    fn record(replica: &str, uid: &str, start_ms: i64, end_ms: i64) -> Record {
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        Record {
            plugin: SHARD.into(),
            op: "update".into(),
            replica: replica.into(),
            uid: uid.into(),
            name: uid.into(),
            rv: "1".into(),
            flag: false,
            start: t0 + chrono::Duration::milliseconds(start_ms),
            end: Some(t0 + chrono::Duration::milliseconds(end_ms)),
        }
    }

    /// Per slot: a new owner's first request before the old owner's last ended is a violation,
    /// across different objects of the slot too; after it, or in another slot, it is not.
    #[test]
    fn handover_violations_catch_a_new_owner_starting_early() {
        // Two uids of one slot and one of another.
        let mut by_slot: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for i in 0.. {
            let uid = format!("uid-{i}");
            by_slot.entry(slot_of(&uid, SLOTS)).or_default().push(uid);
            if by_slot.values().any(|v| v.len() >= 2) && by_slot.len() >= 2 {
                break;
            }
        }
        let (slot, same) = by_slot.iter().find(|(_, v)| v.len() >= 2).unwrap();
        let other = by_slot.iter().find(|(s, _)| *s != slot).unwrap().1[0].clone();
        let ordered = vec![
            record("a", &same[0], 0, 50),
            record("a", &same[1], 10, 100),
            record("b", &same[0], 101, 120),
            record("a", &other, 105, 130),
        ];
        assert!(handover_violations(&ordered, SLOTS).is_empty());
        let early = vec![
            record("a", &same[0], 0, 50),
            record("a", &same[1], 10, 100),
            // Another object of the same slot, while a's request for same[1] is in flight.
            record("b", &same[0], 90, 120),
        ];
        let bad = handover_violations(&early, SLOTS);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].starts_with(&format!("slot {slot}: a's")), "{bad:?}");
    }
}
