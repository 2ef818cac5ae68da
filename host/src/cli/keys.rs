//! `kubewasm generate-key-pair`: a key pair to sign handlers with (`push --key`) and to name in
//! a sources file (`keys = [...]`), in the formats cosign reads (`cosign verify --key` checks
//! what `push --key` signs).

use std::io::Write as _;
use std::path::PathBuf;

use crate::registry::SigningKey;

/// Arguments of `kubewasm generate-key-pair`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct GenerateKeyPairArgs {
    /// Writes `PREFIX.key` (private, mode 0600) and `PREFIX.pub`, as cosign names them.
    #[arg(long, value_name = "PREFIX", default_value = "cosign")]
    pub(crate) output_key_prefix: PathBuf,
}

/// Writes a new ECDSA P-256 key pair; refuses to overwrite either file.
pub(crate) fn generate_key_pair(args: GenerateKeyPairArgs) -> anyhow::Result<()> {
    let with_ext = |ext: &str| {
        let mut p = args.output_key_prefix.clone().into_os_string();
        p.push(ext);
        PathBuf::from(p)
    };
    let (private_path, public_path) = (with_ext(".key"), with_ext(".pub"));
    let (private, public) = SigningKey::generate().map_err(|e| anyhow::anyhow!(e))?;
    let create = |path: &PathBuf, mode: u32| {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    };
    // Both created before either is written, so an existing file leaves no half pair.
    let mut private_file = create(&private_path, 0o600)?;
    let mut public_file = match create(&public_path, 0o644) {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_file(&private_path);
            return Err(e);
        }
    };
    private_file.write_all(private.as_bytes())?;
    public_file.write_all(public.to_pem().as_bytes())?;
    eprintln!(
        "wrote {} (keep it secret) and {} (key {})",
        private_path.display(),
        public_path.display(),
        public.fingerprint()
    );
    Ok(())
}
