//! `kubewasm push HANDLER.wasm REF`: publish a handler as a wasm OCI artifact and print the
//! reference pinned by digest, ready for a sources file.

use std::path::PathBuf;

use super::registry::{RegistryArgs, parse_reference};

/// Arguments of `kubewasm push`.
#[derive(clap::Args, Debug, Clone)]
pub struct PushArgs {
    /// The component to publish.
    pub file: PathBuf,
    /// Where: `REGISTRY/REPOSITORY:TAG`.
    pub reference: String,
    /// Registry access.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Pushes the file (refused unless it is a wasm component) and prints `REF@sha256:…`.
pub async fn push(args: PushArgs) -> anyhow::Result<()> {
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
    let pinned = args
        .registry
        .registry()?
        .push(&reference, wasm, args.registry.plain_http)
        .await?;
    println!("{pinned}");
    Ok(())
}
