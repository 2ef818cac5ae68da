//! Runtime tests against the real Rust guests: examples in `guest-examples/dist/` (built by
//! `bash guest-examples/build.sh rust`) and test fixtures in `target/fixtures/` (built by
//! `bash tests/fixtures/build.sh`).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::*;
use crate::test_support::LogCapture;

// ---------- fixtures ----------

/// Runs one async runtime call to completion on a fresh single-threaded runtime, as a plugin
/// worker thread would.
fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

trait InstantiateBlocking {
    fn instantiate_blocking(
        &self,
        compiled: &CompiledHandler,
        plugin: &str,
        limits: Limits,
        cache: Arc<dyn CacheReader>,
    ) -> Result<HandlerInstance, RuntimeError>;
}

impl InstantiateBlocking for Runtime {
    fn instantiate_blocking(
        &self,
        compiled: &CompiledHandler,
        plugin: &str,
        limits: Limits,
        cache: Arc<dyn CacheReader>,
    ) -> Result<HandlerInstance, RuntimeError> {
        block(self.instantiate(compiled, plugin, limits, cache))
    }
}

/// The component `rust-NAME.wasm`: a test fixture (`test-fixture`, `http-fixture`) from
/// `target/fixtures/`, an example from `guest-examples/dist/`.
fn guest_bytes(name: &str) -> Vec<u8> {
    let (dir, build) = if name.ends_with("-fixture") {
        ("../target/fixtures", "bash tests/fixtures/build.sh")
    } else {
        (
            "../guest-examples/dist",
            "bash guest-examples/build.sh rust",
        )
    };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join(format!("rust-{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); build it first: {build}",
            path.display()
        )
    })
}

/// A Kubernetes object owned by the test.
struct TestObject {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    uid: String,
    resource_version: String,
    labels: Vec<(String, String)>,
    json: String,
}

impl GuestObject for TestObject {
    fn view(&self) -> ObjectView<'_> {
        ObjectView {
            api_version: &self.api_version,
            kind: &self.kind,
            namespace: self.namespace.as_deref(),
            name: &self.name,
            uid: &self.uid,
            resource_version: &self.resource_version,
            generation: None,
            labels: &self.labels,
            json: &self.json,
        }
    }
}

fn configmap(namespace: Option<&str>, name: &str, rv: &str, labels: &[(&str, &str)]) -> TestObject {
    let labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv,
                     "labels": labels.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()},
        "data": {"k": "v"},
    })
    .to_string();
    TestObject {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: namespace.map(Into::into),
        name: name.into(),
        uid: format!("uid-{name}"),
        resource_version: rv.into(),
        labels,
        json,
    }
}

fn action(action: &str) -> TestObject {
    configmap(Some("ns"), action, "1", &[("kubewasm.io/action", action)])
}

/// Serves two ConfigMaps; refuses every other kind like the plugins layer does.
struct FakeCache;

impl CacheReader for FakeCache {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<dyn GuestObject>>, CacheError> {
        if (api_version, kind) != ("v1", "ConfigMap") {
            return Err(CacheError::NotSubscribed {
                plugin: "fake".into(),
                api_version: api_version.into(),
                kind: kind.into(),
            });
        }
        Ok(Some(Arc::new(configmap(namespace, name, "7", &[]))))
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        _namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<Arc<dyn GuestObject>>, CacheError> {
        if (api_version, kind) != ("v1", "ConfigMap") {
            return Err(CacheError::NotSubscribed {
                plugin: "fake".into(),
                api_version: api_version.into(),
                kind: kind.into(),
            });
        }
        Ok(vec![
            Arc::new(configmap(Some("a"), "one", "1", &[])),
            Arc::new(configmap(Some("b"), "two", "2", &[])),
        ])
    }
}

type Lines = Arc<Mutex<Vec<(String, GuestLogLevel, String)>>>;

/// One runtime and one compile of each guest for all tests; tests tell their logs apart by
/// giving each instance a unique plugin name.
struct Shared {
    runtime: Runtime,
    metrics: RuntimeMetrics,
    lines: Lines,
    logger: CompiledHandler,
    fixture: CompiledHandler,
    /// `logger-v2`, a `kubewasm:handler@0.2.0` handler.
    logger_v2: CompiledHandler,
}

/// Keeps every guest line of every instance.
struct LineObserver(Lines);

impl Observer for LineObserver {
    fn log_line(&self, plugin: &str, level: GuestLogLevel, message: &str) {
        self.0
            .lock()
            .push((plugin.to_string(), level, message.to_string()))
    }
}

fn observer(lines: &Lines) -> SharedObserver {
    Arc::new(LineObserver(lines.clone()))
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let lines = Lines::default();
        let metrics = RuntimeMetrics::unregistered();
        let config = RuntimeConfig {
            observer: Some(observer(&lines)),
            ..Default::default()
        };
        let runtime = Runtime::new(config, metrics.clone()).unwrap();
        let logger = runtime.compile(&guest_bytes("configmap-logger")).unwrap();
        let fixture = runtime.compile(&guest_bytes("test-fixture")).unwrap();
        let logger_v2 = runtime.compile(&guest_bytes("logger-v2")).unwrap();
        Shared {
            runtime,
            metrics,
            lines,
            logger,
            fixture,
            logger_v2,
        }
    })
}

fn instance(compiled: &CompiledHandler, plugin: &str, limits: Limits) -> HandlerInstance {
    shared()
        .runtime
        .instantiate_blocking(compiled, plugin, limits, Arc::new(FakeCache))
        .unwrap()
}

