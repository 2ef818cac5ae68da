//! The Rust `lb-controller` example end to end: the real host and the embedded API server, the
//! cloud stand-in (`cloud.py`) as the external system, the plugin loaded with the manifest it
//! ships. A Service of type LoadBalancer gets a finalizer, a load balancer in the cloud, its
//! address in `status.loadBalancer.ingress` and an Event; a load balancer deleted in the cloud
//! behind the controller's back comes back at the next resync (`is-sync`), when no event about
//! the unchanged Service arrives; a load balancer whose Service was deleted while no host ran is
//! removed in `on-synced`; deleting a Service with the host running deletes its load balancer
//! before the finalizer lets the Service go.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kubewasm_e2e::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

pub(crate) const PLUGIN: &str = "lb-controller";
pub(crate) const FINALIZER: &str = "kubewasm.io/lb-controller";

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/rust/lb-controller")
}

/// `cloud.py` on a free loopback port; killed when dropped.
pub(crate) struct Cloud {
    _child: tokio::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) endpoint: String,
}

impl Cloud {
    pub(crate) async fn start() -> Cloud {
        let mut child = tokio::process::Command::new("python3")
            .arg(example_dir().join("cloud.py"))
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs cloud.py");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        tokio::time::timeout(PATIENCE, BufReader::new(stdout).read_line(&mut line))
            .await
            .expect("cloud.py prints its address")
            .expect("read cloud.py's stdout");
        let endpoint = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from cloud.py: {line:?}"))
            .to_string();
        Cloud {
            _child: child,
            endpoint,
        }
    }

    /// One HTTP/1.0 request (the stand-in closes every connection), answering status and body.
    pub(crate) async fn request(&self, method: &str, path: &str) -> (u16, serde_json::Value) {
        let addr = self.endpoint.trim_start_matches("http://");
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to cloud.py");
        s.write_all(format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status code");
        let body = if body.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(body).expect("a JSON body")
        };
        (status, body)
    }

    pub(crate) async fn lb(&self, uid: &str) -> Option<serde_json::Value> {
        match self.request("GET", &format!("/lbs/{uid}")).await {
            (200, lb) => Some(lb),
            (404, _) => None,
            (code, body) => panic!("GET /lbs/{uid}: {code} {body}"),
        }
    }
}

/// Copies the built component and the manifest it ships into `dir` as `lb-controller.*`, with
/// the resync period cut to the 1 s minimum so the repair shows quickly.
pub(crate) fn install(dir: &Path) -> PathBuf {
    let wasm = dir.join(format!("{PLUGIN}.wasm"));
    std::fs::copy(guest("rust-lb-controller.wasm"), &wasm).unwrap();
    let shipped = std::fs::read_to_string(example_dir().join("lb-controller.toml")).unwrap();
    let manifest = shipped.replace("resync-period-ms = 10000", "resync-period-ms = 1000");
    assert_ne!(
        manifest, shipped,
        "the shipped manifest sets resync-period-ms = 10000"
    );
    std::fs::write(dir.join(format!("{PLUGIN}.toml")), manifest).unwrap();
    wasm
}

fn lb_service(name: &str) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        },
    }))
    .unwrap()
}

pub(crate) fn ingress_ip(s: &Service) -> Option<String> {
    s.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

/// Creates a LoadBalancer Service and waits until the controller has made its load balancer and
/// written the address; answers (uid, address).
async fn create_and_await_address(
    api: &Api<Service>,
    t: &TestHost,
    name: &str,
) -> (String, String) {
    create_and_await(api, t, &lb_service(name)).await
}

/// Creates `service` in `api`'s namespace, then as [`create_and_await_address`].
pub(crate) async fn create_and_await(
    api: &Api<Service>,
    t: &TestHost,
    service: &Service,
) -> (String, String) {
    let name = service.metadata.name.as_deref().expect("a name");
    let ns = api.namespace().expect("a namespaced Api");
    let created = api.create(&PostParams::default(), service).await.unwrap();
    let uid = created.metadata.uid.unwrap();
    let svc = tokio::time::timeout(
        PATIENCE,
        await_condition(api.clone(), name, |s: Option<&Service>| {
            s.and_then(ingress_ip).is_some()
        }),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{name} never got an address; logs:\n{}",
            t.logs.of(PLUGIN).join("\n")
        )
    })
    .unwrap()
    .unwrap();
    let address = ingress_ip(&svc).unwrap();
    let finalizers = svc.metadata.finalizers.unwrap_or_default();
    assert!(finalizers.iter().any(|f| f == FINALIZER), "{finalizers:?}");
    t.logs
        .wait_line(
            PLUGIN,
            &format!("ensured {ns}/{name} lb={uid} address={address} (created)"),
        )
        .await;
    (uid, address)
}

/// Waits for an Event in `ns` matching `pred` (the watch's initial list included).
pub(crate) async fn wait_event_in(
    client: kube::Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    let api: Api<Event> = Api::namespaced(client, ns);
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let found = async {
        while let Some(e) = stream.try_next().await.expect("watch Events") {
            if pred(&e) {
                return e;
            }
        }
        panic!("the Event watch ended")
    };
    tokio::time::timeout(PATIENCE, found)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for Event {what}"))
}

