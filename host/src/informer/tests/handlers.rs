//! Shared-informer scenarios: A (5, 6), D (22, 26, 28), H (50–54), I (55–60, 62), factory.

use super::*;

#[tokio::test(start_paused = true)]
async fn scenario_05_initial_item_updated_before_pop() {
    let fake = Fake::new();
    fake.block_lists();
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.fifo().replace(vec![o("a", "1")]);
    inf.fifo().update(o("a", "3"));
    inf.run();
    assert_eq!(
        rec.wait_len(2).await,
        vec![init_add("a", "1"), upd("a", "1", "3", false)]
    );
}

#[tokio::test(start_paused = true)]
async fn scenario_06_registration_has_synced() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1"), v("b", "2")], "10");
    let inf = informer(&fake);
    let rec = Recorder::new();
    let h = inf.add_event_handler(rec.clone(), None).unwrap();
    assert!(!h.has_synced(&inf));
    inf.run();
    rec.wait_len(2).await;
    // The listener task returns from the last on_add before the count drops; let it finish.
    tokio::task::yield_now().await;
    assert!(h.has_synced(&inf));
}

#[tokio::test(start_paused = true)]
async fn scenario_22_watch_disruption_with_per_listener_resync() {
    let fake = Fake::new();
    fake.set_list(vec![v("pod1", "1"), v("pod2", "2")], "2");
    let inf = informer(&fake);
    let (lnr, lr) = (Recorder::new(), Recorder::new());
    inf.add_event_handler(lnr.clone(), None).unwrap();
    inf.add_event_handler(lr.clone(), Some(Duration::from_secs(1)))
        .unwrap();
    inf.run();
    lnr.wait_len(2).await;
    // +1 s: the resync check marks Lr syncing (and Lnr not); Lr gets the resync updates.
    let evs = lr.wait_len(4).await;
    assert_eq!(
        evs[2..]
            .iter()
            .filter(|e| matches!(e, Ev::Update(_, _, true)))
            .count(),
        2
    );
    // pod3 added and pod2 modified, their watch events lost; the watch breaks.
    fake.set_list(vec![v("pod1", "1"), v("pod2", "4"), v("pod3", "3")], "4");
    fake.send(Err(expired()));
    let a = lnr.wait_len(4).await;
    let b = lr.wait_len(7).await;
    assert_eq!(
        a[2..].to_vec(),
        vec![upd("pod2", "2", "4", false), add("pod3", "3")]
    );
    assert_eq!(
        b[4..7].to_vec(),
        vec![
            upd("pod1", "1", "1", true),
            upd("pod2", "2", "4", false),
            add("pod3", "3")
        ]
    );
    assert_eq!(lnr.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn scenario_26_delete_queued_then_relisted_handler_view() {
    let fake = Fake::new();
    fake.block_lists();
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.indexer().add(o("foo", "1"));
    inf.fifo().delete(DeltaObject::Object(o("foo", "1")));
    inf.fifo().replace(vec![o("foo", "2")]);
    inf.run();
    let evs = rec.wait_len(2).await;
    assert_eq!(evs[0], del("foo", "1", false));
    assert!(matches!(&evs[1], Ev::Add(k, _) if k == "foo@2"));
}

#[tokio::test(start_paused = true)]
async fn scenario_28_tombstone_without_state_uses_cached_object() {
    let fake = Fake::new();
    fake.block_lists();
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.indexer().add(o("k", "7"));
    inf.fifo()
        .delete(DeltaObject::Tombstone(DeletedFinalStateUnknown {
            key: "k".into(),
            obj: None,
        }));
    inf.run();
    assert_eq!(rec.wait_len(1).await, vec![del("k", "7", true)]);
}

#[tokio::test(start_paused = true)]
async fn scenario_50_per_handler_periods() {
    let fake = Fake::new();
    fake.set_list(vec![v("pod1", "1"), v("pod2", "2")], "2");
    let inf = informer(&fake);
    let (l1, l2, l3) = (Recorder::new(), Recorder::new(), Recorder::new());
    inf.add_event_handler(l1.clone(), None).unwrap();
    inf.add_event_handler(l2.clone(), Some(Duration::from_secs(2)))
        .unwrap();
    inf.add_event_handler(l3.clone(), Some(Duration::from_secs(3)))
        .unwrap();
    let t0 = Instant::now();
    inf.run();
    l3.wait_len(4).await;
    let times = |r: &Recorder| -> Vec<Duration> {
        r.events
            .lock()
            .iter()
            .skip(2)
            .map(|(t, _)| *t - t0)
            .collect()
    };
    assert_eq!(times(&l2)[..2], [Duration::from_secs(2); 2]);
    assert_eq!(times(&l3)[..2], [Duration::from_secs(3); 2]);
    assert!(
        times(&l2).iter().all(|t| *t != Duration::from_secs(3)),
        "L2 not synced at +3s"
    );
    assert_eq!(l1.len(), 2, "L1 never resyncs");
    assert!(
        l2.evs()[2..]
            .iter()
            .all(|e| matches!(e, Ev::Update(_, _, true)))
    );
}

#[tokio::test(start_paused = true)]
async fn scenario_51_check_period_follows_handlers() {
    let fake = Fake::new();
    let inf = informer(&fake);
    let mut want = Vec::new();
    for (req, check) in [(0u64, None), (60, Some(60)), (55, Some(55)), (5, Some(5))] {
        let h = inf
            .add_event_handler(Recorder::new(), Some(Duration::from_secs(req)))
            .unwrap();
        want.push((h.id, (req > 0).then(|| Duration::from_secs(req))));
        assert_eq!(inf.resync_check_period(), check.map(Duration::from_secs));
    }
    assert_eq!(inf.resync_periods(), want);
}

#[tokio::test(start_paused = true)]
async fn scenario_52_clamping_and_late_short_period_honoured() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let inf = informer(&fake);
    let slow = Recorder::new();
    let h = inf
        .add_event_handler(slow.clone(), Some(Duration::from_millis(100)))
        .unwrap();
    assert_eq!(
        inf.resync_periods(),
        vec![(h.id, Some(Duration::from_secs(1)))]
    );
    inf.run();
    fake.wait_live_watch(2).await;
    // Better than client-go: a late handler asking for less than the current check period gets
    // its own period (client-go would raise it to the check period).
    let inf2 = informer(&fake);
    let _ = inf2;
    let late = Recorder::new();
    let h2 = inf
        .add_event_handler(late.clone(), Some(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(
        inf.resync_periods()[1],
        (h2.id, Some(Duration::from_secs(1)))
    );
}

#[tokio::test(start_paused = true)]
async fn scenario_53_resync_zero_means_permanently_syncing() {
    let (fake, inf, rec) = started(vec![v("a", "1")], "1").await;
    let rec2 = Recorder::new();
    inf.add_event_handler(rec2.clone(), None).unwrap();
    rec2.wait_len(1).await;
    fake.send(Err(expired()));
    assert_eq!(rec.wait_len(2).await[1], upd("a", "1", "1", true));
    assert_eq!(rec2.wait_len(2).await[1], upd("a", "1", "1", true));
}

#[tokio::test(start_paused = true)]
async fn scenario_54_resync_runs_only_while_watching() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), Some(Duration::from_secs(1)))
        .unwrap();
    inf.run();
    rec.wait_len(2).await; // add + first resync at +1 s
    // Outage: the watch breaks and lists fail for a while (backoff grows to ~12 s total).
    for _ in 0..4 {
        fake.script_list(Err(SourceError::new(
            SourceErrorKind::ConnectionRefused,
            "down",
        )));
    }
    let broke = Instant::now();
    fake.send(Err(expired()));
    fake.wait_live_watch(8).await; // L, W, 4 failed L, L, W
    let back = fake.timed_calls()[7].0;
    assert!(back - broke >= Duration::from_secs(10));
    rec.wait_len(4).await; // the relist's sync update, then the next resync
    let times: Vec<Instant> = rec.events.lock().iter().map(|(t, _)| *t).collect();
    assert!(
        times.iter().all(|t| *t <= broke || *t >= back),
        "no resync during the outage"
    );
    // The resync that fell due during the outage runs as soon as the watch phase resumes; it
    // finds every key still queued by the relist, so the next update is one period later.
    assert_eq!(
        times[3] - back,
        Duration::from_secs(1),
        "overdue resync at the end of the outage, then on schedule"
    );
}

