//! KEP-5866's `shardSelector` (server-side sharded list and watch, Kubernetes 1.36+, alpha):
//! `shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')`, several joined
//! with `||`, all over the same field. An object belongs to a range when the FNV-1a 64 hash of
//! the field's bytes as served (the uid string, or the namespace, `""` when cluster-scoped) lies
//! in `[start, end)`.
//!
//! Parsing follows kube-apiserver's rules (the grammar is a fixed subset of CEL, parsed, never
//! evaluated): only `shardRange` and `||`; the fields `object.metadata.uid` and
//! `object.metadata.namespace`; bounds in single quotes, `0x` and exactly 16 lowercase hex digits,
//! except the end `'0x10000000000000000'` (2^64); start below end. The messages are our own.
//! One bound of ours: at most [`MAX_SHARD_RANGES`] ranges, so a request cannot make the server
//! hold an unbounded selector.

use std::fmt;

use crate::SelectorError;

/// Most ranges one selector may join (ours; a ring of 16 slots needs at most 16).
pub const MAX_SHARD_RANGES: usize = 256;

/// The exclusive end that covers the top of the hash space.
const FULL_END: u128 = 1 << 64;

/// The FNV-1a 64 hash KEP-5866 shards by.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The object field a selector hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardField {
    /// `object.metadata.uid`: spreads every object on its own.
    Uid,
    /// `object.metadata.namespace`: keeps a namespace together (`""` for cluster-scoped).
    Namespace,
}

impl ShardField {
    fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }
}

/// A parsed `shardSelector`: a union of `[start, end)` ranges of the hash of one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSelector {
    field: ShardField,
    /// `(start, end)` with `start < end <= 2^64`.
    ranges: Vec<(u64, u128)>,
}

impl ShardSelector {
    /// A selector over `field` from ranges `[start, end)` (`end` up to 2^64), as a client sends
    /// it; refuses what a server would.
    pub fn new(
        field: ShardField,
        ranges: impl IntoIterator<Item = (u64, u128)>,
    ) -> Result<ShardSelector, SelectorError> {
        let ranges: Vec<_> = ranges.into_iter().collect();
        if ranges.is_empty() {
            return Err(SelectorError::new(
                "a shard selector needs at least one range",
            ));
        }
        if ranges.len() > MAX_SHARD_RANGES {
            return Err(too_many());
        }
        for &(start, end) in &ranges {
            check_order(start, end)?;
        }
        Ok(ShardSelector { field, ranges })
    }

    /// Parses the query parameter's value.
    pub fn parse(text: &str) -> Result<ShardSelector, SelectorError> {
        if text.trim().is_empty() {
            return Err(SelectorError::new("shardSelector must not be empty"));
        }
        let mut p = Parser { text, at: 0 };
        let mut field = None;
        let mut ranges = Vec::new();
        loop {
            let (f, start, end) = p.range()?;
            if field.is_some_and(|seen| seen != f) {
                return Err(SelectorError::new(
                    "every shardRange of a selector must hash the same field",
                ));
            }
            field = Some(f);
            if ranges.len() == MAX_SHARD_RANGES {
                return Err(too_many());
            }
            ranges.push((start, end));
            p.skip_space();
            if p.at == text.len() {
                break;
            }
            p.expect("||")?;
        }
        Ok(ShardSelector {
            field: field.expect("one range at least"),
            ranges,
        })
    }

    /// The field hashed.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// Whether a hash lies in one of the ranges.
    pub fn contains(&self, hash: u64) -> bool {
        self.ranges
            .iter()
            .any(|&(start, end)| hash >= start && u128::from(hash) < end)
    }

    /// Whether an object with this uid and namespace (`""` when cluster-scoped) is selected.
    pub fn matches(&self, uid: &str, namespace: &str) -> bool {
        let value = match self.field {
            ShardField::Uid => uid,
            ShardField::Namespace => namespace,
        };
        self.contains(fnv1a64(value.as_bytes()))
    }

    /// [`ShardSelector::matches`] on an object as served (JSON).
    pub fn matches_object(&self, obj: &serde_json::Value) -> bool {
        let meta = |k: &str| obj["metadata"][k].as_str().unwrap_or("");
        self.matches(meta("uid"), meta("namespace"))
    }
}

/// The canonical text: what a client sends, one space after each comma, ` || ` between ranges.
impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(start, end)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '0x{start:016x}', '0x{end:016x}')",
                self.field.path()
            )?;
        }
        Ok(())
    }
}

