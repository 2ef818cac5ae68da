//! Log set-up shared by every subcommand.
//!
//! Guests, registries and component files put text of their own into log fields (an error's
//! message, a log line, an export name). In text format every field value goes through
//! [`EscapedFields`], so no such text can end a line, forge the next one or drive a terminal;
//! JSON escapes control characters itself (serde_json writes them as `\n`, `\u001b`, ...).

use std::fmt::{self, Write as _};

use tracing::field::Field;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::{MakeExt, RecordFields};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

use crate::text::Escaping;

/// Text-format fields as `message name=value ...`, every value with control characters,
/// line separators and bidirectional overrides escaped (`\n`, `\u{1b}`, ...): one event is
/// always one line, whatever text reaches a field.
#[derive(Debug, Default)]
pub(crate) struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        debug_fn(write_field)
            .delimited(" ")
            .format_fields(writer, fields)
    }
}

fn write_field(w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    let name = field.name();
    // `log` crate records arrive with their metadata as fields the formatter already shows.
    if name.starts_with("log.") {
        return Ok(());
    }
    let mut out = Escaping(w);
    match name {
        "message" => write!(out, "{value:?}"),
        name => write!(out, "{}={value:?}", name.strip_prefix("r#").unwrap_or(name)),
    }
}

/// Output format of the host's logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, fields (plugin, message, ...) at the top level, for log shippers.
    Json,
}

/// Installs the global subscriber; `RUST_LOG` overrides the default `info` level. Safe to call
/// more than once (later calls are ignored), which tests rely on.
pub(crate) fn init(format: LogFormat) {
    init_with(format, "info");
}

/// Like [`init`], showing only errors unless `RUST_LOG` says otherwise.
/// Only `kubewasm test` (the `scenario` feature) asks for it.
#[cfg(feature = "scenario")]
pub(crate) fn init_quiet(format: LogFormat) {
    init_with(format, "error");
}

fn init_with(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.fmt_fields(EscapedFields).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
}

/// Logs for test binaries: `RUST_LOG` (default `warn`) to the test harness's captured output.
pub fn init_for_tests() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .fmt_fields(EscapedFields)
        .with_test_writer()
        .try_init();
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::EscapedFields;

    /// Everything the subscriber writes, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(text: bool, emit: impl FnOnce()) -> String {
        let out = Captured::default();
        let writer = {
            let out = out.clone();
            move || out.clone()
        };
        let builder = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false);
        if text {
            tracing::subscriber::with_default(builder.fmt_fields(EscapedFields).finish(), emit);
        } else {
            tracing::subscriber::with_default(builder.json().flatten_event(true).finish(), emit);
        }
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    const FORGED: &str = "bad export\n2026-01-01T00:00:00Z  INFO kubewasm: all good\r\x1b[2K\u{85}";

    fn emit() {
        #[derive(Debug)]
        struct E;
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(FORGED)
            }
        }
        impl std::error::Error for E {}
        let e = E;
        tracing::error!(error = %e, body = FORGED, err = &e as &(dyn std::error::Error + 'static),
            "load failed: {FORGED}");
    }

    #[test]
    fn text_fields_cannot_forge_a_line_or_drive_a_terminal() {
        let out = logged(true, emit);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.ends_with('\n'));
        assert!(
            !out.contains('\x1b') && !out.contains('\r') && !out.contains('\u{85}'),
            "{out}"
        );
        assert!(
            out.contains("load failed: bad export\\n2026-01-01T00:00:00Z  INFO kubewasm: all good\\r\\u{1b}[2K\\u{85}"),
            "{out}"
        );
        assert!(out.contains("error=bad export\\n"), "{out}");
        assert!(out.contains("body=\"bad export\\n"), "{out}");
        assert!(out.contains("err=bad export\\n"), "{out}");
    }

    #[test]
    fn json_escapes_them_itself() {
        let out = logged(false, emit);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(!out.contains('\x1b') && !out.contains('\r'), "{out}");
        let v: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
        assert_eq!(v["error"], FORGED);
        assert_eq!(v["message"], format!("load failed: {FORGED}"));
    }
}