#[tokio::test(start_paused = true)]
async fn scenario_55_late_handler_gets_replay() {
    let (fake, inf, h1) = started(vec![v("pod1", "1")], "1").await;
    let h2 = Recorder::new();
    let handle2 = inf.add_event_handler(h2.clone(), None).unwrap();
    assert!(!handle2.has_synced(&inf));
    assert_eq!(h2.wait_len(1).await, vec![init_add("pod1", "1")]);
    tokio::task::yield_now().await;
    assert!(handle2.has_synced(&inf));
    fake.send(Ok(WatchEvent::Added(v("pod2", "2"))));
    assert_eq!(h1.wait_len(2).await[1], add("pod2", "2"));
    assert_eq!(h2.wait_len(2).await[1], add("pod2", "2"));
}

#[tokio::test(start_paused = true)]
async fn scenario_56_remove_handler() {
    let (fake, inf, h1) = started(vec![v("a", "1")], "1").await;
    let h2 = Recorder::new();
    let handle2 = inf.add_event_handler(h2.clone(), None).unwrap();
    h2.wait_len(1).await;
    assert_eq!(inf.remove_event_handler(handle2.id), 1);
    assert_eq!(
        inf.remove_event_handler(handle2.id),
        1,
        "second removal is a no-op"
    );
    let other = informer(&fake);
    assert_eq!(
        other.remove_event_handler(handle2.id),
        0,
        "foreign informer: no-op"
    );
    fake.send(Ok(WatchEvent::Added(v("b", "2"))));
    h1.wait_len(2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h2.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn scenario_57_duplicate_registration() {
    let (fake, inf, _h) = started(vec![], "1").await;
    let rec = Recorder::new();
    let a = inf.add_event_handler(rec.clone(), None).unwrap();
    let b = inf.add_event_handler(rec.clone(), None).unwrap();
    assert_ne!(a.id, b.id);
    fake.send(Ok(WatchEvent::Added(v("x", "2"))));
    rec.wait_len(2).await;
    inf.remove_event_handler(a.id);
    fake.send(Ok(WatchEvent::Added(v("y", "3"))));
    assert_eq!(rec.wait_len(3).await[2], add("y", "3"));
}

#[tokio::test(start_paused = true)]
async fn scenario_58_add_after_stop() {
    let (_fake, inf, _h) = started(vec![], "1").await;
    inf.stop();
    assert!(inf.is_stopped());
    let err = inf.add_event_handler(Recorder::new(), None).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("was not added to shared informer because it has stopped already")
    );
}

struct Gate {
    rx: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    seen: Arc<Recorder>,
}

impl ResourceEventHandler for Gate {
    fn on_add(&self, obj: &SharedObject, init: bool) {
        // A handler that blocks must tell tokio (block_in_place), or tasks parked in this
        // worker's LIFO slot could not be stolen by the other worker.
        let _ = tokio::task::block_in_place(|| self.rx.lock().unwrap().recv());
        self.seen.on_add(obj, init);
    }
    fn on_update(&self, _: &SharedObject, _: &SharedObject, _: bool) {}
    fn on_delete(&self, _: &SharedObject, _: bool) {}
}

/// Real threads: the slow handler genuinely blocks its thread, so no paused clock here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_59_slow_handler_blocks_nobody() {
    let fake = Fake::new();
    fake.set_list(vec![], "1");
    let inf = informer(&fake);
    let (tx, rx) = std::sync::mpsc::channel();
    let slow_seen = Recorder::new();
    let slow = Arc::new(Gate {
        rx: std::sync::Mutex::new(rx),
        seen: slow_seen.clone(),
    });
    let fast = Recorder::new();
    inf.add_event_handler(slow, None).unwrap();
    inf.add_event_handler(fast.clone(), None).unwrap();
    inf.run();
    fake.wait_live_watch(2).await;
    for i in 0..2000 {
        fake.send(Ok(WatchEvent::Added(v(
            &format!("p{i}"),
            &format!("{}", i + 2),
        ))));
    }
    fast.wait_len(2000).await;
    assert_eq!(slow_seen.len(), 0);
    for _ in 0..2000 {
        tx.send(()).unwrap();
    }
    let evs = slow_seen.wait_len(2000).await;
    let want: Vec<Ev> = (0..2000)
        .map(|i| add(&format!("p{i}"), &format!("{}", i + 2)))
        .collect();
    assert_eq!(evs, want, "delivered in order once unblocked");
    inf.stop();
}

