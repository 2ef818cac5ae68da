//! Small string rules shared across layers, so each is written once.
//!
//! Budgets are in bytes of the original text (what a buffer or a log line costs), cut on a
//! character boundary; escaping happens after the cut, so an escaped text may be longer.

use std::fmt::{self, Write as _};

/// The byte budget on a character boundary, shared with the API server; `clip` marks the cut.
pub(crate) use kubewasm_apimachinery::text::{clip, truncate};

/// Whether `c` could end a line, move the cursor or start a terminal sequence when printed:
/// C0 (newline, CR, ESC, ...), DEL, C1, the Unicode line and paragraph separators and the
/// bidirectional overrides that reorder what a reader sees.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A writer that passes text on with every unsafe character (see `is_unsafe`) written as an
/// escape (`\n`, `\r`, `\t`, else `\u{..}`): whatever text reaches it stays on one line and
/// cannot drive a terminal. Backslashes pass as they are: a literal `\n` in the text cannot
/// end a line either.
pub(crate) struct Escaping<W>(pub(crate) W);

impl<W: fmt::Write> fmt::Write for Escaping<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = rest.find(is_unsafe) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{{{:x}}}", c as u32)?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// Text someone else sent (a registry's error body, a header), fit for an error message or a
/// log field: at most `max_bytes` of it, cut on a character boundary and marked `…` when cut,
/// with unsafe characters escaped.
pub(crate) fn foreign(s: &str, max_bytes: usize) -> String {
    let cut = clip(s, max_bytes);
    let mut out = Escaping(String::with_capacity(cut.len()));
    let _ = out.write_str(&cut);
    out.0
}

#[cfg(test)]
mod tests {
    use super::foreign;

    #[test]
    fn foreign_text_is_cut_and_kept_on_one_line() {
        assert_eq!(foreign("plain", 10), "plain");
        assert_eq!(
            foreign("bad\nINFO forged line\r\x1b[31m\u{85}\u{2028}\u{202e}", 100),
            "bad\\nINFO forged line\\r\\u{1b}[31m\\u{85}\\u{2028}\\u{202e}"
        );
        assert_eq!(foreign("abcdef", 3), "abc…");
        assert_eq!(foreign("a\u{e9}", 2), "a…");
        assert_eq!(foreign("tab\there \\n", 20), "tab\\there \\n");
    }
}
