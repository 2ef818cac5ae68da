//! What a 0.2.0 subscription's `metadata-only` and `fields` keep of an object: the rule that
//! validates them at load and the cut itself.
//!
//! A projection always keeps `apiVersion`, `kind` and the whole of `metadata` (as cached: without
//! `managedFields` unless the host keeps them), plus the members the `fields` JSON pointers
//! (RFC 6901) name. `metadata-only` is the projection with no pointers. The cut works on the
//! cached JSON text: kept values are copied byte for byte as the API server served them, members
//! keep their served order, and nothing is re-encoded.
//!
//! Shape of the result, chosen so that every kept pointer resolves in the projected JSON to the
//! same value as in the whole object:
//! - a path that does not exist in this version (absent member, index out of range, a scalar
//!   where the pointer goes deeper) is omitted, and so is a parent left with nothing;
//! - an array keeps its positions: elements before the last kept one that no pointer names
//!   become `null` (`/spec/ports/1` gives `"ports":[null,{…}]`);
//! - pointers inside another kept pointer (or inside `metadata`) add nothing and are dropped, so
//!   `["/spec", "/spec/type"]` and `["/spec"]` are one projection, shared by both plugins.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::value::RawValue;

use crate::informer::{JsonMembers, raw_json_str};

/// Most JSON pointers one subscription may list in `fields`.
pub(crate) const MAX_FIELDS: usize = 32;
/// Longest JSON pointer accepted in `fields`, in bytes.
pub(crate) const MAX_POINTER_BYTES: usize = 256;

/// The top-level members every projection keeps whole.
const ALWAYS_KEPT: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// What to keep of a JSON value: all of it, or some of its members (of an object) or elements
/// (of an array, named by their decimal index).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Keep {
    All,
    Some(BTreeMap<String, Keep>),
}

/// A validated, normalised projection: equal values keep exactly the same members, so they can
/// share one projected copy of every object version.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Projection {
    /// Never `Keep::All`: the whole object is no projection.
    root: BTreeMap<String, Keep>,
}

/// Why `metadata-only` / `fields` were refused; the message names the field and the pointer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    /// Both were set; `metadata-only` keeps no fields.
    #[error(
        "metadata-only and fields exclude each other: metadata-only keeps no field besides metadata"
    )]
    Both,
    /// More than `MAX_FIELDS` pointers.
    #[error("fields lists {0} JSON pointers, more than the {MAX_FIELDS} a subscription may")]
    TooMany(usize),
    /// One pointer is malformed.
    #[error("fields[{index}] {pointer:?} is not a JSON pointer (RFC 6901): {reason}")]
    Malformed {
        /// Position in `fields`.
        index: usize,
        /// As given, cut to 64 bytes.
        pointer: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl Projection {
    /// The projection `metadata-only` and `fields` ask for: `None` for the whole object (neither
    /// set), else a normalised projection. Refuses malformed pointers, too many or too long ones,
    /// and both options at once.
    pub fn parse(metadata_only: bool, fields: &[String]) -> Result<Option<Self>, ProjectionError> {
        if metadata_only && !fields.is_empty() {
            return Err(ProjectionError::Both);
        }
        if !metadata_only && fields.is_empty() {
            return Ok(None);
        }
        if fields.len() > MAX_FIELDS {
            return Err(ProjectionError::TooMany(fields.len()));
        }
        let mut root = Keep::Some(
            ALWAYS_KEPT
                .iter()
                .map(|k| (k.to_string(), Keep::All))
                .collect(),
        );
        for (index, pointer) in fields.iter().enumerate() {
            let tokens = parse_pointer(pointer).map_err(|reason| ProjectionError::Malformed {
                index,
                pointer: cut(pointer).to_string(),
                reason,
            })?;
            insert(&mut root, &tokens);
        }
        match root {
            Keep::Some(root) => Ok(Some(Projection { root })),
            Keep::All => unreachable!("the root is never replaced: pointers are non-empty"),
        }
    }

    /// Whether this is `metadata-only` (keeps nothing besides `apiVersion`, `kind`, `metadata`).
    pub fn is_metadata_only(&self) -> bool {
        self.root.len() == ALWAYS_KEPT.len()
    }

    /// The projected text of `json`, a JSON object (a cached object version). Text that is not an
    /// object (which the cache never holds) projects to `{}`.
    pub fn apply(&self, json: &str) -> String {
        let mut out = String::with_capacity(json.len().min(4096));
        let Ok(raw) = serde_json::from_str::<&RawValue>(json) else {
            return "{}".into();
        };
        if !cut_object(raw, &self.root, &mut out) {
            out.clear();
            out.push_str("{}");
        }
        out
    }
}

/// Lists the kept pointers (normalised), never object content.
impl fmt::Debug for Projection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn walk(prefix: &str, keep: &BTreeMap<String, Keep>, out: &mut Vec<String>) {
            for (k, v) in keep {
                let p = format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1"));
                match v {
                    Keep::All => out.push(p),
                    Keep::Some(m) => walk(&p, m, out),
                }
            }
        }
        let mut pointers = Vec::new();
        walk("", &self.root, &mut pointers);
        f.debug_tuple("Projection").field(&pointers).finish()
    }
}

