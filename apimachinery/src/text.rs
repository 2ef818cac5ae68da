//! Cutting text to a budget, one rule for the host and the API server: budgets are bytes (what a
//! buffer, a log line or an API field costs, and what the API server's own limits count), and a
//! cut never splits a UTF-8 character.

use std::borrow::Cow;

/// Marks where [`clip`] cut a text.
pub const CUT_MARKER: char = '…';

/// The longest prefix of `s` that is at most `max_bytes` long and ends on a character
/// boundary: for a length limit (a name, an identity, a field) where a marker would not fit.
pub fn truncate(s: &str, max_bytes: usize) -> &str {
    &s[..s.floor_char_boundary(max_bytes)]
}

/// `s` cut as [`truncate`] does, with [`CUT_MARKER`] appended when something was cut: for text
/// shown to a person (an error message, a log field), who should see that there was more. The
/// marker comes on top of the budget.
pub fn clip(s: &str, max_bytes: usize) -> Cow<'_, str> {
    let cut = truncate(s, max_bytes);
    if cut.len() == s.len() {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("{cut}{CUT_MARKER}"))
    }
}

#[cfg(test)]
mod tests {
    use super::{clip, truncate};

    #[test]
    fn cuts_on_a_char_boundary() {
        assert_eq!(truncate("hello", 10), "hello");
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("hello", 3), "hel");
        assert_eq!(truncate("hello", 0), "");
        // 'é' is two bytes: a budget ending inside it keeps the character out, not half of it.
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("aé", 3), "aé");
        assert_eq!(truncate("€€", 4), "€");
        assert_eq!(truncate("", 4), "");
    }

    #[test]
    fn clip_marks_a_cut() {
        assert_eq!(clip("hello", 5), "hello");
        assert_eq!(clip("hello", 3), "hel…");
        assert_eq!(clip("a€", 3), "a…");
        assert_eq!(clip("", 0), "");
    }
}
