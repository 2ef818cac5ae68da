//! `kubewasm pull REF`: fetch a handler from a registry with every digest checked, for CI and
//! debugging.

use std::path::PathBuf;

use super::registry::{RegistryArgs, parse_reference};
use crate::registry::PublicKey;

/// Arguments of `kubewasm pull`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PullArgs {
    /// What: `REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`.
    pub(crate) reference: String,
    /// Where to write the component (default: the repository's last component `.wasm`).
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Refuse the artifact unless one of these cosign public keys signed its digest.
    #[arg(long = "key", value_name = "FILE")]
    pub(crate) keys: Vec<PathBuf>,
    /// Registry access.
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
}

/// Pulls, writes the component and prints the pinned reference.
pub(crate) async fn pull(args: PullArgs) -> anyhow::Result<()> {
    let reference = parse_reference(&args.reference)?;
    let keys = args
        .keys
        .iter()
        .map(|k| PublicKey::load(k).map_err(|e| anyhow::anyhow!("--key {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let pulled = args
        .registry
        .registry()?
        .pull_signed(&reference, &keys, args.registry.plain_http)
        .await?;
    let out = args.output.unwrap_or_else(|| default_file(&reference));
    std::fs::write(&out, &pulled.wasm).map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    if !keys.is_empty() {
        eprintln!("signature verified");
    }
    println!("{}", pulled.reference);
    eprintln!("wrote {} ({} bytes)", out.display(), pulled.wasm.len());
    Ok(())
}

/// `NAME.wasm` for a repository `…/NAME`.
pub(crate) fn default_file(reference: &crate::registry::ArtifactRef) -> PathBuf {
    let name = reference
        .repository
        .rsplit('/')
        .next()
        .unwrap_or(&reference.repository);
    PathBuf::from(format!("{name}.wasm"))
}
