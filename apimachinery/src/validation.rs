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

/// Why a name, label, apiVersion or kind was refused. The message says which rule the value
/// breaks, never the value itself (callers add which field and value it was), except for the
/// part of a compound value that failed (`prefix "Bad_"`), which the `In*` variants name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// Longer than the rule allows.
    #[error("must be no more than {max} characters")]
    TooLong {
        /// The most bytes (all ASCII, so characters) the rule allows.
        max: usize,
    },
    /// Not a DNS-1123 label.
    #[error(
        "must be a lowercase RFC 1123 label: lowercase letters, digits and '-', \
         starting and ending with a letter or digit (e.g. 'my-name' or '123-abc')"
    )]
    Dns1123Label,
    /// Not a DNS-1123 subdomain.
    #[error(
        "must be a lowercase RFC 1123 subdomain: dot-separated parts of lowercase \
         letters, digits and '-', each starting and ending with a letter or digit \
         (e.g. 'example.com')"
    )]
    Dns1123Subdomain,
    /// Not a DNS-1035 label.
    #[error(
        "must be an RFC 1035 label: lowercase letters, digits and '-', starting with a \
         letter and ending with a letter or digit (e.g. 'v1' or 'v1beta2')"
    )]
    Dns1035Label,
    /// A label key with `/` but nothing before it.
    #[error("the prefix before '/' must not be empty")]
    EmptyPrefix,
    /// A label key whose prefix is not a DNS-1123 subdomain.
    #[error("prefix {prefix:?}: {source}")]
    InPrefix {
        /// The prefix as given.
        prefix: String,
        /// What is wrong with it.
        #[source]
        source: Box<ValidationError>,
    },
    /// A label key with nothing after its `/` (or an empty key).
    #[error("the name part must not be empty")]
    EmptyNamePart,
    /// A label key whose name part is too long.
    #[error("the name part must be no more than {max} characters")]
    NamePartTooLong {
        /// The most characters the name part may have.
        max: usize,
    },
    /// A label key whose name part has characters or ends the rule refuses.
    #[error(
        "the name part must consist of alphanumeric characters, '-', '_' or '.', \
         starting and ending with an alphanumeric character (e.g. 'MyName', \
         'my.name' or 'example.com/my-name')"
    )]
    NamePart,
    /// Not a label value.
    #[error(
        "must be empty or consist of alphanumeric characters, '-', '_' or '.', starting \
         and ending with an alphanumeric character (e.g. 'MyValue' or 'my_value')"
    )]
    LabelValue,
    /// An apiVersion with `/` but nothing before it.
    #[error("the group before '/' must not be empty")]
    EmptyGroup,
    /// An apiVersion whose group is not a DNS-1123 subdomain.
    #[error("group {group:?}: {source}")]
    InGroup {
        /// The group as given.
        group: String,
        /// What is wrong with it.
        #[source]
        source: Box<ValidationError>,
    },
    /// An apiVersion whose version is not a DNS-1035 label.
    #[error("version {version:?}: {source}")]
    InVersion {
        /// The version as given.
        version: String,
        /// What is wrong with it.
        #[source]
        source: Box<ValidationError>,
    },
    /// Not a kind.
    #[error(
        "must start with a letter and consist of letters, digits and '-', ending with a \
         letter or digit (e.g. 'ConfigMap')"
    )]
    Kind,
}

impl From<ValidationError> for String {
    fn from(e: ValidationError) -> Self {
        e.to_string()
    }
}

fn too_long(s: &str, max: usize) -> Result<(), ValidationError> {
    if s.len() > max {
        Err(ValidationError::TooLong { max })
    } else {
        Ok(())
    }
}

/// RFC 1123 label: namespaces and most object names. At most 63 characters of `[a-z0-9-]`,
/// starting and ending with `[a-z0-9]`.
pub fn validate_dns1123_label(s: &str) -> Result<(), ValidationError> {
    too_long(s, DNS1123_LABEL_MAX_LEN)?;
    if shaped(s, lower_alnum, |c| lower_alnum(c) || c == b'-', lower_alnum) {
        Ok(())
    } else {
        Err(ValidationError::Dns1123Label)
    }
}

