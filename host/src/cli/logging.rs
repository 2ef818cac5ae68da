//! Log set-up shared by every subcommand.

use tracing_subscriber::EnvFilter;

/// Output format of the host's logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, fields (plugin, message, ...) at the top level, for log shippers.
    Json,
}

/// Installs the global subscriber; `RUST_LOG` overrides the default `info` level. Safe to call
/// more than once (later calls are ignored), which tests rely on.
pub fn init(format: LogFormat) {
    init_with(format, "info");
}

/// Like [`init`], showing only errors unless `RUST_LOG` says otherwise.
pub fn init_quiet(format: LogFormat) {
    init_with(format, "error");
}

fn init_with(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
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
        .with_test_writer()
        .try_init();
}
