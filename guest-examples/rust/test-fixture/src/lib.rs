//! A handler for kubewasm's own tests and benchmarks, not an example: the object's
//! `kubewasm.io/action` label picks a misbehaviour (trap, endless loop, memory hog, attempts to
//! use ambient capabilities) so the host's containment can be checked. Without the label every
//! call returns at once, which is what the benchmarks measure.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "handler",
});

use kubewasm::handler::cache;
use kubewasm::handler::log::{Level, log};
use kubewasm::handler::types::{ObjectMeta, Subscription};

struct TestFixture;

fn key(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name),
        None => meta.name.clone(),
    }
}

fn info(msg: &str) {
    log(Level::Info, msg);
}

/// Performs the action named by the `kubewasm.io/action` label.
fn act(meta: &ObjectMeta) -> Result<(), HandlerError> {
    let Some(action) = meta
        .labels
        .iter()
        .find(|(k, _)| k == "kubewasm.io/action")
        .map(|(_, v)| v.as_str())
    else {
        return Ok(());
    };
    match action {
        "trap" => panic!("test-fixture: trap requested for {}", key(meta)),
        "loop" => {
            let mut i: u64 = 0;
            loop {
                i = std::hint::black_box(i.wrapping_add(1));
            }
        }
        "oom" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Touch every page so the memory is really committed.
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "read-file" => match std::fs::read("/etc/passwd") {
            Ok(_) => info("read-file: ALLOWED"),
            Err(e) => info(&format!("read-file: denied: {e}")),
        },
        "env" => {
            let vars = std::env::vars().count();
            let args = std::env::args().count();
            if vars == 0 && args == 0 {
                info("env: none visible");
            } else {
                info(&format!("env: VISIBLE vars={vars} args={args}"));
            }
        }
        "stdin" => match std::io::read_to_string(std::io::stdin()) {
            Ok(s) if s.is_empty() => info("stdin: empty"),
            Ok(s) => info(&format!("stdin: READ {} bytes", s.len())),
            Err(e) => info(&format!("stdin: denied: {e}")),
        },
        "net" => match std::net::TcpStream::connect("127.0.0.1:80") {
            Ok(_) => info("net: ALLOWED"),
            Err(e) => info(&format!("net: denied: {e}")),
        },
        "cache-get-secret" => match cache::get("v1", "Secret", Some("default"), "anything") {
            Ok(_) => info("cache-get-secret: ALLOWED"),
            Err(e) => info(&format!("cache-get-secret: error: {e}")),
        },
        "cache-list-configmaps" => match cache::list("v1", "ConfigMap", None, None) {
            Ok(objs) => info(&format!("cache-list-configmaps: {}", objs.len())),
            Err(e) => info(&format!("cache-list-configmaps: error: {e}")),
        },
        "print" => {
            println!("print: stdout {}", key(meta));
            eprintln!("print: stderr {}", key(meta));
        }
        "sleep" => {
            info(&format!("sleep begin {}", key(meta)));
            std::thread::sleep(std::time::Duration::from_secs(600));
        }
        "nap" => {
            info(&format!("nap begin {}", key(meta)));
            std::thread::sleep(std::time::Duration::from_millis(700));
            info(&format!("nap end {}", key(meta)));
        }
        "poll" => {
            let p = wasip2::clocks::monotonic_clock::subscribe_duration(600_000_000_000);
            wasip2::io::poll::poll(&[&p]);
        }
        "pollables" => {
            let mut all = Vec::new();
            for _ in 0..1_000_000 {
                all.push(wasip2::clocks::monotonic_clock::subscribe_duration(1));
            }
            info(&format!("pollables: created {}", all.len()));
        }
        "stack-overflow" => {
            fn deep(n: u64) -> u64 {
                let pad = std::hint::black_box([n; 64]);
                deep(n + 1) + pad[7]
            }
            info(&format!("stack: {}", deep(0)));
        }
        // Guest output the host must bound and sanitise (see runtime/guest_log.rs).
        "log-huge" => {
            log(Level::Info, &"x".repeat(60 << 20));
            info("log-huge: done");
        }
        "print-huge" => {
            print!("{}", "y".repeat(60 << 20));
            println!(" end");
            info("print-huge: done");
        }
        "log-forge" => log(
            Level::Error,
            "forged\n2024-01-01T00:00:00Z  INFO kubewasm: \x1b[32mall good\x1b[0m",
        ),
        "log-flood" => {
            for i in 0..3000 {
                info(&format!("flood {i}"));
            }
        }
        "retry-huge" => {
            return Err(HandlerError::Retry(format!(
                "line one\nline two {}",
                "z".repeat(1 << 20)
            )));
        }
        _ => info(&format!("ok {}", key(meta))),
    }
    Ok(())
}

