//! The real-cluster suite (issue 23): the end-to-end tests that mean the same on any cluster,
//! target-agnostic. Against the embedded API server by default (CI); with
//! `KUBEWASM_E2E_KUBECONFIG=PATH` (a cluster-admin kubeconfig: kind, k3s, envtest's binaries)
//! against that cluster. Each test works in namespaces of its own, deleted at its end, so runs
//! side by side on one cluster never meet; the leader election test is
//! `leader::two_replicas_hand_over_on_sigterm_and_sigkill`, on the same target.
//!
//! The acting examples run as a cluster runs them, each plugin under an identity of its own
//! (issue 31): the test creates the host's ServiceAccount `kubewasm` in its namespace, applies
//! what `kubewasm rbac` prints (a ServiceAccount `kubewasm-plugin-<plugin>` per plugin, its
//! RBAC, and the host's `impersonate` on exactly those accounts), and starts the host with a
//! kubeconfig holding nothing but a token of `kubewasm` from a TokenRequest: the host runs as
//! that account, not as the admin, and each plugin's calls impersonate the plugin's account
//! (impersonation does not nest, so the host cannot itself be impersonated here). A
//! permission the printed RBAC lacks is then a 403 on either target: the embedded server,
//! [`Target::from_env`]'s, authorizes token-authenticated and impersonated requests as
//! kube-apiserver does. Each test asserts none happened (host and guest logs; on the embedded
//! server `Stats::forbidden`) and, on the embedded server, that each plugin's calls reached it
//! as the plugin's account (`Stats::impersonated`). On a real cluster the audit log shows the
//! same: its events for the plugin's requests have `user.username`
//! `system:serviceaccount:<ns>:kubewasm` and `impersonatedUser.username`
//! `system:serviceaccount:<ns>:kubewasm-plugin-<plugin>` (`kubewasm dev --audit-log-path` writes
//! the embedded server's in the same shape). Built with `--features unchecked-grants`, a
//! further test switches the host's own grant checks off and shows the API server's RBAC alone
//! refusing a plugin's write outside its grants, naming the plugin's account.
//!
//! Tests that need fault injection (cut watches, compaction, partitions) stay on the embedded
//! server only.

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kubewasm::informer::ReflectorConfig;
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;
use serde_json::{Value, json};

use super::convergence::{Run, env_u64, schedule};
use super::lb_controller::{self, Cloud, event_is, wait_event_in};
use super::{notifier, replicator};

mod controllers;
mod site_controller;

/// `kubewasm` itself (this crate's copy), to print the RBAC as a user would.
const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm-replica");
/// The host's ServiceAccount, in the test's namespace: the host runs with a token of it.
const SERVICE_ACCOUNT: &str = "kubewasm";
/// A node no cluster has: no kubelet (or scheduler) touches a Pod bound to it, so only the test
/// writes its status.
const NO_NODE: &str = "kubewasm-e2e-no-such-node";

/// How the host of a test runs: as ServiceAccount `kubewasm` of the test's namespace.
struct HostIdentity {
    /// A client with nothing but the account's token.
    client: kube::Client,
    /// The same, as a kubeconfig file, for a host process.
    #[cfg_attr(not(feature = "unchecked-grants"), allow(dead_code))]
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

/// The user name of plugin `plugin`'s account in `ns`.
fn plugin_user(ns: &TestNamespace, plugin: &str) -> String {
    format!("system:serviceaccount:{}:kubewasm-plugin-{plugin}", ns.name)
}

/// Creates the host's ServiceAccount `kubewasm` in `ns`, applies what `kubewasm rbac DIR`
/// prints for the plugins in `dir` (per-plugin accounts in `ns`; (Cluster)Roles named after
/// `ns`, deleted with it) and answers the host's identity: a token of `kubewasm` from a
/// TokenRequest.
async fn under_printed_rbac(target: &Target, ns: &TestNamespace, dir: &Path) -> HostIdentity {
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
        ],
    )
    .await;
    assert!(yaml.contains("kind: ServiceAccount"), "{yaml}");
    assert!(yaml.contains("- impersonate"), "{yaml}");
    let admin = target.client();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns.name);
    let host_account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": SERVICE_ACCOUNT}})).unwrap();
    accounts
        .create(&PostParams::default(), &host_account)
        .await
        .unwrap();
    ns.apply_all(&admin, &yaml).await;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = accounts
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token of {SERVICE_ACCOUNT}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("the token");
    let dir = tempfile::tempdir().unwrap();
    HostIdentity {
        client: target.host_client_with_token(dir.path(), &token).await,
        kubeconfig: target.kubeconfig_with_token(dir.path(), &token),
        _dir: dir,
    }
}

