//! [`GrantChange`]: how the grants of a new version of a plugin differ from the running one's,
//! one line per grant entry, so a hot swap or a manifest edit that widens what a plugin may do
//! is never silent.

use std::collections::BTreeSet;
use std::fmt;
use std::fmt::Write as _;

use super::*;

/// Grant entries added and removed between two versions of a plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GrantChange {
    /// Entries the new version has and the old one had not, as `NAME.toml`-like lines.
    pub added: Vec<String>,
    /// Entries the old version had and the new one has not.
    pub removed: Vec<String>,
}

impl GrantChange {
    /// The difference from `old` to `new`.
    pub(crate) fn between(old: &Grants, new: &Grants) -> GrantChange {
        let (old, new) = (lines(old), lines(new));
        GrantChange {
            added: new.difference(&old).cloned().collect(),
            removed: old.difference(&new).cloned().collect(),
        }
    }

    /// Whether the grants are the same.
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

impl fmt::Display for GrantChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |l: &[String]| {
            if l.is_empty() {
                "nothing".to_string()
            } else {
                l.join("; ")
            }
        };
        write!(
            f,
            "added: {}; removed: {}",
            list(&self.added),
            list(&self.removed)
        )
    }
}

/// `namespaces = [...]` of an entry, or nothing for every namespace.
fn namespaces(list: &Option<NamespaceList>) -> String {
    match list {
        None => String::new(),
        Some(l) => format!(
            ", namespaces = [{}]",
            l.names()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// One line per grant entry and setting of `g`.
fn lines(g: &Grants) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in g.watch_grants() {
        out.insert(format!(
            "watch {{ api-version = {:?}, kind = {:?}{} }}",
            w.api_version.as_str(),
            w.kind.as_str(),
            namespaces(&w.namespaces)
        ));
    }
    for w in g.write_grants() {
        let mut line = format!(
            "write {{ api-version = {:?}, kind = {:?}, verbs = [{}]{}",
            w.api_version.as_str(),
            w.kind.as_str(),
            w.verbs
                .verbs()
                .iter()
                .map(|v| format!("{:?}", v.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
            namespaces(&w.namespaces)
        );
        if !w.subresources.is_empty() {
            let names: Vec<String> = w
                .subresources
                .iter()
                .map(|s| format!("{:?}", s.as_str()))
                .collect();
            let _ = write!(line, ", subresources = [{}]", names.join(", "));
        }
        line.push_str(" }");
        out.insert(line);
    }
    if g.events() {
        out.insert("events = true".into());
    }
    for o in g.http_origins() {
        let private = if o.private() { " (private)" } else { "" };
        out.insert(format!("http {:?}{private}", o.to_string()));
    }
    out.insert(format!("write-qps = {}", g.write_qps()));
    out.insert(format!("write-burst = {}", g.write_burst()));
    out.insert(format!("read-qps = {}", g.read_qps()));
    out.insert(format!("read-burst = {}", g.read_burst()));
    out.insert(format!("http-max-inflight = {}", g.http_max_inflight()));
    if g.dry_run() {
        out.insert("dry-run = true".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(toml_text: &str) -> Grants {
        #[derive(serde::Deserialize)]
        struct File {
            grants: GrantsTable,
        }
        let f: File = toml::from_str(toml_text).unwrap();
        Grants::from_table(f.grants, GrantSource::BuiltIn)
    }

    #[test]
    fn a_widened_origin_and_a_dropped_namespace_are_named() {
        let old = grants(
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"a\"] }]\n\
             http = [\"https://api.example.com\"]\n",
        );
        let new = grants(
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
             http = [\"https://api.example.com\", \"https://*.example.com\"]\n",
        );
        let change = GrantChange::between(&old, &new);
        assert_eq!(
            change.added,
            [
                "http \"https://*.example.com\"",
                "watch { api-version = \"v1\", kind = \"ConfigMap\" }"
            ]
        );
        assert_eq!(
            change.removed,
            ["watch { api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"a\"] }"]
        );
        assert!(GrantChange::between(&new, &new.clone()).is_empty());
    }
}
