//! Where guest output goes: `tracing` (target `kubewasm::guest`, field `plugin`) and the optional
//! observer. Shared by the `log` import and the stdout/stderr capture, and the one place where
//! text written by a guest is made safe for the host's log:
//!
//! - **Size**: a line or message keeps at most [`MAX_GUEST_TEXT`] bytes (16 KiB) after escaping,
//!   followed by `…[truncated N bytes]`. The `log` import receives the message as an owned
//!   `String` that wasmtime copied out of guest memory; it is capped and dropped within the
//!   import call, so a 60 MB message costs the host that one transient copy and nothing after.
//!   Handler error strings (`retry`/`fatal`) get the same treatment through [`cap_guest_text`].
//! - **Content**: control characters (newlines, carriage returns, tabs, ANSI escape sequences,
//!   every other C0/C1 code), Unicode line and paragraph separators and bidirectional overrides
//!   are written as escapes (`\n`, `\u{1b}`), so a guest can neither forge a log line nor
//!   restyle or reorder the operator's terminal.
//! - **Rate**: each plugin (all its instances together) may emit [`LOG_LINES_PER_SECOND`] lines per second with
//!   bursts of [`LOG_BURST`] (a token bucket shared by `log`, stdout and stderr). Lines beyond it
//!   are dropped before any work is spent on them, counted in
//!   `kubewasm_runtime_guest_log_dropped_total{plugin}`, and announced by one warning per
//!   episode (plus one line with the count when output flows again): the rule of
//!   [`LineBudget`], which the host's own guest-caused lines follow too.

use std::fmt::Write as _;
use std::sync::Arc;

use super::line_budget::{BudgetKind, LineBudget};
use super::metrics::RuntimeMetrics;
use super::observer::SharedObserver;
use super::types::GuestLogLevel;

/// Target of every event carrying guest output, so operators can filter it separately.
pub(crate) const GUEST_TARGET: &str = "kubewasm::guest";

/// Most bytes of guest text kept per log line, stdout/stderr line or error string (after
/// escaping, before the truncation marker).
pub(crate) const MAX_GUEST_TEXT: usize = 16 * 1024;
/// Sustained guest lines per second per plugin (all its instances together) before lines are
/// dropped.
pub const LOG_LINES_PER_SECOND: u32 = 200;
/// Lines a plugin may emit at once (e.g. one per object of an initial list) before the
/// sustained rate applies.
pub const LOG_BURST: u32 = 2000;

static GUEST_OUTPUT: BudgetKind = BudgetKind {
    what: "guest output",
    metric: "kubewasm_runtime_guest_log_dropped_total",
    per_second: LOG_LINES_PER_SECOND,
    burst: LOG_BURST,
};

/// Caps and escapes a string a guest handed to the host (a `retry`/`fatal` message, say) so it
/// can be logged and kept: at most [`MAX_GUEST_TEXT`] bytes plus a truncation marker, control
/// characters escaped. Takes the string by value so an oversized one is freed at once.
pub(crate) fn cap_guest_text(s: String) -> String {
    if s.len() <= MAX_GUEST_TEXT && !s.chars().any(needs_escape) {
        return s;
    }
    clean(&s, 0).0
}

/// Room for escapes overshooting the cap before it is noticed, plus the truncation marker.
const SLACK: usize = 64;

/// Guest text that went through [`clean`]; the only kind of text [`GuestLog`] emits.
pub(crate) struct CleanText(String);

impl CleanText {
    /// The escaped, capped text.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// Escapes `raw` and caps it at [`MAX_GUEST_TEXT`]. `already_dropped` counts bytes the caller
/// discarded before (the stdout capture keeps at most [`MAX_GUEST_TEXT`] bytes of a line); they
/// are reported in the same marker.
pub(crate) fn clean(raw: &str, already_dropped: usize) -> CleanText {
    clean_to(raw, already_dropped, MAX_GUEST_TEXT)
}

/// [`clean`] with a smaller cap `max`. Stops reading `raw` at the cap, so the cost is bounded
/// whatever its length.
pub(crate) fn clean_to(raw: &str, already_dropped: usize, max: usize) -> CleanText {
    let mut out = String::with_capacity(raw.len().min(max) + SLACK);
    let mut consumed = raw.len();
    for (at, c) in raw.char_indices() {
        let before = out.len();
        if needs_escape(c) {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                _ => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
            }
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            consumed = at;
            break;
        }
    }
    let dropped = raw.len() - consumed + already_dropped;
    if dropped > 0 {
        let _ = write!(out, "…[truncated {dropped} bytes]");
    }
    CleanText(out)
}