struct Panicky(Arc<Recorder>);

impl ResourceEventHandler for Panicky {
    fn on_add(&self, obj: &SharedObject, init: bool) {
        if obj.key() == "boom" {
            panic!("handler bug");
        }
        self.0.on_add(obj, init);
    }
    fn on_update(&self, _: &SharedObject, _: &SharedObject, _: bool) {}
    fn on_delete(&self, _: &SharedObject, _: bool) {}
}

/// Deliberate deviation: a panicking handler does not crash the host; the notification is
/// skipped and the handler keeps receiving.
#[tokio::test(start_paused = true)]
async fn scenario_60_handler_panic_is_contained() {
    let (fake, inf, _h) = started(vec![], "1").await;
    let rec = Recorder::new();
    inf.add_event_handler(Arc::new(Panicky(rec.clone())), None)
        .unwrap();
    fake.send(Ok(WatchEvent::Added(v("boom", "2"))));
    fake.send(Ok(WatchEvent::Added(v("fine", "3"))));
    assert_eq!(rec.wait_len(1).await, vec![add("fine", "3")]);
}

#[tokio::test(start_paused = true)]
async fn scenario_62_filtering_handler() {
    let rec = Recorder::new();
    let f = FilteringHandler {
        selector: LabelSelector::parse("app=web").unwrap(),
        inner: rec.clone(),
    };
    let mk = |rv: &str, app: &str| {
        Arc::new(
            KubeObject::from_value(json!({"apiVersion":"v1","kind":"Pod",
            "metadata":{"name":"x","resourceVersion":rv,"labels":{"app":app}}}))
            .unwrap(),
        )
    };
    f.on_update(&mk("1", "web"), &mk("2", "db"), false);
    f.on_update(&mk("2", "db"), &mk("3", "web"), false);
    f.on_update(&mk("3", "db"), &mk("4", "db"), false);
    assert_eq!(rec.evs(), vec![del("x", "1", false), add("x", "3")]);
}