/// A host running as `identity`, each plugin's calls impersonating its account in `ns`, with
/// the plugin `wasm` loaded.
async fn start_host_as(identity: &HostIdentity, ns: &TestNamespace, wasm: &Path) -> TestHost {
    let t = start_host_built(
        identity.client.clone(),
        None,
        Limits::default(),
        ReflectorConfig::default(),
        |b| b.plugin_accounts(Some(ns.name.clone())),
    )
    .await;
    let out = t
        .host
        .manager()
        .load_file(wasm)
        .await
        .unwrap_or_else(|e| panic!("{} loads: {e}", wasm.display()));
    assert!(
        matches!(out, kubewasm::plugins::LoadOutcome::Loaded { .. }),
        "{out:?}"
    );
    t
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

/// Fails if the plugin or the host said 403 about it, or (embedded) the server refused anything:
/// the printed RBAC lacked something. On the embedded server, also fails unless the plugin's
/// calls reached it as the plugin's own account.
fn assert_no_refusal(target: &Target, ns: &TestNamespace, t: &TestHost, plugin: &str) {
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
    if let Some(server) = target.embedded() {
        let stats = server.stats();
        assert_eq!(stats.forbidden, 0, "refused: {:#?}", stats.refusals);
        let me = format!("{} ", plugin_user(ns, plugin));
        assert!(
            stats.impersonated.iter().any(|r| r.starts_with(&me)),
            "no call as {me}: {:#?}",
            stats.impersonated
        );
    }
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
    let identity = under_printed_rbac(&target, &ns, plugins.path()).await;
    let t = start_host_as(&identity, &ns, &wasm).await;

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
    assert_no_refusal(&target, &ns, &t, lb_controller::PLUGIN);
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
    let identity = under_printed_rbac(&target, &ns, plugins.path()).await;
    let t = start_host_as(&identity, &ns, &wasm).await;

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
    assert_no_refusal(&target, &ns, &t, replicator::PLUGIN);
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
    let identity = under_printed_rbac(&target, &ns, plugins.path()).await;
    let t = start_host_as(&identity, &ns, &wasm).await;

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
    assert_no_refusal(&target, &ns, &t, notifier::PLUGIN);
    t.host.shutdown().await;
    // No kubelet will ever confirm the Pod's end: without a zero grace period a cluster keeps
    // it (and the test namespace, Terminating) until its Pod GC gives up on the node, ~1 min.
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete("crashy", &now).await.unwrap();
}

/// Whether any string of `line` (a host's JSON log line) contains every one of `needles`.
#[cfg(feature = "unchecked-grants")]
fn says(line: &Value, needles: &[&str]) -> bool {
    match line {
        Value::String(s) => needles.iter().all(|n| s.contains(n)),
        Value::Array(a) => a.iter().any(|v| says(v, needles)),
        Value::Object(o) => o.values().any(|v| says(v, needles)),
        _ => false,
    }
}

/// With the host's own grant checks switched off (test-only build,
/// `KUBEWASM_UNCHECKED_GRANTS_FOR_TESTS=1`), a plugin's write outside its grants still reaches
/// no object: the API server's RBAC, from what `kubewasm rbac` printed, refuses it 403, naming
/// the plugin's own account. The lb-controller is granted Service patches in the test's
/// namespace only and sees a LoadBalancer Service in another; the host runs as a process with
/// a token of its ServiceAccount.
#[cfg(feature = "unchecked-grants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_alone_refuses_a_plugin_write_outside_its_grants_as_the_plugins_account() {
    use kubewasm_e2e::process::{HostCommand, HostProcess, field};

    let target = Target::from_env().await;
    let ns = target.namespace("e2e-unchecked").await;
    let elsewhere = target.namespace("e2e-unchecked-other").await;
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
    lb_controller::install(plugins.path());
    let manifest = plugins
        .path()
        .join(format!("{}.toml", lb_controller::PLUGIN));
    let shipped = std::fs::read_to_string(&manifest).unwrap();
    let confined = shipped.replace(
        r#"verbs = ["patch"] }"#,
        &format!(r#"verbs = ["patch"], namespaces = ["{}"] }}"#, ns.name),
    );
    assert_ne!(confined, shipped, "the write grant is confined");
    std::fs::write(&manifest, confined).unwrap();
    let identity = under_printed_rbac(&target, &ns, plugins.path()).await;
    let host = HostProcess::start(HostCommand {
        binary: Path::new(KUBEWASM),
        plugins: plugins.path(),
        kubeconfig: &identity.kubeconfig,
        cache_dir: shared_compile_cache(),
        name: "e2e-unchecked",
        args: vec![
            "--plugin-identity=own".into(),
            format!("--host-namespace={}", ns.name),
            "--metrics-bind-address=0".into(),
            "--health-probe-bind-address=0".into(),
        ],
        env: vec![("KUBEWASM_UNCHECKED_GRANTS_FOR_TESTS".into(), "1".into())],
    })
    .await;
    host.wait_line(
        "the lb-controller loaded",
        kubewasm_e2e::process::loaded(lb_controller::PLUGIN),
    )
    .await;

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
    let api: Api<Service> = Api::namespaced(admin.clone(), &elsewhere.name);
    api.create(&PostParams::default(), &service).await.unwrap();
    let account = plugin_user(&ns, lb_controller::PLUGIN);
    let object = format!("{}/web", elsewhere.name);
    // The patch was sent (the host did not refuse it) and answered 403.
    host.wait_line("the refused patch", |l| {
        field(l, "plugin") == lb_controller::PLUGIN
            && (l["code"] == 403 || field(l, "code") == "403")
            && field(l, "object").contains(&object)
    })
    .await;
    // The refusal, as the plugin was told it, names the plugin's account.
    host.wait_line("the plugin's account in the refusal", |l| {
        field(l, "plugin") == lb_controller::PLUGIN
            && says(l, &[account.as_str(), "forbidden", "patch"])
    })
    .await;
    if let Some(server) = target.embedded() {
        let stats = server.stats();
        let expected = format!(
            "services \"web\" is forbidden: User \"{account}\" cannot patch resource \"services\" \
             in API group \"\" in the namespace \"{}\"",
            elsewhere.name
        );
        assert!(
            stats.refusals.iter().any(|m| *m == expected),
            "{expected}\nnot in {:#?}",
            stats.refusals
        );
    }
    let svc = api.get("web").await.unwrap();
    assert!(svc.metadata.finalizers.is_none(), "{:?}", svc.metadata);
    assert!(lb_controller::ingress_ip(&svc).is_none());
}