/// Characters that could end, restyle or reorder a log line in a terminal or a line-based
/// collector.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{2028}' | '\u{2029}'                 // line / paragraph separator
            | '\u{200e}' | '\u{200f}'               // left-to-right / right-to-left mark
            | '\u{202a}'..='\u{202e}'               // bidi embeddings and overrides
            | '\u{2066}'..='\u{2069}') // bidi isolates
}

/// Emits guest log lines tagged with the plugin name; cheap to clone into WASI streams, and
/// every clone shares one rate budget.
#[derive(Clone)]
pub(crate) struct GuestLog {
    shared: Arc<Shared>,
}

struct Shared {
    observer: Option<SharedObserver>,
    budget: LineBudget,
}

impl GuestLog {
    pub(crate) fn new(
        plugin: Arc<str>,
        observer: Option<SharedObserver>,
        metrics: &RuntimeMetrics,
    ) -> Self {
        let dropped_total = metrics.guest_log_dropped_counter(&plugin);
        Self {
            shared: Arc::new(Shared {
                observer,
                budget: LineBudget::new(plugin, &GUEST_OUTPUT, dropped_total),
            }),
        }
    }

    /// Who sees this plugin's lines, and its other guest activity, besides `tracing`.
    pub(crate) fn observer(&self) -> Option<&SharedObserver> {
        self.shared.observer.as_ref()
    }

    /// The plugin these lines are tagged with.
    pub(crate) fn plugin(&self) -> &str {
        self.shared.budget.plugin()
    }