#[tokio::test(start_paused = true)]
async fn factory_shares_one_informer_per_key_and_stops_with_last_handler() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let metrics = InformerMetrics::unregistered();
    let f = InformerFactory::with_source(Arc::new(FakeFactory(fake.clone())), metrics.clone());
    let (r1, r2) = (Recorder::new(), Recorder::new());
    let reg1 = f.add_handler(&pod_key(), r1.clone(), None).await.unwrap();
    let reg2 = f.add_handler(&pod_key(), r2.clone(), None).await.unwrap();
    reg1.wait_synced().await;
    reg2.wait_synced().await;
    assert_eq!(f.keys(), vec![pod_key()]);
    assert!(f.has_synced(&pod_key()));
    assert_eq!(f.indexer(&pod_key()).unwrap().len(), 1);
    assert_eq!(fake.list_rvs().len(), 1, "one informer, one list");
    assert_eq!(metrics.objects(&pod_key().to_string()), 1);
    assert_eq!(metrics.lists(&pod_key().to_string()), 1);
    let err = f
        .add_handler(&InformerKey::new("v1", "Unknown"), r1.clone(), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Unknown"));
    reg1.remove().await;
    assert!(!fake.watch_closed());
    reg2.remove().await;
    assert!(fake.watch_closed(), "last handler gone: watch closed");
    assert!(f.keys().is_empty());
    // A new handler starts a fresh informer.
    let reg3 = f
        .add_handler(&pod_key(), Recorder::new(), None)
        .await
        .unwrap();
    reg3.wait_synced().await;
    assert_eq!(fake.list_rvs().len(), 2);
    f.shutdown().await;
    assert!(
        f.add_handler(&pod_key(), Recorder::new(), None)
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn metrics_count_relists_and_restarts() {
    let mut reg = prometheus_client::registry::Registry::default();
    let metrics = InformerMetrics::new(&mut reg);
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let f = InformerFactory::with_source(Arc::new(FakeFactory(fake.clone())), metrics.clone());
    let rec = Recorder::new();
    let reg1 = f
        .add_handler(&pod_key(), rec.clone(), Some(Duration::from_secs(5)))
        .await
        .unwrap();
    reg1.wait_synced().await;
    fake.wait_live_watch(2).await;
    fake.send(Err(expired()));
    fake.wait_live_watch(4).await;
    rec.wait_len(3).await; // add, relist sync-update, resync at +5 s
    let k = pod_key().to_string();
    assert_eq!(metrics.relists(&k, "expired"), 1);
    assert_eq!(metrics.watch_restarts(&k), 1);
    assert!(metrics.resyncs(&k) >= 1);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
    assert!(out.contains("kubewasm_informer_relists_total"), "{out}");
    assert!(
        out.contains("kubewasm_informer_listener_queue_depth"),
        "{out}"
    );
    f.shutdown().await;
}

/// Better than client-go (k/k#48941): a handler added after start with a shorter period than
/// every existing one re-plans the resync timer and is served on its own schedule.
#[tokio::test(start_paused = true)]
async fn late_handler_short_period_replans_resync() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let inf = informer(&fake);
    let slow = Recorder::new();
    inf.add_event_handler(slow.clone(), Some(Duration::from_secs(60)))
        .unwrap();
    inf.run();
    fake.wait_live_watch(2).await;
    slow.wait_len(1).await;
    let t0 = Instant::now();
    let fast = Recorder::new();
    inf.add_event_handler(fast.clone(), Some(Duration::from_secs(2)))
        .unwrap();
    let evs = fast.wait_len(2).await;
    assert_eq!(evs[1], upd("a", "1", "1", true));
    assert_eq!(fast.events.lock()[1].0 - t0, Duration::from_secs(2));
    assert_eq!(slow.len(), 1, "the 60 s handler is not due yet");
    assert_eq!(inf.resync_check_period(), Some(Duration::from_secs(2)));
}

#[tokio::test(start_paused = true)]
async fn scenario_61_transform() {
    let fake = Fake::new();
    fake.set_list(vec![v("pod1", "1"), v("pod2", "2")], "2");
    let inf = informer(&fake);
    let upper: TransformFunc = Arc::new(|mut v: Value| {
        if let Some(n) = v.pointer_mut("/metadata/name")
            && let Some(s) = n.as_str()
        {
            *n = Value::String(s.to_uppercase());
        }
        v
    });
    inf.set_transform(upper).unwrap();
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    assert_eq!(
        rec.wait_len(2).await,
        vec![init_add("POD1", "1"), init_add("POD2", "2")]
    );
    fake.wait_live_watch(2).await;
    fake.send(Ok(WatchEvent::Modified(v("pod1", "3"))));
    // The relist's tombstone carries the transformed last state.
    fake.set_list(vec![v("pod1", "3")], "4");
    fake.send(Err(expired()));
    let evs = rec.wait_len(5).await;
    assert_eq!(evs[2], upd("POD1", "1", "3", false));
    assert!(evs.contains(&del("POD2", "2", true)), "{evs:?}");
    assert!(inf.indexer().get("POD1").is_some());
    let err = inf.set_transform(Arc::new(|v| v)).unwrap_err();
    assert!(err.to_string().ends_with("informer has already started"));
}

#[tokio::test(start_paused = true)]
async fn scenario_45_watch_list_with_transform() {
    let fake = Fake::new();
    let inf = informer_with(
        &fake,
        ReflectorConfig {
            use_watch_list: true,
            ..Default::default()
        },
    );
    inf.set_transform(Arc::new(|mut v: Value| {
        if let Some(n) = v.pointer_mut("/metadata/name")
            && let Some(s) = n.as_str()
        {
            *n = Value::String(s.to_uppercase());
        }
        v
    }))
    .unwrap();
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    fake.wait_live_watch(1).await;
    fake.send(Ok(WatchEvent::Added(v("foo", "1"))));
    fake.send(Ok(WatchEvent::Added(v("bar", "2"))));
    fake.send(Ok(WatchEvent::Bookmark {
        resource_version: "2".into(),
        initial_events_end: true,
    }));
    fake.send(Ok(WatchEvent::Added(v("baz", "3"))));
    // Only the two objects before the bookmark form the (single) Replace, already transformed.
    assert_eq!(
        rec.wait_len(3).await,
        vec![init_add("FOO", "1"), init_add("BAR", "2"), add("BAZ", "3")]
    );
}

/// Issue 8 defect: a registration that lands after `remove` found the informer idle but before
/// it stopped it was kept by a stopping informer and never called. The seam runs exactly there,
/// standing in for an `add_handler` that read the factory's map just before the removal.
#[tokio::test(start_paused = true)]
async fn registration_racing_the_last_removal_keeps_the_informer() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let f = InformerFactory::with_source(
        Arc::new(FakeFactory(fake.clone())),
        InformerMetrics::unregistered(),
    );
    let reg = f
        .add_handler(&pod_key(), Recorder::new(), None)
        .await
        .unwrap();
    reg.wait_synced().await;
    fake.wait_live_watch(2).await;
    let inf = f.informer(&pod_key()).unwrap();
    let late = Recorder::new();
    let (inf2, late2) = (inf.clone(), late.clone());
    f.set_before_idle_stop(move || {
        // Either it joins the live informer, or it is told the informer stopped (and
        // `add_handler` then starts a fresh one); never a registration on a stopping informer.
        if let Err(e) = inf2.add_event_handler(late2, None) {
            assert!(matches!(e, InformerError::Stopped(_)), "{e}");
        }
    });
    reg.remove().await;
    assert!(
        !inf.is_stopped(),
        "informer stopped under a registered handler"
    );
    assert_eq!(late.wait_len(1).await, vec![init_add("a", "1")]);
    fake.send(Ok(WatchEvent::Added(v("b", "2"))));
    assert_eq!(late.wait_len(2).await[1], add("b", "2"));
    f.shutdown().await;
}

