//! [`Observer`]: the one hook through which an embedder sees what guests do, as it happens.
//!
//! A host is built with at most one observer (see `crate::host::HostBuilder::observer`); it is
//! handed down at construction, so no layer has a setter and nothing can be swapped in later.
//! `kubewasm test` records its transcript through it; tests await calls through it. Every
//! method defaults to nothing, so an observer implements only what it wants.
//!
//! Methods are called synchronously where the thing happens (a guest's call on its worker, a
//! `kube` request on the host's runtime): keep them quick and never block. What an observer
//! is shown may include object content (a write's body): it is for programs, never for logs.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelValue;

use super::cluster::{EventCall, KubeCall};
use super::types::{ApiError, GuestLogLevel};

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

/// Sees what every plugin's guests do; see the module doc. All methods default to nothing.
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
}

/// How layers hold the observer. They hold `Option<SharedObserver>`: without one they skip
/// even gathering what it would be shown.
pub type SharedObserver = Arc<dyn Observer>;
