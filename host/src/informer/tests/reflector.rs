//! Reflector scenarios: A (1), B (7–9, 12, 13), D (20–25, 30), E (31–38), F (40–43), G (44, 46).

use super::*;

fn list_opts(rv: &str, limit: Option<u32>) -> Call {
    Call::List(ListOptions {
        resource_version: rv.into(),
        limit,
        continue_token: None,
        shard_selector: None,
    })
}

fn page(items: Vec<Value>, rv: &str, cont: Option<&str>) -> Result<ListPage, SourceError> {
    Ok(ListPage {
        items,
        resource_version: rv.into(),
        continue_token: cont.map(str::to_string),
        shard_selector: None,
    })
}

fn watch_rv(c: &Call) -> &str {
    match c {
        Call::Watch(w) => &w.resource_version,
        other => panic!("not a watch: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn scenario_01_initial_list_adds_flagged_initial() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1"), v("b", "2")], "10");
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    assert!(!inf.has_synced());
    inf.run();
    let evs = rec.wait_len(2).await;
    assert_eq!(evs, vec![init_add("a", "1"), init_add("b", "2")]);
    let calls = fake.wait_calls(2).await;
    assert_eq!(calls[0], list_opts("0", Some(500)));
    let Call::Watch(w) = &calls[1] else { panic!() };
    assert_eq!(w.resource_version, "10");
    assert!(w.allow_bookmarks && !w.send_initial_events);
    assert!((300..600).contains(&w.timeout_seconds));
    assert!(inf.has_synced());
    assert_eq!(inf.indexer().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn scenario_07_watch_added() {
    let (fake, inf, rec) = started(vec![v("a", "1")], "10").await;
    fake.send(Ok(WatchEvent::Added(v("c", "11"))));
    assert_eq!(rec.wait_len(2).await[1], add("c", "11"));
    assert!(inf.indexer().get("c").is_some());
    assert_eq!(inf.last_sync_resource_version(), "11");
}

#[tokio::test(start_paused = true)]
async fn scenario_08_watch_modified() {
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "10");
    let inf = informer(&fake);
    let (r1, r2) = (Recorder::new(), Recorder::new());
    inf.add_event_handler(r1.clone(), None).unwrap();
    inf.add_event_handler(r2.clone(), Some(Duration::from_secs(3600)))
        .unwrap();
    inf.run();
    fake.wait_live_watch(2).await;
    fake.send(Ok(WatchEvent::Modified(v("a", "12"))));
    assert_eq!(r1.wait_len(2).await[1], upd("a", "1", "12", false));
    assert_eq!(r2.wait_len(2).await[1], upd("a", "1", "12", false));
}

#[tokio::test(start_paused = true)]
async fn scenario_09_watch_deleted() {
    let (fake, inf, rec) = started(vec![v("a", "1"), v("b", "2")], "10").await;
    fake.send(Ok(WatchEvent::Deleted(v("b", "13"))));
    assert_eq!(rec.wait_len(3).await[2], del("b", "13", false));
    assert!(inf.indexer().get("b").is_none());
}

#[tokio::test(start_paused = true)]
async fn scenario_12_wrong_type_dropped() {
    let (fake, inf, rec) = started(vec![], "10").await;
    let svc =
        json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"s","resourceVersion":"31"}});
    fake.send(Ok(WatchEvent::Added(svc)));
    fake.send(Ok(WatchEvent::Added(v("c", "32"))));
    assert_eq!(rec.wait_len(1).await, vec![add("c", "32")]);
    assert!(inf.indexer().get("s").is_none());
    assert_eq!(inf.last_sync_resource_version(), "32");
}

