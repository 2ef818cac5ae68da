//! A controller's delivery with scripted guests on tokio's paused clock: events of the primary,
//! owned and watched kinds become keys of the primary, a key waits once and is never reconciled
//! twice at once, `requeue-after` and retries come back on the clock, and a reconcile of a key
//! whose primary went away runs once more.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::delivery::dispatch::{ControllerPlan, DispatchConfig, Dispatcher, Guest};
use super::delivery::keys::PrimaryKind;
use super::delivery::state::SharedState;
use super::metrics::PluginMetrics;
use crate::informer::{Indexer, KubeObject, Notification, ResourceEventHandler, SharedObject};
use crate::runtime::{CallError, HandlerOutcome, KeyMapping, ObjectKey, Role};

fn object(v: Value) -> SharedObject {
    Arc::new(KubeObject::from_value(v).unwrap())
}

/// A primary `App` in namespace `ns`.
fn app(name: &str, rv: u32) -> SharedObject {
    object(json!({
        "apiVersion": "example.com/v1", "kind": "App",
        "metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"),
                     "resourceVersion": rv.to_string()},
    }))
}

/// A Deployment the App `owner` (with uid `uid`) controls.
fn owned(name: &str, owner: &str, uid: &str, rv: u32) -> SharedObject {
    object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": "ns", "name": name, "uid": format!("d-{name}"),
                     "resourceVersion": rv.to_string(),
                     "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "App",
                        "name": owner, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
    }))
}

/// A Secret naming the App it concerns by the label `app`.
fn secret(name: &str, app: &str, rv: u32) -> SharedObject {
    object(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": "ns", "name": name, "uid": format!("s-{name}"),
                     "resourceVersion": rv.to_string(), "labels": {"app": app}},
    }))
}

/// What a scripted reconcile does.
#[derive(Clone)]
enum Answer {
    Outcome(HandlerOutcome),
    Fail,
    /// Waits until the test releases it, then answers `ok`.
    Hold,
}

/// A controller guest: records each call (`reconcile ns/web present`), the most calls of one
/// key at once, and answers from a script per key (then `ok`).
#[derive(Clone)]
struct Ctl {
    seen: Arc<Mutex<Vec<String>>>,
    script: Arc<Mutex<HashMap<String, VecDeque<Answer>>>>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    most_at_once: Arc<Mutex<HashMap<String, usize>>>,
    most_overall: Arc<Mutex<usize>>,
    release: Arc<tokio::sync::Semaphore>,
    cache: Option<Indexer>,
    keys_for: Arc<Mutex<Vec<ObjectKey>>>,
    /// How many calls `seen` held at each `on-synced`.
    synced_after: Arc<Mutex<Vec<usize>>>,
}

impl Ctl {
    fn with_cache(cache: &Indexer) -> Ctl {
        Ctl {
            seen: Arc::default(),
            script: Arc::default(),
            in_flight: Arc::default(),
            most_at_once: Arc::default(),
            most_overall: Arc::default(),
            release: Arc::new(tokio::sync::Semaphore::new(0)),
            cache: Some(cache.clone()),
            keys_for: Arc::default(),
            synced_after: Arc::default(),
        }
    }

    fn then(&self, key: &str, a: Answer) -> &Self {
        self.script
            .lock()
            .entry(key.into())
            .or_default()
            .push_back(a);
        self
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().clone()
    }

    fn count(&self, what: &str) -> usize {
        self.seen().iter().filter(|s| s.as_str() == what).count()
    }
}

impl Guest for Ctl {
    async fn deliver(&mut self, n: &Notification) -> Result<HandlerOutcome, CallError> {
        panic!("a controller was handed an event of {}", n.object().key());
    }