/// The reference tokens of an RFC 6901 pointer, unescaped (`~1` → `/`, `~0` → `~`).
fn parse_pointer(pointer: &str) -> Result<Vec<String>, &'static str> {
    if pointer.len() > MAX_POINTER_BYTES {
        return Err("longer than 256 bytes");
    }
    if pointer.is_empty() {
        return Err("the empty pointer names the whole object; leave fields empty for that");
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err("it must start with '/'");
    };
    if pointer.chars().any(char::is_control) {
        return Err("it holds a control character");
    }
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => out.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err("'~' must be followed by '0' or '1'"),
                    },
                }
            }
            Ok(out)
        })
        .collect()
}

/// Adds one pointer's path to the tree; a path inside a kept whole adds nothing, and a whole
/// replaces whatever was kept below it.
fn insert(keep: &mut Keep, tokens: &[String]) {
    let Keep::Some(children) = keep else { return };
    let (first, rest) = tokens.split_first().expect("pointers have a token");
    if rest.is_empty() {
        children.insert(first.clone(), Keep::All);
        return;
    }
    let child = children
        .entry(first.clone())
        .or_insert_with(|| Keep::Some(BTreeMap::new()));
    insert(child, rest);
}

/// Writes the kept part of `raw` (when it is an object) to `out`; false when nothing was kept.
fn cut_object(raw: &RawValue, keep: &BTreeMap<String, Keep>, out: &mut String) -> bool {
    let Ok(members) = serde_json::from_str::<JsonMembers<'_>>(raw.get()) else {
        return false;
    };
    let start = out.len();
    out.push('{');
    let mut any = false;
    for (k, v) in members.iter() {
        let Some(name) = raw_json_str(k) else {
            continue;
        };
        let Some(keep) = keep.get(&*name) else {
            continue;
        };
        let mark = out.len();
        if any {
            out.push(',');
        }
        out.push_str(k.get());
        out.push(':');
        if cut_value(v, keep, out) {
            any = true;
        } else {
            out.truncate(mark);
        }
    }
    if !any {
        out.truncate(start);
        return false;
    }
    out.push('}');
    true
}

/// Writes the kept part of `raw` to `out`; false when nothing was kept.
fn cut_value(raw: &RawValue, keep: &Keep, out: &mut String) -> bool {
    let Keep::Some(children) = keep else {
        out.push_str(raw.get());
        return true;
    };
    match raw.get().as_bytes().first() {
        Some(b'{') => cut_object(raw, children, out),
        Some(b'[') => cut_array(raw, children, out),
        _ => false,
    }
}

