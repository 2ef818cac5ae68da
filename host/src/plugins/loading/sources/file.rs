//! The sources file (`--plugin-sources FILE`): which plugins come from registries, pinned or
//! following a tag, and with what settings. Every string in it is checked before anything is
//! pulled; an error names the file and the entry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::plugins::loading::describe::check_file_name;
use crate::plugins::loading::manifest::Manifest;
use crate::registry::{ArtifactRef, PublicKey};

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

/// Reads and checks the sources file at `path`.
pub(crate) fn load(path: &Path) -> Result<Vec<Source>, String> {
    use std::io::Read;
    let at = |e: String| format!("plugin sources {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| at(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| at(e.to_string()))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(at(format!("over {MAX_FILE_BYTES} bytes")));
    }
    parse(&text, path.parent().unwrap_or(Path::new("."))).map_err(at)
}

/// Parses a sources file's text; `manifest-file` paths are relative to `dir`.
pub(crate) fn parse(text: &str, dir: &Path) -> Result<Vec<Source>, String> {
    let file: FileToml = toml::from_str(text).map_err(|e| e.to_string())?;
    if file.plugin.len() > MAX_SOURCES {
        return Err(format!(
            "{} plugins; at most {MAX_SOURCES}",
            file.plugin.len()
        ));
    }
    let mut out: Vec<Source> = Vec::with_capacity(file.plugin.len());
    for (i, e) in file.plugin.into_iter().enumerate() {
        let source = entry(e, dir).map_err(|m| format!("[[plugin]] #{}: {m}", i + 1))?;
        if out.iter().any(|s| s.name == source.name) {
            return Err(format!("plugin {:?} is named twice", source.name));
        }
        out.push(source);
    }
    Ok(out)
}

fn entry(e: EntryToml, dir: &Path) -> Result<Source, String> {
    check_file_name(Path::new(&format!("{}.wasm", e.name))).map_err(|m| {
        format!(
            "name {:?}: {m}",
            e.name.chars().take(80).collect::<String>()
        )
    })?;
    let at = |m: String| format!("{}: {m}", e.name);
    let reference = ArtifactRef::parse(&e.reference).map_err(|m| at(format!("reference: {m}")))?;
    let follow = match &e.follow {
        None => None,
        Some(s) => {
            let d = humantime::parse_duration(s)
                .map_err(|x| at(format!("follow = {s:?}: {x} (e.g. \"5m\")")))?;
            if !(MIN_POLL..=MAX_POLL).contains(&d) {
                return Err(at(format!("follow = {s:?}: poll between 1s and 24h")));
            }
            if reference.tag.is_none() || reference.digest.is_some() {
                return Err(at(
                    "follow needs a reference by tag without a digest (the tag is what moves)"
                        .into(),
                ));
            }
            Some(d)
        }
    };
    if follow.is_none() && reference.digest.is_none() {
        return Err(at(format!(
            "reference {reference} is not pinned: add @sha256:… (kubewasm push prints it), or \
             set follow = \"5m\" to follow the tag"
        )));
    }
    if e.keys.len() > MAX_KEYS {
        return Err(at(format!("keys: at most {MAX_KEYS}")));
    }
    let keys = e
        .keys
        .iter()
        .map(|k| PublicKey::load(&dir.join(k)).map_err(|m| at(format!("keys: {m}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let manifest = match (e.manifest, e.manifest_file) {
        (Some(_), Some(_)) => {
            return Err(at("set manifest or manifest-file, not both".into()));
        }
        (Some(table), None) => Some(toml::to_string(&table).map_err(|x| at(x.to_string()))?),
        (None, Some(p)) => {
            let p = dir.join(p);
            Some(std::fs::read_to_string(&p).map_err(|x| at(format!("{}: {x}", p.display())))?)
        }
        (None, None) => None,
    };
    if let Some(text) = &manifest {
        // Refused here, naming the sources file, rather than at every pull.
        toml::from_str::<Manifest>(text).map_err(|x| at(format!("manifest: {x}")))?;
    }
    Ok(Source {
        name: e.name,
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
        let one = |body: &str| parse(&format!("[[plugin]]\n{body}"), Path::new(".")).unwrap_err();
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
        let e = parse(&entry("keys = [\"bad.pub\"]"), dir.path()).unwrap_err();
        assert!(e.contains("bad.pub") && e.contains("P-256"), "{e}");
        let e = parse(&entry("manifest-file = \"none.toml\""), dir.path()).unwrap_err();
        assert!(e.contains("none.toml"), "{e}");
        let e = parse(
            &entry("manifest-file = \"a.toml\"\n[plugin.manifest]\ndeadline-ms = 1"),
            dir.path(),
        )
        .unwrap_err();
        assert!(e.contains("not both"), "{e}");
    }
}
