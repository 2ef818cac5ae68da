//! One Event store behind core v1 `events` and `events.k8s.io/v1` `events`: what either API
//! writes the other reads, lists and watches (same name, uid, resourceVersion), with the real
//! field mapping, and the field selectors `kubectl describe` and recorders use.

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::controllers::{kubectl, read, server, settle, watch};

async fn names<K>(api: &Api<K>, fields: &str) -> Result<Vec<String>, u16>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default().fields(fields)).await {
        Ok(l) => Ok(l.items.iter().map(|e| e.name_any()).collect()),
        Err(kube::Error::Api(s)) => Err(s.code),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_event_apis_share_one_store() {
    let (server, c) = server(false).await;
    let core: Api<CoreEvent> = Api::default_namespaced(c.clone());
    let v1: Api<EventV1> = Api::default_namespaced(c.clone());
    let mut core_watch = watch(&core).await;
    let mut v1_watch = watch(&v1).await;
    let pp = PostParams::default();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "web", "uid": "u-1"});

    // A recorder's Event (events.k8s.io/v1), read through core v1.
    let made = v1
        .create(
            &pp,
            &serde_json::from_value(json!({
            "metadata": {"name": "web.1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "kubewasm/lb", "reportingInstance": "host-1", "action": "Ensure",
            "reason": "Created", "type": "Normal", "note": "made", "regarding": pod,
            "related": {"kind": "Node", "name": "node-1"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(made.note.as_deref(), Some("made"));
    let seen = core.get("web.1").await.unwrap();
    assert_eq!(
        (seen.uid(), seen.resource_version()),
        (made.uid(), made.resource_version())
    );
    assert_eq!(seen.involved_object.name.as_deref(), Some("web"));
    assert_eq!(seen.message.as_deref(), Some("made"));
    assert_eq!(seen.reporting_component.as_deref(), Some("kubewasm/lb"));
    assert_eq!(seen.reporting_instance.as_deref(), Some("host-1"));
    assert_eq!(
        (
            seen.action.as_deref(),
            seen.reason.as_deref(),
            seen.type_.as_deref()
        ),
        (Some("Ensure"), Some("Created"), Some("Normal"))
    );
    assert_eq!(seen.related.unwrap().name.as_deref(), Some("node-1"));
    assert!(seen.event_time.is_some());

    // An old-style Event (core v1: kubectl, the kubelet), read through events.k8s.io/v1.
    let legacy = core
        .create(
            &pp,
            &serde_json::from_value(json!({
            "metadata": {"name": "web.2"}, "involvedObject": pod, "reason": "BackOff",
            "message": "restarting", "type": "Warning", "count": 4,
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z"}))
            .unwrap(),
        )
        .await
        .unwrap();
    let as_v1 = v1.get("web.2").await.unwrap();
    assert_eq!(
        (as_v1.uid(), as_v1.resource_version()),
        (legacy.uid(), legacy.resource_version())
    );
    assert_eq!(as_v1.note.as_deref(), Some("restarting"));
    assert_eq!(
        as_v1.regarding.as_ref().unwrap().uid.as_deref(),
        Some("u-1")
    );
    assert_eq!(as_v1.deprecated_count, Some(4));
    let source = as_v1.deprecated_source.unwrap();
    assert_eq!(
        (source.component.as_deref(), source.host.as_deref()),
        (Some("kubelet"), Some("node-1"))
    );
    assert!(
        as_v1.deprecated_first_timestamp.is_some() && as_v1.deprecated_last_timestamp.is_some()
    );

    // The recorder's repeat: a series patch through events.k8s.io/v1, seen by both.
    let series = json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}});
    let patched = v1
        .patch("web.1", &PatchParams::default(), &Patch::Merge(series))
        .await
        .unwrap();
    let seen = core.get("web.1").await.unwrap();
    assert_eq!(seen.series.as_ref().unwrap().count, Some(2));
    assert_eq!(seen.resource_version(), patched.resource_version());

    // Field selectors in each API's names; `kubectl describe pod web`'s own.
    let describe = "involvedObject.name=web,involvedObject.namespace=default,involvedObject.kind=Pod,involvedObject.uid=u-1";
    assert_eq!(
        names(&core, describe).await,
        Ok(vec!["web.1".into(), "web.2".into()])
    );
    assert_eq!(
        names(&core, "source=kubelet").await,
        Ok(vec!["web.2".into()])
    );
    // `source` falls back to the reporting controller, as kube-apiserver's field set does.
    assert_eq!(
        names(&core, "source=kubewasm/lb").await,
        Ok(vec!["web.1".into()])
    );
    assert_eq!(
        names(&core, "reportingComponent=kubewasm/lb,type=Normal").await,
        Ok(vec!["web.1".into()])
    );
    assert_eq!(
        names(&v1, "regarding.name=web,reason=BackOff").await,
        Ok(vec!["web.2".into()])
    );
    assert_eq!(
        names(&v1, "reportingController=kubewasm/lb").await,
        Ok(vec!["web.1".into()])
    );
    assert_eq!(names(&v1, "involvedObject.name=web").await, Err(400));
    assert_eq!(names(&core, "regarding.name=web").await, Err(400));
    assert_eq!(names(&core, "note=made").await, Err(400));

    // Both watches saw every write, each in its own form.
    settle(&server).await;
    let (seen, objects) = read(&mut core_watch).await;
    assert_eq!(seen, ["ADDED web.1", "ADDED web.2", "MODIFIED web.1"]);
    assert_eq!(objects[0]["message"], "made");
    assert_eq!(objects[0]["apiVersion"], "v1");
    let (seen, objects) = read(&mut v1_watch).await;
    assert_eq!(seen, ["ADDED web.1", "ADDED web.2", "MODIFIED web.1"]);
    assert_eq!(objects[1]["note"], "restarting");
    assert_eq!(objects[1]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(objects[2]["series"]["count"], 2);

    // Deleted through one API, gone from both.
    core.delete("web.1", &Default::default()).await.unwrap();
    assert!(v1.get_opt("web.1").await.unwrap().is_none());
    server.shutdown().await;
}

/// `kubectl describe` reads core v1 Events by `involvedObject.*`: it shows what a recorder wrote
/// through events.k8s.io/v1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_shows_events_recorded_with_the_new_api() {
    use k8s_openapi::api::core::v1::Pod;
    let (server, c) = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let pod = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let v1: Api<EventV1> = Api::default_namespaced(c.clone());
    v1.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
        "metadata": {"name": "web.1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "kubewasm/lb", "reportingInstance": "host-1", "action": "Ensure",
        "reason": "LoadBalancerReady", "type": "Normal", "note": "address 203.0.113.7 ready",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "web",
            "uid": pod.uid()}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let Some((ok, out, err)) = kubectl(&server, dir.path(), &["describe", "pod", "web"]).await
    else {
        return;
    };
    assert!(ok, "{out}{err}");
    let events = &out[out.find("Events:").expect("an Events section")..];
    assert!(events.contains("LoadBalancerReady"), "{out}");
    assert!(events.contains("address 203.0.113.7 ready"), "{out}");
    assert!(events.contains("kubewasm/lb"), "{out}");
    server.shutdown().await;
}
