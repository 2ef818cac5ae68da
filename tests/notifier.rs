//! The JavaScript `notifier` example end to end: the real host and the embedded API server, a
//! webhook receiver (axum on loopback) standing in for the chat or paging system, the plugin
//! loaded with the manifest it ships. A Pod whose container goes into CrashLoopBackOff gets a
//! Warning Event and one POST to the webhook; a status update that repeats the same restart
//! count does not notify again, the next restart does.

use std::path::{Path, PathBuf};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubewasm_e2e::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub(crate) const PLUGIN: &str = "notifier";

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/javascript/notifier")
}

/// Copies the built component and the manifest it ships into `dir` as `notifier.*`.
pub(crate) fn install(dir: &Path) -> PathBuf {
    let wasm = dir.join(format!("{PLUGIN}.wasm"));
    std::fs::copy(guest("javascript-notifier.wasm"), &wasm).unwrap();
    std::fs::copy(
        example_dir().join("notifier.toml"),
        dir.join(format!("{PLUGIN}.toml")),
    )
    .unwrap();
    wasm
}

/// A webhook receiver on a free loopback port: every POST to `/hook` is parsed as JSON and
/// sent on the channel (with its content type), answered 204.
pub(crate) async fn webhook() -> (String, mpsc::UnboundedReceiver<(String, Value)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route(
            "/hook",
            post(
                |State(tx): State<mpsc::UnboundedSender<(String, Value)>>,
                 headers: HeaderMap,
                 body: String| async move {
                    let kind = headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let body = serde_json::from_str(&body).expect("the webhook body is JSON");
                    let _ = tx.send((kind, body));
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

pub(crate) async fn next_post(
    rx: &mut mpsc::UnboundedReceiver<(String, Value)>,
    t: &TestHost,
) -> (String, Value) {
    tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("no webhook POST; logs:\n{}", t.logs.of(PLUGIN).join("\n")))
        .expect("the webhook runs")
}

pub(crate) fn crash_looping(restarts: i32, message: &str) -> Value {
    json!({"status": {"containerStatuses": [{
        "name": "app", "image": "example/app:1", "imageID": "", "ready": false,
        "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
    }]}})
}

/// Creates the Pod `crashy` (one container `app`) and returns its uid. `node` pins it to a node
/// (on a real cluster, one that does not exist, so no kubelet writes its status).
pub(crate) async fn create_crashy(pods: &Api<Pod>, node: Option<&str>) -> String {
    let mut spec = json!({"containers": [{"name": "app", "image": "example/app:1"}]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "crashy"}, "spec": spec})).unwrap();
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

/// Sets the status of the Pod `crashy` through `/status`, as a kubelet would.
pub(crate) async fn patch_crashy_status(pods: &Api<Pod>, status: Value) -> Pod {
    pods.patch_status("crashy", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifier_posts_crash_looping_pods_once_per_restart() {
    let (url, mut posts) = webhook().await;
    let server = start_server().await;
    let client = client(&server);
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "notifier"},
        "data": {"webhook": url},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let wasm = install(plugins.path());
    let t = start_host_with_plugin(&server, &wasm).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uid = create_crashy(&pods, None).await;
    let patch_status = |v: Value| patch_crashy_status(&pods, v);

    // CrashLoopBackOff: one POST and a Warning Event.
    patch_status(crash_looping(3, "back-off 40s")).await;
    let (kind, body) = next_post(&mut posts, &t).await;
    assert_eq!(kind, "application/json");
    assert_eq!(
        body,
        json!({"pod": "crashy", "namespace": "default", "container": "app", "restarts": 3})
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let stream = watcher(events, watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let event = tokio::time::timeout(PATIENCE, async {
        while let Some(e) = stream.try_next().await.expect("watch Events") {
            if e.reason.as_deref() == Some("CrashLoopBackOff") {
                return e;
            }
        }
        panic!("the Event watch ended")
    })
    .await
    .expect("a CrashLoopBackOff Event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.action.as_deref(), Some("Notify"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some(uid.as_str())
    );
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("kubewasm/notifier")
    );

    // The same restart count again (the kubelet rewrites the message): no second POST. The
    // next restart is notified, and calls about one Pod are in order, so the POST after this
    // one being restarts = 4 shows that the repeat posted nothing.
    patch_status(crash_looping(3, "back-off 1m20s")).await;
    patch_status(crash_looping(4, "back-off 2m40s")).await;
    let (_, body) = next_post(&mut posts, &t).await;
    assert_eq!(body["restarts"], 4, "the repeat was not notified: {body}");
    // The guest logs after the POST returned: wait for its second line.
    let is_notified = |l: &String| l.starts_with("notified ");
    let lines = t
        .logs
        .wait_for(PLUGIN, "two notifications logged", |l| {
            l.iter().filter(|x| is_notified(x)).count() >= 2
        })
        .await;
    let notified: Vec<&String> = lines.iter().filter(|x| is_notified(x)).collect();
    assert_eq!(notified.len(), 2, "{notified:?}");
    assert_eq!(
        notified[0],
        "notified default/crashy container=\"app\" restarts=3 status=204"
    );
    assert!(posts.try_recv().is_err(), "nothing else was posted");
    t.host.shutdown().await;
}
