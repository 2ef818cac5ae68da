//! Helpers shared by the unit tests of several layers (compiled only for tests).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::runtime::{GuestLogLevel, Observer};

/// A tracing writer that keeps everything in memory, so a test can read what the host logged
/// through a real subscriber.
#[derive(Clone, Default)]
pub(crate) struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}

impl LogCapture {
    /// Everything written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().clone()).expect("tracing writes UTF-8")
    }

    /// Everything written so far by a JSON subscriber, one value per line.
    pub(crate) fn json_lines(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }
}

/// An observer that keeps every guest log line as `(level, message)`.
#[derive(Clone, Default)]
pub(crate) struct SeenLines(Arc<Mutex<Vec<(GuestLogLevel, String)>>>);

impl SeenLines {
    /// The lines seen so far.
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<(GuestLogLevel, String)>> {
        self.0.lock()
    }
}

impl Observer for SeenLines {
    fn log_line(&self, _plugin: &str, level: GuestLogLevel, message: &str) {
        self.0.lock().push((level, message.to_string()));
    }
}