/// Issue 8 defect: the first handler with a resync period, added right after the reflector
/// read the (empty) plan, must still be resynced on its schedule.
#[tokio::test(start_paused = true)]
async fn handler_added_while_the_plan_is_read_is_resynced() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let inf = informer(&fake);
    inf.add_event_handler(Recorder::new(), None).unwrap();
    let late = Recorder::new();
    let (weak, late2) = (Arc::downgrade(&inf), late.clone());
    let added_at = Arc::new(Mutex::new(None));
    let added_at2 = added_at.clone();
    *inf.processor().after_plan_read.lock() = Some(Box::new(move || {
        let inf = weak.upgrade().unwrap();
        inf.add_event_handler(late2, Some(Duration::from_secs(2)))
            .unwrap();
        *added_at2.lock() = Some(Instant::now());
    }));
    inf.run();
    fake.wait_live_watch(2).await;
    let evs = late.wait_len(2).await;
    assert_eq!(evs[1], upd("a", "1", "1", true));
    let t0 = added_at.lock().unwrap();
    assert_eq!(late.events.lock()[1].0 - t0, Duration::from_secs(2));
}

/// Issue 8 defect: a relist must not restart the handlers' resync schedules (client-go keeps
/// each listener's next resync time; only its check timer restarts).
#[tokio::test(start_paused = true)]
async fn relist_keeps_each_handlers_resync_schedule() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let inf = informer(&fake);
    let rec = Recorder::new();
    let t0 = Instant::now();
    inf.add_event_handler(rec.clone(), Some(Duration::from_secs(60)))
        .unwrap();
    inf.run();
    rec.wait_len(1).await;
    fake.wait_live_watch(2).await;
    // Scenario time: 30 s into the schedule the watch expires and the informer relists.
    tokio::time::sleep_until(t0 + Duration::from_secs(30)).await;
    fake.send(Err(expired()));
    fake.wait_live_watch(4).await;
    // The relist's is-sync update (the handler is still syncing), then the resync at +60 s.
    let evs = rec.wait_len(3).await;
    assert_eq!(evs[1], upd("a", "1", "1", true));
    assert_eq!(evs[2], upd("a", "1", "1", true));
    assert_eq!(rec.events.lock()[2].0 - t0, Duration::from_secs(60));
}

