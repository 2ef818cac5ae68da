//! Transcript entries: what a handler did (a call it received, a write, an Event, an HTTP
//! request, a log line), as recorded and as expected, and how the two are compared.

use serde_json::Value;

/// Why an expectation in a scenario file was refused; the message says what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum ExpectationError {
    /// Not a YAML map.
    #[error("an expectation is a map such as {{call: on-add, object: v1/ConfigMap default/a}}")]
    NotAMap,
    /// A key that is not a string.
    #[error("expectation keys are strings")]
    KeyNotAString,
    /// A value with no JSON form.
    #[error("{key}: {source}")]
    Value {
        /// Its key.
        key: String,
        /// Why it has no JSON form.
        #[source]
        source: serde_json::Error,
    },
    /// None of the keys that name a kind.
    #[error("an expectation names its kind: one of the keys call, write, event, http, log")]
    NoKind,
    /// A key the kind does not have.
    #[error("unknown key {key:?} in a {kind} expectation (known: {known})")]
    UnknownKey {
        /// The key given.
        key: String,
        /// The expectation's kind.
        kind: &'static str,
        /// The keys it has, comma-separated.
        known: String,
    },
    /// A value outside the key's fixed set.
    #[error("{key}: {value:?} is not one of {allowed}")]
    NotOneOf {
        /// The key.
        key: &'static str,
        /// The value given.
        value: Value,
        /// The values allowed, comma-separated.
        allowed: String,
    },
    /// A call `result` that is not one of the outcomes.
    #[error("result {value:?} is not one of {allowed}")]
    NotAResult {
        /// The value given.
        value: Value,
        /// The outcomes, comma-separated.
        allowed: String,
    },
    /// A call flag the call does not have.
    #[error("{call} has no flag {flag}")]
    NoSuchFlag {
        /// The call, e.g. `on-add`.
        call: String,
        /// The flag given.
        flag: &'static str,
    },
    /// A `message` that is not a string.
    #[error("message is a regular expression (a string)")]
    MessageNotAString,
    /// A `message` that is not a valid regular expression.
    #[error("message: {0}")]
    MessageRegex(#[source] regex::Error),
    /// A per-kind "none" (`writes: []`) with something in the list.
    #[error(
        "`{key}:` takes only the empty list, which says the step makes none; expect each one as an entry of its own ({{{kind}: ...}})"
    )]
    NoneNotEmpty {
        /// `calls`, `writes`, `events` or `http`.
        key: &'static str,
        /// The key of one entry of that kind.
        kind: &'static str,
    },
}

/// The five kinds of entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    /// An export the host called.
    Call,
    /// A `kube` write.
    Write,
    /// An `events.emit`.
    Event,
    /// An outbound HTTP request.
    Http,
    /// A log line.
    Log,
}

impl EntryKind {
    /// The key that names the kind (and holds its main value).
    pub fn key(self) -> &'static str {
        match self {
            EntryKind::Call => "call",
            EntryKind::Write => "write",
            EntryKind::Event => "event",
            EntryKind::Http => "http",
            EntryKind::Log => "log",
        }
    }

    /// The key of a per-kind "none" expectation (`{writes: []}`: the step makes no write);
    /// `log` has none, since any step may log.
    pub fn none_key(self) -> &'static str {
        match self {
            EntryKind::Call => "calls",
            EntryKind::Write => "writes",
            EntryKind::Event => "events",
            EntryKind::Http => "http",
            EntryKind::Log => "logs",
        }
    }

    /// The kinds a step can expect none of.
    const NONE_KINDS: [EntryKind; 4] = [
        EntryKind::Call,
        EntryKind::Write,
        EntryKind::Event,
        EntryKind::Http,
    ];

    const ALL: [EntryKind; 5] = [
        EntryKind::Call,
        EntryKind::Write,
        EntryKind::Event,
        EntryKind::Http,
        EntryKind::Log,
    ];

    /// The keys an entry of this kind may have besides its own, and the values its own key
    /// takes.
    fn schema(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            EntryKind::Call => (
                &[
                    "object",
                    "is-in-initial-list",
                    "is-sync",
                    "final-state-unknown",
                    "initial",
                    "result",
                    "after-ms",
                    "message",
                ],
                &[
                    "on-add",
                    "on-update",
                    "on-delete",
                    "on-synced",
                    "reconcile",
                    "keys-for",
                ],
            ),
            EntryKind::Write => (
                &[
                    "object",
                    "subresource",
                    "patch-type",
                    "dry-run",
                    "force",
                    "body",
                    "code",
                    "message",
                ],
                &["create", "apply", "patch", "replace", "delete"],
            ),
            EntryKind::Event => (
                &["regarding", "reason", "action", "note"],
                &["Normal", "Warning"],
            ),
            EntryKind::Http => (&["url", "status", "body", "error"], &[]),
            EntryKind::Log => (&["message"], &["trace", "debug", "info", "warn", "error"]),
        }
    }
}

