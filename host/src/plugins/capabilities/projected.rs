//! Projected copies of object versions, made once per version and [`Projection`] and shared by
//! every plugin that asked for that projection.
//!
//! The informer still receives and caches whole objects (one watch serves every projection of a
//! resource); the cut happens at the guest boundary. Plugins without a projection get the cached
//! version itself, with no copy. For each distinct projection in use there is one
//! [`ProjectionCache`], shared through [`Projections`]; it maps an object version (the address of
//! its shared allocation, held by a weak reference so the address cannot be reused while the
//! entry exists) to its projected copy, a [`KubeObject`] with the same metadata and the cut JSON.
//! The first plugin to need a version's projection (its listener queueing a notification, or a
//! `cache` read) makes it; every other plugin with that projection gets the same `Arc`.
//!
//! What it holds: a projected copy lives as long as the version it was cut from (the indexer's
//! current versions, plus old ones still queued), so with a projection in use the host holds,
//! per cached object version, the projected JSON plus a copy of the extracted metadata (a few
//! hundred bytes) and an entry (~100 bytes). Entries whose version is gone are swept when the
//! map has doubled since the last sweep (at least [`SWEEP_MIN`] entries), so dead entries never
//! exceed the live ones by more than that. A projection no plugin uses any more is dropped with
//! everything it held. `kubewasm_plugin_projections_cached` and
//! `kubewasm_plugin_projection_bytes` show what is held, `kubewasm_plugin_projections_total`
//! how many copies were made.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::projection::Projection;
use crate::informer::{KubeObject, SharedObject};
use crate::plugins::metrics::PluginMetrics;

/// Fewest entries before the first sweep of dead ones.
pub(crate) const SWEEP_MIN: usize = 1024;

/// The projection metrics, shared by every cache.
#[derive(Clone)]
struct Gauges {
    entries: Gauge,
    bytes: Gauge,
    made: Counter,
}

/// Hands out the one [`ProjectionCache`] of each projection in use; cheap to clone.
#[derive(Clone)]
pub(crate) struct Projections {
    caches: Arc<Mutex<HashMap<Projection, Weak<ProjectionCache>>>>,
    gauges: Gauges,
}

impl Projections {
    /// No projection in use yet; counts in `metrics`.
    pub(crate) fn new(metrics: &PluginMetrics) -> Self {
        Projections {
            caches: Arc::default(),
            gauges: Gauges {
                entries: metrics.projections_cached.clone(),
                bytes: metrics.projection_bytes.clone(),
                made: metrics.projections_made.clone(),
            },
        }
    }

    /// The cache of `projection`, shared with every holder of an equal projection; it lives as
    /// long as one of them holds it.
    pub(crate) fn cache_for(&self, projection: &Projection) -> Arc<ProjectionCache> {
        let mut caches = self.caches.lock();
        if let Some(cache) = caches.get(projection).and_then(Weak::upgrade) {
            return cache;
        }
        caches.retain(|_, c| c.strong_count() > 0);
        let cache = Arc::new(ProjectionCache {
            projection: projection.clone(),
            entries: Mutex::new(Entries::default()),
            gauges: self.gauges.clone(),
        });
        caches.insert(projection.clone(), Arc::downgrade(&cache));
        cache
    }
}

/// The projected copies of one projection.
pub struct ProjectionCache {
    projection: Projection,
    entries: Mutex<Entries>,
    gauges: Gauges,
}

#[derive(Default)]
struct Entries {
    by_source: HashMap<usize, Entry>,
    bytes: usize,
    /// Sweep when `by_source` reaches this many entries.
    sweep_at: usize,
}

struct Entry {
    /// Keeps the source's allocation (not its content) alive, so its address names it alone.
    source: Weak<KubeObject>,
    projected: SharedObject,
}

impl ProjectionCache {
    /// The projection this cache cuts to.
    pub fn projection(&self) -> &Projection {
        &self.projection
    }

    /// `obj` cut to this projection: made on the first call for this version, the same `Arc`
    /// on every later one, from any plugin.
    pub fn project(&self, obj: &SharedObject) -> SharedObject {
        let address = Arc::as_ptr(obj) as usize;
        let mut entries = self.entries.lock();
        if let Some(e) = entries.by_source.get(&address)
            && std::ptr::eq(e.source.as_ptr(), Arc::as_ptr(obj))
        {
            return e.projected.clone();
        }
        // Made under the lock, so concurrent listeners of one version make it once.
        let json = self.projection.apply(obj.json()).into_boxed_str();
        let len = json.len();
        let projected = Arc::new(obj.with_json(json));
        self.gauges.made.inc();
        let old = entries.by_source.insert(
            address,
            Entry {
                source: Arc::downgrade(obj),
                projected: projected.clone(),
            },
        );
        entries.bytes += len;
        self.gauges.bytes.inc_by(len as i64);
        match old {
            Some(old) => entries.forget(&old, &self.gauges),
            None => {
                self.gauges.entries.inc();
            }
        }
        if entries.by_source.len() >= entries.sweep_at.max(SWEEP_MIN) {
            entries.sweep(&self.gauges);
        }
        projected
    }

