//! Label and field selectors, parsed once per request and evaluated per object.

use serde_json::Value;

/// One label-selector requirement.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` (all requirements must hold).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Split on commas that are not inside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected '(' ... ')' in set, found {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parse the selector syntax (`a=b,c!=d,e in (x,y),f notin (z),g,!h`).
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let req = if let Some(k) = term.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some(idx) = term.find(" notin ").or_else(|| term.find(" notin(")) {
                LabelReq::NotIn(term[..idx].trim().into(), parse_set(&term[idx + 6..])?)
            } else if let Some(idx) = term.find(" in ").or_else(|| term.find(" in(")) {
                LabelReq::In(term[..idx].trim().into(), parse_set(&term[idx + 3..])?)
            } else {
                LabelReq::Exists(term.to_string())
            };
            let key = match &req {
                LabelReq::Eq(k, _)
                | LabelReq::NotEq(k, _)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _)
                | LabelReq::Exists(k)
                | LabelReq::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(format!(
                    "unable to parse requirement: invalid label key {key:?}"
                ));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Evaluate against an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: `path=value` / `path!=value` terms over a per-kind set of fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

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
        "Event" => {
            field.starts_with("involvedObject.")
                || field.starts_with("regarding.")
                || matches!(field, "reason" | "type" | "source" | "reportingComponent")
        }
        "Secret" => field == "type",
        "Namespace" => field == "status.phase",
        _ => false,
    }
}

impl FieldSelector {
    /// Parse `a=b,c!=d` for objects of `kind`; unsupported fields are a 400 like the real server.
    pub fn parse(s: &str, kind: &str) -> Result<FieldSelector, String> {
        let mut out = Vec::new();
        for term in split_terms(s) {
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            };
            let k = k.trim();
            if !field_supported(kind, k) {
                return Err(format!("field label not supported: {k}"));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The name pinned by `metadata.name=X`, if any (single-object watches).
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Add `metadata.name=name` (single-object watch form).
    pub fn push_name(&mut self, name: &str) {
        self.0.push(("metadata.name".into(), true, name.into()));
    }

    /// Evaluate against an object.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let mut cur = obj;
            for part in k.split('.') {
                cur = cur.get(part).unwrap_or(&Value::Null);
            }
            let actual = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == *v) == *eq
        })
    }
}

/// Both selectors of a request.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// Whether every object is selected.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns1", "labels": labels}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_forms() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db, x)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier in (fe,be),!x", true),
            ("missing notin (a)", true),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selector_forms() {
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=a", "ConfigMap")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==ns1", "ConfigMap")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a", "ConfigMap")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("status.phase=Running", "Pod")
                .unwrap()
                .matches(&o)
        );
        let err = FieldSelector::parse("status.phase=Running", "ConfigMap").unwrap_err();
        assert_eq!(err, "field label not supported: status.phase");
        assert_eq!(
            FieldSelector::parse("metadata.name=x", "Pod")
                .unwrap()
                .name(),
            Some("x")
        );
    }
}
