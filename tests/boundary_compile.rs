//! Compiles are bounded (issue 31, attack 5): a component's compile runs in a child process with a
//! memory and time limit, and at most as many run at once as the compile memory budget allows.
//!
//! Before, the compile ran in the host: a component carrying a large unused core module of
//! straight-line functions, dropped in as a hot reload, took the host from 80 MiB to 1.5 GiB and
//! in the deploy's 512 MiB memory cgroup got it OOM-killed; the shipped Python and JavaScript
//! examples compiling side by side from an empty cache did the same. The process tests run the
//! real binary (`kubewasm-replica`, the `kubewasm` entry point) in such a cgroup where the machine
//! lets them make one, and bound its resident size otherwise.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kubewasm::runtime::{
    CompileAborted, CompileLimits, Runtime, RuntimeConfig, RuntimeError, RuntimeMetrics,
};
use kubewasm_e2e::cgroup::{counter, rss_bytes};
use kubewasm_e2e::process::{HostProcess, field, loaded};
use kubewasm_e2e::{client, guest, start_server};
use serde_json::json;

/// The `kubewasm` entry point, to run as a host and as its compile worker.
pub(crate) const BINARY: &str = env!("CARGO_BIN_EXE_kubewasm-replica");

/// A copy of the component `base` carrying one more core module that nothing instantiates:
/// `functions` straight-line functions, each pushing `depth` constants and adding them up (about 4
/// bytes a step). wasmtime compiles every core module a component holds, used or not, and
/// Cranelift's memory grows with the values a function keeps live: four functions of 400,000
/// (6 MB) took a host compiling in-process to 780 MB in 11 s.
///
/// Encoded by hand: four sections of one instruction pattern, where `wasm-encoder` would change
/// the features wasmtime is built with in this crate (and so rebuild it for one test helper).
fn with_unused_module(base: &[u8], functions: u32, depth: u32) -> Vec<u8> {
    fn leb(mut n: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    fn section(id: u8, payload: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }
    const I64_CONST: u8 = 0x42;
    const I64_ADD: u8 = 0x7c;
    const END: u8 = 0x0b;
    let mut body = vec![0]; // no locals
    for i in 0..depth {
        // Constants under 64 are one signed-LEB byte.
        body.extend_from_slice(&[I64_CONST, (i % 64) as u8]);
    }
    body.extend(std::iter::repeat_n(I64_ADD, depth as usize - 1));
    body.push(END);
    let mut code = Vec::new();
    leb(u64::from(functions), &mut code);
    for _ in 0..functions {
        leb(body.len() as u64, &mut code);
        code.extend_from_slice(&body);
    }
    let mut declared = Vec::new();
    leb(u64::from(functions), &mut declared);
    declared.extend(std::iter::repeat_n(0u8, functions as usize));
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    // One type: [] -> [i64].
    section(1, &[1, 0x60, 0, 1, 0x7e], &mut module);
    section(3, &declared, &mut module);
    section(10, &code, &mut module);
    let mut bytes = base.to_vec();
    // The component's core module section.
    section(1, &module, &mut bytes);
    bytes
}

/// A compile bomb: the Rust logger carrying 6 MB of unused straight-line code.
pub(crate) fn compile_bomb() -> Vec<u8> {
    let base = std::fs::read(guest("rust-configmap-logger.wasm")).unwrap();
    with_unused_module(&base, 4, 400_000)
}

fn runtime(limits: CompileLimits) -> Runtime {
    Runtime::new(
        RuntimeConfig {
            compile: limits,
            ..RuntimeConfig::default()
        },
        RuntimeMetrics::unregistered(),
    )
    .unwrap()
}

fn in_child() -> CompileLimits {
    CompileLimits {
        worker: Some(BINARY.into()),
        ..CompileLimits::default()
    }
}

#[test]
fn a_compile_bomb_stops_at_the_child_memory_limit_and_the_next_compile_works() {
    let rt = runtime(in_child());
    let bomb = compile_bomb();
    let before = rss_bytes(std::process::id());
    let err = rt.compile(&bomb).err().expect("the bomb must not compile");
    assert!(
        matches!(
            err,
            RuntimeError::CompileAborted(CompileAborted::MemoryLimit { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("memory limit"), "{err}");
    // The compile's memory was the child's: this process grew by about the bomb's bytes.
    let grown = rss_bytes(std::process::id()).saturating_sub(before);
    assert!(grown < 128 << 20, "the test process grew by {grown} bytes");
    // A handler compiled in a child loads, and instantiates like one compiled here.
    let logger = std::fs::read(guest("rust-configmap-logger.wasm")).unwrap();
    let compiled = rt
        .compile(&logger)
        .expect("a handler compiles in the child");
    assert!(!compiled.cache_hit());
    rt.handler_instance(
        &compiled,
        "logger",
        kubewasm::runtime::Limits::default(),
        Arc::new(kubewasm::runtime::NoCache),
    )
    .expect("a handle on it");
}

#[test]
fn a_compile_past_its_time_limit_is_stopped() {
    let rt = runtime(CompileLimits {
        time_limit: Duration::from_millis(1),
        ..in_child()
    });
    let wasm = std::fs::read(guest("rust-configmap-logger.wasm")).unwrap();
    let err = rt.compile(&wasm).err().expect("1 ms is too short");
    assert!(
        matches!(
            err,
            RuntimeError::CompileAborted(CompileAborted::TimeLimit { .. })
        ),
        "{err}"
    );
}

#[test]
fn a_component_wasmtime_refuses_says_why_through_the_child() {
    let rt = runtime(in_child());
    let mut wasm = std::fs::read(guest("rust-configmap-logger.wasm")).unwrap();
    wasm.truncate(wasm.len() / 2);
    let err = rt.compile(&wasm).err().expect("truncated");
    assert!(matches!(err, RuntimeError::Compile(_)), "{err}");
    assert!(!err.to_string().is_empty());
}

/// Writes `bytes` to `path` as a plugin update arrives: whole, by rename.
pub(crate) fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_bomb_hot_reload_is_refused_and_the_old_version_keeps_running() {
    let server = start_server().await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let plugins = tmp.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let wasm = plugins.join("victim.wasm");
    std::fs::copy(guest("rust-configmap-logger.wasm"), &wasm).unwrap();
    let mut host =
        HostProcess::start_plain(BINARY.as_ref(), tmp.path(), &plugins, &kubeconfig, "bomb").await;
    host.wait_line("victim loaded", loaded("victim")).await;

    replace(&wasm, &compile_bomb());
    let refused = host
        .wait_line("the bomb refused", |l| {
            field(l, "plugin") == "victim"
                && field(l, "message")
                    == "new version not loaded; the running version keeps running"
        })
        .await;
    assert!(
        field(&refused, "error").contains("memory limit"),
        "{refused}"
    );
    host.assert_alive_and_within_the_limit();

    // The first version still handles events.
    Api::<ConfigMap>::namespaced(client(&server), "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "after-the-bomb"}})).unwrap(),
        )
        .await
        .unwrap();
    host.wait_line("the old version's line", |l| {
        field(l, "plugin") == "victim" && field(l, "message").contains("add default/after-the-bomb")
    })
    .await;
    host.assert_alive_and_within_the_limit();
}

/// The deploy-registry pair: the Python replicator and the JavaScript notifier with the manifests
/// `deploy-registry/` ships.
pub(crate) fn install_registry_pair(plugins: &Path) -> [&'static str; 2] {
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy-registry");
    let names = ["python-replicator", "javascript-notifier"];
    for name in names {
        std::fs::copy(
            guest(&format!("{name}.wasm")),
            plugins.join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::copy(
            deploy.join(format!("{name}.toml")),
            plugins.join(format!("{name}.toml")),
        )
        .unwrap();
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_and_javascript_examples_compile_from_an_empty_cache_within_the_deploy_limit() {
    let server = start_server().await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let plugins = tmp.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let names = install_registry_pair(&plugins);
    let mut host =
        HostProcess::start_plain(BINARY.as_ref(), tmp.path(), &plugins, &kubeconfig, "pair").await;
    for name in names {
        host.wait_line(&format!("{name} loaded"), loaded(name))
            .await;
    }
    host.assert_alive_and_within_the_limit();
}

/// The OOM-kill count a compile cgroup reports is read by its exact key (`oom_kill_disable`, a
/// longer key with the same prefix, is skipped).
#[test]
fn cgroup_counters_are_read_by_key() {
    assert_eq!(
        counter("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"),
        3
    );
    assert_eq!(
        counter("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n", "oom_kill"),
        1
    );
    assert_eq!(counter("", "oom_kill"), 0);
}
