//! Informer throughput: N = 100,000 watch events over 10,000 keys through
//! reflector → DeltaFIFO → indexer → processor → listener → handler.
//! Prints events/s, ns/event, allocations/event and JSON serialisations per object version.
//! Run: `cargo bench -p kubewasm --bench informer`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kubewasm::informer::{
    InformerKey, InformerMetrics, KubeObject, ListOptions, ListPage, ListerWatcher,
    ReflectorConfig, ResourceEventHandler, SharedIndexInformer, SharedObject, SourceError,
    WatchEvent, WatchOptions, WatchStream, json_serialisations,
};
use parking_lot::Mutex;
use serde_json::{Value, json};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: usize = 100_000;
const KEYS: usize = 10_000;

fn pod(i: usize, rv: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i}"), "namespace": "bench", "uid": format!("uid-{i}"),
                     "resourceVersion": rv.to_string(), "labels": {"app": "bench", "shard": (i % 16).to_string()}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}
    })
}

/// Lists nothing, then serves one pre-built watch stream.
struct Script(Mutex<Option<Vec<WatchEvent>>>);

#[async_trait::async_trait]
impl ListerWatcher for Script {
    async fn list(&self, _: &ListOptions) -> Result<ListPage, SourceError> {
        Ok(ListPage {
            items: vec![],
            resource_version: "1".into(),
            continue_token: None,
            shard_selector: None,
        })
    }
    async fn watch(&self, _: &WatchOptions) -> Result<WatchStream, SourceError> {
        match self.0.lock().take() {
            Some(evs) => Ok(futures::stream::iter(evs.into_iter().map(Ok)).boxed()),
            None => Ok(futures::stream::pending().boxed()),
        }
    }
}

struct Handler {
    seen: AtomicUsize,
    read_json: bool,
    done: Arc<tokio::sync::Notify>,
    target: usize,
}

impl Handler {
    fn tick(&self, obj: &SharedObject) {
        if self.read_json {
            std::hint::black_box(obj.json().len());
        }
        if self.seen.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.done.notify_one();
        }
    }
}

impl ResourceEventHandler for Handler {
    fn on_add(&self, obj: &SharedObject, _: bool) {
        self.tick(obj)
    }
    fn on_update(&self, _: &SharedObject, new: &SharedObject, _: bool) {
        self.tick(new)
    }
    fn on_delete(&self, obj: &SharedObject, _: bool) {
        self.tick(obj)
    }
}

fn events() -> Vec<WatchEvent> {
    (0..N)
        .map(|n| {
            let (i, rv) = (n % KEYS, n + 2);
            if n < KEYS {
                WatchEvent::Added(pod(i, rv))
            } else {
                WatchEvent::Modified(pod(i, rv))
            }
        })
        .collect()
}

struct Row {
    name: String,
    handlers: usize,
    elapsed: Duration,
    allocs: u64,
    json: u64,
}

async fn run_watch(handlers: usize, read_json: bool) -> Row {
    let evs = events();
    let informer = SharedIndexInformer::new(
        InformerKey::new("v1", "Pod"),
        Arc::new(Script(Mutex::new(Some(evs)))),
        InformerMetrics::unregistered(),
        ReflectorConfig::default(),
    );
    let mut hs = Vec::new();
    for _ in 0..handlers {
        let h = Arc::new(Handler {
            seen: AtomicUsize::new(0),
            read_json,
            done: Arc::new(tokio::sync::Notify::new()),
            target: N,
        });
        informer.add_event_handler(h.clone(), None).unwrap();
        hs.push(h);
    }
    let (a0, j0, t0) = (
        ALLOCS.load(Ordering::Relaxed),
        json_serialisations(),
        Instant::now(),
    );
    informer.run();
    for h in &hs {
        while h.seen.load(Ordering::Relaxed) < N {
            h.done.notified().await;
        }
    }
    let elapsed = t0.elapsed();
    let (allocs, json) = (
        ALLOCS.load(Ordering::Relaxed) - a0,
        json_serialisations() - j0,
    );
    informer.stop();
    informer.join().await;
    Row {
        name: format!("watch→handler{}", if read_json { " (+json)" } else { "" }),
        handlers,
        elapsed,
        allocs,
        json,
    }
}