/// Messages logged so far by `plugin`.
/// Limits for tests whose subject is not time: the default 1 s deadline is a production figure,
/// and a loaded machine (CI builds beside the tests) could end a call before the bound under
/// test (memory, resources, log caps) refuses it. Deadline tests set their own.
fn untimed() -> Limits {
    Limits {
        deadline: Duration::from_secs(30),
        wall_limit: Duration::from_secs(60),
        ..Limits::default()
    }
}

fn logged(plugin: &str) -> Vec<String> {
    shared()
        .lines
        .lock()
        .iter()
        .filter(|(p, ..)| p == plugin)
        .map(|(.., m)| m.clone())
        .collect()
}

fn logged_with_level(plugin: &str) -> Vec<(GuestLogLevel, String)> {
    shared()
        .lines
        .lock()
        .iter()
        .filter(|(p, ..)| p == plugin)
        .map(|(_, l, m)| (*l, m.clone()))
        .collect()
}

// ---------- configmap-logger: the reference behaviour ----------

#[test]
fn logger_describe() {
    let mut h = instance(&shared().logger, "logger-describe", untimed());
    let info = block(h.describe()).unwrap();
    assert_eq!(
        info,
        PluginInfo {
            name: "configmap-logger".into(),
            subscriptions: vec![Subscription {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                resync_period_ms: 0,
                metadata_only: false,
                fields: Vec::new(),
            }],
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: false,
            controller: None,
        }
    );
    assert!(
        logged("logger-describe").is_empty(),
        "describe logs nothing"
    );
}

