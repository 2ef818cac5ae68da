//! Where a plugin's grants come from: its manifest's `[grants]`, the host-wide default file,
//! the built-in default, or (`kubewasm dev`) everything it asks for.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::*;
use crate::plugins::loading::manifest::{Manifest, ManifestError};
use crate::runtime::PluginInfo;

/// Where a plugin's grants came from; error messages and `/plugins` say it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum GrantSource {
    /// The `[grants]` table of the plugin's manifest.
    Manifest {
        /// The manifest.
        path: PathBuf,
    },
    /// The `--default-grants` file (the manifest has no `[grants]`).
    DefaultFile {
        /// The file.
        path: PathBuf,
    },
    /// The built-in default (the manifest has no `[grants]`, no `--default-grants`).
    BuiltIn,
    /// `kubewasm dev`: everything the plugin asked for.
    EverythingAsked,
}

impl fmt::Display for GrantSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrantSource::Manifest { path } => write!(f, "the [grants] table of {}", path.display()),
            GrantSource::DefaultFile { path } => write!(
                f,
                "the default grants of {} (the plugin's manifest has no [grants] table)",
                path.display()
            ),
            GrantSource::BuiltIn => f.write_str(
                "the built-in default (watch and read anything except Secrets; no writes, no \
                 Events, no HTTP) as the plugin's manifest has no [grants] table",
            ),
            GrantSource::EverythingAsked => f.write_str("kubewasm dev: everything asked for"),
        }
    }
}

/// How the host decides a plugin's grants.
#[derive(Clone, Debug)]
pub enum GrantPolicy {
    /// Production: the manifest's `[grants]`, or these defaults without one.
    Operator(std::sync::Arc<Grants>),
    /// `kubewasm dev`: whatever the plugin asks for.
    EverythingAsked,
}

impl Default for GrantPolicy {
    fn default() -> Self {
        GrantPolicy::Operator(std::sync::Arc::new(Grants::builtin_default()))
    }
}

/// A `--default-grants` file: one `[grants]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DefaultGrantsFile {
    grants: GrantsTable,
}

impl GrantPolicy {
    /// Operator grants with the defaults of `--default-grants FILE` (or the built-in ones).
    pub fn operator(default_grants: Option<&Path>) -> Result<GrantPolicy, ManifestError> {
        let Some(path) = default_grants else {
            return Ok(GrantPolicy::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: DefaultGrantsFile =
            toml::from_str(&text).map_err(|e| ManifestError::Invalid {
                path: path.to_path_buf(),
                message: e.to_string().trim().to_string(),
            })?;
        Ok(GrantPolicy::Operator(std::sync::Arc::new(
            Grants::from_table(
                file.grants,
                GrantSource::DefaultFile {
                    path: path.to_path_buf(),
                },
            ),
        )))
    }

    /// The grants of one plugin version: `manifest` (at `manifest_path`) and what `info` asks.
    pub fn grants_for(
        &self,
        manifest: &Manifest,
        manifest_path: &Path,
        info: &PluginInfo,
    ) -> Grants {
        let base = match (self, &manifest.grants) {
            (GrantPolicy::EverythingAsked, _) => Grants::everything_asked(info),
            (GrantPolicy::Operator(_), Some(table)) => Grants::from_table(
                table.clone(),
                GrantSource::Manifest {
                    path: manifest_path.to_path_buf(),
                },
            ),
            (GrantPolicy::Operator(default), None) => (**default).clone(),
        };
        base.with_manifest_settings(manifest)
    }
}