/// Writes the kept elements of the array `raw`, at their positions (see the module docs).
fn cut_array(raw: &RawValue, keep: &BTreeMap<String, Keep>, out: &mut String) -> bool {
    let Ok(elements) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        return false;
    };
    let mut kept: Vec<(usize, &Keep)> = keep
        .iter()
        .filter_map(|(k, v)| Some((array_index(k)?, v)))
        .filter(|(i, _)| *i < elements.len())
        .collect();
    kept.sort_by_key(|(i, _)| *i);
    let mut parts: Vec<(usize, String)> = Vec::with_capacity(kept.len());
    for (i, keep) in kept {
        let mut part = String::new();
        if cut_value(elements[i], keep, &mut part) {
            parts.push((i, part));
        }
    }
    let Some(&(last, _)) = parts.last() else {
        return false;
    };
    out.push('[');
    let mut parts = parts.into_iter().peekable();
    for position in 0..=last {
        if position > 0 {
            out.push(',');
        }
        match parts.next_if(|(i, _)| *i == position) {
            Some((_, part)) => out.push_str(&part),
            None => out.push_str("null"),
        }
    }
    out.push(']');
    true
}

/// An array index token: `0` or digits without a leading zero (RFC 6901), within `usize`.
fn array_index(token: &str) -> Option<usize> {
    let canonical = token == "0"
        || (!token.is_empty()
            && !token.starts_with('0')
            && token.bytes().all(|b| b.is_ascii_digit()));
    if canonical { token.parse().ok() } else { None }
}

