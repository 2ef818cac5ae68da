//! What a handler costs the host, per guest language, side by side with the Rust guest: component
//! size, compile time, precompiled (disk cache) load time, instantiation time, per-call cost of
//! `on-update` with two 2 KB ConfigMaps (`noop` and `parse` bench modes of the configmap-logger)
//! and idle resident memory per instance. Prints one markdown table; run with
//! `cargo bench -p kubewasm-e2e --bench languages` after `bash guest-examples/build.sh`.
//! Arguments after `--` keep only the columns whose title contains one of them (Rust, the peer,
//! always stays): `cargo bench -p kubewasm-e2e --bench languages -- Python QuickJS`.
//!
//! Every guest is measured through the host's public runtime API, so the figures include what the
//! host adds (canonical ABI lowering of both objects, epoch deadline, store limiter) and nothing
//! else: the bench modes never log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::runtime::{
    GuestObject, HandlerInstance, HandlerOutcome, Limits, NoCache, ObjectView, Runtime,
    RuntimeConfig, RuntimeMetrics,
};

/// Instances kept alive at once to measure idle memory; also the instantiation sample size.
const INSTANCES: usize = 20;
/// Calls before timing starts, so lazy initialisation in the guest (e.g. the first `JSON.parse`
/// compiling its fast paths, Python importing `json`'s C accelerator) is not billed per call.
const WARMUP_CALLS: usize = 50;
/// Time budget per (language, mode) for the per-call figures; the call count follows from it.
const CALL_BUDGET: Duration = Duration::from_millis(1500);
const MAX_CALLS: usize = 50_000;
/// Target size of each object's JSON, as the acceptance criterion asks.
const OBJECT_BYTES: usize = 2048;

/// The guests, Rust first: (column title, file under `guest-examples/dist/`).
const GUESTS: &[(&str, &str)] = &[
    ("Rust", "rust-configmap-logger.wasm"),
    ("Python", "python-configmap-logger.wasm"),
    ("JS (QuickJS)", "javascript-configmap-logger.wasm"),
    (
        "JS (StarlingMonkey)",
        "variants/javascript-starlingmonkey-configmap-logger.wasm",
    ),
    ("C", "c-configmap-logger.wasm"),
    ("Go", "go-configmap-logger.wasm"),
];

/// An owned Kubernetes object, standing in for the plugins layer's shared cache entries.
struct BenchObject {
    namespace: String,
    name: String,
    uid: String,
    resource_version: String,
    labels: Vec<(String, String)>,
    json: String,
}

impl GuestObject for BenchObject {
    fn view(&self) -> ObjectView<'_> {
        ObjectView {
            api_version: "v1",
            kind: "ConfigMap",
            namespace: Some(&self.namespace),
            name: &self.name,
            uid: &self.uid,
            resource_version: &self.resource_version,
            generation: None,
            labels: &self.labels,
            json: &self.json,
        }
    }
}