#[test]
fn logger_logs_one_info_line_per_call() {
    let p = "logger-lines";
    let mut h = instance(&shared().logger, p, untimed());
    let a = configmap(Some("default"), "cfg", "10", &[]);
    let b = configmap(Some("default"), "cfg", "11", &[]);
    let c = configmap(None, "cluster-wide", "5", &[]);
    assert_eq!(block(h.on_add(&a, true)).unwrap(), HandlerOutcome::Ok);
    assert_eq!(block(h.on_add(&c, false)).unwrap(), HandlerOutcome::Ok);
    assert_eq!(
        block(h.on_update(&a, &b, false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(
        block(h.on_update(&b, &b, true)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(block(h.on_delete(&b, false)).unwrap(), HandlerOutcome::Ok);
    assert_eq!(block(h.on_delete(&c, true)).unwrap(), HandlerOutcome::Ok);
    let expected = [
        "add default/cfg rv=10 init=true",
        "add cluster-wide rv=5 init=false",
        "update default/cfg rv=10->11 sync=false",
        "update default/cfg rv=11->11 sync=true",
        "delete default/cfg rv=11 final-state-unknown=false",
        "delete cluster-wide rv=5 final-state-unknown=true",
    ];
    let lines = logged_with_level(p);
    assert_eq!(
        lines.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>(),
        expected
    );
    assert!(lines.iter().all(|(l, _)| *l == GuestLogLevel::Info));
}

#[test]
fn logger_fail_label_maps_to_outcomes() {
    let p = "logger-outcomes";
    let mut h = instance(&shared().logger, p, untimed());
    let retry = configmap(Some("n"), "r", "1", &[("kubewasm.io/fail", "retry")]);
    let fatal = configmap(Some("n"), "f", "1", &[("kubewasm.io/fail", "fatal")]);
    let other = configmap(Some("n"), "o", "1", &[("kubewasm.io/fail", "maybe")]);
    assert_eq!(
        block(h.on_add(&retry, false)).unwrap(),
        HandlerOutcome::Retry("kubewasm.io/fail=retry".into())
    );
    assert_eq!(
        block(h.on_add(&fatal, false)).unwrap(),
        HandlerOutcome::Fatal("kubewasm.io/fail=fatal".into())
    );
    assert_eq!(block(h.on_add(&other, false)).unwrap(), HandlerOutcome::Ok);
    // on-update decides on the *new* object.
    assert_eq!(
        block(h.on_update(&retry, &other, false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(
        block(h.on_update(&other, &fatal, false)).unwrap(),
        HandlerOutcome::Fatal("kubewasm.io/fail=fatal".into())
    );
    assert_eq!(
        block(h.on_delete(&retry, false)).unwrap(),
        HandlerOutcome::Retry("kubewasm.io/fail=retry".into())
    );
    assert_eq!(logged(p).len(), 6);
}

#[test]
fn trap_discards_instance_and_next_call_gets_a_fresh_one() {
    let p = "logger-trap";
    let mut h = instance(&shared().logger, p, untimed());
    let trap = configmap(Some("n"), "t", "3", &[("kubewasm.io/fail", "trap")]);
    let err = block(h.on_add(&trap, false)).unwrap_err();
    let CallError::Trap(msg) = &err else {
        panic!("expected a trap, got {err:?}")
    };
    assert!(
        msg.contains("kubewasm.io/fail=trap"),
        "trap message carries the panic: {msg}"
    );
    assert_eq!(
        logged(p)[0],
        "add n/t rv=3 init=false",
        "the line is logged before the trap"
    );
    let ok = configmap(Some("n"), "ok", "4", &[]);
    assert_eq!(block(h.on_add(&ok, false)).unwrap(), HandlerOutcome::Ok);
    let m = &shared().metrics;
    assert_eq!(h.consecutive_failures(), 0, "reset by the successful call");
    assert_eq!(m.instantiations(p), 2);
    assert_eq!(m.failures(p, "trap"), 1);
}

// ---------- containment ----------

#[test]
fn endless_loop_hits_the_deadline() {
    let p = "fixture-loop";
    let deadline = Duration::from_millis(200);
    let mut h = instance(
        &shared().fixture,
        p,
        Limits {
            deadline,
            ..Limits::default()
        },
    );
    let started = Instant::now();
    let err = block(h.on_add(&action("loop"), false)).unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(err, CallError::DeadlineExceeded);
    assert!(elapsed >= deadline, "interrupted early: {elapsed:?}");
    assert!(
        elapsed < deadline + Duration::from_secs(2),
        "interrupted late: {elapsed:?}"
    );
    assert_eq!(
        block(h.on_add(&action("other"), false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(shared().metrics.failures(p, "deadline"), 1);
}

#[test]
fn memory_hog_hits_the_cap() {
    let p = "fixture-oom";
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..untimed()
    };
    let mut h = instance(&shared().fixture, p, limits);
    assert_eq!(
        block(h.on_add(&action("oom"), false)).unwrap_err(),
        CallError::OutOfMemory
    );
    assert_eq!(
        block(h.on_update(&action("x"), &action("other"), false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(shared().metrics.failures(p, "oom"), 1);
}

#[test]
fn no_ambient_capabilities() {
    let p = "fixture-ambient";
    let mut h = instance(&shared().fixture, p, untimed());
    for a in ["read-file", "env", "net", "stdin"] {
        assert_eq!(
            block(h.on_add(&action(a), false)).unwrap(),
            HandlerOutcome::Ok
        );
    }
    let lines = logged(p);
    assert!(lines[0].starts_with("read-file: denied: "), "{lines:?}");
    assert_eq!(lines[1], "env: none visible");
    assert!(lines[2].starts_with("net: denied: "), "{lines:?}");
    assert_eq!(lines[3], "stdin: empty");
}

#[test]
fn cache_imports_are_forwarded_and_refusals_are_values() {
    let p = "fixture-cache";
    let mut h = instance(&shared().fixture, p, untimed());
    assert_eq!(
        block(h.on_add(&action("cache-get-secret"), false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(
        block(h.on_add(&action("cache-list-configmaps"), false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(
        logged(p),
        [
            "cache-get-secret: error: plugin fake does not subscribe to v1 Secret; only \
             subscribed resources can be read from the cache: subscribe to it in describe() and \
             grant it in the plugin's manifest: [grants] watch = [{ api-version = \"v1\", \
             kind = \"Secret\" }]",
            "cache-list-configmaps: 2"
        ]
    );
}

#[test]
fn stdout_and_stderr_lines_are_logged_with_the_plugin() {
    let p = "fixture-print";
    let mut h = instance(&shared().fixture, p, untimed());
    assert_eq!(
        block(h.on_add(&action("print"), false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(
        logged_with_level(p),
        [
            (GuestLogLevel::Info, "print: stdout ns/print".to_string()),
            (GuestLogLevel::Warn, "print: stderr ns/print".to_string()),
        ]
    );
}

// ---------- guest output bounds ----------

#[test]
fn a_60_mb_log_message_is_logged_capped_and_the_instance_keeps_working() {
    let p = "fixture-log-huge";
    let limits = Limits {
        memory_bytes: 192 << 20,
        ..untimed()
    };
    let mut h = instance(&shared().fixture, p, limits);
    assert_eq!(
        block(h.on_add(&action("log-huge"), false)).unwrap(),
        HandlerOutcome::Ok
    );
    let lines = logged(p);
    assert_eq!(lines.len(), 2, "one capped line, then the next message");
    let marker = format!(
        "…[truncated {} bytes]",
        (60 << 20) - guest_log::MAX_GUEST_TEXT
    );
    assert_eq!(lines[0].len(), guest_log::MAX_GUEST_TEXT + marker.len());
    assert!(lines[0].ends_with(&marker));
    assert_eq!(lines[1], "log-huge: done");
}

#[test]
fn a_60_mb_stdout_line_is_logged_once_capped() {
    let p = "fixture-print-huge";
    let limits = Limits {
        memory_bytes: 192 << 20,
        ..untimed()
    };
    let mut h = instance(&shared().fixture, p, limits);
    assert_eq!(
        block(h.on_add(&action("print-huge"), false)).unwrap(),
        HandlerOutcome::Ok
    );
    let lines = logged(p);
    assert_eq!(
        lines.len(),
        2,
        "{:?}",
        lines.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    let dropped = (60 << 20) + " end".len() - guest_log::MAX_GUEST_TEXT;
    assert!(lines[0].starts_with("yyyy"));
    assert!(
        lines[0].ends_with(&format!("y…[truncated {dropped} bytes]")),
        "{}",
        &lines[0][lines[0].len() - 60..]
    );
    assert_eq!(lines[1], "print-huge: done");
}

#[test]
fn guest_log_messages_cannot_forge_lines_or_terminal_escapes() {
    let p = "fixture-log-forge";
    let mut h = instance(&shared().fixture, p, untimed());
    block(h.on_add(&action("log-forge"), false)).unwrap();
    assert_eq!(
        logged_with_level(p),
        [(
            GuestLogLevel::Error,
            "forged\\n2024-01-01T00:00:00Z  INFO kubewasm: \\u{1b}[32mall good\\u{1b}[0m"
                .to_string()
        )]
    );
}

#[test]
fn a_flooding_guest_is_rate_limited_and_counted() {
    let p = "fixture-log-flood";
    let mut h = instance(&shared().fixture, p, untimed());
    block(h.on_add(&action("log-flood"), false)).unwrap();
    let lines = logged(p);
    let burst = guest_log::LOG_BURST as usize;
    // 3000 lines in one call: the burst passes, and the call is far shorter than the
    // (3000 - burst) / rate seconds it would take to earn the rest.
    assert!(
        lines.len() >= burst && lines.len() < 3000,
        "{}",
        lines.len()
    );
    assert_eq!(lines[0], "flood 0");
    assert_eq!(
        shared().metrics.guest_log_dropped(p),
        (3000 - lines.len()) as u64
    );
}

#[test]
fn handler_error_strings_are_capped_and_escaped() {
    let p = "fixture-retry-huge";
    let mut h = instance(&shared().fixture, p, untimed());
    let HandlerOutcome::Retry(msg) = block(h.on_add(&action("retry-huge"), false)).unwrap() else {
        panic!("expected a retry")
    };
    assert!(msg.starts_with("line one\\nline two zzz"), "{}", &msg[..30]);
    let dropped = "line one\nline two ".len() + (1 << 20) - (guest_log::MAX_GUEST_TEXT - 1);
    assert!(
        msg.ends_with(&format!("z…[truncated {dropped} bytes]")),
        "{}",
        &msg[msg.len() - 60..]
    );
}

#[test]
fn memory_cap_above_the_ceiling_is_refused() {
    let limits = Limits {
        memory_bytes: 1 << 40,
        ..untimed()
    };
    let err = shared()
        .runtime
        .instantiate_blocking(&shared().fixture, "too-big", limits, Arc::new(FakeCache))
        .err()
        .expect("must be refused");
    assert!(
        matches!(err, RuntimeError::Instantiate(ref m) if m.contains("ceiling")),
        "{err}"
    );
}

#[test]
fn a_full_pool_is_its_own_error_and_passes() {
    let config = RuntimeConfig {
        max_instances: 1,
        ..Default::default()
    };
    let runtime = Runtime::new(config, RuntimeMetrics::unregistered()).unwrap();
    let compiled = runtime.compile(&guest_bytes("test-fixture")).unwrap();
    let first = runtime
        .instantiate_blocking(&compiled, "first", untimed(), Arc::new(FakeCache))
        .unwrap();
    let err = runtime
        .instantiate_blocking(&compiled, "second", untimed(), Arc::new(FakeCache))
        .err()
        .expect("the only slot is taken");
    assert!(
        matches!(err, RuntimeError::PoolExhausted(ref m) if m.contains("concurrent limit")),
        "{err:?}"
    );
    // Logs read as before the variant existed.
    assert!(
        err.to_string()
            .starts_with("cannot instantiate handler: maximum concurrent limit of"),
        "{err}"
    );
    let mut probe = runtime
        .handler_instance(&compiled, "probe", untimed(), Arc::new(FakeCache))
        .unwrap();
    let err = block(probe.start()).unwrap_err();
    assert!(matches!(err, CallError::PoolExhausted { .. }), "{err:?}");
    assert_eq!(err.cause(), "instantiate");
    drop(first);
    block(probe.start()).expect("a slot is free again");
}

// ---------- validation ----------

#[test]
fn garbage_and_core_modules_are_not_components() {
    let rt = &shared().runtime;
    for bytes in [&b"hello world, not wasm"[..], b"", b"\0asm\x01\0\0\0"] {
        let err = rt.compile(bytes).err().expect("must be rejected");
        assert!(matches!(err, RuntimeError::NotAComponent(_)), "{err}");
    }
    let err = rt.compile(b"\0asm\x01\0\0\0").err().unwrap();
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");
}

#[test]
fn components_of_other_worlds_are_wrong_world() {
    let rt = &shared().runtime;
    let empty = wat::parse_str("(component)").unwrap();
    let err = rt.compile(&empty).err().expect("must be rejected");
    assert!(
        matches!(err, RuntimeError::WrongWorld(ref m) if m.contains("describe, on-add, on-update, on-delete")),
        "{err}"
    );
    let wrong_types = wat::parse_str(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (export "describe" (func $f))
            (export "on-add" (func $f))
            (export "on-update" (func $f))
            (export "on-delete" (func $f)))"#,
    )
    .unwrap();
    let err = rt.compile(&wrong_types).err().expect("must be rejected");
    assert!(
        matches!(err, RuntimeError::WrongWorld(ref m) if m.contains("wrong types")),
        "{err}"
    );
    // Exporting on-synced marks a 0.2.0 handler, which must export the 0.2.0 set.
    let v2_partial = wat::parse_str(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (export "on-synced" (func $f)))"#,
    )
    .unwrap();
    let err = rt.compile(&v2_partial).err().expect("must be rejected");
    assert!(
        matches!(err, RuntimeError::WrongWorld(ref m)
            if m.contains("describe, on-add, on-update, on-delete of kubewasm:handler@0.2.0")),
        "{err}"
    );
    let mixed = wat::parse_str(
        r#"(component
            (import "kubewasm:handler/log@0.1.0" (instance))
            (import "kubewasm:handler/log@0.2.0" (instance)))"#,
    )
    .unwrap();
    let err = rt.compile(&mixed).err().expect("must be rejected");
    assert!(
        matches!(err, RuntimeError::WrongWorld(ref m)
            if m.contains("several versions (0.1.0, 0.2.0)")),
        "{err}"
    );
    let v1_with_http =
        wat::parse_str(r#"(component (import "wasi:http/outgoing-handler@0.2.12" (instance)))"#)
            .unwrap();
    let err = rt.compile(&v1_with_http).err().expect("must be rejected");
    assert!(
        matches!(err, RuntimeError::WrongWorld(ref m)
            if m.contains("imports wasi:http/outgoing-handler@0.2.12")),
        "{err}"
    );
    let truncated = &guest_bytes("configmap-logger")[..4096];
    let err = rt.compile(truncated).err().expect("must be rejected");
    assert!(matches!(err, RuntimeError::Compile(_)), "{err}");
}

// ---------- compile cache ----------

#[test]
fn compile_cache_hits_survive_restarts_and_corruption_recompiles() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = guest_bytes("configmap-logger");
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..Default::default()
    };
    let rt = Runtime::new(config.clone(), RuntimeMetrics::unregistered()).unwrap();
    assert!(!rt.compile(&wasm).unwrap().cache_hit());
    assert!(rt.compile(&wasm).unwrap().cache_hit());

    // A restart (new engine, same configuration) reuses the artifact.
    let rt = Runtime::new(config.clone(), RuntimeMetrics::unregistered()).unwrap();
    let compiled = rt.compile(&wasm).unwrap();
    assert!(compiled.cache_hit());
    let mut h = rt
        .instantiate_blocking(&compiled, "cached", untimed(), Arc::new(FakeCache))
        .unwrap();
    assert_eq!(block(h.describe()).unwrap().name, "configmap-logger");

    // Corrupt the artifact: it is detected, recompiled and rewritten.
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let mut bytes = std::fs::read(&entries[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&entries[0], &bytes).unwrap();
    // A running runtime keeps serving its in-memory copy; the next start finds the corruption.
    assert!(rt.compile(&wasm).unwrap().cache_hit());
    let rt = Runtime::new(config.clone(), RuntimeMetrics::unregistered()).unwrap();
    let compiled = rt.compile(&wasm).unwrap();
    assert!(!compiled.cache_hit());
    let mut h = rt
        .instantiate_blocking(&compiled, "recompiled", untimed(), Arc::new(FakeCache))
        .unwrap();
    assert_eq!(block(h.describe()).unwrap().name, "configmap-logger");
    assert!(rt.compile(&wasm).unwrap().cache_hit());

    // Truncated to nothing: same, at the next start.
    std::fs::write(&entries[0], b"").unwrap();
    let rt = Runtime::new(config, RuntimeMetrics::unregistered()).unwrap();
    assert!(!rt.compile(&wasm).unwrap().cache_hit());
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The cache file of `wasm` in `dir` (named by the wasm's sha256).
fn artifact_of(dir: &std::path::Path, wasm: &[u8]) -> PathBuf {
    use sha2::Digest;
    let prefix = hex::encode(sha2::Sha256::digest(wasm));
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(&prefix)
        })
        .expect("artifact written")
}

/// Compiles `wasm` in a fresh runtime (no in-memory reuse) and names what was loaded.
fn compile_afresh(config: &RuntimeConfig, wasm: &[u8]) -> (bool, String) {
    let rt = Runtime::new(config.clone(), RuntimeMetrics::unregistered()).unwrap();
    let compiled = rt.compile(wasm).unwrap();
    let mut h = rt
        .instantiate_blocking(&compiled, "cache-trust", untimed(), Arc::new(FakeCache))
        .unwrap();
    (compiled.cache_hit(), block(h.describe()).unwrap().name)
}

/// Guest-log-free JSON capture of the host's own warnings.
fn warnings_during(f: impl FnOnce()) -> Vec<serde_json::Value> {
    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::WARN)
        .with_writer(capture.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    capture.json_lines()
}

#[test]
fn compile_cache_in_a_directory_others_can_write_is_not_used() {
    let wasm = guest_bytes("configmap-logger");
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let config = RuntimeConfig {
        cache_dir: Some(cache.clone()),
        ..Default::default()
    };
    // Created private whatever the umask, and used.
    assert_eq!(
        compile_afresh(&config, &wasm),
        (false, "configmap-logger".into())
    );
    assert_eq!(mode(&cache), 0o700);
    let artifact = artifact_of(&cache, &wasm);
    assert_eq!(mode(&artifact), 0o600);
    assert!(
        compile_afresh(&config, &wasm).0,
        "a trusted cache is reused"
    );

    // World-writable: anyone could have planted the artifact, so it is not loaded, the plugin
    // still compiles, and one warning names the directory and the reason.
    set_mode(&cache, 0o777);
    let mut loaded = None;
    let warnings = warnings_during(|| loaded = Some(compile_afresh(&config, &wasm)));
    assert_eq!(loaded.unwrap(), (false, "configmap-logger".into()));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let message = warnings[0]["fields"]["message"].as_str().unwrap();
    assert!(
        message.contains(&cache.display().to_string())
            && message.contains("writable by group or others (mode 0777"),
        "{message}"
    );
    set_mode(&cache, 0o770);
    assert!(!compile_afresh(&config, &wasm).0, "group-writable: same");

    // A parent others can write could swap the whole directory; a sticky one (like /tmp) cannot.
    set_mode(&cache, 0o700);
    set_mode(root.path(), 0o777);
    assert!(!compile_afresh(&config, &wasm).0);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let reason = compile_cache::check_directory(&cache, uid)
        .unwrap_err()
        .to_string();
    assert!(
        reason.contains(&format!("its parent {}", root.path().display()))
            && reason.contains("without the sticky bit"),
        "{reason}"
    );
    set_mode(root.path(), 0o1777);
    assert!(compile_afresh(&config, &wasm).0, "sticky parent: trusted");
    set_mode(root.path(), 0o700);

    // A directory owned by someone else is refused too (the check itself, for any uid).
    let reason = compile_cache::check_directory(&cache, 4242)
        .unwrap_err()
        .to_string();
    assert!(
        reason.contains("not by this process's uid 4242"),
        "{reason}"
    );
}

#[test]
fn tampered_compile_cache_artifacts_are_not_loaded() {
    use sha2::Digest;
    let logger = guest_bytes("configmap-logger");
    let fixture = guest_bytes("test-fixture");
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..Default::default()
    };
    compile_afresh(&config, &logger);
    compile_afresh(&config, &fixture);
    let logger_artifact = artifact_of(dir.path(), &logger);
    let fixture_artifact = artifact_of(dir.path(), &fixture);

    // What a writer of the cache can do: put other native code (here the fixture's) under the
    // logger's key with a checksum that verifies.
    let forge = || {
        let stored = std::fs::read(&fixture_artifact).unwrap();
        let code = &stored[..stored.len() - 40];
        let mut h = sha2::Sha256::new();
        h.update(sha2::Sha256::digest(&logger));
        h.update(code);
        let mut forged = code.to_vec();
        forged.extend_from_slice(&h.finalize());
        forged.extend_from_slice(b"kwcache2");
        std::fs::write(&logger_artifact, forged).unwrap();
    };

    // Written by someone else (the file is writable by others): refused, removed, recompiled
    // from the real wasm and stored privately again.
    forge();
    set_mode(&logger_artifact, 0o666);
    assert_eq!(
        compile_afresh(&config, &logger),
        (false, "configmap-logger".into())
    );
    assert_eq!(
        mode(&logger_artifact),
        0o600,
        "replaced by a fresh private artifact"
    );
    assert!(compile_afresh(&config, &logger).0);

    // Owned by another user: refused (changing the owner needs root).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        forge();
        std::os::unix::fs::chown(&logger_artifact, Some(65534), None).unwrap();
        assert_eq!(
            compile_afresh(&config, &logger),
            (false, "configmap-logger".into())
        );
        assert!(compile_afresh(&config, &logger).0);
    }

    // Another entry merely renamed into place (valid checksum of its own): refused because the
    // checksum is bound to the key.
    std::fs::copy(&fixture_artifact, &logger_artifact).unwrap();
    assert_eq!(
        compile_afresh(&config, &logger),
        (false, "configmap-logger".into())
    );

    // The ownership check is what stops the forgery: the same file, private, is loaded. (This
    // is the trust boundary: whoever runs as the host's uid can replace the host itself.)
    forge();
    assert_eq!(
        compile_afresh(&config, &logger),
        (true, "test-fixture".into())
    );
}

#[test]
fn guests_blocked_in_wasi_calls_are_stopped_at_the_deadline() {
    let limits = Limits {
        deadline: Duration::from_millis(100),
        ..Limits::default()
    };
    let mut h = instance(&shared().fixture, "fixture-blocked", limits);
    for blocking in ["sleep", "poll"] {
        let started = Instant::now();
        assert_eq!(
            block(h.on_add(&action(blocking), false)).unwrap_err(),
            CallError::DeadlineExceeded,
            "{blocking}"
        );
        // Not a timing goal (the benchmark measures overshoot): only that the call was
        // interrupted rather than left to sleep for its 600 s.
        assert!(started.elapsed() < Duration::from_secs(60), "{blocking}");
    }
    assert_eq!(
        block(h.on_add(&action("other"), false)).unwrap(),
        HandlerOutcome::Ok,
        "a fresh instance serves the next call"
    );
}

#[test]
fn a_guest_cannot_hold_unbounded_host_resources() {
    let mut h = instance(&shared().fixture, "fixture-pollables", untimed());
    let err = block(h.on_add(&action("pollables"), false)).unwrap_err();
    assert!(matches!(err, CallError::Trap(_)), "{err:?}");
    assert!(
        !logged("fixture-pollables")
            .iter()
            .any(|l| l.starts_with("pollables: created")),
        "the resource table bound stopped the guest"
    );
}

#[test]
fn a_stack_overflow_is_a_trap() {
    let mut h = instance(&shared().fixture, "fixture-stack", untimed());
    let err = block(h.on_add(&action("stack-overflow"), false)).unwrap_err();
    assert!(matches!(err, CallError::Trap(_)), "{err:?}");
}

#[test]
fn dropping_a_call_discards_the_instance() {
    let mut h = instance(&shared().fixture, "fixture-dropped", untimed());
    let sleeper = action("sleep");
    let cut = block(async {
        tokio::time::timeout(Duration::from_millis(50), h.on_add(&sleeper, false)).await
    });
    assert!(cut.is_err(), "the caller abandoned the call");
    assert_eq!(
        block(h.on_add(&action("other"), false)).unwrap(),
        HandlerOutcome::Ok
    );
}

#[test]
fn guest_logs_become_tracing_events_with_the_plugin_name() {
    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .finish();
    let mut h = instance(&shared().logger, "traced", untimed());
    tracing::subscriber::with_default(subscriber, || {
        block(h.on_add(&configmap(Some("n"), "c", "9", &[]), true)).unwrap();
    });
    let event = capture
        .json_lines()
        .into_iter()
        .find(|v| v["target"] == "kubewasm::guest")
        .unwrap_or_else(|| panic!("no guest event in {}", capture.text()));
    assert_eq!(event["level"], "INFO");
    assert_eq!(event["fields"]["plugin"], "traced");
    assert_eq!(event["fields"]["message"], "add n/c rv=9 init=true");
}

// ---------- label-auditor ----------

#[test]
fn label_auditor_reports_drift_on_resync() {
    let p = "auditor";
    let compiled = shared()
        .runtime
        .compile(&guest_bytes("label-auditor"))
        .unwrap();
    let mut h = instance(&compiled, p, untimed());
    let info = block(h.describe()).unwrap();
    assert_eq!(info.name, "label-auditor");
    assert_eq!(info.subscriptions[0].resync_period_ms, 30_000);
    let bad = configmap(Some("ns"), "bad", "1", &[]);
    let good = configmap(
        Some("ns"),
        "good",
        "1",
        &[("app.kubernetes.io/name", "web")],
    );
    block(h.on_add(&bad, true)).unwrap();
    block(h.on_add(&good, true)).unwrap();
    // A resync replay: the full audit from `cache.list` (FakeCache serves a/one and b/two,
    // both unlabelled, and no longer ns/bad) reports what the events missed.
    assert_eq!(
        block(h.on_update(&good, &good, true)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(
        logged(p),
        [
            "violation ns/bad: missing app.kubernetes.io/name",
            "drift ns/bad: no longer a violator (missed event)",
            "drift a/one: violator not seen before (missed event)",
            "drift b/two: violator not seen before (missed event)",
            "audit: 2 configmaps, 2 violators",
        ]
    );
}

#[test]
fn failures_in_a_row_are_counted_for_quarantine() {
    let mut h = instance(&shared().fixture, "fixture-repeat", untimed());
    for n in 1..=3 {
        assert!(matches!(
            block(h.on_add(&action("trap"), false)),
            Err(CallError::Trap(_))
        ));
        assert_eq!(h.consecutive_failures(), n);
    }
}

#[test]
fn handles_can_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Runtime>();
    send_sync::<CompiledHandler>();
    send::<HandlerInstance>();
    send_sync::<RuntimeError>();
    send_sync::<CallError>();
}

#[test]
fn metrics_are_exported_per_plugin_and_cause() {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = RuntimeMetrics::new(&mut registry);
    let rt = Runtime::new(RuntimeConfig::default(), metrics).unwrap();
    let compiled = rt.compile(&guest_bytes("test-fixture")).unwrap();
    let mut h = rt
        .instantiate_blocking(&compiled, "metered", untimed(), Arc::new(FakeCache))
        .unwrap();
    block(h.on_add(&action("trap"), false)).unwrap_err();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for expected in [
        r#"kubewasm_runtime_instantiations_total{plugin="metered"} 1"#,
        r#"kubewasm_runtime_instance_failures_total{plugin="metered",cause="trap"} 1"#,
        r#"kubewasm_runtime_compiles_total{result="uncached"} 1"#,
    ] {
        assert!(text.contains(expected), "missing {expected} in\n{text}");
    }
}

#[test]
fn calls_work_from_tokio_blocking_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let lines = rt.block_on(async {
        tokio::task::spawn_blocking(|| {
            let mut h = instance(&shared().fixture, "tokio-blocking", untimed());
            assert_eq!(
                block(h.on_add(&action("print"), false)).unwrap(),
                HandlerOutcome::Ok
            );
            logged("tokio-blocking")
        })
        .await
        .unwrap()
    });
    assert_eq!(lines, ["print: stdout ns/print", "print: stderr ns/print"]);
}

// ---------- kubewasm:handler@0.2.0 (logger-v2) ----------

#[test]
fn each_component_is_bound_to_the_world_it_implements() {
    assert_eq!(shared().logger.world(), HandlerWorld::V0_1);
    assert_eq!(shared().fixture.world(), HandlerWorld::V0_1);
    // logger-v2 is built on the Rust SDK, whose handlers are 0.3.0 components now.
    assert_eq!(shared().logger_v2.world(), HandlerWorld::V0_3);
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures");
    let read = |f: &str| std::fs::read(fixtures.join(f)).expect("bash tests/fixtures/build.sh");
    let rt = &shared().runtime;
    // A 0.2.0 component on the raw bindings still loads as what it is.
    let raw = rt.compile(&read("rust-raw-noop.wasm")).unwrap();
    assert_eq!(raw.world(), HandlerWorld::V0_2);
    let controller = rt.compile(&read("rust-controller-fixture.wasm")).unwrap();
    assert_eq!(controller.world(), HandlerWorld::Controller);
    // A component that exports `reconcile` is a controller and must export the whole set.
    let partial = wat::parse_str(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (export "reconcile" (func $f)))"#,
    )
    .unwrap();
    let err = rt.compile(&partial).err().expect("must be rejected");
    assert!(
        matches!(err, RuntimeError::WrongWorld(ref m)
            if m.contains("validate-settings, describe, keys-for, on-synced")
                || m.contains("validate-settings, describe")),
        "{err}"
    );
}

#[test]
fn v2_describe_carries_what_the_handler_asks_for() {
    let mut h = instance(&shared().logger_v2, "v2-describe", untimed());
    let info = block(h.describe()).unwrap();
    assert_eq!(info.name, "logger-v2");
    assert_eq!(info.subscriptions.len(), 1);
    let sub = &info.subscriptions[0];
    assert_eq!(
        (sub.api_version.as_str(), sub.kind.as_str()),
        ("v1", "ConfigMap")
    );
    assert!(!sub.metadata_only && sub.fields.is_empty());
    assert!(info.permissions.is_empty() && info.http_origins.is_empty() && !info.events);
}

#[test]
fn v2_handler_receives_every_notification_and_on_synced() {
    let mut h = instance(&shared().logger_v2, "v2-calls", untimed());
    let (a1, a2) = (
        configmap(Some("ns"), "a", "1", &[]),
        configmap(Some("ns"), "a", "2", &[]),
    );
    assert_eq!(block(h.on_add(&a1, true)).unwrap(), HandlerOutcome::Ok);
    assert_eq!(block(h.on_synced()).unwrap(), HandlerOutcome::Ok);
    assert_eq!(
        block(h.on_update(&a1, &a2, false)).unwrap(),
        HandlerOutcome::Ok
    );
    assert_eq!(block(h.on_delete(&a2, true)).unwrap(), HandlerOutcome::Ok);
    assert_eq!(
        logged("v2-calls"),
        [
            "add ns/a rv=1 init=true",
            "synced",
            "update ns/a rv=1->2 sync=false",
            "delete ns/a rv=2 final-state-unknown=true",
        ]
    );
}

#[test]
fn on_synced_of_a_v1_handler_is_ok_without_a_call() {
    let mut h = shared()
        .runtime
        .handler_instance(
            &shared().logger,
            "v1-synced",
            untimed(),
            Arc::new(FakeCache),
        )
        .unwrap();
    assert_eq!(block(h.on_synced()).unwrap(), HandlerOutcome::Ok);
    assert!(logged("v1-synced").is_empty());
}

/// Delivers an add whose `kubewasm.io/try` label makes logger-v2 attempt `action`, and returns
/// what the handler logged about the host's answer.
fn try_action(plugin: &str, action: &str) -> String {
    let mut h = instance(&shared().logger_v2, plugin, untimed());
    let obj = configmap(Some("ns"), "cm", "1", &[("kubewasm.io/try", action)]);
    assert_eq!(block(h.on_add(&obj, false)).unwrap(), HandlerOutcome::Ok);
    let lines = logged(plugin);
    assert_eq!(lines.len(), 2, "{lines:?}");
    lines[1].clone()
}

#[test]
fn v2_kube_write_without_a_grant_gets_403_forbidden() {
    assert_eq!(
        try_action("v2-write", "write"),
        "try write ns/cm: error 403 Forbidden: not granted: plugin v2-write has no grant to \
         patch this object"
    );
}

#[test]
fn v2_kube_read_without_a_grant_gets_403_forbidden() {
    let line = try_action("v2-get", "get");
    assert!(
        line.starts_with("try get ns/cm: error 403 Forbidden"),
        "{line}"
    );
}

#[test]
fn v2_http_without_a_granted_origin_is_denied() {
    assert_eq!(
        try_action("v2-http", "http"),
        "try http ns/cm: error ErrorCode::HttpRequestDenied"
    );
}

#[test]
fn v2_event_without_the_grant_is_dropped_not_a_trap() {
    assert_eq!(try_action("v2-event", "event"), "try event ns/cm: emitted");
}

mod http;

/// The SDKs retry a cache refusal only when its message says the cache "is not available"
/// (sdk/rust/src/cache.rs, sdk/python/kubewasm_sdk/kube.py, sdk/javascript/kube.js): every
/// other refusal must not say it, or a handler would back off forever.
#[test]
fn only_an_unavailable_cache_says_it_is_not_available() {
    const TRANSIENT: &str = "is not available";
    let unavailable = CacheError::Unavailable {
        informer: "v1/ConfigMap".into(),
    };
    assert!(unavailable.to_string().contains(TRANSIENT));
    let permanent = [
        CacheError::NotSubscribed {
            plugin: "p".into(),
            api_version: "v1".into(),
            kind: "Secret".into(),
        },
        CacheError::TooManyObjects {
            scope: "v1 ConfigMap".into(),
            max_objects: 2000,
            max_bytes: 8 << 20,
        },
        CacheError::TooManyBytes {
            scope: "v1 ConfigMap".into(),
            max_objects: 2000,
            max_bytes: 8 << 20,
        },
    ];
    for e in permanent {
        assert!(!e.to_string().contains(TRANSIENT), "{e}");
    }
}

/// A read of a kind the plugin does not subscribe to says what to add; a name that TOML would
/// not take as it is (a guest may send anything) is not pasted into a manifest line.
#[test]
fn an_unsubscribed_read_says_which_grant_to_add() {
    let refusal = |api_version: &str, kind: &str| {
        CacheError::NotSubscribed {
            plugin: "p".into(),
            api_version: api_version.into(),
            kind: kind.into(),
        }
        .to_string()
    };
    let crd = refusal("example.com/v1", "Widget");
    assert!(
        crd.ends_with("[grants] watch = [{ api-version = \"example.com/v1\", kind = \"Widget\" }]"),
        "{crd}"
    );
    let hostile = refusal("v1\" }]\n[grants]\nhttp = [\"*", "Secret");
    assert!(!hostile.contains("watch = [{"), "{hostile}");
    assert!(
        hostile.ends_with("[grants] watch list of the plugin's manifest"),
        "{hostile}"
    );
}
