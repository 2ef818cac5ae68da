//! Drives the embedded server with the real kube-rs 5 client and kube-runtime watchers, over real HTTP.

use std::time::Duration;

use apiserver::{ApiServer, Config};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};
use kube_runtime::watcher;
use serde_json::json;

const GUARD: Duration = Duration::from_secs(20);

async fn client(server: &ApiServer) -> Client {
    let config = kube::Config::new(server.url().parse().unwrap());
    Client::try_from(config).unwrap()
}

fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}),
    )
    .unwrap()
}

fn api_code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Raw request through the kube client (for content types kube's typed API does not expose).
async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    ct: &str,
    body: Vec<u8>,
) -> Result<serde_json::Value, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(body)
        .unwrap();
    client.request::<serde_json::Value>(req).await
}

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap()
}

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    )
}

async fn next_event<S, K>(stream: &mut S) -> Result<watcher::Event<K>, watcher::Error>
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Unpin,
{
    tokio::time::timeout(GUARD, stream.next())
        .await
        .expect("watcher event timed out")
        .expect("stream ended")
}

/// Consume one full Init … InitDone cycle, returning the names seen.
async fn init_cycle<S, K>(stream: &mut S) -> Vec<String>
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Unpin,
    K: kube::Resource + std::fmt::Debug,
{
    loop {
        if let Ok(watcher::Event::Init) = next_event(stream).await {
            break;
        }
    }
    let mut names = Vec::new();
    loop {
        match next_event(stream).await.expect("no errors during init") {
            watcher::Event::InitApply(o) => names.push(o.name_any()),
            watcher::Event::InitDone => return names,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_crud_and_patches() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    assert_eq!(c.apiserver_version().await.unwrap().minor, "32");
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());

    let created = cms
        .create(&PostParams::default(), &cm("a", json!({"k": "1"})))
        .await
        .unwrap();
    let rv1 = created.resource_version().unwrap();
    assert!(created.uid().is_some());
    assert!(created.creation_timestamp().is_some());
    assert_eq!(
        api_code(
            cms.create(&PostParams::default(), &cm("a", json!({})))
                .await
                .unwrap_err()
        ),
        409
    );
    assert_eq!(api_code(cms.get("nope").await.unwrap_err()), 404);

    // generateName
    let mut g = cm("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let gen_obj = cms.create(&PostParams::default(), &g).await.unwrap();
    assert!(gen_obj.name_any().starts_with("gen-") && gen_obj.name_any().len() == 9);

    // replace with a stale RV conflicts; a no-op replace keeps the RV
    let mut fresh = cms.get("a").await.unwrap();
    fresh.data = Some([("k".to_string(), "2".to_string())].into());
    let replaced = cms
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_ne!(replaced.resource_version().unwrap(), rv1);
    assert_eq!(
        api_code(
            cms.replace("a", &PostParams::default(), &fresh)
                .await
                .unwrap_err()
        ),
        409
    );
    let same = cms
        .replace("a", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(same.resource_version(), replaced.resource_version());

    // merge, json, apply
    let p = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"m": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["m"], "1");
    let p = raw(&c, "PATCH", "/api/v1/namespaces/default/configmaps/a", "application/json-patch+json",
        br#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/data/j","value":"2"}]"#.to_vec())
    .await
    .unwrap();
    assert_eq!(p["data"]["j"], "2");
    let err = raw(
        &c,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/a",
        "application/json-patch+json",
        br#"[{"op":"test","path":"/data/j","value":"nope"}]"#.to_vec(),
    )
    .await
    .unwrap_err();
    assert_eq!(api_code(err), 422);
    // Patches that do not leave an object behind are rejected, not stored.
    for (ct, body) in [
        ("application/merge-patch+json", &b"[1]"[..]),
        (
            "application/json-patch+json",
            &br#"[{"op":"replace","path":"","value":[1]}]"#[..],
        ),
    ] {
        let err = raw(
            &c,
            "PATCH",
            "/api/v1/namespaces/default/configmaps/a",
            ct,
            body.to_vec(),
        )
        .await
        .unwrap_err();
        assert!(matches!(api_code(err), 400 | 422));
    }
    assert!(cms.get("a").await.unwrap().data.is_some());
    let ssa = PatchParams::apply("tests").force();
    let applied = cms
        .patch("b", &ssa, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"x": "1"}})))
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["x"], "1");
    let applied = cms
        .patch("b", &ssa, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"y": "2"}})))
        .await
        .unwrap();
    // Fields the manager stopped applying are removed; other managers' fields stay; a repeat is a no-op.
    assert_eq!(
        applied
            .data
            .clone()
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        vec![("y".to_string(), "2".to_string())]
    );
    let other = cms
        .patch("b", &PatchParams::apply("other"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"z": "3"}})))
        .await
        .unwrap();
    let again = cms
        .patch("b", &ssa, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"y": "2"}})))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), other.resource_version());
    assert_eq!(again.data.unwrap().len(), 2);
    assert_eq!(again.metadata.managed_fields.unwrap().len(), 2);
    let no_manager = cms
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(no_manager), 422);

    // finalizers: delete marks, removing the last finalizer deletes
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["test/f"]}})),
    )
    .await
    .unwrap();
    let marked = cms
        .delete("a", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("object while finalizing");
    assert!(marked.metadata.deletion_timestamp.is_some());
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_code(cms.get("a").await.unwrap_err()), 404);
    let status = cms
        .delete("b", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("Status");
    assert!(status.is_success());

    // status subresource: the main resource ignores status, /status only changes status, generation follows spec
    let deps: Api<Deployment> = Api::default_namespaced(c.clone());
    let d: Deployment = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
    .unwrap();
    let d = deps.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let s = deps
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(s.status.unwrap().replicas, Some(3));
    assert_eq!(s.metadata.generation, Some(1));
    let s = deps
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}, "status": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(2));
    assert_eq!(s.status.unwrap().replicas, Some(3));
    let smp = deps
        .patch("d", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "z", "image": "z"}]}}}})))
        .await
        .unwrap();
    assert_eq!(smp.spec.template.spec.unwrap().containers.len(), 2);

    // custom resources through a CRD
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let crd = crds
        .create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let conds = crd.status.unwrap().conditions.unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    let widgets: Api<DynamicObject> = Api::default_namespaced_with(c.clone(), &widget_resource());
    let mut w = DynamicObject::new("w1", &widget_resource());
    w.data = json!({"spec": {"size": 1}, "status": {"ignored": true}});
    let w = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert!(w.data.get("status").is_none());
    assert_eq!(w.metadata.generation, Some(1));
    let w = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert_eq!(w.data["status"]["ready"], true);
    let strategic = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await;
    assert_eq!(api_code(strategic.unwrap_err()), 415);
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_code(widgets.list(&ListParams::default()).await.unwrap_err()),
        404
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_list_watch_streaming_and_relist() {
    // No periodic bookmarks here: one landing between compact() and end_watches() would (correctly) save the
    // watchers from the relist this test wants to observe.
    let config = Config {
        bookmark_interval: Duration::from_secs(3600),
        ..Config::default()
    };
    let server = ApiServer::start(config).await.unwrap();
    let c = client(&server).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("pre{i}"), json!({})))
            .await
            .unwrap();
    }
    // ListWatch (paged list of 2 so continue tokens are exercised)
    let mut lw = watcher(cms.clone(), watcher::Config::default().page_size(2)).boxed();
    let names = init_cycle(&mut lw).await;
    assert_eq!(names, vec!["pre0", "pre1", "pre2"]);
    // StreamingList
    let mut sl = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let names = init_cycle(&mut sl).await;
    assert_eq!(names.len(), 3);
    // Metadata-only watcher: the server answers PartialObjectMetadata requests with full objects.
    let meta: Api<kube::core::PartialObjectMeta<ConfigMap>> = Api::default_namespaced(c.clone());
    let mut mw = watcher(meta, watcher::Config::default()).boxed();
    assert_eq!(init_cycle(&mut mw).await.len(), 3);
    drop(mw);
    cms.create(&PostParams::default(), &cm("live", json!({})))
        .await
        .unwrap();
    for s in [&mut lw, &mut sl] {
        match next_event(s).await.unwrap() {
            watcher::Event::Apply(o) => assert_eq!(o.name_any(), "live"),
            other => panic!("unexpected {other:?}"),
        }
    }
    cms.delete("live", &DeleteParams::default()).await.unwrap();
    for s in [&mut lw, &mut sl] {
        assert!(
            matches!(next_event(s).await.unwrap(), watcher::Event::Delete(o) if o.name_any() == "live")
        );
    }
    // Compaction + end of watches: resuming from an RV that is gone yields a 410 and a full relist.
    let lists_before = server.stats().lists_of("configmaps");
    server.faults().compact();
    server.faults().end_watches();
    let names = init_cycle(&mut lw).await;
    assert_eq!(names.len(), 3);
    let names = init_cycle(&mut sl).await;
    assert_eq!(names.len(), 3);
    assert!(server.stats().lists_of("configmaps") > lists_before);
    // …and after the relist the watchers are live again.
    cms.create(&PostParams::default(), &cm("after", json!({})))
        .await
        .unwrap();
    for s in [&mut lw, &mut sl] {
        assert!(
            matches!(next_event(s).await.unwrap(), watcher::Event::Apply(o) if o.name_any() == "after")
        );
    }
    // A clean end of stream without compaction resumes without a relist.
    let lists_before = server.stats().lists_of("configmaps");
    let watches_before = server.stats().watches_of("configmaps");
    server.faults().end_watches();
    cms.create(&PostParams::default(), &cm("resumed", json!({})))
        .await
        .unwrap();
    assert!(
        matches!(next_event(&mut lw).await.unwrap(), watcher::Event::Apply(o) if o.name_any() == "resumed")
    );
    assert_eq!(server.stats().lists_of("configmaps"), lists_before);
    assert!(server.stats().watches_of("configmaps") > watches_before);

    // Failed watch starts (500) and a connection cut mid-stream: the watcher surfaces errors, resumes from its
    // RV and misses nothing, still without relisting.
    drop(sl);
    server.faults().fail_next(2, 500);
    server.faults().end_watches();
    for _ in 0..2 {
        assert!(
            next_event(&mut lw).await.is_err(),
            "a failed watch start surfaces as an error"
        );
    }
    server.faults().drop_next_streams(1);
    server.faults().end_watches();
    for name in ["after-fail", "after-drop"] {
        cms.create(&PostParams::default(), &cm(name, json!({})))
            .await
            .unwrap();
        loop {
            match next_event(&mut lw).await {
                Err(_) => {}
                Ok(watcher::Event::Apply(o)) if o.name_any() == name => break,
                Ok(other) => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(server.stats().lists_of("configmaps"), lists_before);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_and_raw_watch_semantics() {
    let config = Config {
        bookmark_interval: Duration::from_millis(100),
        ..Config::default()
    };
    let server = ApiServer::start(config).await.unwrap();
    let c = client(&server).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cms.create(&PostParams::default(), &cm("x", json!({})))
        .await
        .unwrap();

    // Bookmarks carry kind/apiVersion and parse as WatchEvent::Bookmark.
    let wp = WatchParams::default().timeout(30);
    let mut s = cms.watch(&wp, "0").await.unwrap().boxed();
    let first = tokio::time::timeout(GUARD, s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(first, WatchEvent::Added(o) if o.name_any() == "x"));
    let mut bookmarks = 0;
    while bookmarks < 3 {
        match tokio::time::timeout(GUARD, s.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Bookmark(b) => {
                assert!(!b.metadata.resource_version.is_empty());
                bookmarks += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    drop(s);

    // A watcher with bookmarks runs without errors across several bookmark periods.
    let mut w = watcher(cms.clone(), watcher::Config::default()).boxed();
    init_cycle_any(&mut w).await;
    let rv_before = server.resource_version();
    let lp = ListParams::default().labels("sel=yes");
    // Selector transitions: starts matching → ADDED, stops matching → DELETED.
    let mut sel = cms
        .watch(
            &WatchParams::default().labels("sel=yes").disable_bookmarks(),
            &rv_before.to_string(),
        )
        .await
        .unwrap()
        .boxed();
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
    )
    .await
    .unwrap();
    let ev = tokio::time::timeout(GUARD, sel.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(ev, WatchEvent::Added(ref o) if o.name_any() == "x"),
        "{ev:?}"
    );
    assert_eq!(cms.list(&lp).await.unwrap().items.len(), 1);
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "no"}}})),
    )
    .await
    .unwrap();
    let ev = tokio::time::timeout(GUARD, sel.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(ev, WatchEvent::Deleted(ref o) if o.name_any() == "x"),
        "{ev:?}"
    );
    assert!(matches!(
        next_event(&mut w).await,
        Ok(watcher::Event::Apply(_))
    ));
    assert!(matches!(
        next_event(&mut w).await,
        Ok(watcher::Event::Apply(_))
    ));

    // Too old RV on watch: HTTP 200 + ERROR 410 event, then end.
    server.faults().compact();
    let mut old = cms
        .watch(&WatchParams::default(), "2")
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(GUARD, old.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        tokio::time::timeout(GUARD, old.try_next())
            .await
            .unwrap()
            .unwrap()
            .is_none()
    );

    // An RV from the future (a restarted in-memory server) also gets 410, so clients relist.
    let future = (server.resource_version() + 1000).to_string();
    let mut fut = cms
        .watch(&WatchParams::default(), &future)
        .await
        .unwrap()
        .boxed();
    assert!(
        matches!(tokio::time::timeout(GUARD, fut.try_next()).await.unwrap().unwrap(), Some(WatchEvent::Error(e)) if e.code == 410)
    );

    // Short watches end immediately with no events; dropped streams end with an error or EOF.
    server.faults().short_watches(1);
    let mut short = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(
        tokio::time::timeout(GUARD, short.try_next())
            .await
            .unwrap()
            .unwrap()
            .is_none()
    );
    server.faults().drop_next_streams(1);
    let mut dropped = cms
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(GUARD, dropped.try_next())
        .await
        .unwrap();
    assert!(matches!(end, Err(_) | Ok(None)), "{end:?}");
    server.shutdown().await;
}