fn configmaps() -> Subscription {
    Subscription {
        api_version: "v1".to_string(),
        kind: "ConfigMap".to_string(),
        namespace: None,
        label_selector: None,
        field_selector: None,
        resync_period_ms: 0,
    }
}

/// The subscriptions, or the misbehaviour, the build's `describe-*` feature asks for.
fn subscriptions() -> Vec<Subscription> {
    if cfg!(feature = "describe-sleep") {
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
    if cfg!(feature = "describe-trap") {
        panic!("test-fixture: describe() trap requested");
    }
    if cfg!(feature = "describe-none") {
        return Vec::new();
    }
    if cfg!(feature = "describe-many") {
        return (0..10_000)
            .map(|i| Subscription {
                namespace: Some(format!("ns-{i}")),
                ..configmaps()
            })
            .collect();
    }
    if cfg!(feature = "describe-duplicates") {
        return vec![configmaps(), configmaps(), configmaps()];
    }
    let one = if cfg!(feature = "describe-bad-selector") {
        Subscription {
            label_selector: Some("app in (web".to_string()),
            ..configmaps()
        }
    } else if cfg!(feature = "describe-bad-namespace") {
        Subscription {
            namespace: Some("kube-system/secrets?x=".to_string()),
            ..configmaps()
        }
    } else if cfg!(feature = "describe-bad-kind") {
        Subscription {
            kind: "Config Map/../secrets".to_string(),
            ..configmaps()
        }
    } else if cfg!(feature = "describe-bad-field") {
        // Well-formed, but ConfigMaps have no status: only the server can refuse it.
        Subscription {
            field_selector: Some("status.phase=Running".to_string()),
            ..configmaps()
        }
    } else if cfg!(feature = "describe-bad-field-syntax") {
        Subscription {
            field_selector: Some("metadata.name".to_string()),
            ..configmaps()
        }
    } else if cfg!(feature = "describe-bad-api-version") {
        Subscription {
            api_version: "apps/v1/../../api/v1".to_string(),
            ..configmaps()
        }
    } else if cfg!(feature = "describe-secrets") {
        // Valid, but Secrets are not granted by default: refused unless a manifest grants them.
        Subscription {
            kind: "Secret".to_string(),
            ..configmaps()
        }
    } else if cfg!(feature = "describe-unknown-kind") {
        Subscription {
            api_version: "example.com/v1".to_string(),
            kind: "Widget".to_string(),
            ..configmaps()
        }
    } else {
        configmaps()
    };
    vec![one]
}

impl Guest for TestFixture {
    fn describe() -> PluginInfo {
        let name = if cfg!(feature = "describe-huge-name") {
            "n".repeat(1 << 20)
        } else {
            "test-fixture".to_string()
        };
        PluginInfo {
            name,
            subscriptions: subscriptions(),
        }
    }

    fn on_add(obj: Object, _is_in_initial_list: bool) -> Result<(), HandlerError> {
        act(&obj.meta)
    }

    fn on_update(_old: Object, new: Object, _is_sync: bool) -> Result<(), HandlerError> {
        act(&new.meta)
    }

    fn on_delete(_obj: Object, _final_state_unknown: bool) -> Result<(), HandlerError> {
        Ok(())
    }
}

export!(TestFixture);
