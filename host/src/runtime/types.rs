//! Data exchanged between the runtime and the plugins layer, free of wasmtime types.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

/// Borrowed view of one Kubernetes object version, so the host never re-serialises or copies an
/// object per plugin: the runtime copies these strings straight into guest memory.
#[derive(Clone, Copy, Debug)]
pub struct ObjectView<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub uid: &'a str,
    pub resource_version: &'a str,
    pub generation: Option<i64>,
    pub labels: &'a [(String, String)],
    /// The object exactly as the API server served it.
    pub json: &'a str,
}

/// Anything that can present itself as an [`ObjectView`]; implemented by the plugins layer on
/// its shared cache entries so handlers and `cache` reads need no conversion step.
pub trait GuestObject: Send + Sync {
    fn view(&self) -> ObjectView<'_>;
}

/// Answers a guest's `cache` imports. The implementation decides what a plugin may read:
/// refusing (e.g. an unsubscribed kind) is an `Err(message)` that the guest receives as a value,
/// never a trap.
pub trait CacheReader: Send + Sync + 'static {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<dyn GuestObject>>, String>;

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<dyn GuestObject>>, String>;
}

/// What `describe()` returned: the name used in logs and metrics and what to subscribe to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PluginInfo {
    pub name: String,
    pub subscriptions: Vec<Subscription>,
}

/// One resource a handler wants events for; equal subscriptions share one informer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Subscription {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// 0 disables resync.
    pub resync_period_ms: u64,
}

/// How a handler call that ran to completion ended; drives redelivery in the plugins layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerOutcome {
    Ok,
    /// Redeliver later with backoff.
    Retry(String),
    /// Log and count, never redeliver.
    Fatal(String),
}

/// Severity of a guest log line, mirroring the WIT `log.level` enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GuestLogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl fmt::Display for GuestLogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        })
    }
}

/// Taps every guest log line (`log` calls at their level, stdout lines at `Info`, stderr lines at
/// `Warn`) as `(plugin, level, message)`; lines always go to `tracing` as well.
pub type LogObserver = Arc<dyn Fn(&str, GuestLogLevel, &str) + Send + Sync>;
