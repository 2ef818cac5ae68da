//! The RBAC `kubewasm rbac` prints, enforced: the embedded API server with authorization on
//! (`apiserver::Config::authorization`) judges every impersonated call as kube-apiserver's RBAC
//! would, so CI checks without a cluster that the printed RBAC is enough for a shipped example
//! acting under its own identity, and that the server refuses a plugin's write beyond its RBAC
//! even where the host's own grant check lets it through.
//!
//! Before the server authorized anything, the second test's writes were all accepted (the
//! Service got its finalizer and address) and it failed; the first could not notice a missing
//! rule at all.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kubewasm::informer::ReflectorConfig;
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;
use serde_json::json;

use super::lb_controller::{self, Cloud, event_is, wait_event_in};

/// `kubewasm` itself (this crate's copy), to print the RBAC as a user would.
const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm-replica");

/// Namespace of the host's ServiceAccount `kubewasm` and of the plugins' accounts: `deploy/`'s,
/// whose account [`apiserver::Authorization::default`] names as the impersonator.
const HOST_NS: &str = "kubewasm";
/// Name of the printed (Cluster)Roles and bindings (`kubewasm rbac`'s default).
const RBAC_NAME: &str = "kubewasm-plugins";

/// An embedded server of its own that authorizes impersonated requests as coming from
/// `system:serviceaccount:kubewasm:kubewasm`, with namespace `kubewasm` and one for the test.
async fn authorizing_target() -> (Target, TestNamespace) {
    let server = apiserver::ApiServer::start(apiserver::Config {
        bookmark_interval: Duration::from_millis(500),
        authorization: Some(apiserver::Authorization::default()),
        ..apiserver::Config::default()
    })
    .await
    .expect("embedded API server starts");
    let target = Target::Embedded(server);
    let host_ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": HOST_NS}})).unwrap();
    Api::<Namespace>::all(target.client())
        .create(&PostParams::default(), &host_ns)
        .await
        .unwrap();
    let ns = target.namespace("e2e-authz").await;
    (target, ns)
}

/// Applies what `kubewasm rbac DIR` prints for the plugins in `dir`, per-plugin identities
/// (the default) under the host's ServiceAccount `kubewasm` of [`HOST_NS`] (the defaults).
async fn apply_printed_rbac(target: &Target, ns: &TestNamespace, dir: &std::path::Path) {
    let yaml = kubewasm_e2e::process::printed_rbac(KUBEWASM, &[dir]).await;
    assert!(yaml.contains("kind: ServiceAccount"), "{yaml}");
    ns.apply_all(&target.client(), &yaml).await;
}

/// The lb-controller loaded in a host whose plugins act as `kubewasm-plugin-<name>` of `ns`,
/// its settings ConfigMap `default/lb-controller` naming `cloud`.
async fn lb_host(
    target: &Target,
    ns: &TestNamespace,
    cloud: &Cloud,
) -> (TestHost, tempfile::TempDir) {
    let settings = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": lb_controller::PLUGIN, "namespace": "default"},
        "data": {"endpoint": cloud.endpoint}});
    ns.apply_all(&target.client(), &serde_yaml::to_string(&settings).unwrap())
        .await;
    let plugins = tempfile::tempdir().unwrap();
    let wasm = lb_controller::install(plugins.path());
    apply_printed_rbac(target, ns, plugins.path()).await;
    let t = start_host_built(
        target.host_client(),
        None,
        Limits::default(),
        ReflectorConfig::default(),
        |b| b.plugin_accounts(Some(HOST_NS.to_string())),
    )
    .await;
    let out = t.host.manager().load_file(&wasm).await.expect("loads");
    assert!(
        matches!(out, kubewasm::plugins::LoadOutcome::Loaded { .. }),
        "{out:?}"
    );
    (t, plugins)
}

fn web() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    }))
    .unwrap()
}

