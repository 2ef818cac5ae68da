//! The real-cluster suite (issue 23): the end-to-end tests that mean the same on any cluster,
//! target-agnostic. Against the embedded API server by default (CI); with
//! `KUBEWASM_E2E_KUBECONFIG=PATH` (a cluster-admin kubeconfig: kind, k3s, envtest's binaries)
//! against that cluster. Each test works in namespaces of its own, deleted at its end, so runs
//! side by side on one cluster never meet; the leader election test is
//! `leader::two_replicas_hand_over_on_sigterm_and_sigkill`, on the same target.
//!
//! The acting examples run under the RBAC `kubewasm rbac` prints for them, bound to the
//! ServiceAccount `kubewasm` of the test's namespace, with the host impersonating it: a
//! permission the printed RBAC lacks is a 403 on a real cluster (the embedded server enforces
//! no RBAC). Tests that need fault injection (cut watches, compaction, partitions) stay on the
//! embedded server only.

use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kubewasm_e2e::*;
use serde_json::{Value, json};

use super::convergence::{Run, env_u64, schedule};
use super::lb_controller::{self, Cloud, event_is, wait_event_in};
use super::{notifier, replicator};

/// `kubewasm` itself (this crate's copy), to print the RBAC as a user would.
const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm-replica");
/// The ServiceAccount the printed RBAC binds, in the test's namespace; the host impersonates it.
const SERVICE_ACCOUNT: &str = "kubewasm";
/// A node no cluster has: no kubelet (or scheduler) touches a Pod bound to it, so only the test
/// writes its status.
const NO_NODE: &str = "kubewasm-e2e-no-such-node";

/// Applies what `kubewasm rbac DIR` prints for the plugins in `dir` (the ServiceAccount
/// `kubewasm` of `ns`; (Cluster)Roles named after `ns`, deleted with it) and answers a client
/// impersonating that ServiceAccount, for the host.
async fn under_printed_rbac(target: &Target, ns: &TestNamespace, dir: &Path) -> kube::Client {
    let name = format!("kubewasm-plugins-{}", ns.name);
    let yaml = kubewasm_e2e::process::printed_rbac(
        KUBEWASM,
        &[
            dir.as_os_str(),
            "--service-account".as_ref(),
            SERVICE_ACCOUNT.as_ref(),
            "--namespace".as_ref(),
            ns.name.as_ref(),
            "--name".as_ref(),
            name.as_ref(),
            // The host itself impersonates that account here, and impersonation does not nest:
            // the plugins act as the host (per-plugin accounts need the host to run with a token).
            "--shared-identity".as_ref(),
        ],
    )
    .await;
    assert!(yaml.contains("kind: ClusterRoleBinding"), "{yaml}");
    ns.apply_all(&target.client(), &yaml).await;
    target.client_as(&format!(
        "system:serviceaccount:{}:{SERVICE_ACCOUNT}",
        ns.name
    ))
}

/// The examples read their settings from ConfigMap `default/<plugin>`: written (server-side
/// apply, so a leftover of an aborted run is taken over) and deleted with `ns`.
async fn settings_in_default(admin: &kube::Client, ns: &TestNamespace, plugin: &str, data: Value) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": plugin}, "data": data,
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .patch(
            plugin,
            &PatchParams::apply("kubewasm-e2e").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
    ns.delete_later(
        kube::core::ApiResource::erase::<ConfigMap>(&()),
        Some("default"),
        plugin,
    );
}

/// Fails if the plugin or the host said 403 about it: the printed RBAC lacked something.
fn assert_no_refusal(t: &TestHost, plugin: &str) {
    let guest = t.logs.of(plugin);
    let host: Vec<String> = host_lines()
        .of(plugin)
        .into_iter()
        .map(|l| l.message)
        .collect();
    let refused: Vec<&String> = guest
        .iter()
        .chain(&host)
        .filter(|l| l.contains("403") || l.to_lowercase().contains("forbidden"))
        .collect();
    assert!(refused.is_empty(), "{plugin} was refused: {refused:#?}");
}

/// Seeded schedules of writes, hot swaps, removals and failing guests in a namespace of its own
/// (no server faults: a real cluster has none to inject); every plugin's view of the namespace
/// converges to the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_converge_on_the_target() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-converge").await;
    let seed = env_u64("KUBEWASM_SEED").unwrap_or(0x6b75_6265);
    let count = env_u64("KUBEWASM_SCHEDULES").unwrap_or(20);
    let mut run = Run::start_on(target, Some(ns), 1).await;
    for n in 0..count {
        schedule(&mut run, seed, n, 12).await;
    }
    run.converge(&format!("seed {seed} after {count} schedules"))
        .await;
    run.report_and_stop(&format!("on the target, seed {seed}, {count} schedules"))
        .await;
}