/// RFC 1123 subdomain: object names, API groups and label-key prefixes. At most 253
/// characters; dot-separated parts, each made of `[a-z0-9-]` and starting and ending with
/// `[a-z0-9]` (so no empty part: `a..b` is refused, as by the API server).
pub fn validate_dns1123_subdomain(s: &str) -> Result<(), ValidationError> {
    too_long(s, DNS1123_SUBDOMAIN_MAX_LEN)?;
    let part_ok = |p: &str| shaped(p, lower_alnum, |c| lower_alnum(c) || c == b'-', lower_alnum);
    if s.split('.').all(part_ok) {
        Ok(())
    } else {
        Err(ValidationError::Dns1123Subdomain)
    }
}

/// RFC 1035 label: API version names. At most 63 characters of `[a-z0-9-]`, starting with a
/// letter and ending with a letter or digit.
pub fn validate_dns1035_label(s: &str) -> Result<(), ValidationError> {
    too_long(s, DNS1123_LABEL_MAX_LEN)?;
    if shaped(
        s,
        |c| c.is_ascii_lowercase(),
        |c| lower_alnum(c) || c == b'-',
        lower_alnum,
    ) {
        Ok(())
    } else {
        Err(ValidationError::Dns1035Label)
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
pub fn validate_label_key(s: &str) -> Result<(), ValidationError> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err(ValidationError::EmptyPrefix);
        }
        validate_dns1123_subdomain(p).map_err(|e| ValidationError::InPrefix {
            prefix: p.into(),
            source: Box::new(e),
        })?;
    }
    if name.is_empty() {
        return Err(ValidationError::EmptyNamePart);
    }
    if name.len() > LABEL_VALUE_MAX_LEN {
        return Err(ValidationError::NamePartTooLong {
            max: LABEL_VALUE_MAX_LEN,
        });
    }
    if !label_word(name) {
        return Err(ValidationError::NamePart);
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of `[-A-Za-z0-9_.]` starting and ending with
/// an alphanumeric character.
pub fn validate_label_value(s: &str) -> Result<(), ValidationError> {
    too_long(s, LABEL_VALUE_MAX_LEN)?;
    if s.is_empty() || label_word(s) {
        Ok(())
    } else {
        Err(ValidationError::LabelValue)
    }
}

/// An `apiVersion`: `version` for the core group (`v1`) or `group/version`, where the group is
/// a DNS-1123 subdomain and the version a DNS-1035 label.
pub fn validate_api_version(s: &str) -> Result<(), ValidationError> {
    let version = |v: &str| {
        validate_dns1035_label(v).map_err(|e| ValidationError::InVersion {
            version: v.into(),
            source: Box::new(e),
        })
    };
    match s.split_once('/') {
        Some((group, v)) => {
            if group.is_empty() {
                return Err(ValidationError::EmptyGroup);
            }
            validate_dns1123_subdomain(group).map_err(|e| ValidationError::InGroup {
                group: group.into(),
                source: Box::new(e),
            })?;
            version(v)
        }
        None => version(s),
    }
}

/// A `kind`: as the API server requires of CustomResourceDefinitions, a DNS-1035 label once
/// lowercased (so `ConfigMap`, not `config_map` or `Config Map`).
pub fn validate_kind(s: &str) -> Result<(), ValidationError> {
    too_long(s, DNS1123_LABEL_MAX_LEN)?;
    if shaped(
        s,
        |c| c.is_ascii_alphabetic(),
        |c| c.is_ascii_alphanumeric() || c == b'-',
        |c| c.is_ascii_alphanumeric(),
    ) {
        Ok(())
    } else {
        Err(ValidationError::Kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Check = fn(&str) -> Result<(), ValidationError>;

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
        assert_eq!(e.to_string(), "must be no more than 63 characters");
        let e = validate_api_version("Apps/v1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "group \"Apps\": must be a lowercase RFC 1123 subdomain: dot-separated parts of \
             lowercase letters, digits and '-', each starting and ending with a letter or digit \
             (e.g. 'example.com')"
        );
        assert!(matches!(
            &e,
            ValidationError::InGroup { group, source }
                if group == "Apps" && **source == ValidationError::Dns1123Subdomain
        ));
        let inner = std::error::Error::source(&e).expect("the group's own reason");
        assert_eq!(
            inner.to_string(),
            ValidationError::Dns1123Subdomain.to_string()
        );
        let e = validate_label_key("Bad_/x").unwrap_err();
        assert!(e.to_string().starts_with("prefix \"Bad_\": "), "{e}");
        let e = validate_label_key("a/-x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the name part must consist of alphanumeric characters, '-', '_' or '.', starting \
             and ending with an alphanumeric character (e.g. 'MyName', 'my.name' or \
             'example.com/my-name')"
        );
    }
}
