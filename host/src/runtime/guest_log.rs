//! Where guest output goes: `tracing` (target `kubewasm::guest`, field `plugin`) and the optional
//! observer. Shared by the `log` import and the stdout/stderr capture.

use std::sync::Arc;

use super::types::{GuestLogLevel, LogObserver};

/// Target of every event carrying guest output, so operators can filter it separately.
pub(crate) const GUEST_TARGET: &str = "kubewasm::guest";

/// Emits guest log lines tagged with the plugin name; cheap to clone into WASI streams.
#[derive(Clone)]
pub(crate) struct GuestLog {
    plugin: Arc<str>,
    observer: Option<LogObserver>,
}

impl GuestLog {
    pub fn new(plugin: Arc<str>, observer: Option<LogObserver>) -> Self {
        Self { plugin, observer }
    }

    /// A line from the `log` import.
    pub fn log(&self, level: GuestLogLevel, message: &str) {
        let plugin = &*self.plugin;
        match level {
            GuestLogLevel::Trace => tracing::trace!(target: GUEST_TARGET, plugin, "{message}"),
            GuestLogLevel::Debug => tracing::debug!(target: GUEST_TARGET, plugin, "{message}"),
            GuestLogLevel::Info => tracing::info!(target: GUEST_TARGET, plugin, "{message}"),
            GuestLogLevel::Warn => tracing::warn!(target: GUEST_TARGET, plugin, "{message}"),
            GuestLogLevel::Error => tracing::error!(target: GUEST_TARGET, plugin, "{message}"),
        }
        self.observe(level, message);
    }

    /// A complete line the guest wrote to stdout (`stderr == false`) or stderr.
    pub fn output_line(&self, stderr: bool, line: &str) {
        let plugin = &*self.plugin;
        let level = if stderr {
            tracing::warn!(target: GUEST_TARGET, plugin, stream = "stderr", "{line}");
            GuestLogLevel::Warn
        } else {
            tracing::info!(target: GUEST_TARGET, plugin, stream = "stdout", "{line}");
            GuestLogLevel::Info
        };
        self.observe(level, line);
    }

    fn observe(&self, level: GuestLogLevel, message: &str) {
        if let Some(observer) = &self.observer {
            observer(&self.plugin, level, message);
        }
    }
}