/// One transcript entry: its kind, then its keys in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Which kind.
    pub kind: EntryKind,
    /// `(key, value)` pairs, the kind's own key first.
    pub fields: Vec<(String, Value)>,
}

impl Entry {
    /// An entry of `kind` whose own key holds `value`.
    pub fn new(kind: EntryKind, value: impl Into<Value>) -> Self {
        Entry {
            kind,
            fields: vec![(kind.key().to_string(), value.into())],
        }
    }

    /// Adds a key.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.push((key.to_string(), value.into()));
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The string value of `key`.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// The expectation that a step makes no entry of `kind` (`{writes: []}`), so a step that
    /// does other things can still say "and no write".
    pub fn none(kind: EntryKind) -> Self {
        Entry {
            kind,
            fields: Vec::new(),
        }
    }

    /// Whether this is a per-kind "none" expectation ([`Entry::none`]).
    pub fn is_none(&self) -> bool {
        self.fields.is_empty()
    }

    /// An expectation from a scenario file, checked against the kind's keys and values.
    pub fn expectation(v: &serde_yaml::Value) -> Result<Entry, ExpectationError> {
        let serde_yaml::Value::Mapping(map) = v else {
            return Err(ExpectationError::NotAMap);
        };
        // `{writes: []}`: none of that kind (a list, where `{http: GET, ...}` has a string).
        if map.len() == 1
            && let Some((serde_yaml::Value::String(k), serde_yaml::Value::Sequence(items))) =
                map.iter().next()
            && let Some(kind) = EntryKind::NONE_KINDS
                .into_iter()
                .find(|kind| kind.none_key() == k)
        {
            if !items.is_empty() {
                return Err(ExpectationError::NoneNotEmpty {
                    key: kind.none_key(),
                    kind: kind.key(),
                });
            }
            return Ok(Entry::none(kind));
        }
        let mut fields = Vec::new();
        for (k, v) in map {
            let Some(k) = k.as_str() else {
                return Err(ExpectationError::KeyNotAString);
            };
            let v = serde_json::to_value(v).map_err(|source| ExpectationError::Value {
                key: k.to_string(),
                source,
            })?;
            fields.push((k.to_string(), v));
        }
        let kind = EntryKind::ALL
            .into_iter()
            .find(|k| fields.iter().any(|(f, _)| f == k.key()))
            .ok_or(ExpectationError::NoKind)?;
        let (keys, values) = kind.schema();
        let own = fields
            .iter()
            .position(|(f, _)| f == kind.key())
            .expect("found above");
        let own = fields.remove(own);
        fields.insert(0, own);
        for (k, _) in &fields[1..] {
            if !keys.contains(&k.as_str()) {
                return Err(ExpectationError::UnknownKey {
                    key: k.clone(),
                    kind: kind.key(),
                    known: keys.join(", "),
                });
            }
        }
        let main = fields[0].1.as_str().unwrap_or_default();
        if !values.is_empty() && !values.contains(&main) {
            return Err(ExpectationError::NotOneOf {
                key: kind.key(),
                value: fields[0].1.clone(),
                allowed: values.join(", "),
            });
        }
        if kind == EntryKind::Call {
            let flag = match main {
                "on-add" => Some("is-in-initial-list"),
                "on-update" => Some("is-sync"),
                "on-delete" => Some("final-state-unknown"),
                "reconcile" => Some("initial"),
                _ => None,
            };
            for f in [
                "is-in-initial-list",
                "is-sync",
                "final-state-unknown",
                "initial",
            ] {
                if Some(f) != flag && fields.iter().any(|(k, _)| k == f) {
                    return Err(ExpectationError::NoSuchFlag {
                        call: main.to_string(),
                        flag: f,
                    });
                }
            }
            if let Some(r) = fields.iter().find(|(k, _)| k == "result") {
                let ok = ["ok", "retry", "fatal", "trap", "requeue-after"];
                if !r.1.as_str().is_some_and(|r| ok.contains(&r)) {
                    return Err(ExpectationError::NotAResult {
                        value: r.1.clone(),
                        allowed: ok.join(", "),
                    });
                }
            }
        }
        for (k, v) in &fields {
            if k == "message" {
                let pattern = v.as_str().ok_or(ExpectationError::MessageNotAString)?;
                regex::Regex::new(pattern).map_err(ExpectationError::MessageRegex)?;
            }
        }
        Ok(Entry { kind, fields })
    }