async fn init_cycle_any<S>(stream: &mut S)
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin,
{
    init_cycle(stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_paging_selectors_and_errors() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for i in 0..25 {
        let mut o = cm(&format!("c{i:02}"), json!({}));
        o.metadata.labels = Some(
            [(
                "parity".to_string(),
                if i % 2 == 0 { "even" } else { "odd" }.to_string(),
            )]
            .into(),
        );
        cms.create(&PostParams::default(), &o).await.unwrap();
    }
    // Paged list is a consistent snapshot at the first page's RV.
    let p1 = cms.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(p1.items.len(), 10);
    let rv = p1.metadata.resource_version.clone().unwrap();
    cms.create(&PostParams::default(), &cm("zz-late", json!({})))
        .await
        .unwrap();
    let tok = p1.metadata.continue_.clone().unwrap();
    let p2 = cms
        .list(&ListParams::default().limit(10).continue_token(&tok))
        .await
        .unwrap();
    let tok2 = p2.metadata.continue_.clone().unwrap();
    let p3 = cms
        .list(&ListParams::default().limit(10).continue_token(&tok2))
        .await
        .unwrap();
    assert_eq!(p3.items.len(), 5);
    assert!(p3.metadata.continue_.as_deref().unwrap_or("").is_empty());
    assert_eq!(p3.metadata.resource_version.as_deref(), Some(rv.as_str()));
    // Exact RV list sees the past.
    let exact = cms
        .list(
            &ListParams::default()
                .at(&rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 25);
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        26
    );
    // Expired continue token → 410 with a fresh token.
    let q1 = cms.list(&ListParams::default().limit(10)).await.unwrap();
    server.faults().compact();
    let err = cms
        .list(
            &ListParams::default()
                .limit(10)
                .continue_token(q1.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert!(s.metadata.and_then(|m| m.continue_).is_some());
        }
        other => panic!("{other:?}"),
    }
    // Selectors
    assert_eq!(
        cms.list(&ListParams::default().labels("parity=even"))
            .await
            .unwrap()
            .items
            .len(),
        13
    );
    assert_eq!(
        cms.list(&ListParams::default().labels("parity in (odd),parity!=even"))
            .await
            .unwrap()
            .items
            .len(),
        12
    );
    assert_eq!(
        cms.list(&ListParams::default().labels("!parity"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        cms.list(&ListParams::default().fields("metadata.name=c03"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        api_code(
            cms.list(&ListParams::default().fields("spec.bogus=1"))
                .await
                .unwrap_err()
        ),
        400
    );
    let empty: Api<ConfigMap> = Api::namespaced(c.clone(), "kube-system");
    let list = empty.list(&ListParams::default()).await.unwrap();
    assert!(list.items.is_empty());
    // 413 for oversized bodies, 400 for malformed ones; nothing stored.
    let huge = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"huge"}},"data":{{"x":"{}"}}}}"#,
        "a".repeat(4 << 20)
    );
    let err = raw(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        huge.into_bytes(),
    )
    .await
    .unwrap_err();
    assert_eq!(api_code(err), 413);
    let err = raw(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        b"{not json".to_vec(),
    )
    .await
    .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
            assert!(s.message.contains("JSON"), "{}", s.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        26
    );
    // Injected failures.
    // kube-rs retries 429 itself (with backoff), so two injected 429s still end in success.
    server.faults().fail_next(2, 429);
    cms.get("c00").await.unwrap();
    server.faults().fail_next(1, 500);
    assert_eq!(api_code(cms.get("c00").await.unwrap_err()), 500);
    // System namespaces cannot be deleted; other namespaces take their contents with them
    // (the namespace controller's work, done once the controllers are idle).
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    assert_eq!(
        api_code(
            nss.delete("default", &DeleteParams::default())
                .await
                .unwrap_err()
        ),
        403
    );
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "scratch"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let scratch: Api<ConfigMap> = Api::namespaced(c.clone(), "scratch");
    scratch
        .create(&PostParams::default(), &cm("inside", json!({})))
        .await
        .unwrap();
    nss.delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    server.wait_controllers_idle().await;
    assert!(nss.get_opt("scratch").await.unwrap().is_none());
    assert!(
        Api::<ConfigMap>::all(c.clone())
            .list(&ListParams::default().fields("metadata.namespace=scratch"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Missing namespace.
    let nowhere: Api<ConfigMap> = Api::namespaced(c.clone(), "nowhere");
    assert_eq!(
        api_code(
            nowhere
                .create(&PostParams::default(), &cm("a", json!({})))
                .await
                .unwrap_err()
        ),
        404
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_legacy_and_aggregated() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let check = |d: &Discovery| {
        for (g, v, k) in [
            ("", "v1", "ConfigMap"),
            ("", "v1", "Namespace"),
            ("apps", "v1", "Deployment"),
            ("coordination.k8s.io", "v1", "Lease"),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            ("example.com", "v1", "Widget"),
        ] {
            let (ar, caps) = d
                .resolve_gvk(&GroupVersionKind::gvk(g, v, k))
                .unwrap_or_else(|| panic!("{k} not discovered"));
            assert!(caps.supports_operation("watch"));
            if k == "Namespace" || k == "CustomResourceDefinition" {
                assert_eq!(caps.scope, Scope::Cluster);
            } else {
                assert_eq!(caps.scope, Scope::Namespaced, "{}", ar.plural);
            }
        }
    };
    let legacy = Discovery::new(c.clone()).run().await.unwrap();
    check(&legacy);
    let aggregated = Discovery::new(c.clone()).run_aggregated().await.unwrap();
    check(&aggregated);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: Some(dir.path().to_path_buf()),
        ..Config::default()
    };
    let (rv, uid) = {
        let server = ApiServer::start(config.clone()).await.unwrap();
        let c = client(&server).await;
        let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
        let o = cms
            .create(&PostParams::default(), &cm("kept", json!({"a": "1"})))
            .await
            .unwrap();
        cms.create(&PostParams::default(), &cm("gone", json!({})))
            .await
            .unwrap();
        cms.delete("gone", &DeleteParams::default()).await.unwrap();
        Api::<CustomResourceDefinition>::all(c.clone())
            .create(&PostParams::default(), &widget_crd())
            .await
            .unwrap();
        let widgets: Api<DynamicObject> =
            Api::default_namespaced_with(c.clone(), &widget_resource());
        widgets
            .create(
                &PostParams::default(),
                &DynamicObject::new("w", &widget_resource()),
            )
            .await
            .unwrap();
        let rv = server.resource_version();
        server.shutdown().await;
        (rv, o.uid().unwrap())
    };
    let server = ApiServer::start(config).await.unwrap();
    assert_eq!(server.resource_version(), rv);
    let c = client(&server).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let kept = cms.get("kept").await.unwrap();
    assert_eq!(kept.uid().unwrap(), uid);
    assert_eq!(api_code(cms.get("gone").await.unwrap_err()), 404);
    let widgets: Api<DynamicObject> = Api::default_namespaced_with(c.clone(), &widget_resource());
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let next = cms
        .create(&PostParams::default(), &cm("new", json!({})))
        .await
        .unwrap();
    assert!(next.resource_version().unwrap().parse::<u64>().unwrap() > rv);
    // A watch from before the restart is too old (history is not persisted): clients relist.
    let mut w = cms
        .watch(&WatchParams::default(), "2")
        .await
        .unwrap()
        .boxed();
    assert!(
        matches!(tokio::time::timeout(GUARD, w.try_next()).await.unwrap().unwrap(), Some(WatchEvent::Error(e)) if e.code == 410)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_endpoints_and_bind_safety() {
    // Non-loopback binds are refused unless explicitly allowed.
    let remote = Config {
        bind: "0.0.0.0:0".parse().unwrap(),
        ..Config::default()
    };
    assert!(ApiServer::start(remote).await.is_err());

    let off = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&off).await;
    assert_eq!(
        api_code(
            raw(
                &c,
                "POST",
                "/_kubewasm/faults/compact",
                "application/json",
                vec![]
            )
            .await
            .unwrap_err()
        ),
        404
    );
    off.shutdown().await;

    let on = ApiServer::start(Config {
        enable_fault_endpoints: true,
        ..Config::default()
    })
    .await
    .unwrap();
    let c = client(&on).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cms.create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let old = on.resource_version();
    raw(
        &c,
        "POST",
        "/_kubewasm/faults/compact",
        "application/json",
        vec![],
    )
    .await
    .unwrap();
    let mut w = cms
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .unwrap()
        .boxed();
    assert!(
        matches!(tokio::time::timeout(GUARD, w.try_next()).await.unwrap().unwrap(), Some(WatchEvent::Error(e)) if e.code == 410)
    );
    raw(
        &c,
        "POST",
        "/_kubewasm/faults/fail?n=1&status=500",
        "application/json",
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(api_code(cms.get("a").await.unwrap_err()), 500);
    cms.get("a").await.unwrap();
    // The kubeconfig names the kubewasm context and this server.
    let kc = on.kubeconfig_yaml();
    assert!(
        kc.contains(&format!("server: {}", on.url())) && kc.contains("current-context: kubewasm")
    );
    on.shutdown().await;
}

fn service(name: &str, extra: serde_json::Value) -> Service {
    let mut v = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}});
    json_patch::merge(&mut v, &extra);
    serde_json::from_value(v).unwrap()
}

fn manager_fields(obj: &impl ResourceExt, manager: &str) -> serde_json::Value {
    let entry = obj
        .managed_fields()
        .iter()
        .find(|e| e.manager.as_deref() == Some(manager))
        .unwrap_or_else(|| panic!("no managedFields entry for {manager}"));
    serde_json::to_value(entry).unwrap()
}

fn ingress_ips(s: &Service) -> Vec<String> {
    s.status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_status_subresource() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let svcs: Api<Service> = Api::default_namespaced(c.clone());

    // A new Service has no load balancer, whatever the request said.
    let created = svcs
        .create(
            &PostParams::default(),
            &service(
                "lb",
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "6.6.6.6"}]}}}),
            ),
        )
        .await
        .unwrap();
    assert!(ingress_ips(&created).is_empty());

    // /status changes only status, even when the patch says more.
    let lb = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}});
    let s = svcs
        .patch_status(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "NodePort"}, "status": lb})),
        )
        .await
        .unwrap();
    assert_eq!(ingress_ips(&s), vec!["10.0.0.1"]);
    assert_eq!(
        s.spec.as_ref().unwrap().type_.as_deref(),
        Some("LoadBalancer")
    );
    assert_eq!(
        ingress_ips(&svcs.get_status("lb").await.unwrap()),
        vec!["10.0.0.1"]
    );
    // The writer through /status is recorded with the subresource.
    let status_writer = s
        .managed_fields()
        .iter()
        .find(|e| e.subresource.as_deref() == Some("status"))
        .expect("a managedFields entry for the status writer");
    assert_eq!(status_writer.operation.as_deref(), Some("Update"));

    // The main resource ignores status, on PUT and on PATCH.
    let mut replaced = s.clone();
    replaced.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    replaced.status = None;
    let r = svcs
        .replace("lb", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(
        r.spec.as_ref().unwrap().session_affinity.as_deref(),
        Some("ClientIP")
    );
    assert_eq!(ingress_ips(&r), vec!["10.0.0.1"]);
    let p = svcs
        .patch(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "6.6.6.6"}]}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        p.resource_version(),
        r.resource_version(),
        "nothing changed"
    );
    assert_eq!(ingress_ips(&p), vec!["10.0.0.1"]);

    // PUT /status with another spec: only the status is taken.
    let mut st = p.clone();
    st.spec.as_mut().unwrap().session_affinity = Some("None".into());
    st.status = Some(
        serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}]}})).unwrap(),
    );
    let st = svcs
        .replace_status("lb", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(ingress_ips(&st), vec!["10.0.0.2"]);
    assert_eq!(
        st.spec.as_ref().unwrap().session_affinity.as_deref(),
        Some("ClientIP")
    );

    // Server-side apply through /status: the controller owns status.loadBalancer, nothing else.
    let applied = svcs
        .patch_status(
            "lb",
            &PatchParams::apply("lb-controller"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
                "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.3"}]}}}),
            ),
        )
        .await
        .unwrap_err();
    // The PUT above took status.loadBalancer.ingress: a different value conflicts.
    assert_eq!(api_code(applied), 409);
    let applied = svcs
        .patch_status(
            "lb",
            &PatchParams::apply("lb-controller").force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
                "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.3"}]}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(ingress_ips(&applied), vec!["10.0.0.3"]);
    let entry = manager_fields(&applied, "lb-controller");
    assert_eq!(entry["subresource"], "status");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:status": {"f:loadBalancer": {"f:ingress": {}}}})
    );

    // Discovery lists the subresource with the verbs it serves.
    let v1 = raw(&c, "GET", "/api/v1", "application/json", vec![])
        .await
        .unwrap();
    let sub = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "services/status")
        .expect("services/status in /api/v1");
    assert_eq!(sub["verbs"], json!(["get", "patch", "update"]));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_field_managers() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let cfg = |data: serde_json::Value| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data}),
        )
    };

    // Apply to a missing object creates it; alice owns what she applied.
    let a = cms
        .patch(
            "shared",
            &PatchParams::apply("alice"),
            &cfg(json!({"color": "red", "alice-only": "1"})),
        )
        .await
        .unwrap();
    assert_eq!(
        manager_fields(&a, "alice")["fieldsV1"],
        json!({"f:data": {"f:color": {}, "f:alice-only": {}}})
    );

    // bob applying the same value shares the field; a different value is a conflict naming both.
    cms.patch(
        "shared",
        &PatchParams::apply("bob"),
        &cfg(json!({"color": "red"})),
    )
    .await
    .unwrap();
    let err = cms
        .patch(
            "shared",
            &PatchParams::apply("bob"),
            &cfg(json!({"color": "blue"})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"alice\": .data.color"
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, ".data.color");
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(
        cms.get("shared").await.unwrap().data.unwrap()["color"],
        "red"
    );

    // force moves the field to bob.
    let forced = cms
        .patch(
            "shared",
            &PatchParams::apply("bob").force(),
            &cfg(json!({"color": "blue"})),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["color"], "blue");
    assert_eq!(
        manager_fields(&forced, "alice")["fieldsV1"],
        json!({"f:data": {"f:alice-only": {}}})
    );

    // alice stops applying both: alice-only goes (nobody else owns it), color stays (bob owns it).
    let dropped = cms
        .patch(
            "shared",
            &PatchParams::apply("alice"),
            &cfg(json!({"alice-new": "2"})),
        )
        .await
        .unwrap();
    let data = dropped.data.unwrap();
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["alice-new", "color"]
    );

    // A plain patch takes ownership as an Update manager; applying over it conflicts with that updater.
    let edited = cms
        .patch(
            "shared",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"alice-new": "edited"}})),
        )
        .await
        .unwrap();
    assert_eq!(manager_fields(&edited, "editor")["operation"], "Update");
    let err = cms
        .patch(
            "shared",
            &PatchParams::apply("alice"),
            &cfg(json!({"alice-new": "3"})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert!(
        status
            .message
            .starts_with("Apply failed with 1 conflict: conflict with \"editor\" using v1 at "),
        "{}",
        status.message
    );

    // Two conflicts with two managers: grouped by manager in the message, one cause each.
    let err = cms
        .patch(
            "shared",
            &PatchParams::apply("carol"),
            &cfg(json!({"alice-new": "c", "color": "c"})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert!(
        status.message.starts_with("Apply failed with 2 conflicts: conflicts with \"bob\":\n- .data.color\nconflicts with \"editor\""),
        "{}",
        status.message
    );
    assert_eq!(status.details.unwrap().causes.len(), 2);

    // Sets are owned per item: two controllers each keep their own finalizer.
    let svcs: Api<Service> = Api::default_namespaced(c.clone());
    let fin = |f: &str| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "fin", "finalizers": [f]}}),
        )
    };
    svcs.create(&PostParams::default(), &service("fin", json!({})))
        .await
        .unwrap();
    svcs.patch(
        "fin",
        &PatchParams::apply("ctl-a"),
        &fin("a.example.com/lb"),
    )
    .await
    .unwrap();
    let both = svcs
        .patch(
            "fin",
            &PatchParams::apply("ctl-b"),
            &fin("b.example.com/lb"),
        )
        .await
        .unwrap();
    assert_eq!(both.finalizers().len(), 2);
    let one = svcs
        .patch(
            "fin",
            &PatchParams::apply("ctl-a"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "fin"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(one.finalizers(), ["b.example.com/lb"]);

    // fieldManager is validated like the real server's (kube-rs checks the length before sending).
    let err = raw(
        &c,
        "PATCH",
        &format!(
            "/api/v1/namespaces/default/configmaps/shared?fieldManager={}",
            "m".repeat(129)
        ),
        "application/apply-patch+yaml",
        br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}}"#.to_vec(),
    )
    .await
    .unwrap_err();
    assert_eq!(api_code(err), 422);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_with_series() {
    use k8s_openapi::api::events::v1::Event as EventV1;
    use kube::Resource;
    use kube_runtime::events::{Event, EventType, Recorder, Reporter};

    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let svcs: Api<Service> = Api::default_namespaced(c.clone());
    let svc = svcs
        .create(&PostParams::default(), &service("web", json!({})))
        .await
        .unwrap();

    // kube-runtime's recorder (client-go's correlator in Rust): a repeat patches the series of the first.
    let recorder = Recorder::new(
        c.clone(),
        Reporter {
            controller: "kubewasm/lb-controller".into(),
            instance: Some("host-1".into()),
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "EnsureFailed".into(),
        note: Some("cloud said 503".into()),
        action: "Ensure".into(),
        secondary: None,
    };
    for _ in 0..3 {
        recorder.publish(&ev, &svc.object_ref(&())).await.unwrap();
    }
    let events: Api<EventV1> = Api::default_namespaced(c.clone());
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1, "one Event, counted by its series");
    let e = &list.items[0];
    assert_eq!(e.series.as_ref().unwrap().count, 3);
    assert_eq!(
        e.reporting_controller.as_deref(),
        Some("kubewasm/lb-controller")
    );
    assert_eq!(e.reporting_instance.as_deref(), Some("host-1"));
    assert_eq!(e.regarding.as_ref().unwrap().name.as_deref(), Some("web"));
    assert_eq!(e.regarding.as_ref().unwrap().uid, svc.metadata.uid);
    assert_eq!(
        (e.action.as_deref(), e.reason.as_deref(), e.type_.as_deref()),
        (Some("Ensure"), Some("EnsureFailed"), Some("Warning"))
    );
    assert_eq!(e.note.as_deref(), Some("cloud said 503"));

    // What happened is fixed once reported: only the series moves.
    let name = e.name_any();
    let err = events
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"note": "rewritten"})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("note: Invalid value"),
        "{}",
        status.message
    );
    let err = events
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"series": {"count": 1, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(err), 422);
    let bumped = events
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"series": {"count": 4, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(bumped.series.unwrap().count, 4);

    // A new events.k8s.io Event must say when it happened, who reported it and what happened.
    let mut bare = json!({"metadata": {"name": "bare"},
        "regarding": {"kind": "Service", "namespace": "default", "name": "web"}, "type": "Normal",
        "reportingController": "x", "reportingInstance": "y", "action": "a", "reason": "r"});
    let err = events
        .create(
            &PostParams::default(),
            &serde_json::from_value(bare.clone()).unwrap(),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!(
        status.message,
        "Event.events.k8s.io \"bare\" is invalid: eventTime: Required value"
    );
    let obj = bare.as_object_mut().unwrap();
    for k in [
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        obj.remove(k);
    }
    obj.insert("eventTime".into(), json!("2026-01-01T00:00:00.000000Z"));
    let bare: EventV1 = serde_json::from_value(bare).unwrap();
    let err = events
        .create(&PostParams::default(), &bare)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!(status.code, 422);
    for field in [
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        assert!(
            status.message.contains(field),
            "{field}: {}",
            status.message
        );
    }

    // Core v1 Events keep the legacy rules: an old-style Event lives in its object's namespace.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(c.clone());
    let old_style = |ns: &str| -> k8s_openapi::api::core::v1::Event {
        serde_json::from_value(json!({"metadata": {"name": format!("old-{ns}")},
            "involvedObject": {"kind": "Service", "namespace": ns, "name": "web"},
            "reason": "Synced", "message": "ok", "count": 2, "type": "Normal"}))
        .unwrap()
    };
    core.create(&PostParams::default(), &old_style("default"))
        .await
        .unwrap();
    let err = core
        .create(&PostParams::default(), &old_style("elsewhere"))
        .await
        .unwrap_err();
    assert_eq!(api_code(err), 422);
    server.shutdown().await;
}

async fn next_watch_event<K>(
    w: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(GUARD, w.try_next())
        .await
        .expect("a watch event in time")
        .unwrap()
        .expect("the watch goes on")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_finalizers_hold_deletion() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let svcs: Api<Service> = Api::default_namespaced(c.clone());
    svcs.create(
        &PostParams::default(),
        &service(
            "held",
            json!({"metadata": {"finalizers": ["kubewasm.io/lb"]}}),
        ),
    )
    .await
    .unwrap();
    let mut watch = svcs
        .watch(&WatchParams::default().fields("metadata.name=held"), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        next_watch_event(&mut watch).await,
        WatchEvent::Added(_)
    ));

    // DELETE marks the Service and answers with it; it stays readable and writable.
    let marked = svcs
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the object, still finalizing");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(matches!(next_watch_event(&mut watch).await,
        WatchEvent::Modified(s) if s.metadata.deletion_timestamp.is_some()));
    let again = svcs
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("still finalizing");
    assert_eq!(again.resource_version(), marked.resource_version());
    let st = svcs
        .patch_status(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}]}}})),
        )
        .await
        .unwrap();
    assert_eq!(ingress_ips(&st), vec!["10.0.0.9"]);
    assert!(matches!(
        next_watch_event(&mut watch).await,
        WatchEvent::Modified(_)
    ));
    let err = svcs
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["kubewasm.io/lb", "other/f"]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(err), 422, "no new finalizers while terminating");

    // Removing the last finalizer (kube-runtime's JSON patch) deletes it; watchers see DELETED.
    raw(
        &c,
        "PATCH",
        "/api/v1/namespaces/default/services/held",
        "application/json-patch+json",
        serde_json::to_vec(&json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "kubewasm.io/lb"},
            {"op": "remove", "path": "/metadata/finalizers/0"}]))
        .unwrap(),
    )
    .await
    .unwrap();
    assert!(
        matches!(next_watch_event(&mut watch).await, WatchEvent::Deleted(s) if s.name_any() == "held")
    );
    assert_eq!(api_code(svcs.get("held").await.unwrap_err()), 404);
    server.shutdown().await;
}

