//! Label selectors in the API server's string syntax (`labels.Parse` in apimachinery):
//! `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, joined by commas.
//! Keys must be qualified names and values label values, so a selector that parses here is one
//! the API server accepts.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::Value;

use crate::SelectorError;
use crate::validation::{validate_label_key, validate_label_value};

/// Read access to a set of labels, whatever its representation.
pub trait Labels {
    /// The value of label `key`, if present.
    fn get(&self, key: &str) -> Option<&str>;
}

impl<K: AsRef<str>, V: AsRef<str>> Labels for [(K, V)] {
    fn get(&self, key: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| v.as_ref())
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Labels for Vec<(K, V)> {
    fn get(&self, key: &str) -> Option<&str> {
        Labels::get(self.as_slice(), key)
    }
}

impl<V: AsRef<str>> Labels for BTreeMap<String, V> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(AsRef::as_ref)
    }
}

impl<V: AsRef<str>, S: std::hash::BuildHasher> Labels for HashMap<String, V, S> {
    fn get(&self, key: &str) -> Option<&str> {
        HashMap::get(self, key).map(AsRef::as_ref)
    }
}

/// `metadata.labels` of a JSON object; a non-string value counts as absent.
impl Labels for serde_json::Map<String, Value> {
    fn get(&self, key: &str) -> Option<&str> {
        serde_json::Map::get(self, key).and_then(Value::as_str)
    }
}

/// How a requirement relates its key to its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key` or `!key` absent: the label is present.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key=value` or `key==value`.
    Equals,
    /// `key!=value`: also true when the label is absent.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`: also true when the label is absent.
    NotIn,
    /// `key>n`: the label is an integer greater than `n`.
    GreaterThan,
    /// `key<n`: the label is an integer less than `n`.
    LessThan,
}

/// One requirement of a selector; every requirement must hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    op: Operator,
    /// Sorted and without duplicates (the API server keeps a set).
    values: Vec<String>,
}

impl Requirement {
    /// Checks the key and values as the API server does (`labels.NewRequirement`).
    pub fn new(key: &str, op: Operator, values: Vec<String>) -> Result<Self, SelectorError> {
        validate_label_key(key)
            .map_err(|e| SelectorError::new(format!("invalid label key {key:?}: {e}")))?;
        let arity_ok = match op {
            Operator::Exists | Operator::DoesNotExist => values.is_empty(),
            Operator::In | Operator::NotIn => !values.is_empty(),
            _ => values.len() == 1,
        };
        if !arity_ok {
            return Err(SelectorError::new(format!(
                "wrong number of values ({}) for {op:?} on key {key:?}",
                values.len()
            )));
        }
        for v in &values {
            validate_label_value(v).map_err(|e| {
                SelectorError::new(format!("invalid value {v:?} for key {key:?}: {e}"))
            })?;
            if matches!(op, Operator::GreaterThan | Operator::LessThan) && v.parse::<i64>().is_err()
            {
                return Err(SelectorError::new(format!(
                    "value {v:?} for key {key:?} must be an integer for '>' and '<'"
                )));
            }
        }
        let mut values = values;
        values.sort();
        values.dedup();
        Ok(Self {
            key: key.to_string(),
            op,
            values,
        })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values, sorted (empty for `Exists` / `DoesNotExist`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }

    /// Whether `labels` satisfy this requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let got = labels.get(&self.key);
        match self.op {
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::Equals | Operator::In => got.is_some_and(|v| self.has(v)),
            Operator::NotEquals | Operator::NotIn => got.is_none_or(|v| !self.has(v)),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(Ok(have)), Ok(bound)) =
                    (got.map(str::parse::<i64>), self.values[0].parse::<i64>())
                else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    have > bound
                } else {
                    have < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        let one = || self.values.first().map(String::as_str).unwrap_or("");
        match self.op {
            Operator::Exists => write!(f, "{key}"),
            Operator::DoesNotExist => write!(f, "!{key}"),
            Operator::Equals => write!(f, "{key}={}", one()),
            Operator::NotEquals => write!(f, "{key}!={}", one()),
            Operator::GreaterThan => write!(f, "{key}>{}", one()),
            Operator::LessThan => write!(f, "{key}<{}", one()),
            Operator::In => write!(f, "{key} in ({})", self.values.join(",")),
            Operator::NotIn => write!(f, "{key} notin ({})", self.values.join(",")),
        }
    }
}

