//! Where a plugin's grants come from: its manifest's `[grants]`, the host-wide default file,
//! the built-in default, or (`kubewasm dev`) everything it asks for.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::*;
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

/// Why the `--default-grants` file could not be used; the host does not start.
///
/// Worded like a manifest's errors, as the file is written like a manifest's `[grants]`.
#[derive(Debug, thiserror::Error)]
pub enum DefaultGrantsError {
    /// The file exists but could not be read.
    #[error("cannot read manifest {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("invalid manifest {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What the parser said, with line and column.
        message: String,
    },
}

/// The settings beside a manifest's `[grants]` table that the grants carry (rates, dry run,
/// HTTP requests open at once); each `None` takes its default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct GrantSettings {
    /// Sustained writes per second (default [`DEFAULT_WRITE_QPS`]).
    pub(crate) write_qps: Option<f64>,
    /// Writes in a burst (default [`DEFAULT_WRITE_BURST`]).
    pub(crate) write_burst: Option<u32>,
    /// Sustained `kube.get` calls per second (default [`DEFAULT_READ_QPS`]).
    pub(crate) read_qps: Option<f64>,
    /// `kube.get` calls in a burst (default [`DEFAULT_READ_BURST`]).
    pub(crate) read_burst: Option<u32>,
    /// Every write a dry run, only GET/HEAD HTTP (default off).
    pub(crate) dry_run: Option<bool>,
    /// HTTP requests open at once (default
    /// [`DEFAULT_HTTP_MAX_INFLIGHT`](crate::runtime::DEFAULT_HTTP_MAX_INFLIGHT)).
    pub(crate) http_max_inflight: Option<usize>,
}

/// What one plugin version's manifest declares about its grants.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Declared<'a> {
    /// Its `[grants]` table; without one the policy's default applies.
    pub(crate) table: Option<&'a GrantsTable>,
    /// The settings beside the table.
    pub(crate) settings: GrantSettings,
    /// Where the manifest is (or would be), named by [`GrantSource::Manifest`].
    pub(crate) manifest_path: &'a Path,
}

impl GrantPolicy {
    /// Operator grants with the defaults of `--default-grants FILE` (or the built-in ones).
    pub fn operator(default_grants: Option<&Path>) -> Result<GrantPolicy, DefaultGrantsError> {
        let Some(path) = default_grants else {
            return Ok(GrantPolicy::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| DefaultGrantsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: DefaultGrantsFile =
            toml::from_str(&text).map_err(|e| DefaultGrantsError::Invalid {
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

    /// The grants of one plugin version: what its manifest `declared` and what `info` asks.
    pub(crate) fn grants_for(&self, declared: &Declared<'_>, info: &PluginInfo) -> Grants {
        let base = match (self, declared.table) {
            (GrantPolicy::EverythingAsked, _) => Grants::everything_asked(info),
            (GrantPolicy::Operator(_), Some(table)) => Grants::from_table(
                table.clone(),
                GrantSource::Manifest {
                    path: declared.manifest_path.to_path_buf(),
                },
            ),
            (GrantPolicy::Operator(default), None) => (**default).clone(),
        };
        base.with_settings(&declared.settings)
    }
}