/// A ConfigMap shaped like one kubectl applied: labels, the last-applied annotation and managed
/// fields make up much of a real object's size, so a parser sees the same nesting it would in a
/// cluster. `data` is padded so the JSON is exactly [`OBJECT_BYTES`].
fn config_map(resource_version: u64, mode: &str) -> BenchObject {
    let namespace = "payments".to_string();
    let name = "checkout-settings".to_string();
    let uid = "5f0c3a52-8d1e-4b7a-9f64-2c1d0e9b7a31".to_string();
    let labels = vec![
        ("app.kubernetes.io/name".to_string(), "checkout".to_string()),
        ("app.kubernetes.io/part-of".to_string(), "shop".to_string()),
        ("kubewasm.io/bench".to_string(), mode.to_string()),
    ];
    let build = |padding: &str| {
        let data = serde_json::json!({
            "LOG_LEVEL": "info",
            "MAX_CONNECTIONS": "128",
            "FEATURE_FLAGS": "one-click,saved-cards,3ds2",
            "retry.yaml": "attempts: 5\nbackoff:\n  initial: 100ms\n  max: 10s\n",
            "notes": padding,
        });
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid,
                "resourceVersion": resource_version.to_string(),
                "creationTimestamp": "2026-11-02T09:14:27Z",
                "labels": labels.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect::<serde_json::Map<_, _>>(),
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration":
                        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": namespace}}).to_string(),
                },
                "managedFields": [{
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-02T09:14:27Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:LOG_LEVEL": {}, "f:MAX_CONNECTIONS": {},
                        "f:FEATURE_FLAGS": {}, "f:retry.yaml": {}, "f:notes": {}},
                        "f:metadata": {"f:labels": {".": {}}}},
                }],
            },
            "data": data,
        })
        .to_string()
    };
    let unpadded = build("").len();
    assert!(
        unpadded < OBJECT_BYTES,
        "fixture grew past {OBJECT_BYTES} bytes"
    );
    let json = build(&"x".repeat(OBJECT_BYTES - unpadded));
    assert_eq!(json.len(), OBJECT_BYTES);
    BenchObject {
        namespace,
        name,
        uid,
        resource_version: resource_version.to_string(),
        labels,
        json,
    }
}

/// Per-call timings of one mode.
struct CallCost {
    median: Duration,
    mean: Duration,
    calls: usize,
}

/// One column of the table.
struct Measured {
    size: usize,
    compile: Duration,
    load: Duration,
    instantiate: Duration,
    noop: CallCost,
    parse: CallCost,
    rss_per_instance: i64,
}

/// Resident set size from `/proc/self/status` (kB there, so no page-size assumption).
fn rss_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kb: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

thread_local! {
    /// The executor guest calls run on, as on a plugin's worker thread.
    static EXEC: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
}