    /// Entries held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.entries.lock().by_source.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Entries {
    /// Takes an entry's bytes off the books (the entry itself is counted by the caller).
    fn forget(&mut self, e: &Entry, gauges: &Gauges) {
        let len = e.projected.json().len();
        self.bytes -= len;
        gauges.bytes.dec_by(len as i64);
    }

    /// Drops the entries whose source version is gone.
    fn sweep(&mut self, gauges: &Gauges) {
        let before = self.by_source.len();
        let mut freed = 0;
        self.by_source.retain(|_, e| {
            let live = e.source.strong_count() > 0;
            if !live {
                freed += e.projected.json().len();
            }
            live
        });
        self.bytes -= freed;
        gauges.bytes.dec_by(freed as i64);
        gauges
            .entries
            .dec_by((before - self.by_source.len()) as i64);
        self.sweep_at = 2 * self.by_source.len();
    }
}

impl Drop for ProjectionCache {
    fn drop(&mut self) {
        let e = self.entries.get_mut();
        self.gauges.entries.dec_by(e.by_source.len() as i64);
        self.gauges.bytes.dec_by(e.bytes as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, rv: &str) -> SharedObject {
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"keep":"k","drop":"{}"}}}}"#,
            "x".repeat(1000)
        );
        Arc::new(KubeObject::from_json_for(json.into(), "v1", "ConfigMap", false).unwrap())
    }

    fn data_keep() -> Projection {
        Projection::parse(false, &["/data/keep".into()])
            .unwrap()
            .unwrap()
    }

    #[test]
    fn equal_projections_share_one_cache_and_one_copy_per_version() {
        let metrics = PluginMetrics::unregistered();
        let projections = Projections::new(&metrics);
        let (a, b) = (
            projections.cache_for(&data_keep()),
            projections.cache_for(&data_keep()),
        );
        assert!(Arc::ptr_eq(&a, &b));
        let other = projections.cache_for(&Projection::parse(true, &[]).unwrap().unwrap());
        assert!(!Arc::ptr_eq(&a, &other));

        let v1 = object("x", "1");
        let p = a.project(&v1);
        assert!(Arc::ptr_eq(&p, &b.project(&v1)), "one copy for both");
        assert_eq!(metrics.projections_made.get(), 1);
        assert_eq!(
            p.json(),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"ns","resourceVersion":"1"},"data":{"keep":"k"}}"#
        );
        assert_eq!(p.meta(), v1.meta());
        assert_eq!(p.key(), "ns/x");

        // A new version is a new copy; the other projection makes its own.
        let v2 = object("x", "2");
        assert_eq!(a.project(&v2).resource_version(), "2");
        assert!(
            other
                .project(&v2)
                .json()
                .ends_with(r#""resourceVersion":"2"}}"#)
        );
        assert_eq!(metrics.projections_made.get(), 3);
        assert_eq!(metrics.projections_cached.get(), 3);
        let bytes = metrics.projection_bytes.get();
        assert!(bytes > 0 && bytes < 600, "{bytes}");

        // A projection nobody holds any more is dropped with its entries.
        drop(other);
        assert_eq!(metrics.projections_cached.get(), 2);
        drop((a, b, p));
        assert_eq!(metrics.projections_cached.get(), 0);
        assert_eq!(metrics.projection_bytes.get(), 0);
    }

    #[test]
    fn entries_of_dropped_versions_are_swept() {
        let metrics = PluginMetrics::unregistered();
        let cache = Projections::new(&metrics).cache_for(&data_keep());
        let kept: Vec<SharedObject> = (0..10).map(|i| object(&format!("k{i}"), "1")).collect();
        for o in &kept {
            cache.project(o);
        }
        for i in 0..5 * SWEEP_MIN {
            // Each version is dropped right after it was projected.
            cache.project(&object(&format!("t{i}"), "1"));
        }
        assert!(cache.len() <= SWEEP_MIN, "{}", cache.len());
        assert_eq!(metrics.projections_cached.get() as usize, cache.len());
        // Live versions survive every sweep and are not made again.
        let made = metrics.projections_made.get();
        for o in &kept {
            cache.project(o);
        }
        assert_eq!(metrics.projections_made.get(), made);
    }
}
