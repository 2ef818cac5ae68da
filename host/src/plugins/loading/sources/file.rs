//! The sources file (`--plugin-sources FILE`): which plugins come from registries, pinned or
//! following a tag, and with what settings. Every string in it is checked before anything is
//! pulled; an error names the file and the entry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::plugins::loading::describe::{NameError, check_file_name};
use crate::plugins::loading::manifest::Manifest;
use crate::registry::{ArtifactRef, KeyFileError, PublicKey, ReferenceError};

/// Most plugins one sources file may name.
pub(crate) const MAX_SOURCES: usize = 256;
/// Largest sources file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most public keys one plugin may list (each is tried on each signature).
const MAX_KEYS: usize = 8;
/// Shortest and longest poll interval of a followed tag.
const MIN_POLL: Duration = Duration::from_secs(1);
const MAX_POLL: Duration = Duration::from_secs(24 * 3600);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    plugin: Vec<EntryToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct EntryToml {
    name: String,
    reference: String,
    follow: Option<String>,
    #[serde(default)]
    plain_http: bool,
    #[serde(default)]
    keys: Vec<PathBuf>,
    manifest: Option<toml::Table>,
    manifest_file: Option<PathBuf>,
}

/// One plugin the sources file names, checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Source {
    /// Plugin name, as a file stem would be.
    pub(crate) name: String,
    /// What to pull; pinned by digest unless `follow` is set.
    pub(crate) reference: ArtifactRef,
    /// Poll interval of a followed tag; `None` runs the pinned digest only.
    pub(crate) follow: Option<Duration>,
    /// Talk plain HTTP to this registry.
    pub(crate) plain_http: bool,
    /// Cosign public keys; when any are given, a digest runs only if one of them signed it.
    pub(crate) keys: Vec<PublicKey>,
    /// The `NAME.toml` text the plugin is loaded with (`None`: the default grants).
    pub(crate) manifest: Option<String>,
}

/// A sources file refused, naming the file, the entry and the setting (the cause chain keeps
/// each level's error).
#[derive(Debug, thiserror::Error)]
#[error("plugin sources {path}: {source}")]
pub struct SourcesFileError {
    path: PathBuf,
    #[source]
    source: SourcesError,
}

/// Why a sources file's text is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SourcesError {
    /// The file could not be read.
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// The file is larger than any sources file.
    #[error("over {MAX_FILE_BYTES} bytes")]
    TooBig,
    /// Not TOML of the sources file's shape.
    #[error("{0}")]
    Toml(#[source] Box<toml::de::Error>),
    /// More plugins than one file may name.
    #[error("{0} plugins; at most {MAX_SOURCES}")]
    TooMany(usize),
    /// Two entries with one name.
    #[error("plugin {0:?} is named twice")]
    Twice(String),
    /// The entry (1-based) is refused.
    #[error("[[plugin]] #{index}: {source}")]
    Entry {
        /// Its position in the file, from 1.
        index: usize,
        /// Why.
        #[source]
        source: Box<EntryError>,
    },
}

/// Why one `[[plugin]]` entry is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EntryError {
    /// The name cannot name a plugin (shown cut to 80 bytes).
    #[error("name {name:?}: {source}")]
    Name {
        /// The name as written.
        name: String,
        /// Why.
        #[source]
        source: NameError,
    },
    /// A setting of the plugin `name` is refused.
    #[error("{name}: {source}")]
    Setting {
        /// The plugin's (checked) name.
        name: String,
        /// Which setting and why.
        #[source]
        source: SettingError,
    },
}

