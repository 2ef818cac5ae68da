//! Handlers that act (`kubewasm:handler@0.2.0`), end to end: a 0.2.0 handler loads beside a
//! 0.1.0 one in the same host and gets the same notifications, and with no grants configured
//! every acting import is refused by the host: a `kube` write never reaches the API server.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;

use super::{LOGGER, create};

const LOGGER_V2: &str = "rust-logger-v2.wasm";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_handler_runs_beside_v1_and_its_ungranted_write_is_refused_by_the_host() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv_pre = create(&api, "pre", &[("kubewasm.io/try", "write")]).await;

    let t = start_host(&server, None, Limits::default()).await;
    for file in [LOGGER, LOGGER_V2] {
        let out = t.host.manager.load_file(&guest(file)).await.expect(file);
        assert!(matches!(out, LoadOutcome::Loaded { .. }), "{file}: {out:?}");
    }
    let (v1, v2) = ("rust-configmap-logger", "rust-logger-v2");
    let add_pre = format!("add default/pre rv={rv_pre} init=true");
    t.logs.wait_line(v1, &add_pre).await;
    // `on-synced` once the replay is handled, after it; a 0.1.0 handler has no such export.
    let lines = t.logs.wait_line(v2, "synced").await;
    let at = |l: &str| lines.iter().position(|x| x == l);
    assert!(at(&add_pre) < at("synced"), "{lines:?}");
    t.logs
        .wait_line(
            v2,
            "try write default/pre: error 403 Forbidden: not granted: plugin rust-logger-v2 \
             has no grant to patch this object",
        )
        .await;

    let rv_live = create(&api, "live", &[("kubewasm.io/try", "http")]).await;
    t.logs
        .wait_line(v2, &format!("add default/live rv={rv_live} init=false"))
        .await;
    t.logs
        .wait_line(
            v2,
            "try http default/live: error ErrorCode::HttpRequestDenied",
        )
        .await;

    assert_eq!(
        t.logs.of(v2).iter().filter(|l| *l == "synced").count(),
        1,
        "once per replay"
    );

    // The refused patch would have added this annotation and a new resourceVersion.
    let pre = api.get("pre").await.unwrap();
    assert_eq!(pre.metadata.resource_version.as_deref(), Some(&*rv_pre));
    assert!(pre.metadata.annotations.unwrap_or_default().is_empty());
    t.host.shutdown().await;
}
