//! DeltaFIFO scenarios: A (2–4), B (10, 11, 14, 15), C (16–19), D (26–29), H (47–49).

use super::*;

fn describe(d: &Delta) -> String {
    match &d.object {
        DeltaObject::Object(o) => format!("{} {}", d.kind.as_str(), at(o)),
        DeltaObject::Tombstone(t) => format!(
            "{} DFSU{{{}, {}}}",
            d.kind.as_str(),
            t.key,
            t.obj.as_ref().map(at).unwrap_or_else(|| "nil".into())
        ),
    }
}

fn pop(f: &DeltaFifo) -> Vec<String> {
    f.try_pop(|ds, _| ds.iter().map(describe).collect())
        .expect("queue empty")
}

fn pop_all(f: &DeltaFifo) -> Vec<Vec<String>> {
    std::iter::from_fn(|| f.try_pop(|ds, _| ds.iter().map(describe).collect())).collect()
}

fn known(objs: &[(&str, &str)]) -> Indexer {
    let idx = Indexer::new();
    for (n, rv) in objs {
        idx.add(o(n, rv));
    }
    idx
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn scenario_02_empty_list_syncs_at_once() {
    let f = DeltaFifo::new(None, true);
    assert!(!f.has_synced());
    f.replace(vec![]);
    assert!(f.has_synced());
}

#[test]
fn scenario_03_has_synced_table() {
    assert!(!DeltaFifo::new(None, true).has_synced());
    let f = DeltaFifo::new(None, true);
    f.add(o("a", "1"));
    assert!(f.has_synced());
    let f = DeltaFifo::new(None, true);
    f.replace(vec![o("a", "1"), o("b", "1")]);
    assert!(!f.has_synced());
    pop(&f);
    assert!(!f.has_synced());
    pop(&f);
    assert!(f.has_synced());
    let f = DeltaFifo::new(None, true);
    f.replace(vec![o("a", "1"), o("a", "2")]);
    assert!(!f.has_synced());
    pop(&f);
    assert!(f.has_synced());
}

#[test]
fn scenario_04_tombstones_count_toward_initial_population() {
    let f = DeltaFifo::new(
        Some(known(&[("foo", "5"), ("bar", "6"), ("baz", "7")])),
        false,
    );
    f.replace(vec![o("foo", "5")]);
    let mut pops = Vec::new();
    for _ in 0..3 {
        assert!(!f.has_synced());
        pops.push(pop(&f));
    }
    assert!(f.has_synced());
    assert_eq!(pops[0], s(&["Sync foo@5"]));
    let mut rest = vec![pops[1].clone(), pops[2].clone()];
    rest.sort();
    assert_eq!(
        rest,
        vec![
            s(&["Deleted DFSU{bar, bar@6}"]),
            s(&["Deleted DFSU{baz, baz@7}"])
        ]
    );
}

#[test]
fn scenario_05_is_in_initial_list_flag_per_pop() {
    // The FIFO half of scenario 5 (the handler half is in handlers.rs): the flag is computed
    // before the decrement, so the last initial key is still initial.
    let f = DeltaFifo::new(None, true);
    f.replace(vec![o("a", "1"), o("b", "2")]);
    f.update(o("a", "3"));
    let flags: Vec<bool> = std::iter::from_fn(|| f.try_pop(|_, init| init)).collect();
    assert_eq!(flags, vec![true, true]);
    f.add(o("c", "4"));
    assert_eq!(f.try_pop(|_, init| init), Some(false));
}

#[test]
fn scenario_10_burst_for_one_key_not_collapsed() {
    let f = DeltaFifo::new(None, true);
    f.add(o("foo", "10"));
    f.update(o("foo", "12"));
    f.delete(DeltaObject::Object(o("foo", "15")));
    assert_eq!(f.list().iter().map(at).collect::<Vec<_>>(), s(&["foo@15"]));
    assert_eq!(
        pop(&f),
        s(&["Added foo@10", "Updated foo@12", "Deleted foo@15"])
    );
}

#[test]
fn scenario_11_queue_position_is_kept() {
    let f = DeltaFifo::new(None, true);
    f.add(o("foo", "10"));
    f.add(o("bar", "1"));
    f.add(o("foo", "11"));
    f.add(o("foo", "13"));
    f.add(o("zab", "30"));
    assert_eq!(pop(&f).last().unwrap(), "Added foo@13");
    f.add(o("foo", "14"));
    assert_eq!(
        pop_all(&f),
        vec![
            s(&["Added bar@1"]),
            s(&["Added zab@30"]),
            s(&["Added foo@14"])
        ]
    );
}

#[test]
fn scenario_14_delete_of_unknown_key_is_ignored() {
    let f = DeltaFifo::new(None, true);
    f.delete(DeltaObject::Object(o("baz", "1")));
    assert!(f.is_empty());
}

#[test]
fn scenario_15_delete_of_key_known_only_to_store_is_queued() {
    let f = DeltaFifo::new(Some(known(&[("baz", "10")])), true);
    f.delete(DeltaObject::Object(o("baz", "20")));
    assert_eq!(pop(&f), s(&["Deleted baz@20"]));
}

#[test]
fn scenario_16_real_delete_then_tombstone_keeps_real() {
    let f = DeltaFifo::new(Some(Indexer::new()), true);
    f.add(o("foo", "1"));
    f.delete(DeltaObject::Object(o("foo", "1")));
    f.replace(vec![]);
    assert_eq!(pop_all(&f), vec![s(&["Added foo@1", "Deleted foo@1"])]);
}

#[test]
fn scenario_17_tombstone_then_real_delete_keeps_real() {
    let f = DeltaFifo::new(Some(known(&[("k", "1")])), true);
    f.delete(DeltaObject::Tombstone(DeletedFinalStateUnknown {
        key: "k".into(),
        obj: Some(o("k", "1")),
    }));
    f.delete(DeltaObject::Object(o("k", "2")));
    assert_eq!(pop(&f), s(&["Deleted k@2"]));
}

#[test]
fn scenario_18_two_real_deletes_keep_older() {
    let f = DeltaFifo::new(Some(known(&[("k", "1")])), true);
    f.delete(DeltaObject::Object(o("k", "1")));
    f.delete(DeltaObject::Object(o("k", "2")));
    assert_eq!(pop(&f), s(&["Deleted k@1"]));
}

#[test]
fn scenario_19_repeated_empty_replace() {
    let f = DeltaFifo::new(Some(Indexer::new()), true);
    f.add(o("foo", "1"));
    f.replace(vec![]);
    f.replace(vec![]);
    assert_eq!(
        pop_all(&f),
        vec![s(&["Added foo@1", "Deleted DFSU{foo, foo@1}"])]
    );
}

#[test]
fn scenario_26_delete_queued_then_relisted_with_new_object() {
    let f = DeltaFifo::new(Some(known(&[("foo", "1")])), false);
    f.delete(DeltaObject::Object(o("foo", "1")));
    f.replace(vec![o("foo", "2")]);
    assert_eq!(pop_all(&f), vec![s(&["Deleted foo@1", "Sync foo@2"])]);
}

fn known3() -> Indexer {
    known(&[("foo", "5"), ("bar", "6"), ("baz", "7")])
}

fn sorted(mut v: Vec<Vec<String>>) -> Vec<Vec<String>> {
    v.sort();
    v
}

#[test]
fn scenario_27_replace_makes_deletions() {
    let f = DeltaFifo::new(Some(known3()), false);
    f.delete(DeltaObject::Object(o("baz", "10")));
    f.replace(vec![o("foo", "5")]);
    assert_eq!(
        sorted(pop_all(&f)),
        sorted(vec![
            s(&["Deleted baz@10"]),
            s(&["Sync foo@5"]),
            s(&["Deleted DFSU{bar, bar@6}"])
        ])
    );

    let f = DeltaFifo::new(Some(known3()), false);
    f.add(o("baz", "10"));
    f.replace(vec![o("foo", "5")]);
    let pops = pop_all(&f);
    assert_eq!(pops[0], s(&["Added baz@10", "Deleted DFSU{baz, baz@10}"]));
    assert_eq!(pops.len(), 3);

    let f = DeltaFifo::new(Some(known3()), false);
    f.delete(DeltaObject::Object(o("bar", "6")));
    f.add(o("bar", "100"));
    f.replace(vec![o("foo", "5")]);
    let pops = pop_all(&f);
    assert_eq!(
        pops[0],
        s(&[
            "Deleted bar@6",
            "Added bar@100",
            "Deleted DFSU{bar, bar@100}"
        ])
    );

    let f = DeltaFifo::new(Some(known3()), false);
    f.replace(vec![o("bar", "100"), o("foo", "5")]);
    f.replace(vec![o("foo", "5")]);
    assert_eq!(
        sorted(pop_all(&f)),
        sorted(vec![
            s(&["Sync bar@100", "Deleted DFSU{bar, bar@100}"]),
            s(&["Sync foo@5", "Sync foo@5"]),
            s(&["Deleted DFSU{baz, baz@7}"])
        ])
    );
}

#[test]
fn scenario_29_replaced_vs_sync() {
    let f = DeltaFifo::new(Some(known3()), true);
    f.replace(vec![o("foo", "5")]);
    assert_eq!(pop(&f), s(&["Replaced foo@5"]));
}

#[test]
fn scenario_47_resync_replays_the_cache() {
    let f = DeltaFifo::new(Some(known(&[("foo", "5")])), true);
    f.resync();
    assert_eq!(pop(&f), s(&["Sync foo@5"]));
}

#[test]
fn scenario_48_resync_skipped_while_update_pending() {
    let f = DeltaFifo::new(Some(known(&[("foo", "5")])), true);
    f.update(o("foo", "6"));
    f.resync();
    assert_eq!(pop_all(&f), vec![s(&["Updated foo@6"])]);
}

#[test]
fn scenario_49_resync_skipped_while_delete_pending() {
    let f = DeltaFifo::new(Some(known(&[("foo", "5")])), true);
    f.delete(DeltaObject::Object(o("foo", "5")));
    f.resync();
    assert_eq!(pop_all(&f), vec![s(&["Deleted foo@5"])]);
}

#[test]
fn scenario_63_index_maintenance() {
    let idx = Indexer::new();
    let by_label: IndexFunc = Arc::new(|o: &KubeObject| {
        o.meta()
            .labels
            .iter()
            .filter(|(k, _)| k == "l")
            .map(|(_, v)| v.clone())
            .collect()
    });
    let lab = |rv: &str, l: &str| {
        Arc::new(
            KubeObject::from_value(json!({"apiVersion":"v1","kind":"Pod",
                "metadata":{"name":"x","namespace":"ns","resourceVersion":rv,"labels":{"l":l}}}))
            .unwrap(),
        )
    };
    idx.add(lab("1", "v1"));
    // AddIndexers on a populated store indexes existing items; a duplicate name is an error.
    idx.add_indexers([("byLabel".to_string(), by_label.clone())])
        .unwrap();
    assert!(matches!(
        idx.add_indexers([("byLabel".to_string(), by_label)]),
        Err(IndexError::Conflict(_))
    ));
    assert_eq!(idx.by_index("byLabel", "v1").len(), 1);
    idx.add(lab("2", "v2"));
    assert!(idx.by_index("byLabel", "v1").is_empty());
    assert_eq!(idx.by_index("byLabel", "v2")[0].key(), "ns/x");
    assert_eq!(
        idx.list_index_func_values("byLabel"),
        vec!["v2".to_string()]
    );
    assert_eq!(idx.by_index(NAMESPACE_INDEX, "ns").len(), 1);
    assert!(matches!(
        idx.try_by_index("nope", "x"),
        Err(IndexError::UnknownIndex(_))
    ));
    idx.replace(vec![o("y", "1")]);
    assert!(idx.by_index("byLabel", "v2").is_empty());
    assert_eq!(idx.by_index(NAMESPACE_INDEX, "").len(), 1);
    assert!(idx.get("y").is_some() && idx.get("ns/x").is_none());
    idx.delete("y");
    assert!(idx.list_index_func_values(NAMESPACE_INDEX).is_empty());
}

#[test]
fn json_is_serialised_at_most_once_per_version() {
    let obj = o("j", "1");
    let before = json_serialisations();
    let a = obj.json().as_ptr();
    for _ in 0..10 {
        assert_eq!(obj.json().as_ptr(), a);
    }
    // Other tests may serialise concurrently; this object contributes exactly one.
    assert!(json_serialisations() > before);
    assert!(obj.json().contains("\"name\":\"j\""));
}

#[test]
fn object_meta_and_kind_checks() {
    let x = KubeObject::from_value_for(
        json!({"metadata":{"name":"n","namespace":"d","resourceVersion":"3","generation":2,"labels":{"a":"b"}}}),
        "apps/v1",
        "Deployment",
    )
    .unwrap();
    assert_eq!(x.key(), "d/n");
    assert_eq!(x.meta().api_version, "apps/v1");
    assert_eq!(x.meta().generation, Some(2));
    assert_eq!(x.meta().labels, vec![("a".into(), "b".into())]);
    assert!(matches!(
        KubeObject::from_value_for(v("p", "1"), "v1", "Service"),
        Err(MalformedObject::WrongKind { .. })
    ));
    assert!(matches!(
        KubeObject::from_value(json!({"kind":"Pod"})),
        Err(MalformedObject::MissingMetadata)
    ));
}