/// A parsed label selector. The empty selector selects everything. `Display` gives the
/// canonical form (requirements ordered by key, values sorted), equal for equivalent spellings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the string syntax; blank input selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Parser::new(s).selector()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// A selector from already-built requirements.
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { requirements }
    }

    /// The requirements, ordered by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector has no requirements (selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether a JSON object's `metadata.labels` satisfy every requirement (no labels at all is
    /// an empty set).
    pub fn matches_object(&self, obj: &Value) -> bool {
        let empty = serde_json::Map::new();
        let labels = obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        self.matches(labels)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Lexical tokens. `in` and `notin` are plain words that the parser reads as operators only in
/// operator position, so `in in (in)` is a valid selector as it is for the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl Tok<'_> {
    fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Bang => "'!'".into(),
            Tok::Eq => "'='".into(),
            Tok::DoubleEq => "'=='".into(),
            Tok::NotEq => "'!='".into(),
            Tok::Gt => "'>'".into(),
            Tok::Lt => "'<'".into(),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::Comma => "','".into(),
            Tok::End => "end of string".into(),
        }
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the input into tokens: words run until whitespace or a symbol; `!=` and `==` are
/// taken before their one-character prefixes.
fn tokenize(s: &str) -> Vec<Tok<'_>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if is_space(c) {
            i += 1;
            continue;
        }
        if is_symbol(c) {
            let two = b.get(i + 1) == Some(&b'=');
            let (tok, len) = match c {
                b'!' if two => (Tok::NotEq, 2),
                b'=' if two => (Tok::DoubleEq, 2),
                b'!' => (Tok::Bang, 1),
                b'=' => (Tok::Eq, 1),
                b'>' => (Tok::Gt, 1),
                b'<' => (Tok::Lt, 1),
                b'(' => (Tok::Open, 1),
                b')' => (Tok::Close, 1),
                _ => (Tok::Comma, 1),
            };
            out.push(tok);
            i += len;
            continue;
        }
        let start = i;
        while i < b.len() && !is_space(b[i]) && !is_symbol(b[i]) {
            i += 1;
        }
        // Symbols and whitespace are ASCII, so `start..i` lies on character boundaries.
        out.push(Tok::Word(&s[start..i]));
    }
    out.push(Tok::End);
    out
}

