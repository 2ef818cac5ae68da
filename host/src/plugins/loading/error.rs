//! [`LoadError`]: why a plugin file could not be (re)loaded, and whether trying again may help.

use std::path::PathBuf;

/// Why a plugin file could not be (re)loaded. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file's name cannot name a plugin.
    #[error("{path}: {source}")]
    Name {
        /// The plugin file.
        path: PathBuf,
        /// What is wrong with its name.
        #[source]
        source: super::describe::NameError,
    },
    /// The manifest beside it is invalid.
    #[error(transparent)]
    Manifest(#[from] super::manifest::ManifestError),
    /// The API server could not be asked about a subscription; loading is retried later.
    #[error("{path}: {message}")]
    Unavailable {
        /// The plugin file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// `describe()` asks for more than the plugin is granted; the message lists each missing
    /// grant and the `NAME.toml` lines that would grant it.
    #[error("{path}: {message}")]
    NotGranted {
        /// The plugin file.
        path: PathBuf,
        /// What is missing and how to grant it.
        message: String,
    },
    /// Not a usable handler component (not a component, wrong world, trap in describe, ...).
    #[error("{path}: {message}")]
    Invalid {
        /// The plugin file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The handler could not be started now for a reason that may pass (no free instance slot,
    /// the host shutting down); loading is retried later.
    #[error("{path}: {message}")]
    Busy {
        /// The plugin file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

impl LoadError {
    /// Whether the same file may load later without changing (the host retries with backoff);
    /// otherwise the host waits for the file or its manifest to change.
    pub fn is_retriable(&self) -> bool {
        match self {
            LoadError::Read { source, .. } => source.kind() != std::io::ErrorKind::InvalidData,
            LoadError::Unavailable { .. } | LoadError::Busy { .. } => true,
            LoadError::Name { .. }
            | LoadError::Manifest(_)
            | LoadError::Invalid { .. }
            | LoadError::NotGranted { .. } => false,
        }
    }
}
