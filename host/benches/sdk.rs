//! What the Rust SDK (sdk/rust) costs per call: a no-op handler through the SDK
//! (`tests/fixtures/rust/sdk-noop`, objects handed over as `Lazy<DynamicObject>`, never
//! decoded) against the same no-op on the raw bindings (`raw-noop`); the 0.1.0 configmap-logger
//! (on the SDK's 0.1.0 mode) in its `noop` bench mode against the same peer; and a typed
//! `k8s-openapi` decode of a Pod-sized object per call (`sdk-noop` built with feature `pod`,
//! which decodes both objects, against `raw-noop` given the same Pod).
//!
//! The guests of one comparison are measured in alternating rounds, so a machine that is busy
//! for a while slows both alike.
//!
//! Run `bash tests/fixtures/build.sh` and `bash guest-examples/build.sh configmap-logger`, then
//! `cargo bench -p kubewasm --bench sdk`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::runtime::{
    CompiledHandler, GuestObject, HandlerOutcome, Limits, NoCache, ObjectView, Runtime,
    RuntimeConfig, RuntimeMetrics,
};

struct Obj {
    kind: &'static str,
    rv: String,
    labels: Vec<(String, String)>,
    json: String,
}

impl GuestObject for Obj {
    fn view(&self) -> ObjectView<'_> {
        ObjectView {
            api_version: "v1",
            kind: self.kind,
            namespace: Some("default"),
            name: "bench",
            uid: "0b7c3e1e-5f2a-4c1e-9a43-2d1f0c9e8b11",
            resource_version: &self.rv,
            generation: None,
            labels: &self.labels,
            json: &self.json,
        }
    }
}

/// The ConfigMap of the runtime benchmark: about 2 KB of JSON.
fn configmap(rv: &str) -> Obj {
    let data: String = (0..30)
        .map(|i| format!(r#""key-{i:02}":"value-{i:02}-{}","#, "x".repeat(40)))
        .collect();
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"bench","namespace":"default","resourceVersion":"{rv}","labels":{{"app":"bench"}}}},"data":{{{}}}}}"#,
        data.trim_end_matches(',')
    );
    Obj {
        kind: "ConfigMap",
        rv: rv.into(),
        // The configmap-logger's bench mode: return at once (the other guests ignore labels).
        labels: vec![("kubewasm.io/bench".into(), "noop".into())],
        json,
    }
}

