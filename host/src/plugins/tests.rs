//! Delivery rules of the plugins layer with scripted guests: the queue's bound and coalescing,
//! retries, quarantine, stop and kill on tokio's paused clock, and worker restarts.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;

use super::delivery::dispatch::{DispatchConfig, Dispatcher, Guest, IDLE_RELEASE};
use super::delivery::quarantine::QuarantinePolicy;
use super::delivery::queue::coalesce;
use super::delivery::state::SharedState;
use super::metrics::PluginMetrics;
use crate::informer::{KubeObject, Notification, ResourceEventHandler, SharedObject};
use crate::runtime::{
    BudgetKind, CallEnded, CallError, CallKind, HandlerOutcome, MemoryBudget, Observer,
    Quarantined, RuntimeMetrics, SharedObserver,
};

fn obj(name: &str, rv: u32) -> SharedObject {
    Arc::new(
        KubeObject::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"),
                         "resourceVersion": rv.to_string()},
        }))
        .unwrap(),
    )
}

fn add(name: &str, rv: u32) -> Notification {
    Notification::Add {
        obj: obj(name, rv),
        initial: false,
    }
}

fn update(name: &str, old: u32, new: u32) -> Notification {
    Notification::Update {
        old: obj(name, old),
        new: obj(name, new),
        is_sync: false,
    }
}

fn delete(name: &str, rv: u32) -> Notification {
    Notification::Delete {
        obj: obj(name, rv),
        final_state_unknown: false,
    }
}

/// `add ns/a 1`, `update ns/a 1->2 sync`, `delete ns/a 2`: what a handler would log.
fn describe(n: &Notification) -> String {
    match n {
        Notification::Add { obj, initial } => {
            format!(
                "add {} {}{}",
                obj.key(),
                obj.resource_version(),
                if *initial { " init" } else { "" }
            )
        }
        Notification::Update { old, new, is_sync } => format!(
            "update {} {}->{}{}",
            new.key(),
            old.resource_version(),
            new.resource_version(),
            if *is_sync { " sync" } else { "" }
        ),
        Notification::Delete {
            obj,
            final_state_unknown,
        } => format!(
            "delete {} {}{}",
            obj.key(),
            obj.resource_version(),
            if *final_state_unknown { " unknown" } else { "" }
        ),
    }
}

#[test]
fn coalescing_keeps_the_oldest_unseen_old_and_the_newest_new() {
    let one = |v: Vec<Notification>| coalesce(v).map(|n| describe(&n));
    assert_eq!(
        one(vec![add("a", 1), update("a", 1, 2)]),
        Some("add ns/a 2".into())
    );
    assert_eq!(
        one(vec![add("a", 1), delete("a", 1)]),
        None,
        "never seen, gone"
    );
    assert_eq!(
        one(vec![update("a", 1, 2), update("a", 2, 3)]),
        Some("update ns/a 1->3".into())
    );
    assert_eq!(
        one(vec![update("a", 1, 2), delete("a", 2)]),
        Some("delete ns/a 2".into())
    );
    assert_eq!(
        one(vec![delete("a", 2), add("a", 5)]),
        Some("update ns/a 2->5".into()),
        "deleted and re-created: the plugin saw the old state last"
    );
    let sync = Notification::Update {
        old: obj("a", 1),
        new: obj("a", 1),
        is_sync: true,
    };
    assert_eq!(
        one(vec![sync.clone(), sync.clone()]),
        Some("update ns/a 1->1 sync".into())
    );
    assert_eq!(
        one(vec![sync, update("a", 1, 2)]),
        Some("update ns/a 1->2".into()),
        "a real change is not a sync"
    );
    let init = Notification::Add {
        obj: obj("a", 1),
        initial: true,
    };
    assert_eq!(
        one(vec![init, update("a", 1, 2)]),
        Some("add ns/a 2 init".into())
    );
}

/// A guest that records what it was given and answers from a script (then `Ok`).
#[derive(Clone, Default)]
struct Scripted {
    seen: Arc<Mutex<Vec<String>>>,
    script: Arc<Mutex<VecDeque<Step>>>,
    /// Has an `on-synced` export (a 0.2.0 handler).
    v2: bool,
    /// The plugin's memory budget, shared by its instances.
    budget: Option<MemoryBudget>,
}

#[derive(Clone)]
enum Step {
    Answer(Result<HandlerOutcome, CallError>),
    Sleep(Duration),
    Panic,
}