fn too_many() -> SelectorError {
    SelectorError::new(format!(
        "a shard selector joins at most {MAX_SHARD_RANGES} ranges"
    ))
}

fn check_order(start: u64, end: u128) -> Result<(), SelectorError> {
    if end > FULL_END {
        return Err(SelectorError::new(
            "a shard range ends at '0x10000000000000000' at the most",
        ));
    }
    if u128::from(start) >= end {
        return Err(SelectorError::new(format!(
            "shard range start '0x{start:016x}' must be below its end '0x{end:016x}'"
        )));
    }
    Ok(())
}

/// A cursor over the selector text.
struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// What stands at the cursor, cut short and quoted, for a message.
    fn found(&self) -> String {
        let rest = self.rest();
        if rest.is_empty() {
            return "the end".into();
        }
        let cut: String = rest.chars().take(24).collect();
        format!("{cut:?}")
    }

    fn expect(&mut self, token: &str) -> Result<(), SelectorError> {
        self.skip_space();
        if self.rest().starts_with(token) {
            self.at += token.len();
            Ok(())
        } else {
            Err(SelectorError::new(format!(
                "shardSelector: expected {token:?} at offset {}, found {}",
                self.at,
                self.found()
            )))
        }
    }

    /// `shardRange(<field>, '<start>', '<end>')`.
    fn range(&mut self) -> Result<(ShardField, u64, u128), SelectorError> {
        self.expect("shardRange")?;
        self.expect("(")?;
        self.skip_space();
        let field = [ShardField::Uid, ShardField::Namespace]
            .into_iter()
            .find(|f| {
                self.rest().starts_with(f.path())
                    && !self.rest()[f.path().len()..]
                        .starts_with(|c: char| c.is_alphanumeric() || c == '.' || c == '_')
            })
            .ok_or_else(|| {
                SelectorError::new(format!(
                    "shardSelector: unsupported field at offset {}, found {}: only \
                     object.metadata.uid and object.metadata.namespace",
                    self.at,
                    self.found()
                ))
            })?;
        self.at += field.path().len();
        self.expect(",")?;
        let start = self.bound(false)?;
        self.expect(",")?;
        let end = self.bound(true)?;
        self.expect(")")?;
        check_order(start as u64, end)?;
        Ok((field, start as u64, end))
    }

    /// `'0x'` + 16 lowercase hex digits; an end may be `'0x10000000000000000'`.
    fn bound(&mut self, is_end: bool) -> Result<u128, SelectorError> {
        self.expect("'")?;
        let rest = self.rest();
        let len = rest.find('\'').ok_or_else(|| {
            SelectorError::new(format!(
                "shardSelector: unterminated bound at offset {}",
                self.at
            ))
        })?;
        let raw = &rest[..len];
        let digits = raw.strip_prefix("0x").unwrap_or("");
        let lower_hex = |s: &str| s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'));
        let value = if digits.len() == 16 && lower_hex(digits) {
            u128::from_str_radix(digits, 16).ok()
        } else if is_end && raw == "0x10000000000000000" {
            Some(FULL_END)
        } else {
            None
        };
        let Some(value) = value else {
            let shown: String = raw.chars().take(24).collect();
            let hint = match digits {
                d if !d.is_empty() && d.len() < 16 && lower_hex(d) => {
                    format!("; did you mean '0x{:0>16}'?", d)
                }
                _ => String::new(),
            };
            return Err(SelectorError::new(format!(
                "shardSelector: bound {shown:?} is not '0x' and 16 lowercase hex digits{hint}"
            )));
        };
        self.at += len + 1;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: &str =
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";

    #[test]
    fn fnv1a64_matches_the_reference_values() {
        // The empty string hashes to the offset basis: a cluster-scoped object's namespace.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn one_range_and_a_union_parse_and_print_back() {
        let s = ShardSelector::parse(HALF).unwrap();
        assert_eq!(s.field(), ShardField::Uid);
        assert_eq!(s.to_string(), HALF);
        assert!(s.contains(0) && s.contains(0x7fff_ffff_ffff_ffff));
        assert!(!s.contains(0x8000_0000_0000_0000));
        let union = "shardRange(object.metadata.namespace,'0x0000000000000000','0x4000000000000000')||\
             shardRange( object.metadata.namespace , '0xc000000000000000' , '0x10000000000000000' )";
        let s = ShardSelector::parse(union).unwrap();
        assert_eq!(s.field(), ShardField::Namespace);
        assert!(s.contains(u64::MAX) && s.contains(0x3fff_ffff_ffff_ffff));
        assert!(!s.contains(0x4000_0000_0000_0000) && !s.contains(0xbfff_ffff_ffff_ffff));
        assert_eq!(ShardSelector::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn objects_are_matched_by_the_hash_of_the_field() {
        let all = ShardSelector::new(ShardField::Uid, [(0, FULL_END)]).unwrap();
        let uid = "8c1f0b2e-3d4a-4e5f-9a6b-7c8d9e0f1a2b";
        assert!(all.matches(uid, "default"));
        let h = fnv1a64(uid.as_bytes());
        let just = ShardSelector::new(ShardField::Uid, [(h, u128::from(h) + 1)]).unwrap();
        let obj = serde_json::json!({"metadata": {"uid": uid, "namespace": "x"}});
        assert!(just.matches_object(&obj));
        let other = ShardSelector::new(ShardField::Uid, [(h + 1, FULL_END)]).unwrap();
        assert!(!other.matches_object(&obj));
        // Cluster-scoped objects hash the empty namespace.
        let basis = fnv1a64(b"");
        let ns =
            ShardSelector::new(ShardField::Namespace, [(basis, u128::from(basis) + 1)]).unwrap();
        assert!(ns.matches_object(&serde_json::json!({"metadata": {"uid": uid}})));
    }

    #[test]
    fn what_a_server_refuses_is_refused_with_the_reason() {
        let refused = |s: &str| ShardSelector::parse(s).unwrap_err().to_string();
        assert!(refused("").contains("must not be empty"));
        assert!(refused("   ").contains("must not be empty"));
        let short = refused("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')");
        assert!(
            short.contains("did you mean '0x0000000000000000'"),
            "{short}"
        );
        let upper =
            refused("shardRange(object.metadata.uid, '0x000000000000000A', '0x8000000000000000')");
        assert!(upper.contains("lowercase"), "{upper}");
        let start_2_64 = refused(
            "shardRange(object.metadata.uid, '0x10000000000000000', '0x10000000000000000')",
        );
        assert!(
            start_2_64.contains("16 lowercase hex digits"),
            "{start_2_64}"
        );
        let backwards =
            refused("shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')");
        assert!(backwards.contains("must be below its end"), "{backwards}");
        let field =
            refused("shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')");
        assert!(field.contains("unsupported field"), "{field}");
        let prefix =
            refused("shardRange(object.metadata.uidx, '0x0000000000000000', '0x8000000000000000')");
        assert!(prefix.contains("unsupported field"), "{prefix}");
        let mixed = format!(
            "{HALF} || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')"
        );
        assert!(refused(&mixed).contains("same field"));
        assert!(refused(&format!("{HALF} && {HALF}")).contains("expected \"||\""));
        assert!(refused(&format!("{HALF} ||")).contains("expected \"shardRange\""));
        assert!(
            refused("shardRange(object.metadata.uid, '0x0000000000000000").contains("unterminated")
        );
        assert!(refused("has(object.metadata.uid)").contains("expected \"shardRange\""));
    }

    #[test]
    fn a_selector_holds_a_bounded_number_of_ranges() {
        let many = vec![HALF; MAX_SHARD_RANGES + 1].join(" || ");
        assert!(
            ShardSelector::parse(&many)
                .unwrap_err()
                .to_string()
                .contains("at most")
        );
        assert!(ShardSelector::parse(&vec![HALF; MAX_SHARD_RANGES].join(" || ")).is_ok());
        assert!(ShardSelector::new(ShardField::Uid, vec![(0, 1); MAX_SHARD_RANGES + 1]).is_err());
        assert!(ShardSelector::new(ShardField::Uid, []).is_err());
        assert!(ShardSelector::new(ShardField::Uid, [(0, FULL_END + 1)]).is_err());
    }

    #[test]
    fn messages_never_carry_more_than_a_cut_of_the_input() {
        let long = format!("shardRange(object.metadata.{}", "x".repeat(10_000));
        let e = ShardSelector::parse(&long).unwrap_err().to_string();
        assert!(e.len() < 300, "{e}");
        let long_bound = format!(
            "shardRange(object.metadata.uid, '0x{}', '0x8000000000000000')",
            "f".repeat(10_000)
        );
        let e = ShardSelector::parse(&long_bound).unwrap_err().to_string();
        assert!(e.len() < 300, "{e}");
    }
}
