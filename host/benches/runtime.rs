//! Micro-benchmark of the WASM runtime alone (no informers): compile, cached load,
//! instantiation, per-call cost of the no-op path, idle memory per instance.
//!
//! Run `bash tests/fixtures/build.sh`, then `cargo bench -p kubewasm --bench runtime`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::runtime::{
    GuestObject, HandlerOutcome, Limits, NoCache, ObjectView, Runtime, RuntimeConfig,
    RuntimeMetrics,
};

struct Obj {
    name: String,
    rv: String,
    labels: Vec<(String, String)>,
    json: String,
}

impl GuestObject for Obj {
    fn view(&self) -> ObjectView<'_> {
        ObjectView {
            api_version: "v1",
            kind: "ConfigMap",
            namespace: Some("default"),
            name: &self.name,
            uid: "0b7c3e1e-5f2a-4c1e-9a43-2d1f0c9e8b11",
            resource_version: &self.rv,
            generation: None,
            labels: &self.labels,
            json: &self.json,
        }
    }
}

/// A ConfigMap whose JSON is about 2 KB.
fn object(rv: &str) -> Obj {
    let data: String = (0..30)
        .map(|i| format!(r#""key-{i:02}":"value-{i:02}-{}","#, "x".repeat(40)))
        .collect();
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"bench","namespace":"default","resourceVersion":"{rv}","labels":{{"app":"bench","tier":"web"}}}},"data":{{{}}}}}"#,
        data.trim_end_matches(',')
    );
    Obj {
        name: "bench".into(),
        rv: rv.into(),
        labels: vec![
            ("app".into(), "bench".into()),
            ("tier".into(), "web".into()),
        ],
        json,
    }
}

fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures");
    let path = fixtures.join("rust-test-fixture.wasm");
    let wasm = std::fs::read(&path).map_err(|e| {
        anyhow::anyhow!("{}: {e}; run tests/fixtures/build.sh first", path.display())
    })?;
    println!("guest: {} ({} KiB)", path.display(), wasm.len() / 1024);

    let rt = Runtime::new(RuntimeConfig::default(), RuntimeMetrics::unregistered())?;
    let compile = median(
        (0..3)
            .map(|_| {
                let t = Instant::now();
                rt.compile(&wasm).unwrap();
                t.elapsed()
            })
            .collect(),
    );
    println!(
        "compile (Cranelift, no cache):   {:>9.2} ms",
        compile.as_secs_f64() * 1e3
    );

    let dir = tempfile::tempdir()?;
    let cached = Runtime::new(
        RuntimeConfig {
            cache_dir: Some(dir.path().into()),
            ..Default::default()
        },
        RuntimeMetrics::unregistered(),
    )?;
    cached.compile(&wasm)?;
    let load = median(
        (0..20)
            .map(|_| {
                let t = Instant::now();
                assert!(cached.compile(&wasm).unwrap().cache_hit());
                t.elapsed()
            })
            .collect(),
    );
    println!(
        "load from disk cache:            {:>9.2} ms",
        load.as_secs_f64() * 1e3
    );

    let exec = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let compiled = rt.compile(&wasm)?;
    let inst = median(
        (0..50)
            .map(|_| {
                let t = Instant::now();
                let h = exec
                    .block_on(rt.instantiate(
                        &compiled,
                        "bench",
                        Limits::default(),
                        Arc::new(NoCache),
                    ))
                    .unwrap();
                let e = t.elapsed();
                drop(h);
                e
            })
            .collect(),
    );
    println!(
        "instantiate:                     {:>9.1} us",
        inst.as_secs_f64() * 1e6
    );

    let (old, new) = (object("100"), object("101"));
    println!(
        "object JSON size:                {:>9} bytes",
        new.json.len()
    );
    let mut h =
        exec.block_on(rt.instantiate(&compiled, "bench", Limits::default(), Arc::new(NoCache)))?;
    let n = 50_000;
    let per_call = exec.block_on(async {
        for _ in 0..2_000 {
            assert_eq!(
                h.on_update(&old, &new, false).await.unwrap(),
                HandlerOutcome::Ok
            );
        }
        let t = Instant::now();
        for _ in 0..n {
            h.on_update(&old, &new, false).await.unwrap();
        }
        t.elapsed() / n
    });
    println!(
        "on-update, 2 x ~2 KB, no-op:     {:>9.2} us/call ({:.0} calls/s)",
        per_call.as_secs_f64() * 1e6,
        1.0 / per_call.as_secs_f64()
    );
    drop(h);

    let before = rss_kib();
    let mut instances = Vec::new();
    for i in 0..100 {
        let h = exec.block_on(async {
            let mut h = rt
                .instantiate(
                    &compiled,
                    &format!("idle-{i}"),
                    Limits::default(),
                    Arc::new(NoCache),
                )
                .await
                .unwrap();
            h.describe().await.unwrap();
            h.on_update(&old, &new, false).await.unwrap();
            h
        });
        instances.push(h);
    }
    let after = rss_kib();
    println!(
        "idle RSS per instance:           {:>9} KiB (100 instances, +{} KiB)",
        after.saturating_sub(before) / 100,
        after.saturating_sub(before)
    );
    drop(instances);
    deadline_accounting(&rt, &exec, &compiled, (&old, &new))?;
    fuel_cost()?;
    deadline_overshoot(&rt, &exec, &fixtures)?;
    Ok(())
}