/// The lb-controller under its printed RBAC: a LoadBalancer Service gets a load balancer, its
/// address in the status and an Event; deleting it deletes the load balancer before the
/// finalizer lets it go. The Service names a `loadBalancerClass` of its own, so a cluster's
/// own load balancer controller (k3s's ServiceLB, a cloud's) leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_controller_under_printed_rbac() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-lb").await;
    let admin = target.client();
    let cloud = Cloud::start().await;
    settings_in_default(
        &admin,
        &ns,
        lb_controller::PLUGIN,
        json!({"endpoint": cloud.endpoint}),
    )
    .await;
    let plugins = tempfile::tempdir().unwrap();
    let wasm = lb_controller::install(plugins.path());
    let host_client = under_printed_rbac(&target, &ns, plugins.path()).await;
    let t = start_host_with_plugin_on(host_client, &wasm).await;

    let api: Api<Service> = Api::namespaced(admin.clone(), &ns.name);
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "kubewasm.io/e2e",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        },
    }))
    .unwrap();
    let (uid, address) = lb_controller::create_and_await(&api, &t, &service).await;
    let lb = cloud.lb(&uid).await.expect("the load balancer exists");
    assert_eq!(lb["address"], address.as_str());
    assert_eq!(lb["service"], format!("{}/web", ns.name).as_str());
    wait_event_in(admin.clone(), &ns.name, "Created", |e| {
        event_is(e, "Created", "Normal", &uid)
    })
    .await;

    api.delete("web", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(
        PATIENCE,
        await_condition(api.clone(), "web", conditions::is_deleted(&uid)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "web was never released; logs:\n{}",
            t.logs.of("lb-controller").join("\n")
        )
    })
    .unwrap();
    assert!(
        cloud.lb(&uid).await.is_none(),
        "the load balancer went with the Service"
    );
    wait_event_in(admin.clone(), &ns.name, "Deleted", |e| {
        event_is(e, "Deleted", "Normal", &uid)
    })
    .await;
    assert_no_refusal(&t, lb_controller::PLUGIN);
    t.host.shutdown().await;
}

/// The replicator under its printed RBAC: a ConfigMap annotated with two namespaces gets a copy
/// in each, the copies follow its change and go with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicator_under_printed_rbac() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-repl").await;
    let to = [
        target.namespace("e2e-repl-a").await,
        target.namespace("e2e-repl-b").await,
    ];
    let admin = target.client();
    let plugins = tempfile::tempdir().unwrap();
    let wasm = replicator::install(plugins.path());
    let host_client = under_printed_rbac(&target, &ns, plugins.path()).await;
    let t = start_host_with_plugin_on(host_client, &wasm).await;

    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns.name);
    let targets = format!("{}, {}", to[0].name, to[1].name);
    api.create(
        &PostParams::default(),
        &replicator::source("settings", &targets, "1"),
    )
    .await
    .unwrap();
    for v in ["1", "2"] {
        if v == "2" {
            let p = json!({"data": {"k": v}});
            api.patch("settings", &PatchParams::default(), &Patch::Merge(&p))
                .await
                .unwrap();
        }
        for copy in &to {
            replicator::await_copy_of(&admin, &t, &ns.name, &copy.name, "settings", "k", v).await;
        }
    }
    api.delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    for copy in &to {
        replicator::await_gone(&admin, &t, &copy.name, "settings").await;
    }
    assert_no_refusal(&t, replicator::PLUGIN);
    t.host.shutdown().await;
}

/// The next webhook POST about a Pod of `ns` (on a shared cluster other Pods may crash-loop).
async fn next_post_in(
    posts: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Value)>,
    t: &TestHost,
    ns: &str,
) -> Value {
    loop {
        let (_, body) = notifier::next_post(posts, t).await;
        if body["namespace"] == ns {
            return body;
        }
    }
}

/// The notifier under its printed RBAC: a Pod (bound to a node that does not exist, its status
/// written through `/status` as a kubelet would) going into CrashLoopBackOff is posted once per
/// restart count, with a Warning Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifier_under_printed_rbac() {
    let target = Target::from_env().await;
    let ns = target.namespace("e2e-notify").await;
    let admin = target.client();
    let (url, mut posts) = notifier::webhook().await;
    settings_in_default(&admin, &ns, notifier::PLUGIN, json!({"webhook": url})).await;
    let plugins = tempfile::tempdir().unwrap();
    let wasm = notifier::install(plugins.path());
    let host_client = under_printed_rbac(&target, &ns, plugins.path()).await;
    let t = start_host_with_plugin_on(host_client, &wasm).await;

    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    let uid = notifier::create_crashy(&pods, Some(NO_NODE)).await;
    let patch_status = |v: Value| notifier::patch_crashy_status(&pods, v);
    patch_status(notifier::crash_looping(3, "back-off 40s")).await;
    let body = next_post_in(&mut posts, &t, &ns.name).await;
    assert_eq!(
        body,
        json!({"pod": "crashy", "namespace": ns.name, "container": "app", "restarts": 3})
    );
    let event = wait_event_in(admin.clone(), &ns.name, "CrashLoopBackOff", |e| {
        e.reason.as_deref() == Some("CrashLoopBackOff")
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some(uid.as_str())
    );
    // The same count again posts nothing; calls about one Pod are in order, so the next POST
    // being restarts = 4 shows it.
    patch_status(notifier::crash_looping(3, "back-off 1m20s")).await;
    patch_status(notifier::crash_looping(4, "back-off 2m40s")).await;
    let body = next_post_in(&mut posts, &t, &ns.name).await;
    assert_eq!(body["restarts"], 4, "the repeat was not notified: {body}");
    assert_no_refusal(&t, notifier::PLUGIN);
    t.host.shutdown().await;
}