/// Runs one guest call to completion on this thread's executor.
fn block<F: std::future::Future>(f: F) -> F::Output {
    EXEC.with(|rt| rt.block_on(f))
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn call_cost(instance: &mut HandlerInstance, mode: &str) -> anyhow::Result<CallCost> {
    let (old, new) = (config_map(41_000, mode), config_map(41_001, mode));
    let mut call = || -> anyhow::Result<Duration> {
        let started = Instant::now();
        let outcome = block(instance.on_update(&old, &new, false))
            .map_err(|e| anyhow::anyhow!("on-update ({mode}): {e}"))?;
        let elapsed = started.elapsed();
        anyhow::ensure!(
            outcome == HandlerOutcome::Ok,
            "on-update ({mode}) answered {outcome:?}"
        );
        Ok(elapsed)
    };
    for _ in 0..WARMUP_CALLS {
        call()?;
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < MAX_CALLS && (started.elapsed() < CALL_BUDGET || samples.len() < 20) {
        samples.push(call()?);
    }
    let calls = samples.len();
    let mean = samples.iter().sum::<Duration>() / calls as u32;
    Ok(CallCost {
        median: median(samples),
        mean,
        calls,
    })
}

fn measure(wasm: &[u8]) -> anyhow::Result<Measured> {
    let cache_dir = tempfile::tempdir()?;
    let runtime = Runtime::new(
        RuntimeConfig {
            cache_dir: Some(cache_dir.path().to_path_buf()),
            // The default pool: its core-instance budget (a multiple of max_instances) must fit
            // INSTANCES + 1 interpreters, each of several core instances.
            ..Default::default()
        },
        RuntimeMetrics::unregistered(),
    )?;

    let started = Instant::now();
    let compiled = runtime.compile(wasm)?;
    let compile = started.elapsed();
    anyhow::ensure!(!compiled.cache_hit(), "fresh cache dir yet a cache hit");

    let mut loads = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let loaded = runtime.compile(wasm)?;
        loads.push(started.elapsed());
        anyhow::ensure!(loaded.cache_hit(), "second compile missed the cache");
    }
    let load = median(loads);

    let cache: Arc<dyn kubewasm::runtime::CacheReader> = Arc::new(NoCache);
    let limits = Limits {
        deadline: Duration::from_secs(10),
        ..Limits::default()
    };
    // The first instance pays for one-off process costs (code pages faulted in, wasmtime's
    // lazily built trampolines); it is the one the per-call figures use, and it sets the
    // baseline the idle-memory figure is measured from.
    let mut first = block(runtime.instantiate(&compiled, "bench", limits, cache.clone()))?;
    block(first.describe())?;

    let before = rss_bytes();
    let mut times = Vec::with_capacity(INSTANCES);
    let mut idle = Vec::with_capacity(INSTANCES);
    for i in 0..INSTANCES {
        let started = Instant::now();
        let instance =
            block(runtime.instantiate(&compiled, &format!("bench-{i}"), limits, cache.clone()))?;
        times.push(started.elapsed());
        idle.push(instance);
    }
    // describe() runs guest code once, as the host does right after instantiation, so lazily
    // initialised guest state is counted as idle memory.
    for instance in &mut idle {
        block(instance.describe())?;
    }
    let rss_per_instance = (rss_bytes() - before) / INSTANCES as i64;
    drop(idle);

    Ok(Measured {
        size: wasm.len(),
        compile,
        load,
        instantiate: median(times),
        noop: call_cost(&mut first, "noop")?,
        parse: call_cost(&mut first, "parse")?,
        rss_per_instance,
    })
}

fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn fmt_bytes(b: i64) -> String {
    let f = b as f64;
    if b.abs() < 1 << 20 {
        format!("{:.0} KiB", f / 1024.0)
    } else {
        format!("{:.1} MiB", f / (1 << 20) as f64)
    }
}

fn fmt_call(c: &CallCost) -> String {
    format!("{} ({})", fmt_duration(c.median), fmt_duration(c.mean))
}

fn main() -> anyhow::Result<()> {
    let dist = kubewasm_e2e::dist_dir();
    // cargo passes `--bench` to every bench binary: only the other arguments filter.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let mut columns: Vec<(&str, Measured)> = Vec::new();
    for &(title, file) in GUESTS {
        if title != "Rust" && !only.is_empty() && !only.iter().any(|o| title.contains(o.as_str())) {
            continue;
        }
        let path = dist.join(file);
        let Ok(wasm) = std::fs::read(&path) else {
            eprintln!(
                "{title}: {} missing, column skipped (build it with guest-examples/build.sh)",
                path.display()
            );
            continue;
        };
        eprintln!("measuring {title} ({file})...");
        let m = measure(&wasm).map_err(|e| e.context(format!("{title} ({file})")))?;
        eprintln!(
            "  {title}: noop {} calls, parse {} calls",
            m.noop.calls, m.parse.calls
        );
        columns.push((title, m));
    }
    anyhow::ensure!(
        !columns.is_empty(),
        "no guest components in {}",
        dist.display()
    );

    type Row = (&'static str, fn(&Measured) -> String);
    let rows: [Row; 7] = [
        ("component size", |m| fmt_bytes(m.size as i64)),
        ("compile (cache miss)", |m| fmt_duration(m.compile)),
        ("load precompiled (cache hit)", |m| fmt_duration(m.load)),
        ("instantiate (median)", |m| fmt_duration(m.instantiate)),
        ("on-update noop, median (mean)", |m| fmt_call(&m.noop)),
        ("on-update parse, median (mean)", |m| fmt_call(&m.parse)),
        ("idle RSS per instance", |m| fmt_bytes(m.rss_per_instance)),
    ];
    let header: Vec<&str> = columns.iter().map(|(t, _)| *t).collect();
    println!("| | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(columns.len()));
    for (name, cell) in rows {
        let cells: Vec<String> = columns.iter().map(|(_, m)| cell(m)).collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    println!(
        "\non-update: two {OBJECT_BYTES}-byte ConfigMaps per call, label kubewasm.io/bench; \
         parse = both objects through the language's usual JSON parser. Idle RSS: resident \
         growth over {INSTANCES} instances after describe(), divided by {INSTANCES}."
    );
    Ok(())
}
