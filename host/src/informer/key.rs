//! The identity of a shared informer, and the checks that make it safe to turn into requests.

use kubewasm_apimachinery::validation::{
    ValidationError, validate_api_version, validate_dns1123_label, validate_kind,
};
use kubewasm_apimachinery::{FieldSelector, LabelSelector, SelectorError, ShardField};

/// Longest selector accepted. Kubernetes sets no limit of its own; this bounds what a
/// subscription can make the host hold and send, far above any practical selector.
pub const MAX_SELECTOR_LEN: usize = 8192;

/// Longest part of a refused value kept in an [`InvalidKey`] (its message ends up in logs).
const MAX_REPORTED_VALUE: usize = 256;

/// Identity of a shared informer: handlers asking for the same key share one watch and cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InformerKey {
    /// `v1`, `apps/v1`, `example.com/v1alpha1`.
    pub api_version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// `None` = all namespaces (or a cluster-scoped kind).
    pub namespace: Option<String>,
    /// Server-side label selector.
    pub label_selector: Option<String>,
    /// Server-side field selector.
    pub field_selector: Option<String>,
    /// `Some`: the informer holds only the objects whose hash of this field lies in the
    /// factory's shard scope ([`InformerFactory::set_shard_scope`]); such a key never shares an
    /// informer with an unsharded one, whose cache holds everything.
    ///
    /// [`InformerFactory::set_shard_scope`]: super::InformerFactory::set_shard_scope
    pub shard: Option<ShardField>,
}

impl InformerKey {
    /// The fields in a hashable, ordered form (`ShardField` itself is neither).
    #[allow(clippy::type_complexity)]
    fn tuple(
        &self,
    ) -> (
        &str,
        &str,
        &Option<String>,
        &Option<String>,
        &Option<String>,
        Option<u8>,
    ) {
        let shard = self.shard.map(|f| match f {
            ShardField::Uid => 0,
            ShardField::Namespace => 1,
        });
        (
            &self.api_version,
            &self.kind,
            &self.namespace,
            &self.label_selector,
            &self.field_selector,
            shard,
        )
    }
}

impl std::hash::Hash for InformerKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.tuple().hash(state)
    }
}

impl PartialOrd for InformerKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InformerKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.tuple().cmp(&other.tuple())
    }
}

/// A key field that breaks the API server's syntax. `field` uses the WIT subscription's field
/// names, so the message points at what the plugin author wrote.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("subscription field {field}: invalid value {value:?}: {reason}")]
pub struct InvalidKey {
    /// `api-version`, `kind`, `namespace`, `label-selector` or `field-selector`.
    pub field: &'static str,
    /// The refused value (cut to its first 256 bytes, as it is meant for logs).
    pub value: String,
    /// Which rule it breaks.
    #[source]
    pub reason: KeyRule,
}

/// The rule an [`InvalidKey`] field breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyRule {
    /// apiVersion, kind or namespace syntax.
    #[error(transparent)]
    Syntax(#[from] ValidationError),
    /// A selector that does not parse.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// A selector longer than [`MAX_SELECTOR_LEN`].
    #[error("longer than {max} bytes")]
    TooLong {
        /// The most bytes allowed.
        max: usize,
    },
}

impl InvalidKey {
    fn new(field: &'static str, value: &str, reason: impl Into<KeyRule>) -> Self {
        let value = if value.len() > MAX_REPORTED_VALUE {
            let cut = crate::text::truncate(value, MAX_REPORTED_VALUE);
            format!("{cut}… ({} bytes)", value.len())
        } else {
            value.to_string()
        };
        Self {
            field,
            value,
            reason: reason.into(),
        }
    }
}