    /// A message from the `log` import; consumed so an oversized one is freed here.
    pub(crate) fn log(&self, level: GuestLogLevel, message: String) {
        if !self.admit() {
            return;
        }
        let cleaned = clean(&message, 0);
        // Free the guest's copy before anything else runs: only the capped text outlives here.
        drop(message);
        let plugin = self.plugin();
        let message = cleaned.as_str();
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
    pub(crate) fn output_line(&self, stderr: bool, line: &CleanText) {
        if !self.admit() {
            return;
        }
        let plugin = self.plugin();
        let line = line.as_str();
        let level = if stderr {
            tracing::warn!(target: GUEST_TARGET, plugin, stream = "stderr", "{line}");
            GuestLogLevel::Warn
        } else {
            tracing::info!(target: GUEST_TARGET, plugin, stream = "stdout", "{line}");
            GuestLogLevel::Info
        };
        self.observe(level, line);
    }

    /// Takes a token from the plugin's budget; drops, counts and announces when there is none.
    fn admit(&self) -> bool {
        self.shared.budget.admit()
    }

    fn observe(&self, level: GuestLogLevel, message: &str) {
        if let Some(observer) = &self.shared.observer {
            observer.log_line(self.plugin(), level, message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::LogCapture;

    #[test]
    fn control_characters_are_escaped_so_no_line_can_be_forged() {
        let forged = "done\n2024-05-01T10:00:00Z ERROR kubewasm: host compromised\r\t\x1b[31mred\x1b[0m \
                      \u{7}\u{85}\u{2028}x\u{202e}gnp.exe\u{2066} ok é 日本";
        let out = clean(forged, 0);
        assert_eq!(
            out.as_str(),
            "done\\n2024-05-01T10:00:00Z ERROR kubewasm: host compromised\\r\\t\\u{1b}[31mred\
             \\u{1b}[0m \\u{7}\\u{85}\\u{2028}x\\u{202e}gnp.exe\\u{2066} ok é 日本"
        );
        assert!(!out.as_str().chars().any(needs_escape));
        assert_eq!(
            cap_guest_text(forged.to_string()),
            out.as_str(),
            "error strings get the same treatment"
        );
    }

    #[test]
    fn text_is_capped_with_a_marker_counting_what_was_cut() {
        let huge = "a".repeat(60 << 20);
        let capped = cap_guest_text(huge);
        let marker = format!("…[truncated {} bytes]", (60 << 20) - MAX_GUEST_TEXT);
        assert_eq!(capped.len(), MAX_GUEST_TEXT + marker.len());
        assert!(
            capped.ends_with(&marker),
            "{}",
            &capped[MAX_GUEST_TEXT - 5..]
        );
        assert!(
            capped.capacity() <= MAX_GUEST_TEXT + SLACK,
            "a fresh, small allocation ({}); the 60 MB one is gone",
            capped.capacity()
        );

        // Escapes count against the cap, and a multi-byte character is never split.
        let escapes = "\x1b".repeat(MAX_GUEST_TEXT);
        let capped = cap_guest_text(escapes);
        let kept = MAX_GUEST_TEXT / "\\u{1b}".len();
        assert!(capped.starts_with(&"\\u{1b}".repeat(kept)));
        assert!(capped.ends_with(&format!("…[truncated {} bytes]", MAX_GUEST_TEXT - kept)));
        let wide = "日".repeat(MAX_GUEST_TEXT);
        let capped = cap_guest_text(wide);
        let kept = MAX_GUEST_TEXT / 3;
        assert!(capped.starts_with(&"日".repeat(kept)));
        assert!(capped.ends_with(&format!(
            "…[truncated {} bytes]",
            (MAX_GUEST_TEXT - kept) * 3
        )));
    }

    #[test]
    fn text_within_bounds_is_passed_through_without_copying() {
        let s = String::from("retry: upstream 503, tab-free and short");
        let ptr = s.as_ptr();
        let same = cap_guest_text(s);
        assert_eq!(same.as_ptr(), ptr);
        let exact = "b".repeat(MAX_GUEST_TEXT);
        assert_eq!(cap_guest_text(exact.clone()), exact, "the cap is inclusive");
    }

    /// The host's own events at `level` about guest output, as a real subscriber wrote them.
    fn events(capture: &LogCapture, level: &str) -> Vec<serde_json::Value> {
        capture
            .json_lines()
            .into_iter()
            .filter(|e| e["target"] == "kubewasm::runtime" && e["level"] == level)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn lines_over_the_rate_are_dropped_counted_and_announced_once_per_episode() {
        let capture = LogCapture::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(capture.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let seen = crate::test_support::SeenLines::default();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = RuntimeMetrics::new(&mut registry);
        let log = GuestLog::new("chatty".into(), Some(Arc::new(seen.clone())), &metrics);
        let burst = LOG_BURST as usize;
        // Two episodes of drops, with the sustained rate in between. Stdout lines and `log`
        // messages draw on the same budget.
        for i in 0..burst + 50 {
            if i % 2 == 0 {
                log.log(GuestLogLevel::Debug, format!("line {i}"));
            } else {
                log.output_line(false, &clean("printed", 0));
            }
        }
        assert_eq!(
            seen.lock().len(),
            burst,
            "the burst passes, the rest is dropped"
        );
        assert_eq!(metrics.guest_log_dropped("chatty"), 50);
        assert_eq!(
            events(&capture, "WARN").len(),
            1,
            "one warning for 50 drops"
        );

        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let rate = LOG_LINES_PER_SECOND as usize;
        for _ in 0..rate + 7 {
            log.log(GuestLogLevel::Info, "again".into());
        }
        assert_eq!(
            seen.lock().len(),
            burst + rate,
            "one second earns the sustained rate"
        );
        assert_eq!(metrics.guest_log_dropped("chatty"), 57);
        let infos = events(&capture, "INFO");
        assert_eq!(infos.len(), 1, "{infos:?}");
        assert_eq!(
            infos[0]["fields"]["dropped"], 50,
            "the end of an episode reports it"
        );
        assert_eq!(infos[0]["fields"]["plugin"], "chatty");
        let warnings = events(&capture, "WARN");
        assert_eq!(warnings.len(), 2, "a new episode, a new warning");
        assert!(
            warnings[0]["fields"]["message"]
                .as_str()
                .unwrap()
                .contains("kubewasm_runtime_guest_log_dropped_total"),
            "{warnings:?}"
        );

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"kubewasm_runtime_guest_log_dropped_total{plugin="chatty"} 57"#),
            "{text}"
        );
    }
}
