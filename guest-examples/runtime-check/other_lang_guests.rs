//! Copy to host/tests/ of the kubewasm workspace (runtime API as of branch rt, 256fb38) and run
//! `cargo test --release -p kubewasm --test other_lang_guests -- --nocapture` after guest-examples/build.sh.
//! Env: SOAK=N on-update calls per guest (default 2000), ONLY=<lang> to run one guest.
use std::sync::Arc;

use kubewasm::runtime::*;
use parking_lot::Mutex;

struct Obj {
    ns: Option<String>,
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
            namespace: self.ns.as_deref(),
            name: &self.name,
            uid: "uid",
            resource_version: &self.rv,
            generation: None,
            labels: &self.labels,
            json: &self.json,
        }
    }
}

fn cm(ns: Option<&str>, name: &str, rv: &str, labels: &[(&str, &str)]) -> Obj {
    Obj {
        ns: ns.map(Into::into),
        name: name.into(),
        rv: rv.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        json: format!("{{\"kind\":\"ConfigMap\",\"data\":{{\"k\":\"{}\"}}}}", "x".repeat(1900)),
    }
}

struct NoCache;
impl CacheReader for NoCache {
    fn get(&self, _: &str, _: &str, _: Option<&str>, _: &str) -> Result<Option<Arc<dyn GuestObject>>, String> {
        Err("no".into())
    }
    fn list(&self, _: &str, _: &str, _: Option<&str>, _: Option<&str>) -> Result<Vec<Arc<dyn GuestObject>>, String> {
        Err("no".into())
    }
}

#[test]
fn other_language_guests_behave_like_the_reference() {
    let lines: Arc<Mutex<Vec<(String, GuestLogLevel, String)>>> = Default::default();
    let l2 = lines.clone();
    let observer: LogObserver = Arc::new(move |p: &str, lvl: GuestLogLevel, m: &str| {
        l2.lock().push((p.to_string(), lvl, m.to_string()))
    });
    let config = RuntimeConfig { log_observer: Some(observer), ..Default::default() };
    let rt = Runtime::new(config, RuntimeMetrics::unregistered()).unwrap();
    let dist = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/dist");
    let n: usize = std::env::var("SOAK").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let only = std::env::var("ONLY").ok();
    for name in ["c", "python", "javascript", "javascript-starlingmonkey", "go"] {
        if only.as_deref().is_some_and(|o| o != name) { continue; }
        let path = dist.join(format!("{name}-configmap-logger.wasm"));
        let t = std::time::Instant::now();
        let compiled = rt.compile(&std::fs::read(&path).unwrap()).unwrap();
        let compile = t.elapsed();
        let t = std::time::Instant::now();
        let mut h = rt.instantiate(&compiled, name, Limits::default(), Arc::new(NoCache)).unwrap();
        let inst = t.elapsed();
        let info = h.describe().unwrap();
        assert_eq!(info.name, "configmap-logger");
        assert_eq!(info.subscriptions.len(), 1);
        assert_eq!(info.subscriptions[0].kind, "ConfigMap");
        let a = cm(Some("default"), "a", "1", &[]);
        let b = cm(Some("default"), "a", "2", &[]);
        let c = cm(None, "cw", "5", &[]);
        let retry = cm(Some("n"), "r", "1", &[("kubewasm.io/fail", "retry")]);
        let fatal = cm(Some("n"), "f", "1", &[("kubewasm.io/fail", "fatal")]);
        let trap = cm(Some("n"), "t", "1", &[("kubewasm.io/fail", "trap")]);
        assert_eq!(h.on_add(&a, true).unwrap(), HandlerOutcome::Ok);
        assert_eq!(h.on_add(&c, false).unwrap(), HandlerOutcome::Ok);
        assert_eq!(h.on_update(&a, &b, false).unwrap(), HandlerOutcome::Ok);
        assert_eq!(h.on_update(&b, &b, true).unwrap(), HandlerOutcome::Ok);
        assert_eq!(h.on_delete(&b, false).unwrap(), HandlerOutcome::Ok);
        assert_eq!(h.on_delete(&c, true).unwrap(), HandlerOutcome::Ok);
        assert_eq!(h.on_add(&retry, false).unwrap(), HandlerOutcome::Retry("kubewasm.io/fail=retry".into()));
        assert_eq!(h.on_update(&a, &fatal, false).unwrap(), HandlerOutcome::Fatal("kubewasm.io/fail=fatal".into()));
        assert_eq!(h.on_update(&retry, &a, false).unwrap(), HandlerOutcome::Ok);
        let err = h.on_delete(&trap, true).unwrap_err();
        assert!(matches!(err, CallError::Trap(_)), "{name}: {err:?}");
        assert_eq!(h.on_add(&a, false).unwrap(), HandlerOutcome::Ok, "{name}: fresh instance after trap");
        let all = lines.lock().clone();
        for (p, lvl, m) in &all {
            if p == name && *lvl != GuestLogLevel::Info {
                println!("{name}: non-info line (stdout/stderr?): {lvl:?} {m}");
            }
        }
        let got: Vec<String> = all.iter().filter(|(p, l, _)| p == name && *l == GuestLogLevel::Info).map(|(.., m)| m.clone()).collect();
        let want = [
            "add default/a rv=1 init=true",
            "add cw rv=5 init=false",
            "update default/a rv=1->2 sync=false",
            "update default/a rv=2->2 sync=true",
            "delete default/a rv=2 final-state-unknown=false",
            "delete cw rv=5 final-state-unknown=true",
            "add n/r rv=1 init=false",
            "update n/f rv=1->1 sync=false",
            "update default/a rv=1->1 sync=false",
            "delete n/t rv=1 final-state-unknown=true",
            "add default/a rv=1 init=false",
        ];
        assert_eq!(got, want, "{name}");
        let t = std::time::Instant::now();
        let mut soak_err = None;
        for i in 0..n {
            if let Err(e) = h.on_update(&a, &b, i % 2 == 0) {
                soak_err = Some((i, e));
                break;
            }
        }
        let per_call = t.elapsed() / n as u32;
        println!("{name}: compile {compile:?}, instantiate {inst:?}, on-update x{n}: {per_call:?}/call, soak error: {soak_err:?}");
    }
}
