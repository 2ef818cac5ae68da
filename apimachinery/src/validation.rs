//! Syntax of names, label keys and values, apiVersions and kinds, with apimachinery's lengths
//! and character sets (`k8s.io/apimachinery/pkg/util/validation`). Each check returns the reason
//! a value is refused; callers add which field and value it was.

/// Longest DNS-1123 or DNS-1035 label (namespaces, most object names, version names).
pub const DNS1123_LABEL_MAX_LEN: usize = 63;
/// Longest DNS-1123 subdomain (API groups, label-key prefixes).
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
/// Longest label value, and longest name part of a label key.
pub const LABEL_VALUE_MAX_LEN: usize = 63;

fn lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// True when `s` is non-empty, starts with a byte passing `first`, ends with one passing
/// `last`, and every byte passes `inner` (edges included).
fn shaped(s: &str, first: fn(u8) -> bool, inner: fn(u8) -> bool, last: fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => first(f) && last(l) && b.iter().all(|&c| inner(c)),
        _ => false,
    }
}

fn too_long(s: &str, max: usize) -> Result<(), String> {
    if s.len() > max {
        Err(format!("must be no more than {max} characters"))
    } else {
        Ok(())
    }
}

/// RFC 1123 label: namespaces and most object names. At most 63 characters of `[a-z0-9-]`,
/// starting and ending with `[a-z0-9]`.
pub fn validate_dns1123_label(s: &str) -> Result<(), String> {
    too_long(s, DNS1123_LABEL_MAX_LEN)?;
    if shaped(s, lower_alnum, |c| lower_alnum(c) || c == b'-', lower_alnum) {
        Ok(())
    } else {
        Err(
            "must be a lowercase RFC 1123 label: lowercase letters, digits and '-', \
             starting and ending with a letter or digit (e.g. 'my-name' or '123-abc')"
                .into(),
        )
    }
}

/// RFC 1123 subdomain: API groups and label-key prefixes. At most 253 characters; dot-separated
/// parts, each made of `[a-z0-9-]` and starting and ending with `[a-z0-9]`.
pub fn validate_dns1123_subdomain(s: &str) -> Result<(), String> {
    too_long(s, DNS1123_SUBDOMAIN_MAX_LEN)?;
    let part_ok = |p: &str| shaped(p, lower_alnum, |c| lower_alnum(c) || c == b'-', lower_alnum);
    if s.split('.').all(part_ok) {
        Ok(())
    } else {
        Err(
            "must be a lowercase RFC 1123 subdomain: dot-separated parts of lowercase \
             letters, digits and '-', each starting and ending with a letter or digit \
             (e.g. 'example.com')"
                .into(),
        )
    }
}

/// RFC 1035 label: API version names. At most 63 characters of `[a-z0-9-]`, starting with a
/// letter and ending with a letter or digit.
pub fn validate_dns1035_label(s: &str) -> Result<(), String> {
    too_long(s, DNS1123_LABEL_MAX_LEN)?;
    if shaped(
        s,
        |c| c.is_ascii_lowercase(),
        |c| lower_alnum(c) || c == b'-',
        lower_alnum,
    ) {
        Ok(())
    } else {
        Err(
            "must be an RFC 1035 label: lowercase letters, digits and '-', starting with a \
             letter and ending with a letter or digit (e.g. 'v1' or 'v1beta2')"
                .into(),
        )
    }
}

/// `[A-Za-z0-9]` at both ends, `[-A-Za-z0-9_.]` between: the name part of a label key and a
/// non-empty label value.
fn label_word(s: &str) -> bool {
    shaped(
        s,
        |c| c.is_ascii_alphanumeric(),
        |c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'),
        |c| c.is_ascii_alphanumeric(),
    )
}

