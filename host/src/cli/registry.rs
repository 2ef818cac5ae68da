//! What `push`, `pull` and `check` need to reach a registry: credentials and whether plain
//! HTTP is allowed.

use std::path::PathBuf;

use crate::registry::{ArtifactRef, CredentialStore, Registry};

/// Registry access flags shared by the subcommands that talk to a registry.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct RegistryArgs {
    /// Docker-style credentials (`config.json`, or a `kubernetes.io/dockerconfigjson` Secret's
    /// `.dockerconfigjson`); default `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`.
    #[arg(long, value_name = "FILE", env = "KUBEWASM_REGISTRY_CONFIG")]
    pub(crate) registry_config: Option<PathBuf>,
    /// Talk plain HTTP instead of HTTPS (a local test registry); credentials then go only to
    /// this machine.
    #[arg(long)]
    pub(crate) plain_http: bool,
}

impl RegistryArgs {
    /// The client these flags describe.
    pub(crate) fn registry(&self) -> anyhow::Result<Registry> {
        let path = self
            .registry_config
            .clone()
            .or_else(CredentialStore::default_path);
        let store = match path {
            Some(p) => CredentialStore::load(&p)
                .map_err(|e| anyhow::anyhow!("registry credentials: {e}"))?,
            None => CredentialStore::default(),
        };
        Ok(Registry::new(store))
    }
}

/// Parses a reference given on the command line.
pub(crate) fn parse_reference(s: &str) -> anyhow::Result<ArtifactRef> {
    ArtifactRef::parse(s).map_err(|e| anyhow::anyhow!("reference {s:?}: {e}"))
}
