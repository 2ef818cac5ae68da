//! What a stuck plugin makes the host hold: one million update notifications over 10,000
//! objects pushed into a plugin's dispatcher whose worker never takes anything (a guest hung in
//! a call, or quarantined), at the default `max-queued` and with the cap out of reach.
//!
//! Live heap is counted by a wrapping global allocator. The objects' current versions are the
//! informer cache's and are held either way, so the figure is what the queue adds per object:
//! its bookkeeping plus the superseded versions it keeps as the `old` of a coalesced update.
//!
//! Run with `cargo bench -p kubewasm --features bench --bench queue`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use kubewasm::informer::{KubeObject, SharedObject};
use kubewasm::plugins::{DEFAULT_MAX_QUEUED, DispatchConfig, Dispatcher, PluginMetrics};
use prometheus_client::registry::Registry;

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as for `realloc` on the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const OBJECTS: usize = 10_000;

/// A ConfigMap of about 1 KiB of data with three labels, as in the cache-memory figures.
fn object(i: usize, version: usize) -> SharedObject {
    let value = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": format!("cm-{i:05}"), "namespace": format!("ns-{}", i % 10),
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "resourceVersion": (version + 1).to_string(),
            "labels": {"app": "bench", "tier": "backend", "index": i.to_string()},
        },
        "data": {"payload": "x".repeat(1024)},
    });
    Arc::new(KubeObject::from_value(value).expect("valid object"))
}

/// Pushes `events` updates round-robin over the objects into a dispatcher that never runs and
/// reports (bytes held beyond the cache, queue depth, ns per push).
fn stuck(cap: usize, events: usize) -> (isize, usize, f64) {
    let mut cache: Vec<SharedObject> = (0..OBJECTS).map(|i| object(i, 0)).collect();
    let mut registry = Registry::default();
    let metrics = PluginMetrics::new(&mut registry);
    let config = DispatchConfig {
        max_queued: cap,
        ..DispatchConfig::default()
    };
    let before = LIVE.load(Ordering::Relaxed);
    let dispatcher = Dispatcher::new("stuck", 1, &metrics, &config, None);
    let handler = dispatcher.handler(0, None);
    let mut pushing = std::time::Duration::ZERO;
    for e in 0..events {
        let i = e % OBJECTS;
        let new = object(i, e + OBJECTS);
        let start = Instant::now();
        handler.on_update(&cache[i], &new, false);
        pushing += start.elapsed();
        cache[i] = new;
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    let depth = dispatcher.depth();
    dispatcher.stop();
    (held, depth, pushing.as_secs_f64() * 1e9 / events as f64)
}

fn main() {
    println!(
        "| stuck plugin, updates over {OBJECTS} objects | held beyond the cache | per object | queue depth | push |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let row = |label: &str, cap: usize, events: usize| {
        let (held, depth, ns) = stuck(cap, events);
        println!(
            "| {label}, {events} events | {:.1} MiB | {:.0} B | {depth} | {ns:.0} ns |",
            held as f64 / (1 << 20) as f64,
            held as f64 / OBJECTS as f64
        );
        held
    };
    let capped = row(
        &format!("max-queued = {DEFAULT_MAX_QUEUED} (default)"),
        DEFAULT_MAX_QUEUED,
        1_000_000,
    );
    // Without a reachable cap the queue keeps every event: measured at a tenth of the events
    // (a million would hold gigabytes) and extrapolated.
    let uncapped = row("no cap reached", usize::MAX, 100_000);
    println!(
        "| **uncapped at 1M events (extrapolated) ÷ capped** | **{:.0}×** |",
        uncapped as f64 * 10.0 / capped as f64
    );
}
