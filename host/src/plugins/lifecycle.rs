//! Plugin lifecycle: load, hot-swap and unload, each all-or-nothing.
//!
//! A new version is compiled, instantiated and asked to `describe()` itself off the hot path;
//! only when every subscription resolves is it attached to the informers (receiving a replay of
//! the cache) and the old version detached. Any failure leaves the old version running.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use super::cache_reader::SubscribedCache;
use super::dispatch::Dispatcher;
use super::events::PluginEvent;
use super::manifest::Manifest;
use super::metrics::{LoadLabels, PluginMetrics};
use crate::informer::{HandlerRegistration, InformerError, InformerFactory, InformerKey};
use crate::runtime::{Limits, PluginInfo, Runtime};

/// Why a plugin file could not be (re)loaded. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The manifest beside it is invalid.
    #[error("{0}")]
    Manifest(#[from] super::manifest::ManifestError),
    /// The API server could not be asked about a subscription; loading is retried later.
    #[error("{path}: {message}")]
    Unavailable {
        /// The plugin file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// Not a usable handler component (not a component, wrong world, trap in describe, ...).
    #[error("{path}: {message}")]
    Invalid {
        /// The plugin file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// What a successful [`PluginManager::load_file`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadOutcome {
    /// First version of this plugin.
    Loaded {
        /// The new version number.
        version: u64,
    },
    /// Replaced a running version.
    Swapped {
        /// The version that stopped.
        from: u64,
        /// The version now running.
        to: u64,
    },
    /// The file and manifest are byte-for-byte what is already running.
    Unchanged,
}

/// A snapshot of one running plugin, for `/readyz`, logs and tests.
#[derive(Clone, Debug)]
pub struct PluginStatus {
    /// Plugin name (file stem).
    pub name: String,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// Host-assigned version.
    pub version: u64,
    /// What `describe()` returned (after manifest overrides).
    pub info: PluginInfo,
    /// Every subscription's informer has synced and the plugin has handled its replay.
    pub ready: bool,
    /// Notifications waiting.
    pub queue_depth: usize,
}

struct Active {
    path: PathBuf,
    digest: [u8; 32],
    version: u64,
    info: PluginInfo,
    dispatcher: Arc<Dispatcher>,
    registrations: Vec<HandlerRegistration>,
    worker: std::thread::JoinHandle<()>,
}

impl Active {
    fn ready(&self) -> bool {
        self.registrations
            .iter()
            .all(HandlerRegistration::has_synced)
            && self.dispatcher.initial_list_consumed()
    }

    /// Detaches from the informers first (no new notifications), then lets the worker finish its
    /// in-flight call and exit.
    async fn stop(self) {
        for r in self.registrations {
            r.remove().await;
        }
        self.dispatcher.stop();
        let worker = self.worker;
        let _ = tokio::task::spawn_blocking(move || worker.join()).await;
    }
}

struct Inner {
    runtime: Runtime,
    factory: InformerFactory,
    metrics: PluginMetrics,
    defaults: Limits,
    active: tokio::sync::Mutex<HashMap<String, Active>>,
    /// Digest of the last content that failed per plugin, so a rescan does not retry (and
    /// re-log) the same bad bytes until the file changes.
    failed: parking_lot::Mutex<HashMap<String, [u8; 32]>>,
    events: broadcast::Sender<PluginEvent>,
    versions: AtomicU64,
}

/// Owns every loaded plugin and attaches each to the shared informers.
#[derive(Clone)]
pub struct PluginManager {
    inner: Arc<Inner>,
}

/// The plugin name for a file: its stem (`/plugins/foo.wasm` → `foo`).
pub fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Capacity of the lifecycle and call event channel: events are for tests and tooling that
/// keep up; a lagging receiver misses the oldest. The ring is allocated up front (capacity ×
/// ~120 bytes), so it stays small.
const EVENT_CAPACITY: usize = 1024;

impl PluginManager {
    /// A manager with no plugins. `defaults` are the limits for plugins without a manifest.
    pub fn new(
        runtime: Runtime,
        factory: InformerFactory,
        metrics: PluginMetrics,
        defaults: Limits,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        PluginManager {
            inner: Arc::new(Inner {
                runtime,
                factory,
                metrics,
                defaults,
                active: tokio::sync::Mutex::new(HashMap::new()),
                failed: parking_lot::Mutex::new(HashMap::new()),
                events,
                versions: AtomicU64::new(0),
            }),
        }
    }

    /// Lifecycle and call events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<PluginEvent> {
        self.inner.events.subscribe()
    }

    /// The informers the plugins are attached to.
    pub fn factory(&self) -> &InformerFactory {
        &self.inner.factory
    }

    /// Running plugins, sorted by name.
    pub async fn status(&self) -> Vec<PluginStatus> {
        let active = self.inner.active.lock().await;
        let mut out: Vec<_> = active
            .iter()
            .map(|(name, a)| PluginStatus {
                name: name.clone(),
                path: a.path.clone(),
                version: a.version,
                info: a.info.clone(),
                ready: a.ready(),
                queue_depth: a.dispatcher.depth(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Whether the plugin called `name` runs and has handled its replay.
    pub async fn plugin_ready(&self, name: &str) -> bool {
        self.inner
            .active
            .lock()
            .await
            .get(name)
            .is_some_and(Active::ready)
    }

    /// Ready when every plugin's informers have synced and it has handled its replay.
    pub async fn is_ready(&self) -> bool {
        self.inner.active.lock().await.values().all(Active::ready)
    }

    /// Names of running plugins.
    pub async fn names(&self) -> Vec<String> {
        let mut v: Vec<_> = self.inner.active.lock().await.keys().cloned().collect();
        v.sort();
        v
    }

    fn emit(&self, e: PluginEvent) {
        let _ = self.inner.events.send(e);
    }

    fn count(&self, plugin: &str, result: &'static str) {
        self.inner
            .metrics
            .loads
            .get_or_create(&LoadLabels {
                plugin: plugin.to_string(),
                result,
            })
            .inc();
    }

    /// Loads `path`, or hot-swaps it in if a plugin of that name runs already. On error the
    /// running version (if any) is untouched.
    pub async fn load_file(&self, path: &Path) -> Result<LoadOutcome, LoadError> {
        let name = plugin_name(path);
        let result = match read_plugin(path) {
            Ok(files) => self.load_inner(&name, path, files).await,
            Err(e) => Err(e),
        };
        self.report(&name, path, result)
    }

    /// Counts, logs and publishes a failed load; passes the result through.
    fn report(
        &self,
        name: &str,
        path: &Path,
        result: Result<LoadOutcome, LoadError>,
    ) -> Result<LoadOutcome, LoadError> {
        if let Err(e) = &result {
            self.count(name, "failed");
            tracing::error!(plugin = %name, path = %path.display(), error = %e, "plugin not loaded; any previous version keeps running");
            self.emit(PluginEvent::LoadFailed {
                plugin: name.to_string(),
                path: path.to_path_buf(),
                error: e.to_string(),
            });
        }
        result
    }

    /// Like [`PluginManager::load_file`], but a file whose content already failed is skipped
    /// silently until it changes — the directory watcher calls this on every rescan. The file
    /// is read once for both the check and the load.
    pub async fn reconcile_file(&self, path: &Path) -> Option<Result<LoadOutcome, LoadError>> {
        let name = plugin_name(path);
        let result = match read_plugin(path) {
            Ok(files) if self.inner.failed.lock().get(&name) == Some(&files.digest) => return None,
            Ok(files) => self.load_inner(&name, path, files).await,
            Err(e) => Err(e),
        };
        Some(self.report(&name, path, result))
    }

    async fn load_inner(
        &self,
        name: &str,
        path: &Path,
        files: PluginFiles,
    ) -> Result<LoadOutcome, LoadError> {
        let PluginFiles {
            wasm,
            manifest: manifest_text,
            digest,
        } = files;
        let mut active = self.inner.active.lock().await;
        if active.get(name).is_some_and(|a| a.digest == digest) {
            return Ok(LoadOutcome::Unchanged);
        }
        let prepared = self
            .prepare(name, path, wasm, manifest_text.as_deref())
            .await;
        let (instance, info) = match prepared {
            Ok(p) => p,
            Err(e) => {
                self.inner.failed.lock().insert(name.to_string(), digest);
                return Err(e);
            }
        };
        let version = self.inner.versions.fetch_add(1, Ordering::Relaxed) + 1;
        let dispatcher = Dispatcher::new(
            name,
            version,
            &self.inner.metrics,
            self.inner.events.clone(),
        );

        // Attach every subscription; if one fails (unknown kind, bad selector) detach the rest.
        let mut registrations = Vec::with_capacity(info.subscriptions.len());
        for (i, sub) in info.subscriptions.iter().enumerate() {
            let key = informer_key(sub);
            let resync =
                (sub.resync_period_ms > 0).then(|| Duration::from_millis(sub.resync_period_ms));
            match self
                .inner
                .factory
                .add_handler(&key, dispatcher.handler(i as u32), resync)
                .await
            {
                Ok(r) => registrations.push(r),
                Err(e) => {
                    for r in registrations {
                        r.remove().await;
                    }
                    dispatcher.stop();
                    let message = format!(
                        "subscription {} {} cannot be served: {e}",
                        sub.api_version, sub.kind
                    );
                    let path = path.to_path_buf();
                    if matches!(e, InformerError::DiscoveryUnavailable { .. }) {
                        return Err(LoadError::Unavailable { path, message });
                    }
                    self.inner.failed.lock().insert(name.to_string(), digest);
                    return Err(LoadError::Invalid { path, message });
                }
            }
        }
        let worker = match dispatcher.spawn_worker(instance, tokio::runtime::Handle::current()) {
            Ok(w) => w,
            Err(e) => {
                for r in registrations {
                    r.remove().await;
                }
                dispatcher.stop();
                return Err(LoadError::Invalid {
                    path: path.to_path_buf(),
                    message: format!("cannot start worker thread: {e}"),
                });
            }
        };
        self.inner.failed.lock().remove(name);
        let new = Active {
            path: path.to_path_buf(),
            digest,
            version,
            info: info.clone(),
            dispatcher,
            registrations,
            worker,
        };
        let outcome = match active.insert(name.to_string(), new) {
            Some(old) => {
                let from = old.version;
                old.stop().await;
                self.count(name, "swapped");
                tracing::info!(plugin = %name, from, to = version, path = %path.display(), "plugin hot-swapped");
                self.emit(PluginEvent::Swapped {
                    plugin: name.to_string(),
                    from,
                    to: version,
                });
                LoadOutcome::Swapped { from, to: version }
            }
            None => {
                self.count(name, "loaded");
                tracing::info!(plugin = %name, version, path = %path.display(), subscriptions = info.subscriptions.len(), "plugin loaded");
                LoadOutcome::Loaded { version }
            }
        };
        self.emit(PluginEvent::Loaded {
            plugin: name.to_string(),
            version,
            info,
        });
        Ok(outcome)
    }

    /// Compiles, instantiates and describes a plugin on a blocking thread.
    async fn prepare(
        &self,
        name: &str,
        path: &Path,
        wasm: Vec<u8>,
        manifest_text: Option<&str>,
    ) -> Result<(crate::runtime::HandlerInstance, PluginInfo), LoadError> {
        let manifest = match manifest_text {
            Some(t) => Manifest::parse(&Manifest::path_for(path), t)?,
            None => Manifest::default(),
        };
        let limits = manifest.limits(self.inner.defaults);
        let runtime = self.inner.runtime.clone();
        let factory = self.inner.factory.clone();
        let name_owned = name.to_string();
        let invalid = |message: String| LoadError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let joined = tokio::task::spawn_blocking(move || -> Result<_, String> {
            let compiled = runtime.compile(&wasm).map_err(|e| e.to_string())?;
            // describe() runs before the subscriptions are known, so the first instance gets a
            // cache that refuses everything; it is replaced once the subscriptions are known.
            let probe_cache = Arc::new(SubscribedCache::new(
                &name_owned,
                factory.clone(),
                Vec::new(),
            ));
            let mut probe = runtime
                .instantiate(&compiled, &name_owned, limits, probe_cache)
                .map_err(|e| e.to_string())?;
            let info = probe
                .describe()
                .map_err(|e| format!("describe() failed: {e}"))?;
            drop(probe);
            Ok((compiled, info))
        })
        .await
        .map_err(|e| invalid(format!("loader task failed: {e}")))?;
        let (compiled, mut info) = joined.map_err(invalid)?;
        if info.subscriptions.is_empty() {
            return Err(invalid(
                "describe() returned no subscriptions; the plugin would never be called".into(),
            ));
        }
        if let Some(ms) = manifest.resync_period_ms {
            for s in &mut info.subscriptions {
                s.resync_period_ms = ms;
            }
        }
        let keys: Vec<InformerKey> = info.subscriptions.iter().map(informer_key).collect();
        let cache = Arc::new(SubscribedCache::new(name, self.inner.factory.clone(), keys));
        let runtime = self.inner.runtime.clone();
        let name_owned = name.to_string();
        let instance = tokio::task::spawn_blocking(move || {
            runtime.instantiate(&compiled, &name_owned, limits, cache)
        })
        .await
        .map_err(|e| invalid(format!("loader task failed: {e}")))?
        .map_err(|e| invalid(e.to_string()))?;
        Ok((instance, info))
    }

    /// Stops and detaches the plugin called `name`; its informers stop when no listener is left.
    pub async fn unload(&self, name: &str) -> bool {
        let removed = self.inner.active.lock().await.remove(name);
        self.inner.failed.lock().remove(name);
        match removed {
            Some(a) => {
                let version = a.version;
                a.stop().await;
                self.count(name, "unloaded");
                tracing::info!(plugin = %name, version, "plugin unloaded");
                self.emit(PluginEvent::Unloaded {
                    plugin: name.to_string(),
                    version,
                });
                true
            }
            None => false,
        }
    }

    /// Unloads every plugin, e.g. at shutdown.
    pub async fn unload_all(&self) {
        for name in self.names().await {
            self.unload(&name).await;
        }
    }
}

/// The informer a subscription needs; equal subscriptions share one informer and one watch.
pub fn informer_key(sub: &crate::runtime::Subscription) -> InformerKey {
    let norm = |s: &Option<String>| {
        s.as_ref()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    InformerKey {
        api_version: sub.api_version.clone(),
        kind: sub.kind.clone(),
        namespace: norm(&sub.namespace),
        label_selector: norm(&sub.label_selector),
        field_selector: norm(&sub.field_selector),
    }
}

/// A plugin file's bytes, its manifest text (if any) and the digest of both.
struct PluginFiles {
    wasm: Vec<u8>,
    manifest: Option<String>,
    digest: [u8; 32],
}

/// Reads the wasm file and its manifest and hashes both: a manifest edit is a new version too.
fn read_plugin(path: &Path) -> Result<PluginFiles, LoadError> {
    let wasm = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let manifest_path = Manifest::path_for(path);
    let manifest = match std::fs::read_to_string(&manifest_path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(super::manifest::ManifestError::Read {
                path: manifest_path,
                source,
            }
            .into());
        }
    };
    let mut h = Sha256::new();
    h.update((wasm.len() as u64).to_le_bytes());
    h.update(&wasm);
    if let Some(m) = &manifest {
        h.update(m.as_bytes());
    }
    Ok(PluginFiles {
        wasm,
        manifest,
        digest: h.finalize().into(),
    })
}
