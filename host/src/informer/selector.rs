//! Kubernetes label-selector syntax, evaluated against cached objects' extracted labels.

/// One parsed requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`), so the cache host
/// import can filter the informer's store without a round trip to the API server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced ')' in selector {s:?}"));
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced '(' in selector {s:?}"));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected (values) in {whole:?}"))?;
    let mut vals = Vec::new();
    for v in inner.split(',') {
        let v = v.trim();
        if !valid_value(v) {
            return Err(format!("invalid value {v:?} in {whole:?}"));
        }
        vals.push(v.to_string());
    }
    Ok(vals)
}

fn parse_requirement(r: &str) -> Result<Requirement, String> {
    let t = r.trim();
    if t.is_empty() {
        return Err("empty requirement in selector".into());
    }
    if let Some(k) = t.strip_prefix('!') {
        let k = k.trim();
        return if valid_key(k) {
            Ok(Requirement::NotExists(k.into()))
        } else {
            Err(format!("invalid key in {t:?}"))
        };
    }
    for (op, neg) in [("!=", true), ("==", false), ("=", false)] {
        if let Some(i) = t.find(op) {
            let (k, v) = (t[..i].trim(), t[i + op.len()..].trim());
            if !valid_key(k) || !valid_value(v) {
                return Err(format!("invalid requirement {t:?}"));
            }
            return Ok(if neg {
                Requirement::NotEquals(k.into(), v.into())
            } else {
                Requirement::Equals(k.into(), v.into())
            });
        }
    }
    let mut parts = t.splitn(2, char::is_whitespace);
    let k = parts.next().unwrap_or_default().trim();
    let rest = parts.next().unwrap_or_default().trim_start();
    if !valid_key(k) {
        return Err(format!("invalid key in {t:?}"));
    }
    if rest.is_empty() {
        return Ok(Requirement::Exists(k.into()));
    }
    if let Some(set) = rest.strip_prefix("notin") {
        return Ok(Requirement::NotIn(k.into(), parse_set(set, t)?));
    }
    if let Some(set) = rest.strip_prefix("in") {
        return Ok(Requirement::In(k.into(), parse_set(set, t)?));
    }
    Err(format!("unknown operator in {t:?}"))
}

impl LabelSelector {
    /// Parses the API server's selector syntax; the empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let requirements = split_top_level(s)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()?;
        Ok(Self { requirements })
    }

    /// True when every requirement holds (`!=` and `notin` also match an absent label).
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        let get = |k: &str| {
            labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        };
        self.requirements.iter().all(|r| match r {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
        })
    }

    /// True when the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn selector_syntax() {
        let labels = l(&[("app", "web"), ("tier", "fe")]);
        for (s, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier in (fe,be)", true),
            ("app=web,tier=be", false),
        ] {
            assert_eq!(
                LabelSelector::parse(s).unwrap().matches(&labels),
                want,
                "{s}"
            );
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a=b,").is_err());
        assert!(LabelSelector::parse("app in (a").is_err());
    }
}
