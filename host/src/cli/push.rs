//! `kubewasm push HANDLER.wasm REF [--key cosign.key]`: publish a handler as a wasm OCI
//! artifact, optionally sign it cosign-style, and print the reference pinned by digest, ready
//! for a sources file.

use std::path::PathBuf;

use super::registry::{RegistryArgs, parse_reference};
use crate::registry::SigningKey;

/// Arguments of `kubewasm push`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PushArgs {
    /// The component to publish.
    pub(crate) file: PathBuf,
    /// Where: `REGISTRY/REPOSITORY:TAG`.
    pub(crate) reference: String,
    /// Sign the pushed digest cosign-style with this ECDSA P-256 private key (PKCS#8 PEM, as
    /// `kubewasm generate-key-pair` writes); sources listing the public key then accept it.
    #[arg(long, value_name = "FILE")]
    pub(crate) key: Option<PathBuf>,
    /// Registry access.
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
}

/// Pushes the file (refused unless it is a wasm component) and prints `REF@sha256:…`.
pub(crate) async fn push(args: PushArgs) -> anyhow::Result<()> {
    let reference = parse_reference(&args.reference)?;
    anyhow::ensure!(
        reference.digest.is_none(),
        "push takes a tag, not a digest: the digest is what the push returns"
    );
    let wasm =
        std::fs::read(&args.file).map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    anyhow::ensure!(
        wasm.starts_with(b"\0asm") && wasm.get(4..8) == Some(&[0x0d, 0, 0x01, 0][..]),
        "{} is not a WebAssembly component",
        args.file.display()
    );
    // Read before pushing, so a bad key pushes nothing.
    let key = match &args.key {
        Some(path) => Some(SigningKey::load(path).map_err(|e| anyhow::anyhow!("--key {e}"))?),
        None => None,
    };
    let registry = args.registry.registry()?;
    let plain = args.registry.plain_http;
    let pinned = registry.push(&reference, wasm, plain).await?;
    if let Some(key) = &key {
        let signature = registry.sign(&pinned, key, plain).await?;
        eprintln!(
            "signed with key {} ({signature})",
            key.public_key().fingerprint()
        );
    }
    println!("{pinned}");
    Ok(())
}