    /// Whether this expectation matches `actual`: every key given here is there and equal;
    /// `message` is a regular expression searched in the text; `body` is a subset.
    pub fn matches(&self, actual: &Entry) -> bool {
        self.kind == actual.kind && self.mismatch(actual).is_none()
    }

    /// The first key that differs, with both values (`None` when it matches).
    pub fn mismatch(&self, actual: &Entry) -> Option<String> {
        for (k, want) in &self.fields {
            let got = actual.get(k);
            let same = match (k.as_str(), got) {
                (_, None) => false,
                ("message", Some(Value::String(text))) => want
                    .as_str()
                    .and_then(|p| regex::Regex::new(p).ok())
                    .is_some_and(|re| re.is_match(text)),
                ("body", Some(got)) => subset(want, got),
                (_, Some(got)) => want == got,
            };
            if !same {
                return Some(format!(
                    "{k}: expected {}, got {}",
                    flow(want),
                    got.map_or("nothing".to_string(), flow)
                ));
            }
        }
        None
    }

    /// This actual entry as an expectation that matches it: `message` values are regular
    /// expressions, so the characters that would change their meaning are escaped.
    pub fn as_expectation(&self) -> Entry {
        let mut e = self.clone();
        for (k, v) in &mut e.fields {
            if k == "message"
                && let Value::String(text) = v
            {
                let mut escaped = String::with_capacity(text.len());
                for c in text.chars() {
                    if "\\+*?()|[]{}^$".contains(c) {
                        escaped.push('\\');
                    }
                    escaped.push(c);
                }
                *text = escaped;
            }
        }
        e
    }

    /// The entry as one YAML flow map.
    pub fn render(&self) -> String {
        if self.is_none() {
            return format!("{{{}: []}}", self.kind.none_key());
        }
        let parts: Vec<String> = self
            .fields
            .iter()
            .map(|(k, v)| format!("{k}: {}", flow(v)))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }
}

/// Whether `want` is contained in `got`: maps by the keys `want` gives, lists element by
/// element with equal lengths, everything else equal.
pub fn subset(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| subset(wv, gv))),
        (Value::Array(w), Value::Array(g)) => {
            w.len() == g.len() && w.iter().zip(g).all(|(a, b)| subset(a, b))
        }
        (Value::String(w), Value::String(g)) => w == g,
        (Value::Number(w), Value::Number(g)) => w.as_f64() == g.as_f64(),
        _ => want == got,
    }
}

/// A value as YAML flow text: plain scalars where YAML reads them back as the same string,
/// double-quoted (JSON escapes, which YAML accepts) otherwise.
pub fn flow(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            if plain_safe(s) {
                s.clone()
            } else {
                serde_json::to_string(s).unwrap_or_default()
            }
        }
        Value::Array(a) => format!("[{}]", a.iter().map(flow).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    if plain_safe(k) {
                        k.clone()
                    } else {
                        serde_json::to_string(k).unwrap_or_default()
                    },
                    flow(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn plain_safe(s: &str) -> bool {
    let reserved = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~",
    ];
    !s.is_empty()
        && !reserved.contains(&s.to_ascii_lowercase().as_str())
        && s.parse::<f64>().is_err()
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '/' || c == '_')
        && !s.ends_with(' ')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || " _./-".contains(c))
}