impl InformerKey {
    /// A key for all objects of a kind.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: None,
            label_selector: None,
            field_selector: None,
            shard: None,
        }
    }

    /// Narrows the key to this replica's shard of `field`'s hash space (KEP-5866).
    pub fn sharded(mut self, field: ShardField) -> Self {
        self.shard = Some(field);
        self
    }

    /// Restricts the key to one namespace.
    pub fn in_namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// Adds a server-side label selector.
    pub fn with_labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Adds a server-side field selector.
    pub fn with_fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Checks every field against the API server's rules: apiVersion and kind syntax, the
    /// namespace as a DNS-1123 label, selectors that parse (and are at most
    /// [`MAX_SELECTOR_LEN`] bytes). A key that passes can be put in a request path and query
    /// without changing its meaning. The first bad field is reported.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        fn check<E: Into<KeyRule>>(
            field: &'static str,
            value: &str,
            r: Result<(), E>,
        ) -> Result<(), InvalidKey> {
            r.map_err(|reason| InvalidKey::new(field, value, reason))
        }
        check(
            "api-version",
            &self.api_version,
            validate_api_version(&self.api_version),
        )?;
        check("kind", &self.kind, validate_kind(&self.kind))?;
        if let Some(ns) = &self.namespace {
            check("namespace", ns, validate_dns1123_label(ns))?;
        }
        let bounded = |s: &str| {
            if s.len() > MAX_SELECTOR_LEN {
                Err(KeyRule::TooLong {
                    max: MAX_SELECTOR_LEN,
                })
            } else {
                Ok(())
            }
        };
        if let Some(s) = &self.label_selector {
            check("label-selector", s, bounded(s))?;
            check("label-selector", s, LabelSelector::parse(s).map(drop))?;
        }
        if let Some(s) = &self.field_selector {
            check("field-selector", s, bounded(s))?;
            check("field-selector", s, FieldSelector::parse(s).map(drop))?;
        }
        Ok(())
    }
}

impl std::fmt::Display for InformerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " ns={ns}")?;
        }
        if let Some(l) = &self.label_selector {
            write!(f, " labels={l}")?;
        }
        if let Some(fs) = &self.field_selector {
            write!(f, " fields={fs}")?;
        }
        match self.shard {
            Some(ShardField::Uid) => write!(f, " shard=uid")?,
            Some(ShardField::Namespace) => write!(f, " shard=namespace")?,
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_table() {
        let base = || InformerKey::new("v1", "ConfigMap");
        let long = "a=b,".repeat(3000);
        let cases: Vec<(InformerKey, Option<&str>)> = vec![
            (base(), None),
            (InformerKey::new("apps/v1", "Deployment"), None),
            (InformerKey::new("example.com/v1alpha1", "Widget"), None),
            (base().in_namespace("kube-system"), None),
            (base().with_labels("app in (a,b),!x"), None),
            (base().with_labels(""), None),
            (base().with_fields("metadata.name=a\\,b"), None),
            (
                base().in_namespace("kube-system/secrets?x="),
                Some("namespace"),
            ),
            (base().in_namespace("../secrets"), Some("namespace")),
            (base().in_namespace("Default"), Some("namespace")),
            (base().in_namespace(""), Some("namespace")),
            (InformerKey::new("v1/../../x", "Pod"), Some("api-version")),
            (InformerKey::new("", "Pod"), Some("api-version")),
            (
                InformerKey::new("apps/v1?watch=1", "Pod"),
                Some("api-version"),
            ),
            (InformerKey::new("v1", ""), Some("kind")),
            (InformerKey::new("v1", "Config/Map"), Some("kind")),
            (base().with_labels("a in ("), Some("label-selector")),
            (
                base().with_labels("a=b&fieldSelector=x"),
                Some("label-selector"),
            ),
            (base().with_fields("metadata.name"), Some("field-selector")),
            (
                base().with_fields("metadata.name=a,b"),
                Some("field-selector"),
            ),
            (
                base().with_labels(long.trim_end_matches(',')),
                Some("label-selector"),
            ),
        ];
        for (key, want) in cases {
            match (key.validate(), want) {
                (Ok(()), None) => {}
                (Err(e), Some(field)) => assert_eq!(e.field, field, "{key}: {e}"),
                (got, want) => panic!("{key}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn message_names_field_value_and_reason() {
        let e = InformerKey::new("v1", "Pod")
            .with_labels("a in (")
            .validate()
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("subscription field label-selector: invalid value \"a in (\": "),
            "{msg}"
        );
        assert!(msg.contains("end of string"), "{msg}");
        let huge = format!("{}é", "x".repeat(300));
        let e = InformerKey::new("v1", "Pod")
            .in_namespace(huge.clone())
            .validate()
            .unwrap_err();
        assert!(e.value.len() < 300, "{}", e.value);
        assert!(e.value.ends_with(&format!("({} bytes)", huge.len())));
        let e = InformerKey::new("Apps/v1", "Pod").validate().unwrap_err();
        assert!(
            matches!(
                e.reason,
                KeyRule::Syntax(ValidationError::InGroup { ref group, .. }) if group == "Apps"
            ),
            "{e:?}"
        );
    }
}
