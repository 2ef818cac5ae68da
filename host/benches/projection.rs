//! What a `fields` projection saves per call (issue 9): the same ~20 KiB object delivered whole
//! and cut to two fields, to a guest that parses the JSON (`http-fixture`'s `on-add`) and to
//! one that ignores it (`test-fixture`'s `on-update` of two versions), measured in one run in
//! alternating rounds; plus the one-off cost of making the projected copy, which every plugin
//! of the projection shares.
//!
//! Run `bash tests/fixtures/build.sh`, then `cargo bench -p kubewasm --bench projection`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::informer::{KubeObject, SharedObject};
use kubewasm::plugins::Projection;
use kubewasm::runtime::{
    HandlerInstance, HandlerOutcome, Limits, NoCache, Runtime, RuntimeConfig, RuntimeMetrics,
};

/// A Pod of about 20 KiB: labels, annotations, four containers with long env lists, status.
fn pod(rv: &str) -> SharedObject {
    let env: Vec<serde_json::Value> = (0..52)
        .map(|i| serde_json::json!({"name": format!("SETTING_{i:03}"), "value": "v".repeat(60)}))
        .collect();
    let containers: Vec<serde_json::Value> = (0..4)
        .map(|i| {
            serde_json::json!({
                "name": format!("c{i}"), "image": format!("registry.example.com/app/c{i}:1.2.3"),
                "env": env, "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                "ports": [{"containerPort": 8080 + i, "protocol": "TCP"}],
            })
        })
        .collect();
    let json = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-7d9f8b6c5d-x2x4z", "namespace": "default", "resourceVersion": rv,
            "uid": "0b7c3e1e-5f2a-4c1e-9a43-2d1f0c9e8b11",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d9f8b6c5d"},
            "annotations": {"example.com/owner": "team-web"},
        },
        "spec": {"nodeName": "node-17", "containers": containers, "restartPolicy": "Always"},
        "status": {"phase": "Running", "podIP": "10.0.3.17",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    })
    .to_string();
    Arc::new(KubeObject::from_json_for(json.into(), "v1", "Pod", false).unwrap())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One of the two calls measured.
enum Call {
    Add(SharedObject),
    Update(SharedObject, SharedObject),
}

/// Mean time of one call over `n` calls.
fn per_call(
    exec: &tokio::runtime::Runtime,
    h: &mut HandlerInstance,
    n: u32,
    call: &Call,
) -> Duration {
    exec.block_on(async {
        let t = Instant::now();
        for _ in 0..n {
            let outcome = match call {
                Call::Add(obj) => h.on_add(&**obj, false).await,
                Call::Update(old, new) => h.on_update(&**old, &**new, false).await,
            };
            assert_eq!(outcome.unwrap(), HandlerOutcome::Ok);
        }
        t.elapsed() / n
    })
}

fn main() -> anyhow::Result<()> {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures");
    let rt = Runtime::new(RuntimeConfig::default(), RuntimeMetrics::unregistered())?;
    let exec = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let load = |file: &str| -> anyhow::Result<HandlerInstance> {
        let path = fixtures.join(file);
        let wasm = std::fs::read(&path).map_err(|e| {
            anyhow::anyhow!("{}: {e}; run tests/fixtures/build.sh first", path.display())
        })?;
        let compiled = rt.compile(&wasm)?;
        Ok(exec.block_on(rt.instantiate(&compiled, file, Limits::default(), Arc::new(NoCache)))?)
    };

    let fields = Projection::parse(false, &["/spec/nodeName".into(), "/status/phase".into()])?
        .expect("a projection");
    let (old, new) = (pod("100"), pod("101"));
    let cut = |o: &SharedObject| Arc::new(o.with_json(fields.apply(o.json()).into_boxed_str()));
    let (old_cut, new_cut) = (cut(&old), cut(&new));
    println!(
        "object: {} bytes whole, {} bytes cut to {fields:?}",
        new.json().len(),
        new_cut.json().len()
    );

    // The one-off cost, per object version and projection.
    let make = median(
        (0..2_000)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(fields.apply(std::hint::black_box(new.json())));
                t.elapsed()
            })
            .collect(),
    );
    println!(
        "making the projected copy:         {:>8.2} us per version",
        us(make)
    );

    let mut parsing = load("rust-http-fixture.wasm")?;
    let mut noop = load("rust-test-fixture.wasm")?;
    let (add_whole, add_cut) = (Call::Add(new.clone()), Call::Add(new_cut.clone()));
    let (upd_whole, upd_cut) = (
        Call::Update(old.clone(), new.clone()),
        Call::Update(old_cut.clone(), new_cut.clone()),
    );
    // Warm-up, then alternating rounds so both sides see the same machine state.
    for _ in 0..500 {
        per_call(&exec, &mut parsing, 1, &add_whole);
        per_call(&exec, &mut noop, 1, &upd_whole);
    }
    let (mut pw, mut pc, mut nw, mut nc) = (vec![], vec![], vec![], vec![]);
    for _ in 0..15 {
        pw.push(per_call(&exec, &mut parsing, 400, &add_whole));
        pc.push(per_call(&exec, &mut parsing, 400, &add_cut));
        nw.push(per_call(&exec, &mut noop, 400, &upd_whole));
        nc.push(per_call(&exec, &mut noop, 400, &upd_cut));
    }
    let (pw, pc, nw, nc) = (median(pw), median(pc), median(nw), median(nc));
    println!("guest that parses the JSON (on-add, http-fixture):");
    println!("  whole object:                    {:>8.2} us/call", us(pw));
    println!(
        "  fields projection:               {:>8.2} us/call  (projected / whole = {:.2})",
        us(pc),
        us(pc) / us(pw)
    );
    println!(
        "  + making the copy, 1 plugin:      {:>8.2} us/call  (ratio {:.2})",
        us(pc + make),
        us(pc + make) / us(pw)
    );
    println!("guest that ignores the JSON (on-update of two versions, test-fixture):");
    println!("  whole objects:                   {:>8.2} us/call", us(nw));
    println!(
        "  fields projection:               {:>8.2} us/call  (projected / whole = {:.2})",
        us(nc),
        us(nc) / us(nw)
    );
    Ok(())
}
