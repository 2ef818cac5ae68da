//! [`Observer`]: the one hook through which an embedder sees what happens to plugins and what
//! their guests do, as it happens.
//!
//! Two kinds of methods share the trait. What guests do (calls, `kube` requests, Events, log
//! lines, HTTP) is reported from this layer and from the plugins layer's delivery; what
//! happens to a plugin's versions (loaded or swapped in, refused, quarantined, unloaded) is
//! reported by the plugins layer only. The trait lives here, in the lowest layer that reports to
//! it, so both can reach it without importing upwards; its lifecycle payloads are plain data
//! (names, version numbers, the [`PluginInfo`] this layer defines, text), so this layer still
//! knows nothing of how plugins are loaded.
//!
//! A host is built with any number of observers (`crate::host::HostBuilder::observer`, once
//! each: metrics, logs, CLI output, a test's recorder); [`fan_out`] makes them one, handed
//! down at construction, so no layer has a setter and nothing can be swapped in later.
//! `kubewasm test` records its transcript through it; tests await calls and lifecycle through
//! it. Every method defaults to nothing, so an observer implements only what it wants.
//!
//! Methods are called synchronously where the thing happens (a guest's call on its worker, a
//! `kube` request on the host's runtime, a load on the task loading it): keep them quick and
//! never block. What an observer is shown may include object content (a write's body): it is
//! for programs, never for logs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelValue;

use super::cluster::{EventCall, KubeCall};
use super::types::{ApiError, GuestLogLevel, PluginInfo};

/// Which export of the handler world was called.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelValue)]
pub enum CallKind {
    /// `on-add`.
    Add,
    /// `on-update`.
    Update,
    /// `on-delete`.
    Delete,
    /// `on-synced` (0.2.0 handlers, once after each replay).
    Synced,
    /// A controller's `reconcile` of one key.
    Reconcile,
    /// A controller's `keys-for` of a watched object.
    KeysFor,
}

/// How one call into a handler ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// The handler returned `ok`.
    Ok,
    /// The handler returned `retry(msg)`.
    Retry(String),
    /// The handler returned `fatal(msg)`.
    Fatal(String),
    /// The guest trapped, ran out of time or memory; the instance was discarded.
    Failed(String),
    /// A controller's reconcile returned `requeue-after` (the delay the host honours).
    RequeueAfter(Duration),
}

/// The object a call was about (absent for `on-synced`).
#[derive(Clone, Copy, Debug)]
pub struct CalledObject<'a> {
    /// `namespace/name`.
    pub key: &'a str,
    /// The object's `apiVersion` (empty when nobody listened as the call ended).
    pub api_version: &'a str,
    /// The object's `kind` (likewise).
    pub kind: &'a str,
    /// The delivered object's resourceVersion (the new one for an update).
    pub resource_version: &'a str,
    /// `is-in-initial-list`, `is-sync` or `final-state-unknown`, by export.
    pub flag: bool,
}

/// One call into a handler, as it ended.
#[derive(Clone, Copy, Debug)]
pub struct CallEnded<'a> {
    /// The plugin version that handled it.
    pub version: u64,
    /// Which export.
    pub call: CallKind,
    /// What it was about; `None` for `on-synced`.
    pub object: Option<CalledObject<'a>>,
    /// How it ended.
    pub outcome: &'a CallOutcome,
}

/// One outbound `wasi:http` request, as it ended.
#[derive(Clone, Copy, Debug)]
pub struct HttpExchange<'a> {
    /// Method, e.g. `GET`.
    pub method: &'a str,
    /// The URL the guest asked for.
    pub url: &'a str,
    /// The response status, or how the request failed before a response (`denied`,
    /// `dry_run`, `timeout`, `dns`, `connect`, ...).
    pub result: Result<u16, &'a str>,
}

/// A version of a plugin that now runs (delivers, or stands by warm under leader election).
#[derive(Clone, Copy, Debug)]
pub struct VersionLoaded<'a> {
    /// Host-assigned version number, unique for the process.
    pub version: u64,
    /// The version it replaced (a hot swap), which has stopped; `None` for a first load.
    pub replaced: Option<u64>,
    /// The file it was loaded from.
    pub path: &'a Path,
    /// What its `describe()` returned (after manifest overrides).
    pub info: &'a PluginInfo,
}

/// A file that could not be loaded.
#[derive(Clone, Copy, Debug)]
pub struct LoadFailed<'a> {
    /// The offending file.
    pub path: &'a Path,
    /// The cause, naming the file: the text the host logs.
    pub error: &'a str,
    /// The host tries again by itself (a transient cause) rather than waiting for the file to
    /// change.
    pub retrying: bool,
    /// A previous version keeps running.
    pub running: bool,
}

/// A plugin version paused after calls that failed in a row.
#[derive(Clone, Copy, Debug)]
pub struct Quarantined {
    /// The version paused.
    pub version: u64,
    /// Failed calls in a row that led to it.
    pub failures: u32,
    /// How long no new call starts (notifications keep queueing).
    pub pause: Duration,
}