/// Decoded events whose object client-go cannot key are skipped (as client-go's reflector
/// does); the watch goes on.
#[tokio::test(start_paused = true)]
async fn malformed_objects_are_skipped_and_the_informer_keeps_running() {
    let (fake, inf, rec) = started(vec![], "10").await;
    fake.send(Ok(WatchEvent::Added(
        json!({"apiVersion":"v1","kind":"Pod"}),
    )));
    fake.send(Ok(WatchEvent::Added(json!("not an object"))));
    fake.send(Ok(WatchEvent::Modified(
        json!({"apiVersion":"v1","kind":"Pod","metadata":{}}),
    )));
    fake.send(Ok(WatchEvent::Added(v("ok", "20"))));
    assert_eq!(rec.wait_len(1).await, vec![add("ok", "20")]);
    assert_eq!(inf.last_sync_resource_version(), "20");
    // Still watching on the same stream: no relist happened.
    assert_eq!(fake.calls().len(), 2);
}

/// Issue 8 defect: an event that cannot be decoded hides a change the cache would silently
/// miss. Like client-go, the watch ends and the informer relists after a backoff.
#[tokio::test(start_paused = true)]
async fn undecodable_event_ends_the_watch_and_relists_after_backoff() {
    let metrics = InformerMetrics::unregistered();
    let fake = Fake::new();
    fake.set_list(vec![v("a", "1")], "10");
    let inf = SharedIndexInformer::new(
        pod_key(),
        fake.clone(),
        metrics.clone(),
        ReflectorConfig::default(),
    );
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    rec.wait_len(1).await;
    fake.wait_live_watch(2).await;
    // "a" changed at RV 11, but its event arrives undecodable.
    fake.set_list(vec![v("a", "11")], "11");
    let t = Instant::now();
    fake.send(Err(SourceError::new(
        SourceErrorKind::Malformed,
        "invalid type: string \"x\", expected i64",
    )));
    let calls = fake.wait_calls(3).await;
    assert_eq!(calls[2], list_opts("10", None));
    assert!(fake.timed_calls()[2].0 - t >= Duration::from_millis(800));
    assert_eq!(rec.wait_len(2).await[1], upd("a", "1", "11", false));
    let k = pod_key().to_string();
    assert_eq!(metrics.undecodable_events(&k), 1);
    assert_eq!(metrics.relists(&k, "undecodable"), 1);
}

#[tokio::test(start_paused = true)]
async fn scenario_13_bookmark_advances_rv_only() {
    let fake = Fake::new();
    fake.set_list(vec![], "5");
    let metrics = InformerMetrics::unregistered();
    let inf = SharedIndexInformer::new(
        pod_key(),
        fake.clone(),
        metrics.clone(),
        ReflectorConfig::default(),
    );
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    fake.wait_live_watch(2).await;
    fake.send(Ok(WatchEvent::Added(v("x", "10"))));
    fake.send(Ok(WatchEvent::Modified(v("x", "20"))));
    fake.send(Ok(WatchEvent::Bookmark {
        resource_version: "30".into(),
        initial_events_end: false,
    }));
    rec.wait_len(2).await;
    // A normal close re-watches from the bookmark's RV without listing.
    tokio::task::yield_now().await;
    fake.close_watch();
    let calls = fake.wait_calls(3).await;
    assert_eq!(watch_rv(&calls[2]), "30");
    fake.send(Ok(WatchEvent::Deleted(v("x", "40"))));
    let evs = rec.wait_len(3).await;
    assert_eq!(
        evs,
        vec![
            add("x", "10"),
            upd("x", "10", "20", false),
            del("x", "40", false)
        ]
    );
    assert_eq!(inf.last_sync_resource_version(), "40");
    assert_eq!(
        metrics.bookmarks(&pod_key().to_string()),
        1,
        "each bookmark is counted"
    );
}