/// A Pod as a cluster serves it: two containers with env, ports, probes, volumes, conditions
/// and container statuses (managedFields stripped, as the host does).
fn pod(rv: &str) -> Obj {
    let container = |name: &str| {
        let env: Vec<String> = (0..12)
            .map(|i| format!(r#"{{"name":"ENV_{i}","value":"value-{i}-{name}"}}"#))
            .collect();
        format!(
            r#"{{"name":"{name}","image":"registry.example.com/team/{name}:1.2.3","ports":[{{"containerPort":8080,"name":"http","protocol":"TCP"}}],"env":[{}],"resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}},"limits":{{"cpu":"1","memory":"512Mi"}}}},"livenessProbe":{{"httpGet":{{"path":"/healthz","port":8080,"scheme":"HTTP"}},"periodSeconds":10,"timeoutSeconds":1,"successThreshold":1,"failureThreshold":3}},"volumeMounts":[{{"name":"config","mountPath":"/etc/config"}},{{"name":"kube-api-access","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}"#,
            env.join(",")
        )
    };
    let status = |name: &str| {
        format!(
            r#"{{"name":"{name}","ready":true,"restartCount":0,"image":"registry.example.com/team/{name}:1.2.3","imageID":"registry.example.com/team/{name}@sha256:{}","containerID":"containerd://{}","started":true,"state":{{"running":{{"startedAt":"2026-01-01T00:00:00Z"}}}}}}"#,
            "a".repeat(64),
            "b".repeat(64)
        )
    };
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"bench","namespace":"default","uid":"0b7c3e1e-5f2a-4c1e-9a43-2d1f0c9e8b11","resourceVersion":"{rv}","creationTimestamp":"2026-01-01T00:00:00Z","labels":{{"app":"web","pod-template-hash":"5d4f8c7b9"}},"annotations":{{"kubectl.kubernetes.io/restartedAt":"2026-01-01T00:00:00Z"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-5d4f8c7b9","uid":"1b7c3e1e-5f2a-4c1e-9a43-2d1f0c9e8b11","controller":true,"blockOwnerDeletion":true}}]}},"spec":{{"containers":[{},{}],"volumes":[{{"name":"config","configMap":{{"name":"web-config","defaultMode":420}}}},{{"name":"kube-api-access","projected":{{"defaultMode":420,"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}},{{"configMap":{{"name":"kube-root-ca.crt","items":[{{"key":"ca.crt","path":"ca.crt"}}]}}}}]}}}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","nodeName":"node-1","schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"status":{{"phase":"Running","conditions":[{{"type":"Ready","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"}},{{"type":"ContainersReady","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"}},{{"type":"PodScheduled","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"}}],"hostIP":"10.0.0.1","podIP":"10.244.1.7","podIPs":[{{"ip":"10.244.1.7"}}],"startTime":"2026-01-01T00:00:00Z","containerStatuses":[{},{}],"qosClass":"Burstable"}}}}"#,
        container("web"),
        container("sidecar"),
        status("web"),
        status("sidecar")
    );
    Obj {
        kind: "Pod",
        rv: rv.into(),
        labels: Vec::new(),
        json,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median per-call time of `on-update(old, new)` of each guest over 7 rounds of `n` calls, the
/// guests taking turns within every round.
fn per_call(
    rt: &Runtime,
    exec: &tokio::runtime::Runtime,
    guests: &[&CompiledHandler],
    (old, new): (&Obj, &Obj),
    n: u32,
) -> anyhow::Result<Vec<Duration>> {
    exec.block_on(async {
        let mut handlers = Vec::new();
        for guest in guests {
            // A machine shared with builds can stall one call past the 1 s default: the
            // bench measures cost, not deadlines.
            let limits = Limits {
                deadline: Duration::from_secs(60),
                wall_limit: Duration::from_secs(60),
                ..Limits::default()
            };
            let mut h = rt
                .instantiate(guest, "bench", limits, Arc::new(NoCache))
                .await?;
            for _ in 0..1_000 {
                assert_eq!(
                    h.on_update(old, new, false).await.unwrap(),
                    HandlerOutcome::Ok
                );
            }
            handlers.push(h);
        }
        let mut rounds = vec![Vec::new(); guests.len()];
        for _ in 0..7 {
            for (h, times) in handlers.iter_mut().zip(&mut rounds) {
                let t = Instant::now();
                for _ in 0..n {
                    h.on_update(old, new, false).await.unwrap();
                }
                times.push(t.elapsed() / n);
            }
        }
        Ok(rounds.into_iter().map(median).collect())
    })
}

fn main() -> anyhow::Result<()> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let rt = Runtime::new(RuntimeConfig::default(), RuntimeMetrics::unregistered())?;
    let load = |path: PathBuf, hint: &str| -> anyhow::Result<CompiledHandler> {
        let wasm = std::fs::read(&path)
            .map_err(|e| anyhow::anyhow!("{}: {e}; run {hint} first", path.display()))?;
        println!(
            "guest: {} ({} KiB)",
            path.file_name().unwrap_or_default().to_string_lossy(),
            wasm.len() / 1024
        );
        Ok(rt.compile(&wasm)?)
    };
    let fixture = |name: &str| {
        load(
            repo.join("target/fixtures").join(name),
            "tests/fixtures/build.sh",
        )
    };
    let raw = fixture("rust-raw-noop.wasm")?;
    let sdk = fixture("rust-sdk-noop.wasm")?;
    let sdk_pod = fixture("rust-sdk-noop-pod.wasm")?;
    let logger = load(
        repo.join("guest-examples/dist/rust-configmap-logger.wasm"),
        "guest-examples/build.sh configmap-logger",
    )?;
    let exec = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    let cms = (configmap("100"), configmap("101"));
    let pods = (pod("100"), pod("101"));
    let cm = (&cms.0, &cms.1);
    let p = (&pods.0, &pods.1);
    println!(
        "objects: ConfigMap {} bytes, Pod {} bytes of JSON",
        cms.1.json.len(),
        pods.1.json.len()
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let t = per_call(&rt, &exec, &[&raw, &sdk, &logger], cm, 20_000)?;
    let (raw_cm, sdk_cm, logger_cm) = (t[0], t[1], t[2]);
    println!(
        "on-update no-op, raw bindings:          {:>8.2} us/call",
        us(raw_cm)
    );
    println!(
        "on-update no-op, SDK (Lazy, no decode): {:>8.2} us/call",
        us(sdk_cm)
    );
    println!(
        "SDK / raw:                              {:>8.2}",
        ratio(sdk_cm, raw_cm)
    );
    println!(
        "configmap-logger noop (SDK, 0.1.0):     {:>8.2} us/call",
        us(logger_cm)
    );
    println!(
        "configmap-logger / raw:                 {:>8.2}",
        ratio(logger_cm, raw_cm)
    );
    let t = per_call(&rt, &exec, &[&raw, &sdk_pod], p, 5_000)?;
    let (raw_pod, sdk_pod) = (t[0], t[1]);
    println!(
        "on-update Pod, raw bindings:            {:>8.2} us/call",
        us(raw_pod)
    );
    println!(
        "on-update Pod, SDK typed (2 decodes):   {:>8.2} us/call",
        us(sdk_pod)
    );
    println!(
        "typed Pod decode:                       {:>8.2} us/object",
        us(sdk_pod.saturating_sub(raw_pod)) / 2.0
    );
    Ok(())
}