/// Sees what happens to every plugin and what its guests do; see the module doc. All methods
/// default to nothing.
pub trait Observer: Send + Sync {
    /// A call of `plugin` is about to begin (on the plugin's worker, before the guest runs), so
    /// that what the guest does until [`Observer::call_ended`] can be attributed to it.
    fn call_started(&self, plugin: &str, call: CallKind) {
        let _ = (plugin, call);
    }

    /// A call of `plugin` ended: the one begun last when the plugin runs one call at a time;
    /// with `concurrency` above 1, any of its calls in flight.
    fn call_ended(&self, plugin: &str, call: &CallEnded<'_>) {
        let _ = (plugin, call);
    }

    /// A `kube` call ended with `result`: the status the server answered with (201 for a
    /// create), no object (the observer has the request).
    fn kube_request(&self, plugin: &str, call: &KubeCall, result: Result<u16, &ApiError>) {
        let _ = (plugin, call, result);
    }

    /// A granted `events.emit` call (the rate limit may still drop or fold it).
    fn event(&self, plugin: &str, event: &EventCall) {
        let _ = (plugin, event);
    }

    /// A guest log line: `log` calls at their level, stdout at `Info`, stderr at `Warn`. Lines
    /// the per-plugin rate limit drops are not shown.
    fn log_line(&self, plugin: &str, level: GuestLogLevel, message: &str) {
        let _ = (plugin, level, message);
    }

    /// An outbound HTTP request ended (answered, refused or failed).
    fn http_request(&self, plugin: &str, exchange: &HttpExchange<'_>) {
        let _ = (plugin, exchange);
    }

    /// A version of `plugin` was loaded, or swapped in for the one named in `loaded.replaced`.
    fn version_loaded(&self, plugin: &str, loaded: &VersionLoaded<'_>) {
        let _ = (plugin, loaded);
    }

    /// A file of `plugin` could not be loaded; any running version keeps running.
    fn load_failed(&self, plugin: &str, failed: &LoadFailed<'_>) {
        let _ = (plugin, failed);
    }

    /// `plugin` was quarantined: no new call until the pause is over.
    fn quarantined(&self, plugin: &str, quarantined: &Quarantined) {
        let _ = (plugin, quarantined);
    }

    /// `plugin` was unloaded: `version` has stopped and its listeners are detached.
    fn unloaded(&self, plugin: &str, version: u64) {
        let _ = (plugin, version);
    }
}

/// How layers hold the observer. They hold `Option<SharedObserver>`: without one they skip
/// even gathering what it would be shown.
pub type SharedObserver = Arc<dyn Observer>;

/// The one observer that tells each of `observers`, in order: `None` for none, the observer
/// itself for one.
pub(crate) fn fan_out(mut observers: Vec<SharedObserver>) -> Option<SharedObserver> {
    match observers.len() {
        0 => None,
        1 => observers.pop(),
        _ => Some(Arc::new(FanOut(observers))),
    }
}

/// Several observers as one; see [`fan_out`].
struct FanOut(Vec<SharedObserver>);

impl Observer for FanOut {
    fn call_started(&self, plugin: &str, call: CallKind) {
        self.0.iter().for_each(|o| o.call_started(plugin, call));
    }

    fn call_ended(&self, plugin: &str, call: &CallEnded<'_>) {
        self.0.iter().for_each(|o| o.call_ended(plugin, call));
    }

    fn kube_request(&self, plugin: &str, call: &KubeCall, result: Result<u16, &ApiError>) {
        self.0
            .iter()
            .for_each(|o| o.kube_request(plugin, call, result));
    }

    fn event(&self, plugin: &str, event: &EventCall) {
        self.0.iter().for_each(|o| o.event(plugin, event));
    }

    fn log_line(&self, plugin: &str, level: GuestLogLevel, message: &str) {
        self.0
            .iter()
            .for_each(|o| o.log_line(plugin, level, message));
    }

    fn http_request(&self, plugin: &str, exchange: &HttpExchange<'_>) {
        self.0.iter().for_each(|o| o.http_request(plugin, exchange));
    }

    fn version_loaded(&self, plugin: &str, loaded: &VersionLoaded<'_>) {
        self.0.iter().for_each(|o| o.version_loaded(plugin, loaded));
    }

    fn load_failed(&self, plugin: &str, failed: &LoadFailed<'_>) {
        self.0.iter().for_each(|o| o.load_failed(plugin, failed));
    }

    fn quarantined(&self, plugin: &str, quarantined: &Quarantined) {
        self.0
            .iter()
            .for_each(|o| o.quarantined(plugin, quarantined));
    }

    fn unloaded(&self, plugin: &str, version: u64) {
        self.0.iter().for_each(|o| o.unloaded(plugin, version));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts what it is told.
    #[derive(Default)]
    struct Counting(parking_lot::Mutex<Vec<String>>);

    impl Observer for Counting {
        fn unloaded(&self, plugin: &str, version: u64) {
            self.0.lock().push(format!("{plugin} {version}"));
        }
    }

    #[test]
    fn a_fan_out_tells_every_observer_once() {
        let (a, b) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
        let both = fan_out(vec![a.clone(), b.clone()]).expect("two observers");
        both.unloaded("p", 3);
        assert_eq!(*a.0.lock(), ["p 3"]);
        assert_eq!(*b.0.lock(), ["p 3"]);
        assert!(fan_out(Vec::new()).is_none());
    }
}