impl Scripted {
    fn then(&self, step: Step) -> &Self {
        self.script.lock().push_back(step);
        self
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().clone()
    }
}

impl Scripted {
    async fn answer(&self, what: String) -> Result<HandlerOutcome, CallError> {
        self.seen.lock().push(what);
        let step = self.script.lock().pop_front();
        match step {
            None => Ok(HandlerOutcome::Ok),
            Some(Step::Answer(a)) => a,
            Some(Step::Sleep(d)) => {
                tokio::time::sleep(d).await;
                Ok(HandlerOutcome::Ok)
            }
            Some(Step::Panic) => panic!("scripted panic"),
        }
    }
}

impl Guest for Scripted {
    async fn deliver(&mut self, n: &Notification) -> Result<HandlerOutcome, CallError> {
        self.answer(describe(n)).await
    }

    fn wants_synced(&self) -> bool {
        self.v2
    }

    async fn synced(&mut self) -> Result<HandlerOutcome, CallError> {
        self.answer("synced".into()).await
    }

    fn memory_budget(&self) -> Option<MemoryBudget> {
        self.budget.clone()
    }
}

struct Rig {
    dispatcher: Arc<Dispatcher>,
    handler: Arc<dyn ResourceEventHandler>,
    /// The plugin's state the dispatcher reports to; its steps are what it reported.
    states: SharedState,
    metrics: PluginMetrics,
}

fn rig(config: DispatchConfig) -> Rig {
    rig_observed(config, None)
}

/// A rig whose dispatcher tells `observer` what it does.
fn rig_observed(config: DispatchConfig, observer: Option<SharedObserver>) -> Rig {
    let metrics = PluginMetrics::unregistered();
    let states = SharedState::default();
    let dispatcher = Dispatcher::with_state("p", 1, &metrics, &config, states.clone(), observer);
    let handler = dispatcher.handler(0, None);
    Rig {
        dispatcher,
        handler,
        states,
        metrics,
    }
}

impl Rig {
    fn push(&self, n: Notification) {
        match n {
            Notification::Add { obj, initial } => self.handler.on_add(&obj, initial),
            Notification::Update { old, new, is_sync } => {
                self.handler.on_update(&old, &new, is_sync)
            }
            Notification::Delete {
                obj,
                final_state_unknown,
            } => self.handler.on_delete(&obj, final_state_unknown),
        }
    }