/// Compares a step's expectations with its transcript; returns one line per difference.
///
/// For each kind the expectations name (call, write, event, http), the actual entries of that
/// kind and the expected ones must pair up one-to-one: each expectation takes the first unused
/// entry it matches. Kubernetes orders notifications per object, not across objects (a resync
/// or a replay walks the cache in no particular order), so only the order of entries about the
/// same object (the same URL for HTTP) is checked. Log expectations must each match a distinct
/// log line; other lines may come anywhere. An empty list expects no call, write, Event or
/// request at all; `{writes: []}` (`calls`, `events`, `http`) expects none of that one kind,
/// whatever else the step does.
pub fn compare(expected: &[Entry], actual: &[Entry]) -> Vec<String> {
    let mut out = Vec::new();
    if expected.is_empty() {
        // `expect: []`: the step must not make the handler do anything (logs aside).
        for e in actual.iter().filter(|e| e.kind != EntryKind::Log) {
            out.push(format!(
                "+ {}   (unexpected: the step expects nothing)",
                e.render()
            ));
        }
        return out;
    }
    for kind in EntryKind::ALL {
        let got: Vec<&Entry> = actual.iter().filter(|e| e.kind == kind).collect();
        if expected.iter().any(|e| e.kind == kind && e.is_none()) {
            // `{writes: []}` (never beside a write expectation: refused when parsed).
            for g in &got {
                out.push(format!(
                    "+ {}   (unexpected: the step expects {}: [])",
                    g.render(),
                    kind.none_key()
                ));
            }
            continue;
        }
        let want: Vec<&Entry> = expected.iter().filter(|e| e.kind == kind).collect();
        if want.is_empty() {
            continue;
        }
        let mut used = vec![false; got.len()];
        let mut taken: Vec<Option<usize>> = Vec::with_capacity(want.len());
        for w in &want {
            let found = (0..got.len()).find(|&i| !used[i] && w.matches(got[i]));
            if let Some(i) = found {
                used[i] = true;
            }
            taken.push(found);
        }
        // Entries about one object must come in the order expected.
        let pairs: Vec<usize> = taken.iter().flatten().copied().collect();
        for (n, &x) in pairs.iter().enumerate() {
            for &y in &pairs[n + 1..] {
                if x > y && kind != EntryKind::Log && order_key(got[x]) == order_key(got[y]) {
                    out.push(format!(
                        "  out of order: {} came before {}",
                        got[y].render(),
                        got[x].render()
                    ));
                }
            }
        }
        // Pair what is left by kind value and object, to say which key differs.
        for (w, t) in want.iter().zip(&taken) {
            if t.is_some() {
                continue;
            }
            let near = (0..got.len()).find(|&i| {
                !used[i]
                    && got[i].fields.first() == w.fields.first()
                    && order_key(w).is_none_or(|k| order_key(got[i]) == Some(k))
            });
            match near {
                Some(i) if kind != EntryKind::Log || order_key(w).is_some() => {
                    used[i] = true;
                    let why = w.mismatch(got[i]).unwrap_or_default();
                    out.push(format!("- {}", w.render()));
                    out.push(format!("+ {}   ({why})", got[i].render()));
                }
                _ => out.push(format!("- {}   (missing)", w.render())),
            }
        }
        if kind != EntryKind::Log {
            for (g, u) in got.iter().zip(&used) {
                if !u {
                    out.push(format!("+ {}   (unexpected)", g.render()));
                }
            }
        }
    }
    out
}

