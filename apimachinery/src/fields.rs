//! Field selectors in the API server's string syntax (`fields.ParseSelector` in apimachinery):
//! `path=value`, `path==value`, `path!=value`, joined by commas. In values, `\,`, `\=` and `\\`
//! stand for `,`, `=` and `\`; an unescaped `,` or `=` is an error. Which paths a kind supports
//! is the server's business, not the syntax's.

use std::fmt;

use serde_json::Value;

use crate::SelectorError;

/// Whether a field term asks for equality or inequality.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOp {
    /// `=` or `==`.
    Equals,
    /// `!=`: also true when the field is absent (absent reads as "").
    NotEquals,
}

/// One `path op value` term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    /// Dotted path, e.g. `metadata.name` (kept verbatim, whitespace included, as the server
    /// does).
    pub field: String,
    /// The comparison.
    pub op: FieldOp,
    /// The unescaped value.
    pub value: String,
}

impl FieldRequirement {
    /// Whether the term holds for `actual` (the field's value, "" when absent).
    pub fn matches_value(&self, actual: &str) -> bool {
        (actual == self.value) == (self.op == FieldOp::Equals)
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Equals => "=",
            FieldOp::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// A parsed field selector; every term must hold. The empty selector selects everything.
/// `Display` gives a canonical form (terms sorted, values escaped).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    terms: Vec<FieldRequirement>,
}

/// Escapes `\`, `,` and `=` so `value` reads back literally (`fields.EscapeValue`).
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn unescape_value(raw: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => {
                    return Err(SelectorError::new(format!(
                        "invalid escape sequence '\\{e}' in field selector value"
                    )));
                }
                None => {
                    return Err(SelectorError::new(
                        "field selector value ends with a lone '\\'",
                    ));
                }
            },
            ',' | '=' => {
                return Err(SelectorError::new(format!(
                    "unescaped '{c}' in field selector value (write '\\{c}')"
                )));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Splits on commas not preceded by a backslash escape.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    out.push(&s[start..]);
    out
}

/// The first operator in `term` (`!=` before `==` before `=` at each position); the path cannot
/// contain escapes, so the first match splits it.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOp::NotEquals),
            ("==", FieldOp::Equals),
            ("=", FieldOp::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, value));
            }
        }
    }
    None
}

impl FieldSelector {
    /// Parses the string syntax; empty input selects everything and empty terms are ignored.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for term in split_terms(s) {
            if term.is_empty() {
                continue;
            }
            let (field, op, raw) = split_term(term).ok_or_else(|| {
                SelectorError::new(format!(
                    "term {term:?} has no operator (one of '=', '==', '!=')"
                ))
            })?;
            terms.push(FieldRequirement {
                field: field.to_string(),
                op,
                value: unescape_value(raw)?,
            });
        }
        terms.sort_by(|a, b| a.field.cmp(&b.field));
        Ok(Self { terms })
    }

    /// The terms, ordered by path.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.terms
    }

    /// True when the selector has no terms (selects everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Adds a term (e.g. the `metadata.name=X` a single-object watch implies).
    pub fn push(&mut self, term: FieldRequirement) {
        let at = self.terms.partition_point(|t| t.field <= term.field);
        self.terms.insert(at, term);
    }

    /// The value `path` must equal, if a term pins it (e.g. the name of a single-object watch).
    pub fn required_value(&self, path: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == path && t.op == FieldOp::Equals)
            .map(|t| t.value.as_str())
    }

    /// Evaluates against a JSON object: a path walks nested objects, a missing or null field
    /// reads as "", a string as itself and any other value as its JSON text (`true`, `3`).
    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|t| {
            let mut cur = Some(obj);
            for part in t.field.split('.') {
                cur = cur.and_then(|v| v.get(part));
            }
            let actual = match cur {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            t.matches_value(&actual)
        })
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `None` means the selector must not parse.
    #[test]
    fn field_selector_table() {
        let obj = json!({
            "metadata": {"name": "a,b", "namespace": "ns1"},
            "spec": {"nodeName": "n=1", "unschedulable": true, "replicas": 3},
            "status": {"phase": "Running"},
            "type": "x\\y"
        });
        let cases: &[(&str, Option<bool>)] = &[
            ("", Some(true)),
            (",", Some(true)),
            ("metadata.namespace=ns1", Some(true)),
            ("metadata.namespace==ns1", Some(true)),
            ("metadata.namespace!=ns1", Some(false)),
            ("metadata.name=a\\,b", Some(true)),
            ("spec.nodeName=n\\=1", Some(true)),
            ("type=x\\\\y", Some(true)),
            ("spec.unschedulable=true", Some(true)),
            ("spec.replicas=3", Some(true)),
            ("status.phase=Running,metadata.namespace=ns1", Some(true)),
            ("status.phase=Running,metadata.namespace=ns2", Some(false)),
            ("status.missing=", Some(true)),
            ("status.missing!=x", Some(true)),
            ("status.phase.deeper=", Some(true)),
            // Whitespace is not trimmed: the path "metadata.namespace " does not exist.
            ("metadata.namespace = ns1", Some(false)),
            ("status.phase", None),
            ("metadata.name=a,b", None),
            ("spec.nodeName=n=1", None),
            ("a=b\\", None),
            ("a=b\\x", None),
        ];
        for (sel, want) in cases {
            match (FieldSelector::parse(sel), want) {
                (Ok(s), Some(m)) => assert_eq!(s.matches(&obj), *m, "{sel:?}"),
                (Err(e), None) => assert!(!e.to_string().is_empty()),
                (got, want) => panic!("{sel:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// The API server's former copy trimmed paths and values and knew no escapes.
    #[test]
    fn former_apiserver_copy_disagreements() {
        let s = FieldSelector::parse("metadata.name=a\\,b").unwrap();
        assert_eq!(s.required_value("metadata.name"), Some("a,b"));
        assert_eq!(
            FieldSelector::parse(" metadata.name=x")
                .unwrap()
                .requirements()[0]
                .field,
            " metadata.name"
        );
    }

    #[test]
    fn canonical_form_round_trips() {
        let s = FieldSelector::parse("b==x\\,y,a!=1").unwrap();
        assert_eq!(s.to_string(), "a!=1,b=x\\,y");
        assert_eq!(FieldSelector::parse(&s.to_string()).unwrap(), s);
        let mut t = FieldSelector::parse("z=1").unwrap();
        t.push(FieldRequirement {
            field: "metadata.name".into(),
            op: FieldOp::Equals,
            value: "n".into(),
        });
        assert_eq!(t.to_string(), "metadata.name=n,z=1");
        assert_eq!(t.required_value("metadata.name"), Some("n"));
        assert_eq!(escape_value("a=b,c\\"), "a\\=b\\,c\\\\");
    }
}