    /// Runs the dispatcher on `guest` (cloned per instance) in a task of its own.
    fn spawn<G: Guest + Clone + Send + Sync + 'static>(
        &self,
        guest: &G,
    ) -> tokio::task::JoinHandle<()> {
        let d = self.dispatcher.clone();
        let g = guest.clone();
        tokio::spawn(async move { d.run(&mut move || g.clone()).await })
    }

    /// Runs the dispatcher on `guest` (cloned per instance) until the queue is empty and
    /// nothing is scheduled.
    async fn drain<G: Guest + Clone + Send + Sync + 'static>(&self, guest: &G) {
        let run = self.spawn(guest);
        while self.dispatcher.depth() > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Let the in-flight call end.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        self.dispatcher.stop();
        run.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn below_the_cap_every_notification_is_delivered_in_order() {
    let r = rig(DispatchConfig::default());
    r.dispatcher.open();
    r.push(add("a", 1));
    r.push(update("a", 1, 2));
    r.push(update("a", 2, 3));
    r.push(delete("a", 3));
    let g = Scripted::default();
    r.drain(&g).await;
    assert_eq!(
        g.seen(),
        [
            "add ns/a 1",
            "update ns/a 1->2",
            "update ns/a 2->3",
            "delete ns/a 3"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stuck_plugin_holds_one_notification_per_object_above_the_cap() {
    let r = rig(DispatchConfig {
        max_queued: 100,
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    for i in 0..50 {
        r.push(add(&format!("o{i}"), 1));
    }
    for v in 1..1000u32 {
        for i in 0..50 {
            r.push(update(&format!("o{i}"), v, v + 1));
        }
    }
    assert!(
        r.dispatcher.depth() <= 100,
        "depth {} over the cap of 100",
        r.dispatcher.depth()
    );
    // One more object than the cap allows still gets its notification.
    for i in 50..250 {
        r.push(add(&format!("o{i}"), 1));
    }
    assert_eq!(r.dispatcher.depth(), 250, "max(cap, one per object)");
    let coalesced = r
        .metrics
        .coalesced
        .get_or_create(&super::metrics::PluginLabels { plugin: "p".into() })
        .get();
    assert!(coalesced > 40_000, "coalesced {coalesced}");
    let g = Scripted::default();
    r.drain(&g).await;
    let seen = g.seen();
    assert_eq!(seen.len(), 250);
    // Each of the first 50 objects is seen once, at its newest state.
    assert!(
        seen.contains(&"add ns/o7 1000".to_string()),
        "{:?}",
        &seen[..5]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_is_redelivered_with_backoff_unless_something_newer_arrives() {
    let r = rig(DispatchConfig::default());
    r.dispatcher.open();
    let g = Scripted::default();
    g.then(Step::Answer(Ok(HandlerOutcome::Retry("later".into()))))
        .then(Step::Answer(Ok(HandlerOutcome::Retry("later".into()))));
    r.push(add("a", 1));
    r.drain(&g).await;
    assert_eq!(g.seen(), ["add ns/a 1", "add ns/a 1", "add ns/a 1"]);

    let r = rig(DispatchConfig::default());
    r.dispatcher.open();
    let g = Scripted::default();
    g.then(Step::Answer(Ok(HandlerOutcome::Retry("later".into()))));
    r.push(add("b", 1));
    let run = r.spawn(&g);
    while g.seen().is_empty() {
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    // The retry waits its backoff (5 ms); a newer notification supersedes it.
    r.push(update("b", 1, 2));
    tokio::time::sleep(Duration::from_secs(60)).await;
    r.dispatcher.stop();
    run.await.unwrap();
    assert_eq!(g.seen(), ["add ns/b 1", "update ns/b 1->2"]);
}

#[tokio::test(start_paused = true)]
async fn failures_in_a_row_quarantine_the_plugin_and_it_resumes() {
    let r = rig(DispatchConfig {
        quarantine: QuarantinePolicy {
            threshold: 3,
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        },
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = Scripted::default();
    for _ in 0..3 {
        g.then(Step::Answer(Err(CallError::Trap("boom".into()))));
    }
    for i in 0..5 {
        r.push(add(&format!("o{i}"), 1));
    }
    let started = tokio::time::Instant::now();
    let run = r.spawn(&g);
    while g.seen().len() < 5 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "the fourth call waited for the quarantine"
    );
    assert_eq!(r.states.steps(), ["quarantined", "resumed"]);
    r.dispatcher.stop();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn stop_lets_the_call_finish_and_kill_abandons_it() {
    for kill in [false, true] {
        let r = rig(DispatchConfig::default());
        r.dispatcher.open();
        let g = Scripted::default();
        g.then(Step::Sleep(Duration::from_secs(30)));
        r.push(add("a", 1));
        r.push(add("b", 1));
        let started = tokio::time::Instant::now();
        let run = r.spawn(&g);
        while g.seen().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if kill {
            r.dispatcher.kill();
        } else {
            r.dispatcher.stop();
        }
        run.await.unwrap();
        let took = started.elapsed();
        assert_eq!(g.seen(), ["add ns/a 1"], "nothing after the stop");
        if kill {
            assert!(took < Duration::from_secs(30), "abandoned: {took:?}");
        } else {
            assert!(took >= Duration::from_secs(30), "finished: {took:?}");
        }
        assert_eq!(r.dispatcher.depth(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_delivered_before_the_gate_opens() {
    let r = rig(DispatchConfig::default());
    r.push(add("a", 1));
    let g = Scripted::default();
    let run = r.spawn(&g);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(g.seen().is_empty());
    r.dispatcher.open();
    while g.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    r.dispatcher.stop();
    run.await.unwrap();
}

#[test]
fn a_worker_that_panics_is_restarted_and_its_queue_keeps_a_consumer() {
    let r = rig(DispatchConfig::default());
    r.dispatcher.open();
    let g = Scripted::default();
    g.then(Step::Panic);
    r.push(add("a", 1));
    r.push(add("b", 1));
    let template = g.clone();
    let worker = super::delivery::worker::spawn_worker(
        r.dispatcher.clone(),
        move || template.clone(),
        Duration::from_millis(10),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while g.seen().len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(g.seen(), ["add ns/a 1", "add ns/b 1"]);
    assert_eq!(r.states.steps()[..2], ["panicked", "resumed"]);
    // The key whose call panicked is usable again.
    r.push(update("a", 1, 2));
    while g.seen().len() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(g.seen()[2], "update ns/a 1->2");
    r.dispatcher.stop();
    worker.join().unwrap();
    let restarts = r
        .metrics
        .worker_restarts
        .get_or_create(&super::metrics::PluginLabels { plugin: "p".into() })
        .get();
    assert_eq!(restarts, 1);
}

#[tokio::test(start_paused = true)]
async fn an_inline_delivery_that_panics_is_restarted_like_a_worker_thread() {
    let r = rig(DispatchConfig::default());
    r.dispatcher.open();
    let g = Scripted::default();
    g.then(Step::Panic);
    r.push(add("a", 1));
    r.push(add("b", 1));
    let template = g.clone();
    let task = super::delivery::worker::spawn_task(
        r.dispatcher.clone(),
        move || template.clone(),
        Duration::from_millis(10),
    );
    seen_at_least(&g, 2).await;
    assert_eq!(g.seen(), ["add ns/a 1", "add ns/b 1"]);
    assert_eq!(r.states.steps()[..2], ["panicked", "resumed"]);
    // The key whose call panicked is usable again.
    r.push(update("a", 1, 2));
    seen_at_least(&g, 3).await;
    assert_eq!(g.seen()[2], "update ns/a 1->2");
    r.dispatcher.stop();
    task.await.unwrap();
    let restarts = r
        .metrics
        .worker_restarts
        .get_or_create(&super::metrics::PluginLabels { plugin: "p".into() })
        .get();
    assert_eq!(restarts, 1);
}

fn initial(name: &str) -> Notification {
    Notification::Add {
        obj: obj(name, 1),
        initial: true,
    }
}

/// Waits (on the paused clock) until the guest has seen `n` calls.
async fn seen_at_least(g: &Scripted, n: usize) {
    while g.seen().len() < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn on_synced_follows_the_handled_replay_once_the_informers_have_synced() {
    let r = rig(DispatchConfig::default());
    let informers_synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = informers_synced.clone();
    r.dispatcher.watch_sync_with(Box::new(move || {
        flag.load(std::sync::atomic::Ordering::Acquire)
    }));
    r.dispatcher.open();
    r.push(initial("a"));
    r.push(initial("b"));
    let g = Scripted {
        v2: true,
        ..Scripted::default()
    };
    let run = r.spawn(&g);
    seen_at_least(&g, 2).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        g.seen(),
        ["add ns/a 1 init", "add ns/b 1 init"],
        "not synced before the informers are"
    );
    assert!(!r.dispatcher.replay_handled());
    informers_synced.store(true, std::sync::atomic::Ordering::Release);
    seen_at_least(&g, 3).await;
    assert!(r.dispatcher.replay_handled());
    r.push(update("a", 1, 2));
    seen_at_least(&g, 4).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    r.dispatcher.stop();
    run.await.unwrap();
    assert_eq!(
        g.seen(),
        [
            "add ns/a 1 init",
            "add ns/b 1 init",
            "synced",
            "update ns/a 1->2"
        ],
        "exactly once, after the replay"
    );
}

#[tokio::test(start_paused = true)]
async fn on_synced_is_called_again_after_retry_or_failure_and_not_after_fatal() {
    for (answers, calls) in [
        (
            vec![
                Ok(HandlerOutcome::Retry("cloud down".into())),
                Err(CallError::Trap("boom".into())),
            ],
            3,
        ),
        (vec![Ok(HandlerOutcome::Fatal("cannot".into()))], 1),
    ] {
        let r = rig(DispatchConfig::default());
        r.dispatcher.watch_sync_with(Box::new(|| true));
        r.dispatcher.open();
        let g = Scripted {
            v2: true,
            ..Scripted::default()
        };
        for a in answers {
            g.then(Step::Answer(a));
        }
        let started = tokio::time::Instant::now();
        let run = r.spawn(&g);
        seen_at_least(&g, calls).await;
        let took = started.elapsed();
        // Meanwhile, deliveries go on.
        r.push(add("c", 1));
        seen_at_least(&g, calls + 1).await;
        tokio::time::sleep(Duration::from_secs(3600)).await;
        r.dispatcher.stop();
        run.await.unwrap();
        let synced = g.seen().iter().filter(|s| *s == "synced").count();
        assert_eq!(synced, calls, "{:?}", g.seen());
        if calls == 3 {
            let backoff = super::delivery::dispatch::SYNCED_RETRY_BASE * 3;
            assert!(took >= backoff, "backed off 0.5 s then 1 s: {took:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_without_on_synced_is_never_called_for_it() {
    let r = rig(DispatchConfig::default());
    r.dispatcher.watch_sync_with(Box::new(|| true));
    r.dispatcher.open();
    r.push(initial("a"));
    let g = Scripted::default();
    r.drain(&g).await;
    assert_eq!(g.seen(), ["add ns/a 1 init"]);
    assert!(r.dispatcher.replay_handled());
}

#[tokio::test(start_paused = true)]
async fn at_concurrency_one_the_stream_keeps_the_informers_order_across_objects() {
    let r = rig(DispatchConfig::default());
    r.dispatcher.open();
    let g = Scripted::default();
    g.then(Step::Sleep(Duration::from_secs(10)));
    r.push(add("a", 1));
    let run = r.spawn(&g);
    while g.seen().is_empty() {
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    // A burst while a's slow call is in flight: a's next notification comes before c's, as
    // the informer produced them (a queue keyed by object would put a's behind c's).
    r.push(add("b", 1));
    r.push(update("a", 1, 2));
    r.push(add("c", 1));
    r.push(update("b", 1, 2));
    while r.dispatcher.depth() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(3600)).await;
    r.dispatcher.stop();
    run.await.unwrap();
    assert_eq!(
        g.seen(),
        [
            "add ns/a 1",
            "add ns/b 1",
            "update ns/a 1->2",
            "add ns/c 1",
            "update ns/b 1->2"
        ]
    );
}

/// A guest that notices two calls in flight for one object, and records per-object order and
/// how many calls ran at once.
#[derive(Clone, Default)]
struct OverlapProbe {
    per_key: Arc<Mutex<std::collections::HashMap<String, u32>>>,
    seen: Arc<Mutex<Vec<(String, u32)>>>,
    overlaps: Arc<std::sync::atomic::AtomicUsize>,
    now: Arc<std::sync::atomic::AtomicUsize>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
}

impl Guest for OverlapProbe {
    async fn deliver(&mut self, n: &Notification) -> Result<HandlerOutcome, CallError> {
        use std::sync::atomic::Ordering::SeqCst;
        let key = n.object().key().to_string();
        let rv: u32 = n.object().resource_version().parse().unwrap();
        {
            let mut per_key = self.per_key.lock();
            let c = per_key.entry(key.clone()).or_default();
            if *c > 0 {
                self.overlaps.fetch_add(1, SeqCst);
            }
            *c += 1;
        }
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(now, SeqCst);
        self.seen.lock().push((key.clone(), rv));
        tokio::time::sleep(Duration::from_millis(1 + u64::from(rv % 7))).await;
        self.now.fetch_sub(1, SeqCst);
        *self.per_key.lock().get_mut(&key).unwrap() -= 1;
        Ok(HandlerOutcome::Ok)
    }
}

#[tokio::test(start_paused = true)]
async fn at_concurrency_sixteen_no_object_ever_has_two_calls_in_flight() {
    use std::sync::atomic::Ordering::SeqCst;
    let r = rig(DispatchConfig {
        concurrency: Some(16),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = OverlapProbe::default();
    let keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for name in keys {
        r.push(add(name, 1));
    }
    let run = r.spawn(&g);
    for rv in 2..=500u32 {
        for name in keys {
            r.push(update(name, rv - 1, rv));
        }
        if rv % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    while r.dispatcher.depth() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(r.dispatcher.instances() <= 16);
    r.dispatcher.stop();
    run.await.unwrap();
    assert_eq!(
        g.overlaps.load(SeqCst),
        0,
        "two calls for one object at once"
    );
    let peak = g.peak.load(SeqCst);
    assert_eq!(peak, keys.len(), "every object was served at once");
    let seen = g.seen.lock().clone();
    assert_eq!(seen.len(), keys.len() * 500, "nothing lost below the cap");
    for name in keys {
        let order: Vec<u32> = seen
            .iter()
            .filter(|(k, _)| k == &format!("ns/{name}"))
            .map(|(_, rv)| *rv)
            .collect();
        assert_eq!(
            order,
            (1..=500).collect::<Vec<_>>(),
            "per-object order of {name}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn failures_spread_over_instances_count_in_a_row_for_quarantine() {
    let r = rig(DispatchConfig {
        concurrency: Some(4),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = Scripted::default();
    for _ in 0..5 {
        g.then(Step::Answer(Err(CallError::DeadlineExceeded)));
    }
    for name in ["a", "b", "c", "d", "e", "f"] {
        r.push(add(name, 1));
    }
    r.drain(&g).await;
    let states = r.states.steps();
    assert_eq!(
        states,
        ["quarantined", "resumed"],
        "one quarantine for five failures in a row over four instances"
    );
    assert_eq!(g.seen().len(), 6, "the sixth is delivered after the pause");
}

#[tokio::test(start_paused = true)]
async fn a_kill_abandons_every_call_in_flight() {
    let r = rig(DispatchConfig {
        concurrency: Some(4),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = Scripted::default();
    for _ in 0..4 {
        g.then(Step::Sleep(Duration::from_secs(86_400)));
    }
    for name in ["a", "b", "c", "d"] {
        r.push(add(name, 1));
    }
    let run = r.spawn(&g);
    while r.dispatcher.calls_in_flight() < 4 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(r.dispatcher.instances(), 4);
    r.dispatcher.kill();
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("killed at once")
        .unwrap();
    assert_eq!(r.dispatcher.calls_in_flight(), 0);
    assert_eq!(r.dispatcher.instances(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stop_lets_every_call_in_flight_end() {
    let r = rig(DispatchConfig {
        concurrency: Some(3),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = OverlapProbe::default();
    for name in ["a", "b", "c"] {
        r.push(add(name, 6));
    }
    let run = r.spawn(&g);
    while r.dispatcher.calls_in_flight() < 3 {
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    r.dispatcher.stop();
    run.await.unwrap();
    assert_eq!(
        g.now.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every call ended"
    );
    assert_eq!(g.seen.lock().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_among_concurrent_ones_fails_alone() {
    let r = rig(DispatchConfig {
        concurrency: Some(4),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = Scripted::default();
    g.then(Step::Sleep(Duration::from_millis(50)))
        .then(Step::Answer(Err(CallError::DeadlineExceeded)))
        .then(Step::Sleep(Duration::from_millis(50)));
    for name in ["a", "b", "c", "d"] {
        r.push(add(name, 1));
    }
    r.drain(&g).await;
    assert_eq!(g.seen().len(), 4, "the other calls ended normally");
    assert!(
        r.states.steps().is_empty(),
        "one failure quarantines nothing"
    );
    let errors = r
        .metrics
        .errors
        .get_or_create(&super::metrics::ErrorLabels {
            plugin: "p".into(),
            kind: super::metrics::ErrorKind::Deadline,
        })
        .get();
    assert_eq!(errors, 1);
}

#[tokio::test(start_paused = true)]
async fn a_panic_among_concurrent_calls_returns_every_key_in_flight() {
    let r = rig(DispatchConfig {
        concurrency: Some(3),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = Scripted::default();
    g.then(Step::Sleep(Duration::from_secs(10)))
        .then(Step::Panic);
    r.push(add("a", 1));
    r.push(add("b", 1));
    let template = g.clone();
    let task = super::delivery::worker::spawn_task(
        r.dispatcher.clone(),
        move || template.clone(),
        Duration::from_millis(10),
    );
    seen_at_least(&g, 2).await;
    while r.states.steps().len() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(r.states.steps()[..2], ["panicked", "resumed"]);
    assert_eq!(r.dispatcher.calls_in_flight(), 0);
    // Both keys, the one that panicked and the one abandoned with it, are usable again.
    r.push(update("a", 1, 2));
    r.push(update("b", 1, 2));
    seen_at_least(&g, 4).await;
    let mut after = g.seen()[2..].to_vec();
    after.sort();
    assert_eq!(after, ["update ns/a 1->2", "update ns/b 1->2"]);
    r.dispatcher.stop();
    task.await.unwrap();
}

/// A guest that logs when each call starts and ends, each taking the time its description is
/// given in `takes` (else 1 ms), so a test can assert which calls overlapped.
#[derive(Clone, Default)]
struct Timeline {
    log: Arc<Mutex<Vec<String>>>,
    takes: Arc<std::collections::HashMap<String, Duration>>,
}

impl Timeline {
    fn new(takes: &[(&str, Duration)]) -> Self {
        Timeline {
            log: Arc::default(),
            takes: Arc::new(takes.iter().map(|(d, t)| (d.to_string(), *t)).collect()),
        }
    }

    async fn run(&self, what: String) -> Result<HandlerOutcome, CallError> {
        self.log.lock().push(format!("start {what}"));
        let took = self.takes.get(&what).copied();
        tokio::time::sleep(took.unwrap_or(Duration::from_millis(1))).await;
        self.log.lock().push(format!("end {what}"));
        Ok(HandlerOutcome::Ok)
    }

    fn at(&self, entry: &str) -> usize {
        let log = self.log.lock();
        log.iter()
            .position(|e| e == entry)
            .unwrap_or_else(|| panic!("{entry} not in {log:?}"))
    }

    async fn wait_for(&self, entry: &str) {
        while !self.log.lock().iter().any(|e| e == entry) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl Guest for Timeline {
    async fn deliver(&mut self, n: &Notification) -> Result<HandlerOutcome, CallError> {
        self.run(describe(n)).await
    }

    fn wants_synced(&self) -> bool {
        true
    }

    async fn synced(&mut self) -> Result<HandlerOutcome, CallError> {
        self.run("synced".into()).await
    }
}

#[tokio::test(start_paused = true)]
async fn on_synced_waits_for_the_initial_list_calls_and_then_holds_up_no_other_call() {
    let r = rig(DispatchConfig {
        concurrency: Some(4),
        ..DispatchConfig::default()
    });
    r.dispatcher.watch_sync_with(Box::new(|| true));
    r.dispatcher.open();
    let g = Timeline::new(&[
        ("add ns/a 1 init", Duration::from_secs(10)),
        ("add ns/x 1", Duration::from_secs(1000)),
        ("synced", Duration::from_secs(100)),
    ]);
    // A slow initial add, a fast one, and a slow call about a new object.
    r.push(initial("a"));
    r.push(initial("b"));
    r.push(add("x", 1));
    let run = r.spawn(&g);
    g.wait_for("start synced").await;
    assert!(
        g.at("end add ns/a 1 init") < g.at("start synced"),
        "on-synced started while an initial-list call was in flight: {:?}",
        g.log.lock()
    );
    // Both the slow on-synced and x's slow call are in flight: new objects still get the
    // other two slots, one after another.
    assert_eq!(r.dispatcher.calls_in_flight(), 2);
    for name in ["c", "d", "e"] {
        r.push(add(name, 1));
    }
    g.wait_for("end add ns/e 1").await;
    assert!(
        !g.log
            .lock()
            .iter()
            .any(|e| e == "end synced" || e == "end add ns/x 1"),
        "the others were served while on-synced and x were in flight"
    );
    g.wait_for("end synced").await;
    r.dispatcher.kill();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn at_concurrency_one_on_synced_takes_the_slot_between_the_replay_and_newer_calls() {
    let r = rig(DispatchConfig::default());
    r.dispatcher.watch_sync_with(Box::new(|| true));
    r.dispatcher.open();
    let g = Timeline::new(&[("add ns/a 1 init", Duration::from_secs(10))]);
    r.push(initial("a"));
    r.push(add("b", 1));
    r.push(add("c", 1));
    r.drain(&g).await;
    let starts: Vec<String> = g
        .log
        .lock()
        .iter()
        .filter_map(|e| e.strip_prefix("start ").map(str::to_string))
        .collect();
    assert_eq!(
        starts,
        ["add ns/a 1 init", "synced", "add ns/b 1", "add ns/c 1"]
    );
    let log = g.log.lock().clone();
    for pair in log.chunks(2) {
        assert_eq!(
            pair[0].replacen("start", "end", 1),
            pair[1],
            "one call at a time: {log:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_queue_depth_gauge_counts_both_versions_during_a_hot_swap() {
    let metrics = PluginMetrics::unregistered();
    let config = DispatchConfig::default();
    let v1 = Dispatcher::new("p", 1, &metrics, &config, None);
    let v2 = Dispatcher::new("p", 2, &metrics, &config, None);
    let depth = || {
        metrics
            .queue_depth
            .get_or_create(&super::metrics::PluginLabels { plugin: "p".into() })
            .get()
    };
    for name in ["a", "b", "c"] {
        v1.handler(0, None).on_add(&obj(name, 1), false);
    }
    for name in ["a", "b"] {
        v2.handler(0, None).on_add(&obj(name, 1), true);
    }
    assert_eq!(depth(), 5, "v1 drains while v2 fills");
    v1.stop();
    assert_eq!(depth(), 2, "stopping v1 leaves v2's waiting notifications");
    drop(v1);
    assert_eq!(depth(), 2);
    drop(v2);
    assert_eq!(depth(), 0, "a dropped queue takes its share off");
}

/// Waits (on the paused clock) until `cond` holds.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(start_paused = true)]
async fn idle_instances_are_released_and_made_again_on_demand() {
    let r = rig(DispatchConfig {
        concurrency: Some(4),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    let g = Scripted::default();
    for _ in 0..4 {
        g.then(Step::Sleep(Duration::from_secs(1)));
    }
    for name in ["a", "b", "c", "d"] {
        r.push(add(name, 1));
    }
    let run = r.spawn(&g);
    until("four calls at once", || r.dispatcher.calls_in_flight() == 4).await;
    assert_eq!(r.dispatcher.instances(), 4);
    until("the calls end", || r.dispatcher.calls_in_flight() == 0).await;
    assert_eq!(r.dispatcher.instances(), 4, "kept while recently used");
    tokio::time::sleep(IDLE_RELEASE + Duration::from_secs(1)).await;
    assert_eq!(r.dispatcher.instances(), 0, "released once idle");
    r.push(add("e", 1));
    until("a fresh instance serves the next call", || {
        g.seen().contains(&"add ns/e 1".to_string())
    })
    .await;
    assert_eq!(r.dispatcher.instances(), 1);
    r.dispatcher.stop();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn calls_wait_for_an_instance_when_another_would_not_fit_the_plugins_memory() {
    let r = rig(DispatchConfig {
        concurrency: Some(4),
        ..DispatchConfig::default()
    });
    r.dispatcher.open();
    // One instance of 60 bytes is alive in a budget of 100: a second would not fit.
    let budget = MemoryBudget::new("p", 100, &RuntimeMetrics::unregistered());
    budget.charge(BudgetKind::Linear, 60).unwrap();
    budget.instance_reached(60);
    let g = Scripted {
        budget: Some(budget.clone()),
        ..Scripted::default()
    };
    for _ in 0..4 {
        g.then(Step::Sleep(Duration::from_secs(1)));
    }
    for name in ["a", "b", "c", "d"] {
        r.push(add(name, 1));
    }
    let run = r.spawn(&g);
    until("the first call", || r.dispatcher.calls_in_flight() == 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        (r.dispatcher.calls_in_flight(), r.dispatcher.instances()),
        (1, 1),
        "no second instance while it would not fit"
    );
    until("every call served, one at a time", || g.seen().len() == 4).await;
    // Room again: the next calls overlap.
    budget.release(BudgetKind::Linear, 60);
    for _ in 0..2 {
        g.then(Step::Sleep(Duration::from_secs(1)));
    }
    until("the last call ends", || r.dispatcher.calls_in_flight() == 0).await;
    r.push(add("e", 1));
    r.push(add("f", 1));
    until("two calls at once", || r.dispatcher.calls_in_flight() == 2).await;
    r.dispatcher.stop();
    run.await.unwrap();
}

/// Writes down what a dispatcher tells its observer.
#[derive(Default)]
struct Told(Mutex<Vec<String>>);

impl Observer for Told {
    fn call_started(&self, plugin: &str, _: CallKind) {
        self.0.lock().push(format!("{plugin} start"));
    }

    fn call_ended(&self, plugin: &str, call: &CallEnded<'_>) {
        let key = call.object.map_or("-", |o| o.key);
        self.0.lock().push(format!("{plugin} end {key}"));
    }

    fn quarantined(&self, plugin: &str, q: &Quarantined) {
        let line = format!("{plugin} quarantined v{} after {}", q.version, q.failures);
        self.0.lock().push(line);
    }
}

#[tokio::test(start_paused = true)]
async fn the_observer_is_told_each_call_and_each_quarantine_once() {
    let told = Arc::new(Told::default());
    let r = rig_observed(
        DispatchConfig {
            concurrency: Some(4),
            ..DispatchConfig::default()
        },
        Some(told.clone()),
    );
    r.dispatcher.open();
    let g = Scripted::default();
    for _ in 0..5 {
        g.then(Step::Answer(Err(CallError::DeadlineExceeded)));
    }
    for name in ["a", "b", "c", "d", "e", "f"] {
        r.push(add(name, 1));
    }
    r.drain(&g).await;
    let told = told.0.lock().clone();
    let count = |line: &str| told.iter().filter(|l| *l == line).count();
    assert_eq!(count("p start"), 6, "{told:?}");
    for name in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(count(&format!("p end ns/{name}")), 1, "{told:?}");
    }
    let quarantines: Vec<_> = told.iter().filter(|l| l.contains("quarantined")).collect();
    assert_eq!(quarantines, ["p quarantined v1 after 5"], "{told:?}");
    assert_eq!(r.states.steps(), ["quarantined", "resumed"]);
}
