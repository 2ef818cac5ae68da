//! What a plugin asks for beyond its grants: each missing grant, and the `NAME.toml` lines
//! that would grant it, for load errors and `kubewasm check`.

use std::fmt;
use std::path::Path;

use kubewasm_apimachinery::validation::{
    ValidationError, validate_api_version, validate_dns1123_label, validate_kind,
};

use super::*;
use crate::runtime::{Permission, PluginInfo, Subscription};

/// What `describe()` asks for, validated.
pub(super) struct Asks {
    pub(super) origins: Vec<OriginPattern>,
}

impl Asks {
    pub(super) fn validate(info: &PluginInfo) -> Result<Asks, InvalidAsk> {
        if info.permissions.len() > MAX_PERMISSIONS {
            return Err(InvalidAsk::Permissions(info.permissions.len()));
        }
        if info.http_origins.len() > MAX_HTTP_ORIGINS {
            return Err(InvalidAsk::Origins(info.http_origins.len()));
        }
        for (index, p) in info.permissions.iter().enumerate() {
            let bad = |field, value: &str, source| InvalidAsk::Field {
                index,
                field,
                value: Quoted(value).to_string(),
                source,
            };
            validate_api_version(&p.api_version)
                .map_err(|e| bad("api-version", &p.api_version, e))?;
            validate_kind(&p.kind).map_err(|e| bad("kind", &p.kind, e))?;
            if let Some(ns) = &p.namespace {
                validate_dns1123_label(ns).map_err(|e| bad("namespace", ns, e))?;
            }
            if p.verbs.is_empty() {
                return Err(InvalidAsk::NoVerbs(index));
            }
            if p.verbs.len() > READ_VERBS.len() + Verb::ALL.len() {
                return Err(InvalidAsk::Verbs {
                    index,
                    count: p.verbs.len(),
                });
            }
            for v in &p.verbs {
                if !READ_VERBS.contains(&v.as_str()) && Verb::parse(v).is_none() {
                    return Err(InvalidAsk::Verb {
                        index,
                        verb: Quoted(v).to_string(),
                    });
                }
            }
        }
        let origins = info
            .http_origins
            .iter()
            .map(|o| OriginPattern::parse(o).map_err(InvalidAsk::Origin))
            .collect::<Result<_, _>>()?;
        Ok(Asks { origins })
    }
}

/// What is malformed in a `describe()`: the entry and (quoted, escaped) value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAsk {
    /// More permissions than a plugin may ask for.
    #[error("describe() asks for {0} permissions, more than {MAX_PERMISSIONS}")]
    Permissions(usize),
    /// More HTTP origins than a plugin may ask for.
    #[error("describe() asks for {0} HTTP origins, more than {MAX_HTTP_ORIGINS}")]
    Origins(usize),
    /// A permission's api-version, kind or namespace breaks the API server's syntax.
    #[error("permission {index}: {field} {value}: {source}")]
    Field {
        /// Which permission, from 0.
        index: usize,
        /// `api-version`, `kind` or `namespace`.
        field: &'static str,
        /// The value, quoted.
        value: String,
        /// The rule it breaks.
        #[source]
        source: ValidationError,
    },
    /// A permission without verbs.
    #[error("permission {0}: no verbs")]
    NoVerbs(usize),
    /// More verbs than exist.
    #[error("permission {index}: {count} verbs")]
    Verbs {
        /// Which permission, from 0.
        index: usize,
        /// How many.
        count: usize,
    },
    /// A verb that is not a Kubernetes verb a plugin may use.
    #[error(
        "permission {index}: verb {verb}: not one of get, list, watch, create, update, patch, \
         delete, apply"
    )]
    Verb {
        /// Which permission, from 0.
        index: usize,
        /// The verb, quoted.
        verb: String,
    },
    /// An HTTP origin that does not parse.
    #[error("http-origins: {0}")]
    Origin(#[source] OriginError),
}

/// One thing `describe()` asks for that the grants do not cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// A subscription outside the `watch` grants.
    Watch(Subscription),
    /// A permission's read verbs outside the `watch` grants.
    Read(Permission),
    /// A permission's write verbs (only the missing ones) outside the `write` grants.
    Write(Permission),
    /// Events asked for, not granted.
    Events,
    /// An HTTP origin no granted origin covers.
    Http(OriginPattern),
}

pub(super) fn where_(ns: &Option<String>) -> String {
    match ns {
        Some(n) => format!("in namespace {n}"),
        None => "in every namespace".into(),
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Watch(s) => write!(
                f,
                "watch {} {} {}",
                s.api_version,
                s.kind,
                where_(&s.namespace)
            ),
            Missing::Read(p) | Missing::Write(p) => write!(
                f,
                "{} {} {} {}",
                p.verbs.join(", "),
                p.api_version,
                p.kind,
                where_(&p.namespace)
            ),
            Missing::Events => f.write_str("record Events"),
            Missing::Http(o) => write!(f, "HTTP to {o}"),
        }
    }
}