/// Issue 8 defect: the resync timer keeps running while the watch is re-opened or backs off
/// (client-go's resync goroutine lives for the whole ListAndWatch, watch retries included).
#[tokio::test(start_paused = true)]
async fn resync_runs_while_the_watch_backs_off() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "1");
    let inf = informer(&fake);
    let rec = Recorder::new();
    let t0 = Instant::now();
    inf.add_event_handler(rec.clone(), Some(Duration::from_secs(5)))
        .unwrap();
    inf.run();
    rec.wait_len(1).await;
    fake.wait_live_watch(2).await;
    // Throttled, then the server refuses connections for a while: re-watch attempts with a
    // growing backoff (0.8 + 1.6 + 3.2 + 6.4 s at least), never a relist.
    for _ in 0..4 {
        fake.script_watch(WatchScript::Err(SourceError::new(
            SourceErrorKind::ConnectionRefused,
            "refused",
        )));
    }
    fake.send(Err(SourceError::from_status(
        429,
        "TooManyRequests",
        "slow down",
        &[],
    )));
    let evs = rec.wait_len(2).await;
    assert_eq!(evs[1], upd("a", "1", "1", true));
    let resynced = rec.events.lock()[1].0;
    assert_eq!(resynced - t0, Duration::from_secs(5));
    fake.wait_live_watch(7).await;
    let reopened = fake.timed_calls()[6].0;
    assert!(resynced < reopened, "resynced while the watch was down");
    assert_eq!(fake.list_rvs().len(), 1, "no relist");
}