#[tokio::test(start_paused = true)]
async fn scenario_20_410_during_watch_relists_at_last_rv_after_backoff() {
    let (fake, _inf, rec) = started(vec![], "10").await;
    fake.send(Ok(WatchEvent::Added(v("c", "11"))));
    rec.wait_len(1).await;
    let t = Instant::now();
    fake.send(Err(expired()));
    let calls = fake.wait_calls(3).await;
    assert_eq!(calls[2], list_opts("11", None));
    let (at_list, _) = fake.timed_calls()[2].clone();
    let waited = at_list - t;
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_millis(1600),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn scenario_21_relist_after_changes() {
    let (fake, inf, rec) = started(vec![v("a", "1"), v("b", "2"), v("c", "3")], "3").await;
    fake.set_list(vec![v("a", "1"), v("b", "5"), v("d", "6")], "7");
    fake.send(Err(expired()));
    let evs = rec.wait_len(7).await;
    assert_eq!(
        evs[3..].to_vec(),
        vec![
            upd("a", "1", "1", true),
            upd("b", "2", "5", false),
            add("d", "6"),
            del("c", "3", true)
        ]
    );
    let mut keys = inf.indexer().list_keys();
    keys.sort();
    assert_eq!(keys, vec!["a", "b", "d"]);
}

#[tokio::test(start_paused = true)]
async fn scenario_23_expired_on_relist_retries_consistent() {
    let (fake, _inf, _rec) = started(vec![], "10").await;
    fake.script_list(Err(expired()));
    fake.send(Err(expired()));
    fake.wait_live_watch(5).await;
    assert_eq!(fake.list_rvs(), vec!["0", "10", ""]);
}

#[tokio::test(start_paused = true)]
async fn scenario_24_too_large_rv_relists_consistent() {
    let fake = Fake::new();
    let encodings = [
        SourceError::from_status(
            504,
            "Timeout",
            "x",
            &[("ResourceVersionTooLarge", "Too large resource version")],
        ),
        SourceError::from_status(
            504,
            "Timeout",
            "x",
            &[("", "Too large resource version: 40, current: 39")],
        ),
        SourceError::from_status(
            504,
            "Timeout",
            "Too large resource version: 50, current: 49",
            &[],
        ),
    ];
    fake.script_list(page(vec![], "20", None));
    for (i, e) in encodings.iter().enumerate() {
        assert_eq!(e.kind, SourceErrorKind::TooLarge);
        fake.script_list(Err(e.clone()));
        fake.script_list(page(vec![], &format!("{}", 30 + 10 * i), None));
        fake.script_watch(WatchScript::Events(vec![(Duration::ZERO, Err(expired()))]));
    }
    fake.set_list(vec![], "99");
    let inf = informer(&fake);
    inf.add_event_handler(Recorder::new(), None).unwrap();
    inf.run();
    // 7 lists and 4 watches; the 4th watch is live.
    fake.wait_live_watch(11).await;
    assert_eq!(fake.list_rvs(), vec!["0", "20", "", "30", "", "40", ""]);
}

#[tokio::test(start_paused = true)]
async fn scenario_25_no_time_travel() {
    let (fake, _inf, _rec) = started(vec![], "10").await;
    fake.send(Err(SourceError::new(SourceErrorKind::Other, "boom")));
    fake.wait_calls(3).await;
    assert_eq!(fake.list_rvs(), vec!["0", "10"]);
}

#[tokio::test(start_paused = true)]
async fn scenario_30_unsafe_deleted_object_leaves_via_relist() {
    let (fake, inf, rec) = started(vec![v("good", "1"), v("corrupt", "2")], "2").await;
    fake.set_list(vec![v("good", "1")], "3");
    fake.send(Err(SourceError::from_status(
        500,
        "StoreReadError",
        "corrupt object",
        &[],
    )));
    let evs = rec.wait_len(4).await;
    assert!(evs.contains(&del("corrupt", "2", true)), "{evs:?}");
    assert!(inf.indexer().get("good").is_some() && inf.indexer().get("corrupt").is_none());
}

#[tokio::test(start_paused = true)]
async fn scenario_31_normal_close_rewatches_without_list() {
    let (fake, _inf, rec) = started(vec![], "10").await;
    fake.send(Ok(WatchEvent::Added(v("a", "11"))));
    rec.wait_len(1).await;
    let t = Instant::now();
    fake.close_watch();
    let calls = fake.wait_calls(3).await;
    assert_eq!(watch_rv(&calls[2]), "11");
    assert_eq!(fake.timed_calls()[2].0, t, "no backoff before re-watch");
    assert_eq!(fake.list_rvs().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn scenario_32_very_short_watch_relists_after_backoff() {
    let (fake, _inf, _rec) = started(vec![], "10").await;
    let t = Instant::now();
    fake.close_watch();
    let calls = fake.wait_calls(3).await;
    assert_eq!(calls[2], list_opts("10", None));
    assert!(fake.timed_calls()[2].0 - t >= Duration::from_millis(800));
}

#[tokio::test(start_paused = true)]
async fn scenario_33_429_on_watch_retries_without_relist() {
    let fake = Fake::new();
    fake.set_list(vec![], "10");
    for _ in 0..4 {
        fake.script_watch(WatchScript::Err(SourceError::from_status(
            429,
            "TooManyRequests",
            "slow down",
            &[],
        )));
    }
    let inf = informer(&fake);
    inf.add_event_handler(Recorder::new(), None).unwrap();
    inf.run();
    fake.wait_live_watch(6).await;
    assert_eq!(fake.list_rvs().len(), 1);
    assert_eq!(fake.watch_count(), 5);
    // Connection refused is treated the same way.
    let fake = Fake::new();
    fake.set_list(vec![], "10");
    fake.script_watch(WatchScript::Err(SourceError::new(
        SourceErrorKind::ConnectionRefused,
        "refused",
    )));
    let inf = informer(&fake);
    inf.add_event_handler(Recorder::new(), None).unwrap();
    inf.run();
    fake.wait_live_watch(3).await;
    assert_eq!(fake.list_rvs().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn scenario_34_429_in_stream_backs_off_and_rewatches() {
    let (fake, _inf, _rec) = started(vec![], "10").await;
    let t = Instant::now();
    fake.send(Err(SourceError::from_status(
        429,
        "TooManyRequests",
        "slow down",
        &[],
    )));
    let calls = fake.wait_calls(3).await;
    assert_eq!(watch_rv(&calls[2]), "10");
    assert!(fake.timed_calls()[2].0 - t >= Duration::from_millis(800));
}

fn internal() -> SourceError {
    SourceError::from_status(500, "InternalError", "etcd hiccup", &[])
}

#[tokio::test(start_paused = true)]
async fn scenario_35_internal_error_retry() {
    // Default (0): no re-watch, relist.
    let (fake, _inf, _rec) = started(vec![], "10").await;
    fake.send(Err(internal()));
    let calls = fake.wait_calls(3).await;
    assert!(matches!(calls[2], Call::List(_)));

    // 30 s with 1 s elapsing per failure: 31 re-watches before the relist.
    let fake = Fake::new();
    fake.set_list(vec![], "10");
    for _ in 0..40 {
        fake.script_watch(WatchScript::Events(vec![(
            Duration::from_secs(1),
            Err(internal()),
        )]));
    }
    let cfg = ReflectorConfig {
        max_internal_error_retry: Duration::from_secs(30),
        ..Default::default()
    };
    let inf = informer_with(&fake, cfg);
    inf.add_event_handler(Recorder::new(), None).unwrap();
    inf.run();
    let calls = fake.wait_calls(34).await;
    let second_list = calls
        .iter()
        .skip(1)
        .position(|c| matches!(c, Call::List(_)))
        .unwrap()
        + 1;
    assert_eq!(second_list - 1, 32, "1 watch + 31 re-watches: {calls:?}");
}

#[tokio::test(start_paused = true)]
async fn scenario_36_list_error_backs_off_and_retries() {
    let fake = Fake::new();
    fake.script_list(Err(SourceError::from_status(
        403,
        "Forbidden",
        "Access Denied",
        &[],
    )));
    fake.set_list(vec![v("a", "1")], "10");
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    rec.wait_len(1).await;
    let calls = fake.timed_calls();
    assert!(calls[1].0 - calls[0].0 >= Duration::from_millis(800));
    assert!(inf.has_synced());
}

#[tokio::test(start_paused = true)]
async fn api_server_down_delays_sync_with_backoff() {
    let fake = Fake::new();
    for _ in 0..6 {
        fake.script_list(Err(SourceError::new(
            SourceErrorKind::ConnectionRefused,
            "connection refused",
        )));
    }
    fake.set_list(vec![], "10");
    let inf = informer(&fake);
    inf.add_event_handler(Recorder::new(), None).unwrap();
    let t = Instant::now();
    inf.run();
    fake.wait_live_watch(8).await;
    assert!(inf.has_synced());
    // 0.8 + 1.6 + 3.2 + 6.4 + 12.8 + 25.6 = 50.4 s at least.
    assert!(Instant::now() - t >= Duration::from_millis(50_400));
}

#[tokio::test(start_paused = true)]
async fn scenario_37_stop_during_and_before_watch() {
    let (fake, inf, _rec) = started(vec![], "10").await;
    assert!(!fake.watch_closed());
    inf.stop();
    inf.join().await;
    assert!(fake.watch_closed());
    assert!(inf.is_stopped());

    let fake = Fake::new();
    let inf = informer(&fake);
    inf.stop();
    inf.run();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(fake.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn scenario_38_watch_timeout_range() {
    for (min, lo, hi) in [
        (None, 300, 600),
        (Some(1), 300, 600),
        (Some(1800), 1800, 3600),
    ] {
        let fake = Fake::new();
        fake.set_list(vec![], "1");
        let mut cfg = ReflectorConfig::default();
        if let Some(m) = min {
            cfg.min_watch_timeout = Duration::from_secs(m);
        }
        let inf = informer_with(&fake, cfg);
        inf.add_event_handler(Recorder::new(), None).unwrap();
        inf.run();
        let calls = fake.wait_calls(2).await;
        let Call::Watch(w) = &calls[1] else { panic!() };
        assert!(
            (lo..hi).contains(&w.timeout_seconds),
            "{min:?}: {}",
            w.timeout_seconds
        );
        inf.stop();
    }
}

#[tokio::test(start_paused = true)]
async fn scenario_40_explicit_page_size() {
    let fake = Fake::new();
    let items = |r: std::ops::Range<usize>| r.map(|i| v(&format!("p{i}"), "1")).collect::<Vec<_>>();
    fake.script_list(page(items(0..4), "10", Some("C1")));
    fake.script_list(page(items(4..8), "10", Some("C2")));
    fake.script_list(page(items(8..10), "10", None));
    let inf_metrics = InformerMetrics::unregistered();
    let inf = SharedIndexInformer::new(
        pod_key(),
        fake.clone(),
        inf_metrics.clone(),
        ReflectorConfig {
            page_size: Some(4),
            ..Default::default()
        },
    );
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    rec.wait_len(10).await;
    let calls = fake.calls();
    let lists: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            Call::List(l) => Some(l.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(lists.len(), 3);
    let k = pod_key().to_string();
    assert_eq!(inf_metrics.lists(&k), 1, "three pages are one list");
    assert_eq!(inf_metrics.list_pages(&k), 3);
    assert!(lists.iter().all(|l| l.limit == Some(4)));
    assert_eq!(lists[1].continue_token.as_deref(), Some("C1"));
    assert_eq!(lists[2].continue_token.as_deref(), Some("C2"));
    assert_eq!(inf.indexer().len(), 10);
}

#[tokio::test(start_paused = true)]
async fn scenario_41_consistent_relist_not_paginated() {
    let (fake, _inf, _rec) = started(vec![], "10").await;
    fake.send(Err(expired()));
    assert_eq!(fake.wait_calls(3).await[2], list_opts("10", None));
}

#[tokio::test(start_paused = true)]
async fn scenario_42_paginated_initial_list_keeps_paging() {
    let fake = Fake::new();
    fake.script_list(page(vec![v("a", "1")], "10", Some("C1")));
    fake.script_list(page(vec![v("b", "1")], "10", None));
    fake.set_list(vec![], "11");
    let inf = informer(&fake);
    inf.add_event_handler(Recorder::new(), None).unwrap();
    inf.run();
    fake.wait_live_watch(3).await;
    fake.send(Err(expired()));
    assert_eq!(fake.wait_calls(4).await[3], list_opts("10", Some(500)));
}

#[tokio::test(start_paused = true)]
async fn scenario_43_continuation_expired_falls_back_to_full_list() {
    let fake = Fake::new();
    fake.script_list(page(vec![], "10", None));
    fake.script_list(page(vec![v("a", "1")], "10", Some("C1")));
    fake.script_list(Err(expired()));
    fake.set_list(vec![v("a", "1"), v("b", "1")], "10");
    fake.script_watch(WatchScript::Events(vec![(Duration::ZERO, Err(expired()))]));
    let inf = informer_with(
        &fake,
        ReflectorConfig {
            page_size: Some(4),
            ..Default::default()
        },
    );
    inf.add_event_handler(Recorder::new(), None).unwrap();
    inf.run();
    let calls = fake.wait_calls(6).await;
    let lists: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            Call::List(l) => Some(l.clone()),
            _ => None,
        })
        .collect();
    let short: Vec<_> = lists
        .iter()
        .map(|l| {
            (
                l.resource_version.as_str(),
                l.limit,
                l.continue_token.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        short,
        vec![
            ("0", Some(4), None),
            ("10", Some(4), None),
            ("", Some(4), Some("C1")),
            ("10", None, None)
        ]
    );
    assert_eq!(inf.indexer().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn scenario_44_streaming_list_happy_path() {
    let fake = Fake::new();
    let inf = informer_with(
        &fake,
        ReflectorConfig {
            use_watch_list: true,
            ..Default::default()
        },
    );
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    fake.wait_live_watch(1).await;
    fake.send(Ok(WatchEvent::Added(v("foo", "1"))));
    fake.send(Ok(WatchEvent::Bookmark {
        resource_version: "1".into(),
        initial_events_end: true,
    }));
    fake.send(Ok(WatchEvent::Modified(v("foo", "2"))));
    for (n, rv) in [("bar", "3"), ("baz", "4"), ("qux", "5"), ("zoo", "6")] {
        fake.send(Ok(WatchEvent::Added(v(n, rv))));
    }
    let evs = rec.wait_len(6).await;
    assert_eq!(evs[0], init_add("foo", "1"));
    assert_eq!(evs[1], upd("foo", "1", "2", false));
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    let Call::Watch(w) = &calls[0] else { panic!() };
    assert!(w.send_initial_events && w.allow_bookmarks && w.resource_version.is_empty());
    let mut keys = inf.indexer().list_keys();
    keys.sort();
    assert_eq!(keys, vec!["bar", "baz", "foo", "qux", "zoo"]);
    assert_eq!(inf.indexer().get("foo").unwrap().resource_version(), "2");
}

#[tokio::test(start_paused = true)]
async fn scenario_46_watch_list_failure_falls_back() {
    let fake = Fake::new();
    fake.script_watch(WatchScript::Err(expired()));
    fake.script_watch(WatchScript::Err(SourceError::from_status(
        403,
        "Forbidden",
        "no",
        &[],
    )));
    fake.set_list(vec![v("a", "1")], "5");
    let inf = informer_with(
        &fake,
        ReflectorConfig {
            use_watch_list: true,
            ..Default::default()
        },
    );
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    rec.wait_len(1).await;
    let calls = fake.wait_calls(4).await;
    assert!(
        matches!(&calls[0], Call::Watch(w) if w.send_initial_events && w.resource_version.is_empty())
    );
    assert!(
        matches!(&calls[1], Call::Watch(w) if w.send_initial_events && w.resource_version.is_empty())
    );
    assert_eq!(calls[2], list_opts("", Some(500)));
    assert!(
        matches!(&calls[3], Call::Watch(w) if !w.send_initial_events && w.resource_version == "5")
    );
}