/// FIFO → indexer → processor → handler only, objects pre-decoded (no JSON tree parsing).
async fn run_fifo(handlers: usize) -> Row {
    struct Never;
    #[async_trait::async_trait]
    impl ListerWatcher for Never {
        async fn list(&self, _: &ListOptions) -> Result<ListPage, SourceError> {
            futures::future::pending().await
        }
        async fn watch(&self, _: &WatchOptions) -> Result<WatchStream, SourceError> {
            futures::future::pending().await
        }
    }
    let objs: Vec<SharedObject> = (0..N)
        .map(|n| Arc::new(KubeObject::from_value(pod(n % KEYS, n + 2)).unwrap()))
        .collect();
    let informer = SharedIndexInformer::new(
        InformerKey::new("v1", "Pod"),
        Arc::new(Never),
        InformerMetrics::unregistered(),
        ReflectorConfig::default(),
    );
    let mut hs = Vec::new();
    for _ in 0..handlers {
        let h = Arc::new(Handler {
            seen: AtomicUsize::new(0),
            read_json: false,
            done: Arc::new(tokio::sync::Notify::new()),
            target: N,
        });
        informer.add_event_handler(h.clone(), None).unwrap();
        hs.push(h);
    }
    informer.run();
    // Keep every version alive past the timed window: this row measures the pipeline only,
    // not freeing superseded versions (the watch rows include that).
    let keep: Vec<SharedObject> = objs.clone();
    let (a0, j0, t0) = (
        ALLOCS.load(Ordering::Relaxed),
        json_serialisations(),
        Instant::now(),
    );
    for (n, o) in objs.into_iter().enumerate() {
        if n < KEYS {
            informer.fifo().add(o);
        } else {
            informer.fifo().update(o);
        }
    }
    for h in &hs {
        while h.seen.load(Ordering::Relaxed) < N {
            h.done.notified().await;
        }
    }
    let elapsed = t0.elapsed();
    let (allocs, json) = (
        ALLOCS.load(Ordering::Relaxed) - a0,
        json_serialisations() - j0,
    );
    informer.stop();
    informer.join().await;
    drop(keep);
    Row {
        name: "fifo→handler".into(),
        handlers,
        elapsed,
        allocs,
        json,
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("informer benchmark: N = {N} watch events over {KEYS} keys, current-thread runtime");
    println!(
        "{:<22} {:>8} {:>12} {:>10} {:>16} {:>12} {:>14}",
        "pipeline",
        "handlers",
        "events/s",
        "ns/event",
        "ns/event/handler",
        "allocs/event",
        "json/version"
    );
    let rows = rt.block_on(async {
        let mut rows = Vec::new();
        rows.push(run_watch(1, false).await); // warm-up
        rows.clear();
        rows.push(run_fifo(1).await);
        rows.push(run_watch(1, false).await);
        rows.push(run_watch(4, false).await);
        rows.push(run_watch(4, true).await);
        rows
    });
    for r in rows {
        let ns = r.elapsed.as_nanos() as f64 / N as f64;
        let versions = N as f64;
        println!(
            "{:<22} {:>8} {:>12.0} {:>10.0} {:>16.0} {:>12.1} {:>14.2}",
            r.name,
            r.handlers,
            N as f64 / r.elapsed.as_secs_f64(),
            ns,
            ns / r.handlers as f64,
            r.allocs as f64 / N as f64,
            r.json as f64 / versions,
        );
        assert!(
            r.json as usize <= N,
            "JSON serialised more than once per version"
        );
    }
}