/// Why [`Grants::check`] refused a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantError {
    /// `describe()` asked for something malformed (names the entry and value).
    InvalidAsk(InvalidAsk),
    /// Asks the grants do not cover.
    Missing(Vec<Missing>),
}

/// The `[grants]` lines that would grant `missing`, as TOML (for error messages and
/// `kubewasm check`).
pub(crate) fn toml_lines(missing: &[Missing]) -> Vec<String> {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let ns = |n: &Option<String>| match n {
        Some(n) => format!(", namespaces = [{}]", q(n)),
        None => String::new(),
    };
    let (mut watch, mut write, mut http, mut events) = (Vec::new(), Vec::new(), Vec::new(), false);
    for m in missing {
        match m {
            Missing::Watch(s) => watch.push(format!(
                "{{ api-version = {}, kind = {}{} }}",
                q(&s.api_version),
                q(&s.kind),
                ns(&s.namespace)
            )),
            Missing::Read(p) => watch.push(format!(
                "{{ api-version = {}, kind = {}{} }}",
                q(&p.api_version),
                q(&p.kind),
                ns(&p.namespace)
            )),
            Missing::Write(p) => write.push(format!(
                "{{ api-version = {}, kind = {}, verbs = [{}]{} }}",
                q(&p.api_version),
                q(&p.kind),
                p.verbs.iter().map(|v| q(v)).collect::<Vec<_>>().join(", "),
                ns(&p.namespace)
            )),
            Missing::Events => events = true,
            Missing::Http(o) => http.push(q(&o.to_string())),
        }
    }
    let mut seen = std::collections::HashSet::new();
    watch.retain(|w| seen.insert(w.clone()));
    fn list(lines: &mut Vec<String>, key: &str, items: Vec<String>) {
        match items.len() {
            0 => {}
            1 => lines.push(format!("{key} = [{}]", items[0])),
            _ => {
                lines.push(format!("{key} = ["));
                lines.extend(items.into_iter().map(|i| format!("  {i},")));
                lines.push("]".into());
            }
        }
    }
    let mut lines = vec!["[grants]".to_string()];
    list(&mut lines, "watch", watch);
    list(&mut lines, "write", write);
    if events {
        lines.push("events = true".into());
    }
    list(&mut lines, "http", http);
    lines
}

impl GrantError {
    /// The `[grants]` lines that would let the plugin load: what is missing when the grants
    /// came from its manifest; everything it asks for when they came from a default (a
    /// `[grants]` table replaces the default as a whole). Empty when nothing is missing.
    pub fn suggestion(&self, grants: &Grants, info: &PluginInfo) -> Vec<String> {
        let GrantError::Missing(missing) = self else {
            return Vec::new();
        };
        if matches!(grants.source(), GrantSource::Manifest { .. }) {
            return toml_lines(missing);
        }
        let nothing = Grants::from_table(GrantsTable::default(), GrantSource::BuiltIn);
        match nothing.check(info) {
            Err(GrantError::Missing(all)) => toml_lines(&all),
            _ => toml_lines(missing),
        }
    }

    /// The load error's message: each missing grant, then the `NAME.toml` lines that would
    /// grant it. A `[grants]` table replaces the default entirely, so when the grants came
    /// from a default the suggested table grants everything the plugin asks for.
    pub fn message(
        &self,
        name: &str,
        grants: &Grants,
        manifest: &Path,
        info: &PluginInfo,
    ) -> String {
        let missing = match self {
            GrantError::InvalidAsk(m) => return format!("describe() of plugin {name}: {m}"),
            GrantError::Missing(m) => m,
        };
        let mut out = format!(
            "describe() of plugin {name} asks for more than it is granted by {}:",
            grants.source()
        );
        for m in missing {
            out.push_str(&format!("\n  - not granted: {m}"));
        }
        out.push_str(&match grants.source() {
            GrantSource::Manifest { .. } => format!(
                "\nto grant it, add to the [grants] table of {} (merging into arrays already there):",
                manifest.display()
            ),
            _ => format!(
                "\nto grant it, put this table in {} (a [grants] table replaces the default, so it lists everything the plugin asks for):",
                manifest.display()
            ),
        });
        for l in self.suggestion(grants, info) {
            out.push_str("\n    ");
            out.push_str(&l);
        }
        out
    }
}

/// A guest or operator string in a message: debug-quoted (control characters escaped) and cut
/// to a bounded length.
pub(super) struct Quoted<'a>(pub(super) &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = crate::text::truncate(self.0, 128);
        write!(f, "{shown:?}")?;
        if shown.len() < self.0.len() {
            write!(f, "…")?;
        }
        Ok(())
    }
}