/// What counting each call's own running time costs a no-op call: the same call with and
/// without the account of its time inside `poll`, in alternating rounds (the median of the
/// paired ratios), and what one read of each clock the account could use costs.
fn deadline_accounting(
    rt: &Runtime,
    exec: &tokio::runtime::Runtime,
    compiled: &kubewasm::runtime::CompiledHandler,
    (old, new): (&Obj, &Obj),
) -> anyhow::Result<()> {
    let start = |name: &str| {
        exec.block_on(rt.instantiate(compiled, name, Limits::default(), Arc::new(NoCache)))
    };
    let mut with = start("with-clock")?;
    let mut without = start("without-clock")?.without_poll_clock_for_benchmarks();
    let n = 10_000u32;
    let time = |h: &mut kubewasm::runtime::HandlerInstance| {
        exec.block_on(async {
            let t = Instant::now();
            for _ in 0..n {
                h.on_update(old, new, false).await.unwrap();
            }
            t.elapsed() / n
        })
    };
    time(&mut with);
    time(&mut without);
    let (mut ratios, mut on, mut off) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..20 {
        let (a, b) = if round % 2 == 0 {
            let a = time(&mut with);
            (a, time(&mut without))
        } else {
            let b = time(&mut without);
            (time(&mut with), b)
        };
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
        on.push(a);
        off.push(b);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "deadline account (time in poll): no-op call {:.2} us with, {:.2} us without, paired \
         ratio {:.3} (median of 20 rounds of {n})",
        median(on).as_secs_f64() * 1e6,
        median(off).as_secs_f64() * 1e6,
        ratios[ratios.len() / 2]
    );
    let reads = 1_000_000u32;
    let t = Instant::now();
    for _ in 0..reads {
        std::hint::black_box(Instant::now());
    }
    let monotonic = t.elapsed() / reads;
    let t = Instant::now();
    for _ in 0..reads {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec for the call to write.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        std::hint::black_box(ts);
    }
    let thread_cpu = t.elapsed() / reads;
    println!(
        "clock read: monotonic {:.0} ns, thread CPU time {:.0} ns (two reads per poll)",
        monotonic.as_secs_f64() * 1e9,
        thread_cpu.as_secs_f64() * 1e9
    );
    Ok(())
}

/// What wasmtime's fuel metering costs guest code: a tight loop of 50 M iterations with and
/// without `consume_fuel`, in alternating rounds (median of the paired ratios).
fn fuel_cost() -> anyhow::Result<()> {
    const SPIN: &str = r#"(module (func (export "spin") (param i32) (result i32) (local i32)
        (loop $l
          (local.set 1 (i32.add (local.get 1) (local.get 0)))
          (local.set 0 (i32.sub (local.get 0) (i32.const 1)))
          (br_if $l (local.get 0)))
        (local.get 1)))"#;
    let spinner = |fuel: bool| -> anyhow::Result<_> {
        let mut config = wasmtime::Config::new();
        config.consume_fuel(fuel).epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config)?;
        let module = wasmtime::Module::new(&engine, SPIN)?;
        let mut store = wasmtime::Store::new(&engine, ());
        if fuel {
            store.set_fuel(u64::MAX)?;
        }
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = wasmtime::Instance::new(&mut store, &module, &[])?;
        let spin = instance.get_typed_func::<i32, i32>(&mut store, "spin")?;
        Ok((store, spin))
    };
    let (mut fueled, fueled_spin) = spinner(true)?;
    let (mut plain, plain_spin) = spinner(false)?;
    let mut ratios = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        fueled_spin.call(&mut fueled, 50_000_000)?;
        let with = t.elapsed();
        let t = Instant::now();
        plain_spin.call(&mut plain, 50_000_000)?;
        ratios.push(with.as_secs_f64() / t.elapsed().as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "fuel metering: guest loop paired ratio {:.2} (median of 5 rounds of 50 M iterations)",
        ratios[ratios.len() / 2]
    );
    Ok(())
}

/// How long after its deadline a call is actually stopped, for a guest that never leaves wasm
/// code and for one blocked in a 600 s WASI sleep (goal: within deadline + 50 ms at p99).
fn deadline_overshoot(
    rt: &Runtime,
    exec: &tokio::runtime::Runtime,
    fixtures: &std::path::Path,
) -> anyhow::Result<()> {
    let fixture = rt.compile(&std::fs::read(fixtures.join("rust-test-fixture.wasm"))?)?;
    let deadline = Duration::from_millis(100);
    let limits = Limits {
        deadline,
        ..Limits::default()
    };
    let mut h = exec.block_on(rt.instantiate(&fixture, "overshoot", limits, Arc::new(NoCache)))?;
    println!("deadline {} ms, 30 calls each:", deadline.as_millis());
    for action in ["loop", "sleep", "poll"] {
        let target = fixture_object(action);
        let mut over: Vec<Duration> = (0..30)
            .map(|_| {
                let t = Instant::now();
                let r = exec.block_on(h.on_add(&target, false));
                assert!(r.is_err(), "{action} must hit the deadline");
                t.elapsed().saturating_sub(deadline)
            })
            .collect();
        over.sort();
        let p = |q: f64| over[((over.len() - 1) as f64 * q).round() as usize];
        println!(
            "  {action:<6} stopped after deadline + p50 {:>6.2} ms, p99 {:>6.2} ms, max {:>6.2} ms",
            p(0.5).as_secs_f64() * 1e3,
            p(0.99).as_secs_f64() * 1e3,
            over[over.len() - 1].as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// A ConfigMap whose `kubewasm.io/action` label makes the test fixture misbehave.
fn fixture_object(action: &str) -> Obj {
    let mut o = object("1");
    o.labels = vec![("kubewasm.io/action".into(), action.into())];
    o
}