/// Which setting of an entry is refused, and why.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SettingError {
    /// `reference` is not an artifact reference.
    #[error("reference: {0}")]
    Reference(#[source] ReferenceError),
    /// `follow` is not a duration.
    #[error("follow = {value:?}: {source} (e.g. \"5m\")")]
    FollowSyntax {
        /// As written.
        value: String,
        /// Why.
        #[source]
        source: humantime::DurationError,
    },
    /// `follow` outside the poll bounds.
    #[error("follow = {0:?}: poll between 1s and 24h")]
    FollowRange(String),
    /// `follow` with a reference that cannot move.
    #[error("follow needs a reference by tag without a digest (the tag is what moves)")]
    FollowPinned,
    /// Neither pinned nor followed.
    #[error(
        "reference {0} is not pinned: add @sha256:… (kubewasm push prints it), or set follow = \"5m\" to follow the tag"
    )]
    NotPinned(ArtifactRef),
    /// More keys than one plugin may list.
    #[error("keys: at most {MAX_KEYS}")]
    TooManyKeys,
    /// A key file that cannot be read.
    #[error("keys: {0}")]
    Key(#[source] KeyFileError),
    /// `manifest` and `manifest-file` together.
    #[error("set manifest or manifest-file, not both")]
    BothManifests,
    /// An inline `manifest` table that does not write back as TOML.
    #[error("{0}")]
    ManifestTable(#[source] toml::ser::Error),
    /// A `manifest-file` that cannot be read.
    #[error("{path}: {source}")]
    ManifestFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A manifest that is not a valid `NAME.toml`.
    #[error("manifest: {0}")]
    Manifest(#[source] toml::de::Error),
}

/// Reads and checks the sources file at `path`.
pub(crate) fn load(path: &Path) -> Result<Vec<Source>, SourcesFileError> {
    use std::io::Read;
    let read = || {
        let file = std::fs::File::open(path).map_err(SourcesError::Read)?;
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(SourcesError::Read)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(SourcesError::TooBig);
        }
        parse(&text, path.parent().unwrap_or(Path::new(".")))
    };
    read().map_err(|source| SourcesFileError {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a sources file's text; `manifest-file` paths are relative to `dir`.
pub(crate) fn parse(text: &str, dir: &Path) -> Result<Vec<Source>, SourcesError> {
    let file: FileToml = toml::from_str(text).map_err(|e| SourcesError::Toml(Box::new(e)))?;
    if file.plugin.len() > MAX_SOURCES {
        return Err(SourcesError::TooMany(file.plugin.len()));
    }
    let mut out: Vec<Source> = Vec::with_capacity(file.plugin.len());
    for (i, e) in file.plugin.into_iter().enumerate() {
        let source = entry(e, dir).map_err(|source| SourcesError::Entry {
            index: i + 1,
            source: Box::new(source),
        })?;
        if out.iter().any(|s| s.name == source.name) {
            return Err(SourcesError::Twice(source.name));
        }
        out.push(source);
    }
    Ok(out)
}

fn entry(e: EntryToml, dir: &Path) -> Result<Source, EntryError> {
    check_file_name(Path::new(&format!("{}.wasm", e.name))).map_err(|source| EntryError::Name {
        name: crate::text::clip(&e.name, 80).into_owned(),
        source,
    })?;
    settings(&e, dir).map_err(|source| EntryError::Setting {
        name: e.name.clone(),
        source,
    })
}

/// The entry's settings, checked; its name already is.
fn settings(e: &EntryToml, dir: &Path) -> Result<Source, SettingError> {
    let reference = ArtifactRef::parse(&e.reference).map_err(SettingError::Reference)?;
    let follow = match &e.follow {
        None => None,
        Some(s) => {
            let d = humantime::parse_duration(s).map_err(|source| SettingError::FollowSyntax {
                value: s.clone(),
                source,
            })?;
            if !(MIN_POLL..=MAX_POLL).contains(&d) {
                return Err(SettingError::FollowRange(s.clone()));
            }
            if reference.tag.is_none() || reference.digest.is_some() {
                return Err(SettingError::FollowPinned);
            }
            Some(d)
        }
    };
    if follow.is_none() && reference.digest.is_none() {
        return Err(SettingError::NotPinned(reference));
    }
    if e.keys.len() > MAX_KEYS {
        return Err(SettingError::TooManyKeys);
    }
    let keys = e
        .keys
        .iter()
        .map(|k| PublicKey::load(&dir.join(k)).map_err(SettingError::Key))
        .collect::<Result<Vec<_>, _>>()?;
    let manifest = match (&e.manifest, &e.manifest_file) {
        (Some(_), Some(_)) => return Err(SettingError::BothManifests),
        (Some(table), None) => Some(toml::to_string(table).map_err(SettingError::ManifestTable)?),
        (None, Some(p)) => {
            let path = dir.join(p);
            Some(
                std::fs::read_to_string(&path)
                    .map_err(|source| SettingError::ManifestFile { path, source })?,
            )
        }
        (None, None) => None,
    };
    if let Some(text) = &manifest {
        // Refused here, naming the sources file, rather than at every pull.
        toml::from_str::<Manifest>(text).map_err(SettingError::Manifest)?;
    }
    Ok(Source {
        name: e.name.clone(),
        reference,
        follow,
        plain_http: e.plain_http,
        keys,
        manifest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn a_sources_file_with_pinned_and_followed_plugins() {
        let text = format!(
            r#"
            [[plugin]]
            name = "logger"
            reference = "127.0.0.1:5000/handlers/logger:v1@{DIGEST}"
            plain-http = true
            [plugin.manifest]
            deadline-ms = 500
            [plugin.manifest.grants]
            watch = [{{ api-version = "v1", kind = "ConfigMap" }}]

            [[plugin]]
            name = "notifier"
            reference = "ghcr.io/acme/notifier:stable"
            follow = "5m"
            "#
        );
        let s = parse(&text, Path::new(".")).unwrap();
        assert_eq!(s.len(), 2);
        assert!(s[0].plain_http && s[0].follow.is_none());
        let m: Manifest = toml::from_str(s[0].manifest.as_deref().unwrap()).unwrap();
        assert_eq!(m.deadline_ms, Some(500));
        assert!(m.grants.is_some());
        assert_eq!(s[1].follow, Some(Duration::from_secs(300)));
        assert_eq!(s[1].manifest, None);
    }

    #[test]
    fn bad_entries_are_refused_naming_the_entry() {
        let one = |body: &str| {
            parse(&format!("[[plugin]]\n{body}"), Path::new("."))
                .unwrap_err()
                .to_string()
        };
        for (body, expect) in [
            (
                "name = \"a\"\nreference = \"ghcr.io/a:v1\"".to_string(),
                "not pinned",
            ),
            (
                format!("name = \"a b\"\nreference = \"ghcr.io/a@{DIGEST}\""),
                "character",
            ),
            (
                format!("name = \"a\"\nreference = \"ghcr.io/a@{DIGEST}\"\nfollow = \"5m\""),
                "follow needs",
            ),
            (
                "name = \"a\"\nreference = \"ghcr.io/a:v1\"\nfollow = \"1ms\"".to_string(),
                "between",
            ),
            (
                "name = \"a\"\nreference = \"ghcr.io/a:v1\"\nfollow = \"soon\"".to_string(),
                "follow",
            ),
            (
                format!(
                    "name = \"a\"\nreference = \"ghcr.io/a@{DIGEST}\"\nkeys = [\"nowhere.pub\"]"
                ),
                "nowhere.pub",
            ),
            (
                format!(
                    "name = \"a\"\nreference = \"ghcr.io/a@{DIGEST}\"\n[plugin.manifest]\ndeadline_ms = 1"
                ),
                "manifest",
            ),
            (
                format!("name = \"a\"\nreference = \"ghcr.io/a@{DIGEST}\"\ntypo = 1"),
                "unknown field",
            ),
            (
                "name = \"a\"\nreference = \"Ghcr.io/A:v1\"\nfollow = \"5m\"".to_string(),
                "reference",
            ),
        ] {
            let e = one(&body);
            assert!(e.contains(expect), "{body}: {e}");
        }
        let twice = format!(
            "[[plugin]]\nname = \"a\"\nreference = \"ghcr.io/a@{DIGEST}\"\n[[plugin]]\nname = \"a\"\nreference = \"ghcr.io/b@{DIGEST}\""
        );
        assert!(
            parse(&twice, Path::new("."))
                .unwrap_err()
                .to_string()
                .contains("named twice")
        );
    }

    #[test]
    fn keys_and_manifest_files_are_read_relative_to_the_sources_file() {
        let dir = tempfile::tempdir().unwrap();
        let (_, public) = crate::registry::SigningKey::generate().unwrap();
        std::fs::write(dir.path().join("cosign.pub"), public.to_pem()).unwrap();
        std::fs::write(
            dir.path().join("bad.pub"),
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("a.toml"), "deadline-ms = 700\n").unwrap();
        let entry = |extra: &str| {
            format!("[[plugin]]\nname = \"a\"\nreference = \"ghcr.io/a@{DIGEST}\"\n{extra}")
        };
        let s = parse(
            &entry("keys = [\"cosign.pub\"]\nmanifest-file = \"a.toml\""),
            dir.path(),
        )
        .unwrap();
        assert_eq!(s[0].keys, [public]);
        assert_eq!(s[0].manifest.as_deref(), Some("deadline-ms = 700\n"));
        let e = parse(&entry("keys = [\"bad.pub\"]"), dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.pub") && e.contains("P-256"), "{e}");
        let e = parse(&entry("manifest-file = \"none.toml\""), dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("none.toml"), "{e}");
        let e = parse(
            &entry("manifest-file = \"a.toml\"\n[plugin.manifest]\ndeadline-ms = 1"),
            dir.path(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not both"), "{e}");
    }
}