    async fn reconcile(&mut self, key: &ObjectKey) -> Result<HandlerOutcome, CallError> {
        let k = key.cache_key();
        let present = self
            .cache
            .as_ref()
            .and_then(|c| c.get(&k))
            .map_or("absent", |_| "present");
        self.seen.lock().push(format!("reconcile {k} {present}"));
        let now = {
            let mut f = self.in_flight.lock();
            *f.entry(k.clone()).or_default() += 1;
            let total: usize = f.values().sum();
            let mut most = self.most_overall.lock();
            *most = (*most).max(total);
            f[&k]
        };
        {
            let mut most = self.most_at_once.lock();
            let m = most.entry(k.clone()).or_default();
            *m = (*m).max(now);
        }
        let step = self.script.lock().get_mut(&k).and_then(VecDeque::pop_front);
        let out = match step {
            None => Ok(HandlerOutcome::Ok),
            Some(Answer::Outcome(o)) => Ok(o),
            Some(Answer::Fail) => Err(CallError::Trap("scripted trap".into())),
            Some(Answer::Hold) => {
                self.release.acquire().await.expect("open").forget();
                Ok(HandlerOutcome::Ok)
            }
        };
        *self.in_flight.lock().get_mut(&k).expect("counted") -= 1;
        out
    }

    async fn keys_for(&mut self, obj: &SharedObject) -> Result<Vec<ObjectKey>, CallError> {
        self.seen.lock().push(format!("keys-for {}", obj.key()));
        Ok(self.keys_for.lock().clone())
    }

    fn wants_synced(&self) -> bool {
        true
    }

    async fn synced(&mut self) -> Result<HandlerOutcome, CallError> {
        let n = self.seen.lock().len();
        self.synced_after.lock().push(n);
        Ok(HandlerOutcome::Ok)
    }
}

/// A controller of `App`s owning Deployments and watching Secrets by `watch`.
struct Rig {
    dispatcher: Arc<Dispatcher>,
    handlers: Vec<Arc<dyn ResourceEventHandler>>,
    cache: Indexer,
}

fn rig(concurrency: usize, watch: KeyMapping) -> Rig {
    let plan = ControllerPlan {
        roles: vec![Role::Primary, Role::Owned, Role::Watched(watch)],
        primary: PrimaryKind::new("example.com/v1", "App"),
        api_version: "example.com/v1".into(),
    };
    let config = DispatchConfig {
        concurrency: Some(concurrency),
        controller: Some(Arc::new(plan)),
        ..DispatchConfig::default()
    };
    let metrics = PluginMetrics::unregistered();
    let dispatcher =
        Dispatcher::with_state("ctl", 1, &metrics, &config, SharedState::default(), None);
    let cache = Indexer::new();
    dispatcher.attach_primary(cache.clone());
    let handlers = (0..3).map(|i| dispatcher.handler(i, None)).collect();
    dispatcher.watch_sync_with(Box::new(|| true));
    dispatcher.open();
    Rig {
        dispatcher,
        handlers,
        cache,
    }
}

impl Rig {
    /// A primary the informer has cached and announced.
    fn create_app(&self, name: &str, initial: bool) {
        let a = app(name, 1);
        self.cache.add(a.clone());
        self.handlers[0].on_add(&a, initial);
        self.handlers[0].drained();
    }

    fn spawn(&self, g: &Ctl) -> tokio::task::JoinHandle<()> {
        let (d, g) = (self.dispatcher.clone(), g.clone());
        tokio::spawn(async move { d.run(&mut move || g.clone()).await })
    }

    async fn stop(&self, run: tokio::task::JoinHandle<()>) {
        self.dispatcher.stop();
        run.await.unwrap();
    }
}