async fn wait_event(client: kube::Client, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
    wait_event_in(client, "default", what, pred).await
}

pub(crate) fn event_is(e: &Event, reason: &str, kind: &str, uid: &str) -> bool {
    e.reason.as_deref() == Some(reason)
        && e.type_.as_deref() == Some(kind)
        && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_controller_creates_repairs_and_removes_load_balancers() {
    let cloud = Cloud::start().await;
    let server = start_server().await;
    let client = client(&server);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let config: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "lb-controller"},
        "data": {"endpoint": cloud.endpoint},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &config).await.unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let wasm = install(plugins.path());
    let api: Api<Service> = Api::namespaced(client.clone(), "default");

    // Created: finalizer, load balancer, status, Event.
    let t = start_host_with_plugin(&server, &wasm).await;
    let (web, address) = create_and_await_address(&api, &t, "web").await;
    let lb = cloud.lb(&web).await.expect("the load balancer exists");
    assert_eq!(lb["address"], address.as_str());
    assert_eq!(lb["service"], "default/web");
    assert_eq!(
        lb["ports"],
        serde_json::json!([{"port": 80, "protocol": "TCP", "name": "http"}])
    );
    let created = wait_event(client.clone(), "Created", |e| {
        event_is(e, "Created", "Normal", &web)
    })
    .await;
    // Assumption (issue 9): the host reports Events as controller `kubewasm/<plugin>`.
    assert_eq!(
        created.reporting_controller.as_deref(),
        Some("kubewasm/lb-controller")
    );

    // Steady state first: until the controller has handled the Service as it is now (after its
    // own finalizer and status writes), a queued older version without the address could still
    // be delivered after the delete below, and a missing load balancer for a Service without an
    // address is a first creation ("created"), not a repair.
    let steady = format!("ensured default/web lb={web} address={address} (unchanged)");
    t.logs
        .wait_for(PLUGIN, "the controller's steady state", |l| {
            l.contains(&steady)
        })
        .await;

    // Deleted behind the controller's back: nothing about the Service changes, so only the
    // resync replay (is-sync = true) can notice, and it re-creates the load balancer.
    let lines_before = t.logs.of(PLUGIN).len();
    assert_eq!(cloud.request("DELETE", &format!("/lbs/{web}")).await.0, 204);
    let lines = t
        .logs
        .wait_for(PLUGIN, "the repair", |l| {
            l[lines_before..].iter().any(|x| {
                x.starts_with(&format!("ensured default/web lb={web} address="))
                    && x.ends_with("(recreated)")
            })
        })
        .await;
    assert!(
        lines[lines_before..]
            .contains(&"repaired default/web: load balancer was missing".to_string()),
        "{lines:?}"
    );
    let lb = cloud.lb(&web).await.expect("the load balancer is back");
    let svc = api.get("web").await.unwrap();
    assert_eq!(
        ingress_ip(&svc).as_deref(),
        lb["address"].as_str(),
        "status shows the new address"
    );
    wait_event(client.clone(), "Recreated", |e| {
        event_is(e, "Recreated", "Warning", &web)
    })
    .await;

    // Orphaned while no host runs: `gone` loses its finalizer and is deleted meanwhile, so no
    // notification will ever say so; on-synced after the next start finds its load balancer
    // unaccounted for.
    let (gone, _) = create_and_await_address(&api, &t, "gone").await;
    t.host.shutdown().await;
    api.patch(
        "gone",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("gone").await.unwrap().is_none());
    assert!(cloud.lb(&gone).await.is_some(), "nobody removed it yet");

    let t = start_host_with_plugin(&server, &wasm).await;
    t.logs
        .wait_line(
            PLUGIN,
            &format!("removed orphan lb={gone} (service default/gone gone)"),
        )
        .await;
    assert!(
        cloud.lb(&gone).await.is_none(),
        "the orphan is deleted in the cloud"
    );
    assert!(
        cloud.lb(&web).await.is_some(),
        "web's load balancer is accounted for and stays"
    );

    // Deleted with the host running: the finalizer holds the Service until its load balancer
    // is gone, then lets it go.
    api.delete("web", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(
        PATIENCE,
        await_condition(api.clone(), "web", conditions::is_deleted(&web)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "web was never released; logs:\n{}",
            t.logs.of(PLUGIN).join("\n")
        )
    })
    .unwrap();
    t.logs
        .wait_line(PLUGIN, &format!("deleted default/web lb={web}"))
        .await;
    assert!(
        cloud.lb(&web).await.is_none(),
        "the load balancer went with the Service"
    );
    wait_event(client.clone(), "Deleted", |e| {
        event_is(e, "Deleted", "Normal", &web)
    })
    .await;
    let (_, all) = cloud.request("GET", "/lbs").await;
    assert_eq!(all, serde_json::json!([]), "no load balancer left");
    t.host.shutdown().await;
}