/// Recursive-descent parser over the token list, following the grammar of `labels.Parse`.
struct Parser<'a> {
    toks: Vec<Tok<'a>>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str) -> Self {
        Self {
            toks: tokenize(s),
            pos: 0,
        }
    }

    fn peek(&self) -> Tok<'a> {
        self.toks[self.pos.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> Tok<'a> {
        let t = self.peek();
        self.pos += 1;
        t
    }

    fn unexpected(t: Tok<'_>, expected: &str) -> SelectorError {
        SelectorError::new(format!("found {}, expected {expected}", t.describe()))
    }

    /// `requirement ("," requirement)*`, or nothing at all.
    fn selector(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut out = Vec::new();
        if self.peek() == Tok::End {
            return Ok(out);
        }
        loop {
            match self.peek() {
                Tok::Word(_) | Tok::Bang => {}
                t => return Err(Self::unexpected(t, "'!', a key or end of string")),
            }
            out.push(self.requirement()?);
            match self.next() {
                Tok::End => return Ok(out),
                Tok::Comma => {
                    if !matches!(self.peek(), Tok::Word(_) | Tok::Bang) {
                        return Err(Self::unexpected(self.peek(), "a key after ','"));
                    }
                }
                t => return Err(Self::unexpected(t, "',' or end of string")),
            }
        }
    }

    /// `["!"] key [operator values]`.
    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let negated = self.peek() == Tok::Bang;
        if negated {
            self.next();
        }
        let key = match self.next() {
            Tok::Word(k) => k,
            t => return Err(Self::unexpected(t, "a key")),
        };
        // `!key` takes no operator: whatever follows is left for `selector` to reject.
        if negated {
            return Requirement::new(key, Operator::DoesNotExist, vec![]);
        }
        if matches!(self.peek(), Tok::End | Tok::Comma) {
            return Requirement::new(key, Operator::Exists, vec![]);
        }
        let op = match self.next() {
            Tok::Word("in") => Operator::In,
            Tok::Word("notin") => Operator::NotIn,
            Tok::Eq | Tok::DoubleEq => Operator::Equals,
            Tok::NotEq => Operator::NotEquals,
            Tok::Gt => Operator::GreaterThan,
            Tok::Lt => Operator::LessThan,
            t => {
                return Err(Self::unexpected(
                    t,
                    "one of 'in', 'notin', '=', '==', '!=', '>', '<'",
                ));
            }
        };
        let values = match op {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => vec![self.single_value()?],
        };
        Requirement::new(key, op, values)
    }

    /// The value of `key=value`: empty when the requirement ends right after the operator.
    fn single_value(&mut self) -> Result<String, SelectorError> {
        match self.peek() {
            Tok::End | Tok::Comma => Ok(String::new()),
            Tok::Word(w) => {
                self.next();
                Ok(w.to_string())
            }
            t => Err(Self::unexpected(t, "a value")),
        }
    }

    /// `"(" values ")"`, where a missing value between, before or after commas is the empty
    /// string (`()` is the set holding only "").
    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            Tok::Open => {}
            t => return Err(Self::unexpected(t, "'('")),
        }
        let mut values = Vec::new();
        // Whether the last item read was a value (so a comma now separates rather than
        // stands for an empty value).
        let mut after_value = false;
        loop {
            match self.next() {
                Tok::Word(w) if !after_value => {
                    values.push(w.to_string());
                    after_value = true;
                }
                Tok::Comma => {
                    if !after_value {
                        values.push(String::new());
                    }
                    after_value = false;
                }
                Tok::Close => {
                    if !after_value {
                        values.push(String::new());
                    }
                    return Ok(values);
                }
                t => return Err(Self::unexpected(t, "a value, ',' or ')'")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// Matching on `app=web, tier=fe, n=5`; `None` means the selector must not parse.
    #[test]
    fn selector_table() {
        let l = labels(&[("app", "web"), ("tier", "fe"), ("n", "5")]);
        let cases: &[(&str, Option<bool>)] = &[
            ("", Some(true)),
            ("   ", Some(true)),
            ("app=web", Some(true)),
            ("app==web", Some(true)),
            ("app = web", Some(true)),
            ("app!=web", Some(false)),
            ("missing!=x", Some(true)),
            ("app in (web, db)", Some(true)),
            ("app in(web)", Some(true)),
            ("app notin (web)", Some(false)),
            ("missing notin (web)", Some(true)),
            ("missing in (web)", Some(false)),
            ("tier", Some(true)),
            ("missing", Some(false)),
            ("!tier", Some(false)),
            ("! missing", Some(true)),
            ("app=web,tier in (fe,be),!x", Some(true)),
            ("app=web,tier=be", Some(false)),
            ("n>4", Some(true)),
            ("n<5", Some(false)),
            ("n > 4,n < 6", Some(true)),
            ("app>1", Some(false)),
            ("missing>1", Some(false)),
            ("app.kubernetes.io/name", Some(false)),
            ("app=", Some(false)),
            ("missing=", Some(false)),
            ("missing!=", Some(true)),
            ("app in ()", Some(false)),
            ("app in (web,)", Some(true)),
            ("app in (,,web)", Some(true)),
            ("in in (in)", Some(false)),
            // Errors.
            ("app in web", None),
            ("app in (a", None),
            ("app in (a b)", None),
            ("app in ((a))", None),
            ("a=b,", None),
            (",a=b", None),
            ("a=b,,c=d", None),
            ("a=b c", None),
            ("a b", None),
            ("!a=b", None),
            ("!", None),
            ("=b", None),
            ("a=(b)", None),
            ("a>b", None),
            ("a>-1", None),
            ("a=b=c", None),
            ("-a", None),
            ("a/b/c", None),
            ("Example.com/a", None),
            ("a=b/c", None),
            ("a=has space", None),
            ("a in (ok, bad/value)", None),
            ("a)", None),
            ("a=b)", None),
        ];
        for (sel, want) in cases {
            match (LabelSelector::parse(sel), want) {
                (Ok(s), Some(m)) => assert_eq!(s.matches(&l), *m, "{sel:?}"),
                (Err(e), None) => assert!(!e.to_string().is_empty()),
                (got, want) => panic!("{sel:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Inputs on which the informer's and the API server's former parsers disagreed; the
    /// expectation is what the real API server does.
    #[test]
    fn former_disagreements_follow_the_api_server() {
        let l = labels(&[("app", "web"), ("empty", "")]);
        let cases: &[(&str, Option<bool>)] = &[
            // Trailing comma: the API server's copy accepted it, the informer's refused it.
            ("app=web,", None),
            // Empty set member: the API server's copy dropped it, so `()` matched nothing
            // while the informer's copy kept "" and matched an empty label.
            ("empty in ()", Some(true)),
            ("empty notin (,)", Some(false)),
            ("app in (web,)", Some(true)),
            // Invalid values: the API server's copy accepted any text.
            ("app in (w b)", None),
            ("app=we$b", None),
            // Keys: both accepted slashes anywhere and any length.
            ("a//b", None),
            (&format!("{}=x", "k".repeat(64)), None),
            // Integer comparisons: neither supported them.
            ("n>1", Some(false)),
            // Unbalanced parenthesis: the API server's copy did not check.
            ("app in (web))", None),
        ];
        for (sel, want) in cases {
            match (LabelSelector::parse(sel), want) {
                (Ok(s), Some(m)) => assert_eq!(s.matches(&l), *m, "{sel:?}"),
                (Err(_), None) => {}
                (got, want) => panic!("{sel:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn empty_label_value_matches_in_set_with_empty_member() {
        let l = labels(&[("app", "")]);
        assert!(LabelSelector::parse("app in ()").unwrap().matches(&l));
        assert!(LabelSelector::parse("app=").unwrap().matches(&l));
        assert!(!LabelSelector::parse("app!=").unwrap().matches(&l));
    }

    #[test]
    fn canonical_form_is_equal_for_equivalent_spellings() {
        let a = LabelSelector::parse("tier in (b, a, a), app == web, !x").unwrap();
        let b = LabelSelector::parse("!x,app=web,tier in (a,b)").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "app=web,tier in (a,b),!x");
        assert_eq!(LabelSelector::parse(&a.to_string()).unwrap(), a);
    }

    #[test]
    fn label_representations() {
        let s = LabelSelector::parse("app=web").unwrap();
        let json = serde_json::json!({"metadata": {"labels": {"app": "web"}}});
        assert!(s.matches_object(&json));
        assert!(!s.matches_object(&serde_json::json!({"metadata": {}})));
        assert!(!s.matches_object(&serde_json::json!({"metadata": {"labels": {"app": 1}}})));
        let map: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        assert!(s.matches(&map));
        let pairs: &[(&str, &str)] = &[("app", "web")];
        assert!(s.matches(pairs));
    }

    #[test]
    fn errors_say_what_was_found() {
        let e = LabelSelector::parse("a in (").unwrap_err().to_string();
        assert!(e.contains("end of string"), "{e}");
        let e = LabelSelector::parse("a=b,").unwrap_err().to_string();
        assert!(e.contains("after ','"), "{e}");
        let e = LabelSelector::parse("a=b c").unwrap_err().to_string();
        assert!(e.contains("'c'"), "{e}");
    }
}
