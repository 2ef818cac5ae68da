//! Compiled artifacts on disk, so a restart or a re-dropped file skips Cranelift.
//!
//! Key: sha256 of the wasm bytes plus the engine's precompile compatibility hash (wasmtime
//! version, target, settings). File: the serialized component followed by a trailer holding its
//! own sha256, because deserializing runs native code: a corrupted or truncated file must be
//! detected and recompiled, never loaded. Writes go to a temporary file renamed into place, so
//! concurrent writers and crashes leave either nothing or a complete file.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const TRAILER_MAGIC: &[u8; 8] = b"kwcache1";
const TRAILER_LEN: usize = 32 + TRAILER_MAGIC.len();

pub(crate) struct DiskCache {
    dir: PathBuf,
    engine_hash: u64,
}

impl DiskCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let digest = hasher.0.finalize();
        let engine_hash = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        Ok(Self { dir, engine_hash })
    }

    /// Path of the artifact for a wasm file with this sha256.
    pub fn path_for(&self, wasm_sha256: &[u8; 32]) -> PathBuf {
        self.dir.join(format!(
            "{}-{:016x}.cwasm",
            hex::encode(wasm_sha256),
            self.engine_hash
        ))
    }

    /// The cached component, or `None` when absent, corrupted or incompatible (then the file is
    /// removed so the next store replaces it).
    pub fn load(&self, engine: &Engine, path: &Path) -> Option<Component> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read compile cache entry");
                return None;
            }
        };
        match verify(&bytes) {
            // SAFETY: the bytes were produced by `Component::serialize` of an engine with the
            // same compatibility hash (part of the file name) and their checksum matches.
            Some(artifact) => match unsafe { Component::deserialize(engine, artifact) } {
                Ok(c) => return Some(c),
                Err(e) => tracing::warn!(path = %path.display(), error = %e,
                    "compile cache entry rejected by wasmtime; recompiling"),
            },
            None => tracing::warn!(path = %path.display(),
                "compile cache entry corrupted (checksum mismatch); recompiling"),
        }
        let _ = std::fs::remove_file(path);
        None
    }

    /// Stores a freshly compiled component; failures are logged, never fatal.
    pub fn store(&self, path: &Path, component: &Component) {
        if let Err(e) = self.try_store(path, component) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write compile cache entry");
        }
    }

    fn try_store(&self, path: &Path, component: &Component) -> anyhow::Result<()> {
        let artifact = component.serialize()?;
        let digest: [u8; 32] = Sha256::digest(&artifact).into();
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(&artifact)?;
        tmp.1.write_all(&digest)?;
        tmp.1.write_all(TRAILER_MAGIC)?;
        tmp.1.sync_all()?;
        drop(tmp.1);
        std::fs::rename(&tmp.0, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp.0);
        })?;
        Ok(())
    }
}

/// Feeds `Hash` into sha256: unlike `DefaultHasher`, stable across Rust releases, so a toolchain
/// upgrade alone does not invalidate the cache.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        unreachable!("only finalized through the inner digest")
    }
}

/// The artifact part of a cache file if its trailer checks out.
fn verify(bytes: &[u8]) -> Option<&[u8]> {
    let split = bytes.len().checked_sub(TRAILER_LEN)?;
    let (artifact, trailer) = bytes.split_at(split);
    let (digest, magic) = trailer.split_at(32);
    (magic == TRAILER_MAGIC && Sha256::digest(artifact).as_slice() == digest).then_some(artifact)
}

/// A uniquely named file in `dir` (pid + counter + time), opened for writing.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let name = format!(
        ".tmp-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(name);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}