/// Percent-encodes a query value (everything but unreserved characters).
fn query_value(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// KEP-5866: a list under `shardSelector` holds exactly the objects whose uid hashes into the
/// ranges (filtered before paging, no `remainingItemCount`), echoes the selector verbatim; a
/// watch under it sends only those objects' events and still every bookmark; a bad selector is
/// a 400; a server without sharding ignores it and echoes nothing.
#[tokio::test]
async fn shard_selector_narrows_lists_and_watches() {
    use kubewasm_apimachinery::{ShardField, ShardSelector, fnv1a64};
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for i in 0..40 {
        cms.create(&PostParams::default(), &cm(&format!("s{i:02}"), json!({})))
            .await
            .unwrap();
    }
    let half = 1u128 << 63;
    let low = ShardSelector::new(ShardField::Uid, [(0, half)]).unwrap();
    // The client's own spelling, spaces and all, is what comes back.
    let high = "shardRange(object.metadata.uid,'0x8000000000000000', '0x10000000000000000')";
    let list = |sel: String, extra: &str| {
        let c = c.clone();
        let path = format!(
            "/api/v1/namespaces/default/configmaps?shardSelector={}{extra}",
            query_value(&sel)
        );
        async move { raw(&c, "GET", &path, "application/json", Vec::new()).await }
    };
    let names_in = |items: &serde_json::Value, want_low: bool| {
        let mut names = Vec::new();
        for o in items.as_array().unwrap() {
            let uid = o["metadata"]["uid"].as_str().unwrap();
            assert_eq!(
                u128::from(fnv1a64(uid.as_bytes())) < half,
                want_low,
                "{uid} in the wrong half"
            );
            names.push(o["metadata"]["name"].as_str().unwrap().to_string());
        }
        names
    };
    let l = list(low.to_string(), "").await.unwrap();
    assert_eq!(l["metadata"]["shardInfo"]["selector"], low.to_string());
    let mut all = names_in(&l["items"], true);
    let h = list(high.to_string(), "").await.unwrap();
    assert_eq!(h["metadata"]["shardInfo"]["selector"], high);
    all.extend(names_in(&h["items"], false));
    all.sort();
    assert_eq!(
        all.len(),
        40,
        "the two halves together hold every object once"
    );
    all.dedup();
    assert_eq!(all.len(), 40);
    // Paged: filtered before paging, every page echoes, no count of what remains.
    let (mut paged, mut token) = (Vec::new(), String::new());
    loop {
        let extra = if token.is_empty() {
            "&limit=3".to_string()
        } else {
            format!("&limit=3&continue={}", query_value(&token))
        };
        let p = list(low.to_string(), &extra).await.unwrap();
        assert_eq!(p["metadata"]["shardInfo"]["selector"], low.to_string());
        assert!(p["metadata"].get("remainingItemCount").is_none(), "{p}");
        paged.extend(names_in(&p["items"], true));
        token = p["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(paged.len(), l["items"].as_array().unwrap().len());

    // Refused: empty, malformed, an unsupported field.
    for bad in [
        "",
        "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
        "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
    ] {
        let e = list(bad.to_string(), "").await.unwrap_err();
        assert_eq!(api_code(e), 400, "{bad:?}");
    }

    // A watch sends only the selected objects' events, and bookmarks whatever they carry.
    let rv = l["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let req = http::Request::get(format!(
        "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&\
         resourceVersion={rv}&shardSelector={}",
        query_value(&low.to_string())
    ))
    .body(Vec::new())
    .unwrap();
    let mut events = c.request_events::<ConfigMap>(req).await.unwrap().boxed();
    let mut created_low = 0;
    for i in 0..40 {
        let o = cms
            .create(&PostParams::default(), &cm(&format!("w{i:02}"), json!({})))
            .await
            .unwrap();
        created_low += usize::from(low.matches(&o.uid().unwrap(), "default"));
    }
    let last = server.resource_version();
    server.faults().bookmark_now();
    let mut seen = 0;
    loop {
        let ev = tokio::time::timeout(GUARD, events.next())
            .await
            .expect("the bookmark comes")
            .expect("stream open")
            .unwrap();
        match ev {
            WatchEvent::Added(o) => {
                assert!(
                    low.matches(&o.uid().unwrap(), "default"),
                    "{:?}",
                    o.metadata.name
                );
                seen += 1;
            }
            WatchEvent::Bookmark(b) => {
                if b.metadata.resource_version.parse::<u64>().unwrap() >= last {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, created_low);
    assert!(
        created_low > 0 && created_low < 40,
        "uids spread over both halves"
    );
    // The fault: the next watch ignores its selector (as an older server would), the one after
    // does not.
    server.faults().ignore_shard_selector(1);
    let from = server.resource_version();
    let watch = |rv: u64| {
        let c = c.clone();
        let path = format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&shardSelector={}",
            query_value(&low.to_string())
        );
        async move {
            let req = http::Request::get(path).body(Vec::new()).unwrap();
            c.request_events::<ConfigMap>(req).await.unwrap().boxed()
        }
    };
    let mut unsharded = watch(from).await;
    let mut sharded = watch(from).await;
    let mut names = Vec::new();
    for i in 0..8 {
        let o = cms
            .create(&PostParams::default(), &cm(&format!("f{i}"), json!({})))
            .await
            .unwrap();
        names.push((o.name_any(), low.matches(&o.uid().unwrap(), "default")));
    }
    for (name, _) in &names {
        let ev = tokio::time::timeout(GUARD, unsharded.next()).await.unwrap();
        let Some(Ok(WatchEvent::Added(o))) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(&o.name_any(), name);
    }
    for (name, _) in names.iter().filter(|(_, is_low)| *is_low) {
        let ev = tokio::time::timeout(GUARD, sharded.next()).await.unwrap();
        let Some(Ok(WatchEvent::Added(o))) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(&o.name_any(), name);
    }
    server.shutdown().await;

    // A server without sharding sends everything and says nothing.
    let old = ApiServer::start(Config {
        shard_selector: false,
        ..Config::default()
    })
    .await
    .unwrap();
    let c = client(&old).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for i in 0..4 {
        cms.create(&PostParams::default(), &cm(&format!("o{i}"), json!({})))
            .await
            .unwrap();
    }
    let path = format!(
        "/api/v1/namespaces/default/configmaps?shardSelector={}",
        query_value("shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')")
    );
    let l = raw(&c, "GET", &path, "application/json", Vec::new())
        .await
        .unwrap();
    assert_eq!(l["items"].as_array().unwrap().len(), 4);
    assert!(l["metadata"].get("shardInfo").is_none(), "{l}");
    old.shutdown().await;
}
