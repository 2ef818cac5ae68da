//! Start-up with plugins that compile at very different speeds: each delivers as soon as it is
//! compiled, and `/readyz` waits for all of them.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::host::HostBuilder;
use kubewasm::runtime::{CallKind, RuntimeConfig};
use kubewasm_e2e::*;

use super::{LOGGER, create, install};

const OBJECTS: usize = 20;

/// Status line and body of a GET on the health endpoint.
async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Initial-list adds `plugin` has handled so far.
fn initial_adds(r: &Recorder, plugin: &str) -> usize {
    r.calls(plugin)
        .iter()
        .filter(|c| c.call == CallKind::Add && c.flag)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_compile_does_not_hold_up_another_plugins_initial_list() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    for i in 0..OBJECTS {
        create(&api, &format!("cm-{i}"), &[]).await;
    }
    let dir = tempfile::tempdir().unwrap();
    for (src, name) in [
        (guest(LOGGER), "fast"),
        (guest("python-configmap-logger.wasm"), "slow"),
    ] {
        install(&src, dir.path(), &format!("{name}.wasm"));
        std::fs::copy(
            src.with_extension("toml"),
            dir.path().join(format!("{name}.toml")),
        )
        .unwrap();
    }
    // An empty cache of its own: the 18 MB Python component takes seconds of Cranelift.
    let cache = tempfile::tempdir().unwrap();
    // The health endpoint answers while `start` still loads, before it returns its address.
    let health = process::free_port();
    let recorder = Recorder::default();
    let loading = tokio::spawn(
        HostBuilder::new(client(&server))
            .runtime(RuntimeConfig {
                cache_dir: Some(cache.path().join("cache")),
                ..RuntimeConfig::default()
            })
            .health_addr(Some(health))
            .observer(recorder.observer())
            .plugins_dir(dir.path())
            .start(),
    );

    recorder
        .wait("the fast plugin handles its whole initial list", |r| {
            initial_adds(r, "fast") == OBJECTS
        })
        .await;
    let slow_loaded = |r: &Recorder| {
        r.events()
            .iter()
            .any(|e| matches!(e, HostEvent::Loaded { plugin, .. } if plugin == "slow"))
    };
    assert!(
        !slow_loaded(&recorder),
        "the fast plugin's initial list was handled only after the slow one loaded"
    );
    let ready = get(health, "/readyz").await;
    assert!(
        ready.starts_with("HTTP/1.0 503") && ready.contains("loading the plugins directory"),
        "/readyz waits for the plugin still compiling: {ready}"
    );

    let host = loading.await.unwrap().unwrap();
    recorder
        .wait("the slow plugin joins with a replay of the cache", |r| {
            initial_adds(r, "slow") == OBJECTS
        })
        .await;
    assert!(slow_loaded(&recorder));
    assert_eq!(
        server.stats().lists_of("configmaps"),
        1,
        "the late plugin joins the running informer, no second list"
    );
    // The queue counts the replay consumed when its last item is taken, before the call.
    let ready = get(health, "/readyz").await;
    assert!(
        ready.starts_with("HTTP/1.0 200"),
        "/readyz once all are in: {ready}"
    );
    host.shutdown().await;
}