/// Waits until the server refused a request with a message starting with `prefix`.
async fn refusal(server: &apiserver::ApiServer, prefix: &str) -> String {
    let found = async {
        loop {
            if let Some(m) = server
                .stats()
                .refusals
                .into_iter()
                .find(|m| m.starts_with(prefix))
            {
                return m;
            }
            // The stats are polled: the server has no change notification for them.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, found)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no refusal {prefix:?}; refused: {:#?}",
                server.stats().refusals
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_rbac_is_enough_for_the_lb_controller_under_its_own_identity() {
    let (target, ns) = authorizing_target().await;
    let server = target.embedded().expect("embedded");
    let cloud = Cloud::start().await;
    let (t, _plugins) = lb_host(&target, &ns, &cloud).await;
    let admin = target.client();
    let api: Api<Service> = Api::namespaced(admin.clone(), &ns.name);
    let (uid, _address) = lb_controller::create_and_await(&api, &t, &web()).await;
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
    .expect("web is released")
    .unwrap();
    assert!(cloud.lb(&uid).await.is_none());
    let stats = server.stats();
    assert_eq!(stats.forbidden, 0, "{:#?}", stats.refusals);
    // The plugin's calls were judged as its own account (the finalizer and status patches).
    let me = format!(
        "system:serviceaccount:{HOST_NS}:kubewasm-plugin-{} PATCH /api/v1/namespaces/{}/services/web",
        lb_controller::PLUGIN,
        ns.name
    );
    assert!(
        stats.impersonated.iter().any(|r| r.starts_with(&me)),
        "{:#?}",
        stats.impersonated
    );
    t.host.shutdown().await;
    drop(ns);
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_granted_write_the_rbac_lacks_and_an_impersonation_it_lacks() {
    let (target, ns) = authorizing_target().await;
    let server = target.embedded().expect("embedded");
    let cloud = Cloud::start().await;
    let (t, _plugins) = lb_host(&target, &ns, &cloud).await;
    let admin = target.client();
    let name = RBAC_NAME;
    let account = format!(
        "system:serviceaccount:{HOST_NS}:kubewasm-plugin-{}",
        lb_controller::PLUGIN
    );
    // The plugin's ClusterRole (its Service patches) goes; its binding stays. The host's
    // grants still allow the patch, so only the API server can refuse it.
    let role = format!("{name}-{}", lb_controller::PLUGIN);
    Api::<ClusterRole>::all(admin.clone())
        .delete(&role, &DeleteParams::default())
        .await
        .unwrap();
    let api: Api<Service> = Api::namespaced(admin.clone(), &ns.name);
    api.create(&PostParams::default(), &web()).await.unwrap();
    let m = refusal(server, "services \"web\" is forbidden").await;
    assert_eq!(
        m,
        format!(
            "services \"web\" is forbidden: User \"{account}\" cannot patch resource \"services\" \
             in API group \"\" in the namespace \"{}\": RBAC: clusterrole.rbac.authorization.k8s.io \
             \"{role}\" not found",
            ns.name
        )
    );
    let svc = api.get("web").await.unwrap();
    assert!(svc.metadata.finalizers.is_none(), "{:?}", svc.metadata);
    assert!(lb_controller::ingress_ip(&svc).is_none());

    // Without the impersonate Role the host may not act as the plugin at all: its next
    // attempt (every resync) is refused before the plugin's own RBAC is looked at.
    Api::<Role>::namespaced(admin.clone(), HOST_NS)
        .delete(&format!("{name}-impersonate"), &DeleteParams::default())
        .await
        .unwrap();
    let sa = format!("kubewasm-plugin-{}", lb_controller::PLUGIN);
    let m = refusal(server, &format!("serviceaccounts \"{sa}\" is forbidden")).await;
    assert_eq!(
        m,
        format!(
            "serviceaccounts \"{sa}\" is forbidden: User \"system:serviceaccount:{HOST_NS}:kubewasm\" \
             cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \
             \"{HOST_NS}\": RBAC: role.rbac.authorization.k8s.io \"{name}-impersonate\" not found"
        )
    );
    t.host.shutdown().await;
    drop(ns);
    target.shutdown().await;
}
