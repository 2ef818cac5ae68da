//! Small string rules shared across layers, so each is written once.

/// The longest prefix of `s` that is at most `max_bytes` long and ends on a character
/// boundary: a byte budget (a log field, an API limit) that never splits a UTF-8 character.
pub(crate) fn truncate(s: &str, max_bytes: usize) -> &str {
    &s[..s.floor_char_boundary(max_bytes)]
}

#[cfg(test)]
mod tests {
    use super::truncate;

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
}