/// A label (or annotation) key, i.e. a qualified name: an optional DNS-1123 subdomain prefix
/// and `/`, then a name of at most 63 characters of `[-A-Za-z0-9_.]` starting and ending with
/// an alphanumeric character.
pub fn validate_label_key(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("the prefix before '/' must not be empty".into());
        }
        validate_dns1123_subdomain(p).map_err(|e| format!("prefix {p:?}: {e}"))?;
    }
    if name.is_empty() {
        return Err("the name part must not be empty".into());
    }
    if name.len() > LABEL_VALUE_MAX_LEN {
        return Err(format!(
            "the name part must be no more than {LABEL_VALUE_MAX_LEN} characters"
        ));
    }
    if !label_word(name) {
        return Err(
            "the name part must consist of alphanumeric characters, '-', '_' or '.', \
                    starting and ending with an alphanumeric character (e.g. 'MyName', \
                    'my.name' or 'example.com/my-name')"
                .into(),
        );
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of `[-A-Za-z0-9_.]` starting and ending with
/// an alphanumeric character.
pub fn validate_label_value(s: &str) -> Result<(), String> {
    too_long(s, LABEL_VALUE_MAX_LEN)?;
    if s.is_empty() || label_word(s) {
        Ok(())
    } else {
        Err(
            "must be empty or consist of alphanumeric characters, '-', '_' or '.', starting \
             and ending with an alphanumeric character (e.g. 'MyValue' or 'my_value')"
                .into(),
        )
    }
}

/// An `apiVersion`: `version` for the core group (`v1`) or `group/version`, where the group is
/// a DNS-1123 subdomain and the version a DNS-1035 label.
pub fn validate_api_version(s: &str) -> Result<(), String> {
    match s.split_once('/') {
        Some((group, version)) => {
            if group.is_empty() {
                return Err("the group before '/' must not be empty".into());
            }
            validate_dns1123_subdomain(group).map_err(|e| format!("group {group:?}: {e}"))?;
            validate_dns1035_label(version).map_err(|e| format!("version {version:?}: {e}"))
        }
        None => validate_dns1035_label(s).map_err(|e| format!("version {s:?}: {e}")),
    }
}

/// A `kind`: as the API server requires of CustomResourceDefinitions, a DNS-1035 label once
/// lowercased (so `ConfigMap`, not `config_map` or `Config Map`).
pub fn validate_kind(s: &str) -> Result<(), String> {
    too_long(s, DNS1123_LABEL_MAX_LEN)?;
    if shaped(
        s,
        |c| c.is_ascii_alphabetic(),
        |c| c.is_ascii_alphanumeric() || c == b'-',
        |c| c.is_ascii_alphanumeric(),
    ) {
        Ok(())
    } else {
        Err(
            "must start with a letter and consist of letters, digits and '-', ending with a \
             letter or digit (e.g. 'ConfigMap')"
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Check = fn(&str) -> Result<(), String>;

    #[test]
    fn syntax_rules() {
        let l63 = "a".repeat(63);
        let l64 = "a".repeat(64);
        let sub253 = format!("{}.{}.{}.{}", l63, l63, l63, "a".repeat(61));
        let sub254 = format!("{sub253}a");
        let key_prefix_ok = format!("{sub253}/name");
        let cases: Vec<(&str, Check, &str, bool)> = vec![
            ("dns1123 label", validate_dns1123_label, "kube-system", true),
            ("dns1123 label", validate_dns1123_label, "0abc", true),
            ("dns1123 label", validate_dns1123_label, &l63, true),
            ("dns1123 label", validate_dns1123_label, &l64, false),
            ("dns1123 label", validate_dns1123_label, "", false),
            ("dns1123 label", validate_dns1123_label, "Kube", false),
            ("dns1123 label", validate_dns1123_label, "-a", false),
            ("dns1123 label", validate_dns1123_label, "a-", false),
            ("dns1123 label", validate_dns1123_label, "a.b", false),
            (
                "dns1123 label",
                validate_dns1123_label,
                "kube-system/secrets?x=",
                false,
            ),
            ("dns1123 label", validate_dns1123_label, "a%2Fb", false),
            ("dns1123 label", validate_dns1123_label, "é", false),
            ("subdomain", validate_dns1123_subdomain, "example.com", true),
            ("subdomain", validate_dns1123_subdomain, "apps", true),
            ("subdomain", validate_dns1123_subdomain, &sub253, true),
            ("subdomain", validate_dns1123_subdomain, &sub254, false),
            ("subdomain", validate_dns1123_subdomain, "a..b", false),
            ("subdomain", validate_dns1123_subdomain, ".a", false),
            ("subdomain", validate_dns1123_subdomain, "a.-b", false),
            ("subdomain", validate_dns1123_subdomain, "A.com", false),
            ("dns1035", validate_dns1035_label, "v1beta1", true),
            ("dns1035", validate_dns1035_label, "1v", false),
            ("label key", validate_label_key, "app", true),
            ("label key", validate_label_key, "App_1.x-y", true),
            (
                "label key",
                validate_label_key,
                "app.kubernetes.io/name",
                true,
            ),
            ("label key", validate_label_key, &key_prefix_ok, true),
            ("label key", validate_label_key, &l63, true),
            ("label key", validate_label_key, &l64, false),
            ("label key", validate_label_key, "", false),
            ("label key", validate_label_key, "/a", false),
            ("label key", validate_label_key, "a/", false),
            ("label key", validate_label_key, "a/b/c", false),
            ("label key", validate_label_key, "Example.com/a", false),
            ("label key", validate_label_key, "-a", false),
            ("label key", validate_label_key, "a_", false),
            ("label key", validate_label_key, "a b", false),
            ("label value", validate_label_value, "", true),
            ("label value", validate_label_value, "Web_1.0-x", true),
            ("label value", validate_label_value, &l63, true),
            ("label value", validate_label_value, &l64, false),
            ("label value", validate_label_value, "a/b", false),
            ("label value", validate_label_value, "_a", false),
            ("label value", validate_label_value, "a b", false),
            ("apiVersion", validate_api_version, "v1", true),
            ("apiVersion", validate_api_version, "apps/v1", true),
            (
                "apiVersion",
                validate_api_version,
                "example.com/v1alpha1",
                true,
            ),
            ("apiVersion", validate_api_version, "", false),
            ("apiVersion", validate_api_version, "/v1", false),
            ("apiVersion", validate_api_version, "apps/", false),
            ("apiVersion", validate_api_version, "apps/v1/x", false),
            ("apiVersion", validate_api_version, "Apps/v1", false),
            ("apiVersion", validate_api_version, "apps/V1", false),
            ("apiVersion", validate_api_version, "../v1", false),
            ("apiVersion", validate_api_version, "v1?watch=1", false),
            ("kind", validate_kind, "ConfigMap", true),
            ("kind", validate_kind, "Pod", true),
            ("kind", validate_kind, "X509-Thing", true),
            ("kind", validate_kind, "", false),
            ("kind", validate_kind, "1Pod", false),
            ("kind", validate_kind, "Config Map", false),
            ("kind", validate_kind, "config_map", false),
            ("kind", validate_kind, "Pod-", false),
            ("kind", validate_kind, &l64, false),
        ];
        for (rule, check, value, ok) in cases {
            let got = check(value);
            assert_eq!(got.is_ok(), ok, "{rule} {value:?}: {got:?}");
        }
    }

    #[test]
    fn reasons_name_the_rule() {
        let e = validate_dns1123_label(&"a".repeat(64)).unwrap_err();
        assert!(e.contains("63"), "{e}");
        let e = validate_api_version("Apps/v1").unwrap_err();
        assert!(e.contains("group \"Apps\""), "{e}");
        let e = validate_label_key("Bad_/x").unwrap_err();
        assert!(e.contains("prefix"), "{e}");
    }
}