/// What orders entries of a kind: the object they are about (the URL of a request).
fn order_key(e: &Entry) -> Option<&str> {
    match e.kind {
        EntryKind::Call | EntryKind::Write => e.str("object"),
        EntryKind::Event => e.str("regarding"),
        EntryKind::Http => e.str("url"),
        EntryKind::Log => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(text: &str) -> Entry {
        Entry::expectation(&serde_yaml::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn expectations_are_subsets_and_messages_regexes() {
        let actual = Entry::new(EntryKind::Call, "on-update")
            .with("object", "v1/ConfigMap default/a")
            .with("is-sync", true)
            .with("result", "retry")
            .with("message", "cloud is down (503)");
        assert!(exp("{call: on-update, is-sync: true}").matches(&actual));
        assert!(exp("{call: on-update, message: 'down \\(503\\)'}").matches(&actual));
        assert!(!exp("{call: on-update, is-sync: false}").matches(&actual));
        let w = Entry::new(EntryKind::Write, "apply").with(
            "body",
            serde_json::json!({"data": {"a": "1", "b": "2"}, "kind": "ConfigMap"}),
        );
        assert!(exp("{write: apply, body: {data: {a: '1'}}}").matches(&w));
        assert!(!exp("{write: apply, body: {data: {a: '2'}}}").matches(&w));
    }

    #[test]
    fn bad_expectations_are_refused() {
        let bad = |t: &str| {
            Entry::expectation(&serde_yaml::from_str(t).unwrap())
                .unwrap_err()
                .to_string()
        };
        assert!(bad("{call: on-create}").contains("not one of"));
        assert!(bad("{call: on-add, is-sync: true}").contains("no flag"));
        assert!(bad("{write: apply, colour: red}").contains("unknown key"));
        assert!(bad("{object: x}").contains("names its kind"));
        assert!(bad("{log: info, message: '('}").starts_with("message: "));
        assert!(
            bad("{call: on-add, result: maybe}")
                .starts_with("result String(\"maybe\") is not one of ok, retry, fatal, trap")
        );
        assert_eq!(
            bad("[1]"),
            "an expectation is a map such as {call: on-add, object: v1/ConfigMap default/a}"
        );
    }

    #[test]
    fn a_none_expectation_refuses_every_entry_of_its_kind_only() {
        let none = exp("{writes: []}");
        assert!(none.is_none());
        assert_eq!(none.render(), "{writes: []}");
        let call = Entry::new(EntryKind::Call, "on-add").with("object", "x");
        let write = Entry::new(EntryKind::Write, "patch").with("object", "x");
        assert!(compare(std::slice::from_ref(&none), std::slice::from_ref(&call)).is_empty());
        let d = compare(&[none, exp("{call: on-add, object: x}")], &[call, write]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("writes: []"), "{d:?}");
        assert!(exp("{http: []}").is_none());
        let e = Entry::expectation(&serde_yaml::from_str("{events: [{event: Normal}]}").unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("only the empty list"), "{e}");
    }

    #[test]
    fn compare_reports_missing_unexpected_and_logs_in_order() {
        let a = |n: &str| Entry::new(EntryKind::Call, "on-add").with("object", n);
        let l = |m: &str| Entry::new(EntryKind::Log, "info").with("message", m);
        let actual = vec![a("x"), l("one"), l("two"), a("y")];
        assert!(
            compare(
                &[
                    exp("{call: on-add, object: x}"),
                    exp("{call: on-add, object: y}"),
                    exp("{log: info, message: two}")
                ],
                &actual
            )
            .is_empty()
        );
        let d = compare(&[exp("{call: on-add, object: x}")], &actual);
        assert_eq!(d.len(), 1);
        assert!(d[0].contains("unexpected"), "{d:?}");
        // Logs and entries about different objects may come in any order...
        let logs = [
            exp("{log: info, message: two}"),
            exp("{log: info, message: one}"),
        ];
        assert!(compare(&logs, &actual).is_empty());
        let calls = [
            exp("{call: on-add, object: y}"),
            exp("{call: on-add, object: x}"),
        ];
        assert!(compare(&calls, &actual).is_empty());
        // ... entries about one object may not.
        let d = |n: &str| Entry::new(EntryKind::Call, "on-delete").with("object", n);
        let swapped = vec![d("x"), a("x")];
        let want = [
            exp("{call: on-add, object: x}"),
            exp("{call: on-delete, object: x}"),
        ];
        let diffs = compare(&want, &swapped);
        assert_eq!(diffs.len(), 1, "{diffs:?}");
        assert!(diffs[0].contains("out of order"), "{diffs:?}");
        // A wrong flag shows the entry it was closest to; `expect: []` wants nothing.
        let one = vec![a("x").with("is-in-initial-list", false)];
        let diffs = compare(
            &[exp("{call: on-add, object: x, is-in-initial-list: true}")],
            &one,
        );
        assert_eq!(diffs.len(), 2, "{diffs:?}");
        assert!(
            diffs[1].contains("is-in-initial-list: expected true, got false"),
            "{diffs:?}"
        );
        assert_eq!(compare(&[], &one).len(), 1);
        assert!(compare(&[], &[l("just a log line")]).is_empty());
    }

    #[test]
    fn an_actual_entry_is_an_expectation_that_matches_it() {
        let actual =
            Entry::new(EntryKind::Log, "info").with("message", "lb (created) at [10.0.0.1]+1 $x");
        let text = actual.as_expectation().render();
        assert!(exp(&text).matches(&actual), "{text}");
    }

    #[test]
    fn flow_text_reads_back() {
        let v =
            serde_json::json!({"a": "on", "b": "http://x:1/", "c": [1, "two"], "d": "plain text"});
        let text = flow(&v);
        assert_eq!(
            text,
            r#"{a: "on", b: "http://x:1/", c: [1, two], d: plain text}"#
        );
        let back: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(serde_json::to_value(back).unwrap(), v);
    }
}
