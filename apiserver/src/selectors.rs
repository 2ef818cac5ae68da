//! A request's label and field selectors. The syntax and matching are the shared
//! `kubewasm-apimachinery` rules (the informer uses the same ones); this module adds only the
//! server's policy of which fields each kind can be selected on.

use kubewasm_apimachinery::{FieldOp, FieldRequirement, SelectorError, ShardSelector};
use serde_json::Value;

pub use kubewasm_apimachinery::LabelSelector;

/// Fields every kind supports, plus some type-specific ones (kind → extra fields).
fn field_supported(kind: &str, field: &str) -> bool {
    if field == "metadata.name" || field == "metadata.namespace" {
        return true;
    }
    match kind {
        "Pod" => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        "Secret" => field == "type",
        "Namespace" => field == "status.phase",
        _ => false,
    }
}

/// Why a request's `fieldSelector` was refused (a 400 either way).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldSelectorError {
    /// The string does not parse.
    #[error("invalid field selector: {0}")]
    Syntax(#[source] SelectorError),
    /// It parses, but names a field the kind cannot be selected on.
    #[error("field label not supported: {field}")]
    Unsupported {
        /// The first unsupported field.
        field: String,
    },
}

/// A `fieldSelector` restricted to the fields the kind supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    sel: kubewasm_apimachinery::FieldSelector,
    /// Events are matched on their selectable fields (`events::selectable_fields`), in core v1
    /// names whichever API the request used.
    events: bool,
}

impl FieldSelector {
    /// Parses `s` for objects of `group`'s `kind`; an unsupported field is a 400, as on a real
    /// server. Event field labels are those of the request's API, mapped to core v1's.
    pub fn parse(s: &str, group: &str, kind: &str) -> Result<FieldSelector, FieldSelectorError> {
        let sel =
            kubewasm_apimachinery::FieldSelector::parse(s).map_err(FieldSelectorError::Syntax)?;
        let events = kind == "Event" && (group.is_empty() || group == "events.k8s.io");
        if events {
            let mut mapped = kubewasm_apimachinery::FieldSelector::default();
            for t in sel.requirements() {
                let field = crate::events::field_label(group, &t.field).ok_or_else(|| {
                    FieldSelectorError::Unsupported {
                        field: t.field.clone(),
                    }
                })?;
                mapped.push(FieldRequirement { field, ..t.clone() });
            }
            return Ok(FieldSelector {
                sel: mapped,
                events,
            });
        }
        if let Some(t) = sel
            .requirements()
            .iter()
            .find(|t| !field_supported(kind, &t.field))
        {
            return Err(FieldSelectorError::Unsupported {
                field: t.field.clone(),
            });
        }
        Ok(FieldSelector { sel, events })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.sel.is_empty()
    }

    /// The name pinned by `metadata.name=X`, if any (single-object watches).
    pub fn name(&self) -> Option<&str> {
        self.sel.required_value("metadata.name")
    }

    /// Adds `metadata.name=name` (single-object watch form).
    pub fn push_name(&mut self, name: &str) {
        self.sel.push(FieldRequirement {
            field: "metadata.name".into(),
            op: FieldOp::Equals,
            value: name.into(),
        });
    }

    /// Evaluates against a stored object.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.events && !self.sel.is_empty() {
            return self.sel.matches(&crate::events::selectable_fields(obj));
        }
        self.sel.matches(obj)
    }
}

/// A request's `shardSelector` (KEP-5866), kept with its text: a list that filtered by it
/// echoes the text verbatim in `metadata.shardInfo.selector`.
#[derive(Debug, Clone)]
pub struct Shards {
    /// The parsed selector.
    pub selector: ShardSelector,
    /// The parameter as the client sent it.
    pub text: String,
}

/// Every selector of a request.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Shard selector, when the request has one and the server honours it.
    pub shards: Option<Shards>,
}

impl Selectors {
    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches_object(obj)
            && self.fields.matches(obj)
            && self
                .shards
                .as_ref()
                .is_none_or(|s| s.selector.matches_object(obj))
    }

    /// Whether every object is selected.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty() && self.shards.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_selectors() {
        let o = json!({"metadata": {"name": "a", "namespace": "ns1", "labels": {"app": "web"}},
            "status": {"phase": "Running"}});
        let sel = |l: &str, f: &str, kind: &str| Selectors {
            labels: LabelSelector::parse(l).unwrap(),
            fields: FieldSelector::parse(f, "", kind).unwrap(),
            shards: None,
        };
        assert!(sel("app=web", "metadata.name=a", "ConfigMap").matches(&o));
        assert!(!sel("app!=web", "", "ConfigMap").matches(&o));
        assert!(sel("", "status.phase=Running", "Pod").matches(&o));
        assert!(sel("", "", "Pod").is_empty());
        assert_eq!(
            FieldSelector::parse("status.phase=Running", "", "ConfigMap")
                .unwrap_err()
                .to_string(),
            "field label not supported: status.phase"
        );
        let e = FieldSelector::parse("metadata.name=a,b", "", "ConfigMap").unwrap_err();
        assert!(e.to_string().starts_with("invalid field selector: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let mut f = FieldSelector::parse("", "", "Pod").unwrap();
        assert_eq!(f.name(), None);
        f.push_name("x");
        assert_eq!(f.name(), Some("x"));
        assert!(LabelSelector::parse("a=b,").is_err());
    }
}