/// A guest string shown in an error, cut to 64 bytes.
fn cut(s: &str) -> &str {
    crate::text::truncate(s, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pointers: &[&str]) -> Projection {
        let pointers: Vec<String> = pointers.iter().map(|p| p.to_string()).collect();
        Projection::parse(false, &pointers).unwrap().unwrap()
    }

    fn project(pointers: &[&str], json: &str) -> String {
        fields(pointers).apply(json)
    }

    const SERVICE: &str = r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"default","labels":{"a":"b"}},"spec":{"type":"LoadBalancer","ports":[{"port":80,"name":"http"},{"port":443,"name":"https"},{"port":8080}],"selector":{"app":"web"}},"status":{"loadBalancer":{}}}"#;

    #[test]
    fn neither_option_is_the_whole_object() {
        assert_eq!(Projection::parse(false, &[]).unwrap(), None);
    }

    #[test]
    fn metadata_only_keeps_type_and_metadata_in_served_order() {
        let p = Projection::parse(true, &[]).unwrap().unwrap();
        assert!(p.is_metadata_only());
        assert_eq!(
            p.apply(SERVICE),
            r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"default","labels":{"a":"b"}}}"#
        );
    }

    #[test]
    fn nested_pointers_keep_their_paths_and_served_bytes() {
        assert_eq!(
            project(&["/spec/selector", "/status"], SERVICE),
            r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"default","labels":{"a":"b"}},"spec":{"selector":{"app":"web"}},"status":{"loadBalancer":{}}}"#
        );
        // Served formatting inside a kept value is untouched.
        let spaced = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{ "a" : "1",  "b":"2" }}"#;
        assert_eq!(
            project(&["/data"], spaced),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{ "a" : "1",  "b":"2" }}"#
        );
    }

    #[test]
    fn array_elements_keep_their_positions() {
        let md = r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"default","labels":{"a":"b"}}"#;
        assert_eq!(
            project(&["/spec/ports/1/port"], SERVICE),
            format!(r#"{md},"spec":{{"ports":[null,{{"port":443}}]}}}}"#)
        );
        assert_eq!(
            project(&["/spec/ports/0", "/spec/ports/2/port"], SERVICE),
            format!(
                r#"{md},"spec":{{"ports":[{{"port":80,"name":"http"}},null,{{"port":8080}}]}}}}"#
            )
        );
        // Element 1 has no `missing`: it is padded like an unnamed one; element 2 has nothing
        // either, so the array ends at element 0.
        assert_eq!(
            project(&["/spec/ports/0/name", "/spec/ports/2/name"], SERVICE),
            format!(r#"{md},"spec":{{"ports":[{{"name":"http"}}]}}}}"#)
        );
        assert_eq!(
            project(&["/spec/ports/2/name", "/spec/ports/1/name"], SERVICE),
            format!(r#"{md},"spec":{{"ports":[null,{{"name":"https"}}]}}}}"#)
        );
    }

    #[test]
    fn missing_paths_are_omitted_with_their_empty_parents() {
        let md = r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"web","namespace":"default","labels":{"a":"b"}}}"#;
        for pointers in [
            &["/spec/clusterIP"][..],
            &["/nothing"],
            &["/spec/ports/3"],
            &["/spec/ports/01"],
            &["/spec/ports/-"],
            &["/spec/type/deeper"],
            &["/spec/ports/99999999999999999999999"],
        ] {
            assert_eq!(project(pointers, SERVICE), md, "{pointers:?}");
        }
    }

    #[test]
    fn escaped_tokens_name_keys_with_slash_and_tilde() {
        let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a/b":"1","c~d":"2","a~1b":"3","e":"4"}}"#;
        assert_eq!(
            project(&["/data/a~1b", "/data/c~0d"], json),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a/b":"1","c~d":"2"}}"#
        );
        // A key holding a JSON escape is matched by its decoded text.
        let escaped = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"\u0041":"1"}}"#;
        assert_eq!(
            project(&["/data/A"], escaped),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"\u0041":"1"}}"#
        );
    }

    #[test]
    fn covered_pointers_normalise_to_one_projection() {
        assert_eq!(fields(&["/spec", "/spec/type"]), fields(&["/spec"]));
        assert_eq!(fields(&["/spec/type", "/spec"]), fields(&["/spec"]));
        assert_eq!(fields(&["/b", "/a", "/a"]), fields(&["/a", "/b"]));
        assert_eq!(
            fields(&["/metadata/labels", "/kind"]),
            Projection::parse(true, &[]).unwrap().unwrap()
        );
        assert_ne!(fields(&["/spec"]), fields(&["/spec/type"]));
        assert_eq!(
            format!("{:?}", fields(&["/spec/a~1b", "/data"])),
            r#"Projection(["/apiVersion", "/data", "/kind", "/metadata", "/spec/a~1b"])"#
        );
    }

    #[test]
    fn bad_pointers_are_refused_naming_the_culprit() {
        let err = |metadata_only: bool, pointers: &[&str]| {
            let pointers: Vec<String> = pointers.iter().map(|p| p.to_string()).collect();
            Projection::parse(metadata_only, &pointers)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(false, &["/ok", "spec/type"]),
            r#"fields[1] "spec/type" is not a JSON pointer (RFC 6901): it must start with '/'"#
        );
        assert!(err(false, &[""]).contains("leave fields empty"));
        assert!(err(false, &["/a~2"]).contains("'~' must be followed by '0' or '1'"));
        assert!(err(false, &["/a~"]).contains("'~' must be followed"));
        assert!(err(false, &["/a\nb"]).contains("control character"));
        let long = format!("/{}", "x".repeat(MAX_POINTER_BYTES));
        let e = err(false, &[&long]);
        assert!(e.contains("longer than 256 bytes"), "{e}");
        assert!(e.len() < 200, "the pointer is cut in the message: {e}");
        let many: Vec<String> = (0..=MAX_FIELDS).map(|i| format!("/f{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            err(false, &many),
            "fields lists 33 JSON pointers, more than the 32 a subscription may"
        );
        assert!(err(true, &["/spec"]).contains("exclude each other"));
        // Legal per RFC 6901: the empty key, and `~01` (a literal `~1`).
        assert!(Projection::parse(false, &["/spec/".into(), "/a~01".into()]).is_ok());
    }
}