/// Lets the paused clock run until `cond` holds (or fails after an hour of virtual time).
async fn until(g: &Ctl, what: &str, cond: impl Fn(&Ctl) -> bool) {
    for _ in 0..3_600_000 {
        if cond(g) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never: {what}; seen {:?}", g.seen());
}

/// Lets everything runnable run, and a minute of virtual time pass.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn an_owned_objects_change_reconciles_its_owner_once_by_the_owners_key() {
    let r = rig(1, KeyMapping::SameName);
    r.create_app("web", true);
    let g = Ctl::with_cache(&r.cache);
    let run = r.spawn(&g);
    until(&g, "the first pass", |g| g.synced_after.lock().len() == 1).await;
    assert_eq!(g.seen(), ["reconcile ns/web present"]);
    assert_eq!(
        *g.synced_after.lock(),
        [1],
        "on-synced after the first pass"
    );
    let d1 = owned("web-1", "web", "uid-web", 1);
    r.handlers[1].on_add(&d1, false);
    r.handlers[1].drained();
    r.handlers[1].on_update(&d1, &owned("web-1", "web", "uid-web", 2), false);
    r.handlers[1].drained();
    until(&g, "the owner's reconcile", |g| g.seen().len() == 2).await;
    settle().await;
    assert_eq!(
        g.seen()[1..],
        ["reconcile ns/web present"],
        "one reconcile, of the owner's key, for two events of its Deployment"
    );
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn an_owner_reference_whose_uid_is_not_the_cached_owners_reconciles_nothing() {
    let r = rig(1, KeyMapping::SameName);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    let run = r.spawn(&g);
    until(&g, "the app's reconcile", |g| {
        g.count("reconcile ns/web present") == 1
    })
    .await;
    // The reference of a Deployment an earlier `web` (deleted, re-created) owned.
    r.handlers[1].on_add(&owned("old", "web", "uid-of-the-earlier-web", 1), false);
    r.handlers[1].drained();
    r.handlers[1].on_add(&owned("stray", "nobody", "uid-nobody", 1), false);
    r.handlers[1].drained();
    settle().await;
    assert_eq!(g.count("reconcile ns/web present"), 1, "{:?}", g.seen());
    assert_eq!(
        g.seen()
            .iter()
            .filter(|s| s.starts_with("reconcile"))
            .count(),
        1
    );
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn a_burst_on_three_owned_objects_during_a_reconcile_gives_exactly_one_more() {
    let r = rig(4, KeyMapping::SameName);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    g.then("ns/web", Answer::Hold);
    let run = r.spawn(&g);
    until(&g, "the held reconcile", |g| g.seen().len() == 1).await;
    for rv in 2..12 {
        for name in ["web-a", "web-b", "web-c"] {
            r.handlers[1].on_add(&owned(name, "web", "uid-web", rv), false);
        }
        r.handlers[1].drained();
    }
    settle().await;
    assert_eq!(
        g.seen().len(),
        1,
        "nothing runs beside the key's reconcile in flight"
    );
    g.release.add_permits(1);
    until(&g, "the one more", |g| g.seen().len() == 2).await;
    settle().await;
    assert_eq!(
        g.seen(),
        ["reconcile ns/web present", "reconcile ns/web present"]
    );
    assert_eq!(g.most_at_once.lock()["ns/web"], 1);
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn two_owners_reconcile_at_once_at_concurrency_two_and_one_owner_never_twice() {
    let r = rig(2, KeyMapping::SameName);
    r.create_app("web", false);
    r.create_app("db", false);
    let g = Ctl::with_cache(&r.cache);
    for key in ["ns/web", "ns/db"] {
        g.then(key, Answer::Hold).then(key, Answer::Hold);
    }
    let run = r.spawn(&g);
    until(&g, "both in flight", |g| g.seen().len() == 2).await;
    assert_eq!(*g.most_overall.lock(), 2, "two keys at once");
    // Events for both while both are in flight: each key waits behind its own reconcile.
    r.handlers[1].on_add(&owned("web-1", "web", "uid-web", 1), false);
    r.handlers[1].drained();
    r.handlers[0].on_update(&app("db", 1), &app("db", 2), false);
    r.handlers[0].drained();
    settle().await;
    assert_eq!(g.seen().len(), 2);
    g.release.add_permits(4);
    until(&g, "one more each", |g| g.seen().len() == 4).await;
    settle().await;
    let most = g.most_at_once.lock().clone();
    assert_eq!(
        (most["ns/web"], most["ns/db"]),
        (1, 1),
        "never one key twice at once"
    );
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn requeue_after_comes_back_on_the_clock_and_not_before() {
    let r = rig(1, KeyMapping::SameName);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    g.then(
        "ns/web",
        Answer::Outcome(HandlerOutcome::RequeueAfter(Duration::from_secs(30))),
    );
    let run = r.spawn(&g);
    until(&g, "the first reconcile", |g| g.seen().len() == 1).await;
    let first = tokio::time::Instant::now();
    until(&g, "the requeue", |g| g.seen().len() == 2).await;
    let waited = first.elapsed();
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "requeued after {waited:?}"
    );
    settle().await;
    assert_eq!(g.seen().len(), 2, "a `done` reconcile is not requeued");
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn an_event_during_a_requeue_delay_reconciles_at_once() {
    let r = rig(1, KeyMapping::SameName);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    g.then(
        "ns/web",
        Answer::Outcome(HandlerOutcome::RequeueAfter(Duration::from_secs(600))),
    );
    let run = r.spawn(&g);
    until(&g, "the first reconcile", |g| g.seen().len() == 1).await;
    let first = tokio::time::Instant::now();
    r.handlers[1].on_add(&owned("web-1", "web", "uid-web", 1), false);
    r.handlers[1].drained();
    until(&g, "the event's reconcile", |g| g.seen().len() == 2).await;
    assert!(first.elapsed() < Duration::from_secs(1));
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn an_error_backs_off_per_key_and_a_later_success_resets_the_backoff() {
    let r = rig(1, KeyMapping::SameName);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    let retry = || Answer::Outcome(HandlerOutcome::Retry("not yet".into()));
    g.then("ns/web", retry())
        .then("ns/web", Answer::Fail)
        .then("ns/web", retry())
        .then("ns/web", Answer::Outcome(HandlerOutcome::Ok))
        .then("ns/web", retry());
    let run = r.spawn(&g);
    let mut at = Vec::new();
    for n in 1..=6 {
        until(&g, "the next reconcile", |g| g.seen().len() == n).await;
        at.push(tokio::time::Instant::now());
        if n == 4 {
            // The success: the next reconcile needs an event.
            settle().await;
            assert_eq!(g.seen().len(), 4);
            r.handlers[0].on_update(&app("web", 1), &app("web", 2), false);
            r.handlers[0].drained();
        }
    }
    let gaps: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    // client-go's default controller limiter: 5 ms doubling per failure of the key (a trap
    // counts like a retry), forgotten on success.
    assert_eq!(gaps[0], 5, "{gaps:?}");
    assert_eq!(gaps[1], 10, "{gaps:?}");
    assert_eq!(gaps[2], 20, "{gaps:?}");
    assert_eq!(
        gaps[4], 5,
        "after a success the backoff starts again: {gaps:?}"
    );
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn a_primary_deleted_mid_reconcile_is_reconciled_again_and_seen_absent() {
    let r = rig(1, KeyMapping::SameName);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    g.then("ns/web", Answer::Hold);
    let run = r.spawn(&g);
    until(&g, "the held reconcile", |g| g.seen().len() == 1).await;
    let gone = r.cache.get("ns/web").unwrap();
    r.cache.replace(Vec::new());
    r.handlers[0].on_delete(&gone, false);
    r.handlers[0].drained();
    g.release.add_permits(1);
    until(&g, "the reconcile after the deletion", |g| {
        g.seen().len() == 2
    })
    .await;
    settle().await;
    assert_eq!(
        g.seen(),
        ["reconcile ns/web present", "reconcile ns/web absent"]
    );
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn a_watched_kinds_mapping_reconciles_the_primaries_it_names() {
    let r = rig(1, KeyMapping::Label("app".into()));
    r.create_app("web", false);
    r.create_app("db", false);
    let g = Ctl::with_cache(&r.cache);
    let run = r.spawn(&g);
    until(&g, "the apps' reconciles", |g| g.seen().len() == 2).await;
    r.handlers[2].on_add(&secret("creds", "db", 1), false);
    r.handlers[2].drained();
    r.handlers[2].on_add(&secret("other", "no-such-app", 1), false);
    r.handlers[2].drained();
    // The label moves from db to web: both are reconciled.
    r.handlers[2].on_update(&secret("tls", "db", 1), &secret("tls", "web", 2), false);
    r.handlers[2].drained();
    until(&g, "the mapped reconciles", |g| g.seen().len() == 4).await;
    settle().await;
    assert_eq!(
        g.seen()[2..],
        ["reconcile ns/db present", "reconcile ns/web present"],
        "the db key once (its two events waited as one), web once, nothing for no-such-app"
    );
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn a_guest_mapping_asks_keys_for_and_reconciles_only_cached_primaries() {
    let r = rig(1, KeyMapping::Guest);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    *g.keys_for.lock() = vec![
        ObjectKey {
            namespace: Some("ns".into()),
            name: "web".into(),
        },
        ObjectKey {
            namespace: Some("ns".into()),
            name: "invented".into(),
        },
        ObjectKey {
            namespace: Some("ns/../x".into()),
            name: "web".into(),
        },
    ];
    let run = r.spawn(&g);
    until(&g, "the app's reconcile", |g| g.seen().len() == 1).await;
    r.handlers[2].on_add(&secret("creds", "whatever", 1), false);
    r.handlers[2].drained();
    until(&g, "the mapped reconcile", |g| g.seen().len() == 3).await;
    settle().await;
    assert_eq!(
        g.seen(),
        [
            "reconcile ns/web present",
            "keys-for ns/creds",
            "reconcile ns/web present"
        ]
    );
    r.stop(run).await;
}

#[tokio::test(start_paused = true)]
async fn a_resync_reconciles_every_primary_and_on_synced_follows_the_first_pass() {
    let r = rig(2, KeyMapping::SameName);
    for name in ["a", "b", "c"] {
        r.create_app(name, true);
    }
    // Owned objects replayed in the initial list name their owners: still one reconcile each.
    r.handlers[1].on_add(&owned("a-1", "a", "uid-a", 1), true);
    r.handlers[1].drained();
    let g = Ctl::with_cache(&r.cache);
    let run = r.spawn(&g);
    until(&g, "on-synced", |g| g.synced_after.lock().len() == 1).await;
    let seen = g.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        *g.synced_after.lock(),
        [3],
        "after every reconcile of the first pass"
    );
    // A resync of the primary kind names every key; one of the owned kind names none.
    for name in ["a", "b", "c"] {
        let a = app(name, 1);
        r.handlers[0].on_update(&a, &a, true);
        r.handlers[0].drained();
    }
    let d = owned("a-1", "a", "uid-a", 1);
    r.handlers[1].on_update(&d, &d, true);
    r.handlers[1].drained();
    until(&g, "the resync's reconciles", |g| g.seen().len() == 6).await;
    settle().await;
    assert_eq!(g.seen().len(), 6);
    for name in ["a", "b", "c"] {
        assert_eq!(g.count(&format!("reconcile ns/{name} present")), 2);
    }
    r.stop(run).await;
}

/// A hostile `keys-for` naming thousands of keys: only cached primaries are reconciled, each
/// once, and the host holds no item for the invented ones.
#[tokio::test(start_paused = true)]
async fn a_flood_of_invented_keys_from_keys_for_costs_nothing_but_the_answer() {
    let r = rig(1, KeyMapping::Guest);
    r.create_app("web", false);
    let g = Ctl::with_cache(&r.cache);
    let mut keys: Vec<ObjectKey> = (0..5000)
        .map(|i| ObjectKey {
            namespace: Some("ns".into()),
            name: format!("invented-{i}"),
        })
        .collect();
    keys.insert(
        3,
        ObjectKey {
            namespace: Some("ns".into()),
            name: "web".into(),
        },
    );
    *g.keys_for.lock() = keys;
    let run = r.spawn(&g);
    until(&g, "the app's reconcile", |g| g.seen().len() == 1).await;
    r.handlers[2].on_add(&secret("creds", "x", 1), false);
    r.handlers[2].drained();
    until(&g, "the mapped reconcile", |g| g.seen().len() == 3).await;
    settle().await;
    assert_eq!(g.seen().len(), 3, "{:?}", g.seen());
    assert_eq!(
        r.dispatcher.depth(),
        0,
        "nothing of the invented keys waits"
    );
    r.stop(run).await;
}

/// A burst the listener delivers is handed on at its end: however many events of it name one
/// key, and even with the worker idle when the first arrives, the key is reconciled once.
#[tokio::test(start_paused = true)]
async fn a_burst_is_one_reconcile_even_when_it_finds_the_worker_idle() {
    let r = rig(1, KeyMapping::SameName);
    r.create_app("web", false);
    r.create_app("db", false);
    let g = Ctl::with_cache(&r.cache);
    let run = r.spawn(&g);
    until(&g, "the apps' reconciles", |g| g.seen().len() == 2).await;
    for rv in 2..12 {
        r.handlers[1].on_add(&owned("web-1", "web", "uid-web", rv), false);
        r.handlers[1].on_add(&owned("db-1", "db", "uid-db", rv), false);
        settle().await;
    }
    assert_eq!(
        g.seen().len(),
        2,
        "nothing before the burst ends: {:?}",
        g.seen()
    );
    r.handlers[1].drained();
    until(&g, "one reconcile per key", |g| g.seen().len() == 4).await;
    settle().await;
    assert_eq!(g.seen().len(), 4, "{:?}", g.seen());
    r.stop(run).await;
}
