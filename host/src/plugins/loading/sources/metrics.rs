//! What operators alert on for plugins from registries: pulls by outcome.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::registry::RegistryError;

/// How a pull ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub(crate) enum PullResult {
    /// The component arrived with every digest matching.
    Pulled,
    /// The registry could not be reached.
    Unreachable,
    /// Credentials refused or missing.
    Unauthorized,
    /// No such reference.
    NotFound,
    /// Bytes that did not match their digest.
    DigestMismatch,
    /// Not a one-layer wasm artifact within bounds, or refused before asking.
    Refused,
    /// Unsigned, or no signature by a required key vouches for the digest.
    Unverified,
}

impl From<&RegistryError> for PullResult {
    fn from(e: &RegistryError) -> Self {
        match e {
            RegistryError::Unreachable { .. } => PullResult::Unreachable,
            RegistryError::Unauthorized { .. } => PullResult::Unauthorized,
            RegistryError::NotFound { .. } => PullResult::NotFound,
            RegistryError::DigestMismatch { .. } => PullResult::DigestMismatch,
            RegistryError::NotAnArtifact { .. } | RegistryError::Refused { .. } => {
                PullResult::Refused
            }
            RegistryError::Unverified { .. } => PullResult::Unverified,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PullLabels {
    plugin: String,
    result: PullResult,
}

/// Pull counters of the plugins named in a sources file (one series per plugin and outcome,
/// bounded by the file's `MAX_SOURCES`).
#[derive(Clone, Default)]
pub(crate) struct SourceMetrics {
    pulls: Family<PullLabels, Counter>,
}

impl SourceMetrics {
    /// Registers `kubewasm_plugin_source_pulls_total`.
    pub(crate) fn new(registry: &mut Registry) -> Self {
        let m = SourceMetrics::default();
        registry.register(
            "kubewasm_plugin_source_pulls",
            "Pulls of plugins named in the sources file, by outcome",
            m.pulls.clone(),
        );
        m
    }

    pub(crate) fn count(&self, plugin: &str, result: PullResult) {
        self.pulls
            .get_or_create(&PullLabels {
                plugin: plugin.to_string(),
                result,
            })
            .inc();
    }
}
