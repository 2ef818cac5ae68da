//! Compiled artifacts on disk, so a restart or a re-dropped file skips Cranelift.
//!
//! Key: sha256 of the wasm bytes plus the engine's precompile compatibility hash (wasmtime
//! version, target, settings). File: the serialized component followed by a trailer holding the
//! sha256 of the wasm digest and the artifact, because deserializing runs native code: a
//! corrupted or truncated file, or one renamed from another plugin's entry, must be detected and
//! recompiled, never loaded. Writes go to a private (0600) temporary file renamed into place, so
//! concurrent writers and crashes leave either nothing or a complete file.
//!
//! # Threat: native code injection through the cache
//!
//! An artifact is machine code that wasmtime maps executable without re-checking it (hence
//! `unsafe` deserialization); the checksum only catches accidents, since anyone able to write a
//! file can also write a matching checksum. Whoever can write into the cache directory can
//! therefore run arbitrary code inside the host, with its cluster credentials. The cache must be
//! writable by nobody the host does not already trust.
//!
//! Choice: **trust by ownership and permissions, as ssh does for `~/.ssh`**, rather than
//! authenticating artifacts with a key. A key would have to be stored somewhere the host can
//! read and others cannot write, which is exactly the property checked here, so it would add a
//! secret to manage without raising the bar; and an attacker with the host's own uid can replace
//! the binary anyway. The rules:
//! - the cache directory is owned by the host's effective uid and not writable by group or
//!   others;
//! - every directory above it (as given, and after resolving symlinks), up to `/`, is owned by
//!   that uid or root and not writable by group or others, unless it has the sticky bit (as
//!   `/tmp` has), which stops others from renaming or deleting what they do not own;
//! - every artifact, checked on the open file, is a regular file owned by that uid and not
//!   writable by group or others.
//!
//! The directory is created 0700 and artifacts 0600 whatever the umask, so the host never
//! produces a cache it would refuse. An untrusted directory disables the disk cache with one
//! warning naming the directory and the reason (handlers are then compiled in memory, slower but
//! correct); an untrusted artifact is removed and recompiled, with a warning naming the file.

use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const TRAILER_MAGIC: &[u8; 8] = b"kwcache2";
const TRAILER_LEN: usize = 32 + TRAILER_MAGIC.len();
/// Permission bits that let group or others write.
const GROUP_OTHER_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

pub(crate) struct DiskCache {
    dir: PathBuf,
    engine_hash: u64,
    uid: u32,
}

impl DiskCache {
    /// The cache in `dir` (created 0700 if missing), or `None` after one warning naming the
    /// directory and the reason when it cannot be created or others could write into it.
    pub(crate) fn open(dir: PathBuf, engine: &Engine) -> Option<Self> {
        if let Err(e) = DirBuilder::new().recursive(true).mode(0o700).create(&dir) {
            tracing::warn!(target: "kubewasm::runtime", dir = %dir.display(), error = %e,
                "cannot create the compile cache directory; compiling without the cache");
            return None;
        }
        let uid = effective_uid();
        if let Err(reason) = check_directory(&dir, uid) {
            tracing::warn!(target: "kubewasm::runtime", dir = %dir.display(), %reason,
                "compile cache directory {} is not trusted: {reason}. Cached artifacts are \
                 native code, so they are only loaded from a directory nobody else can write; \
                 compiling without the cache", dir.display());
            return None;
        }
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let digest = hasher.0.finalize();
        let engine_hash = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        Some(Self {
            dir,
            engine_hash,
            uid,
        })
    }

    /// Path of the artifact for a wasm file with this sha256.
    pub(crate) fn path_for(&self, wasm_sha256: &[u8; 32]) -> PathBuf {
        self.dir.join(format!(
            "{}-{:016x}.cwasm",
            hex::encode(wasm_sha256),
            self.engine_hash
        ))
    }

    /// The cached component for the wasm with digest `wasm_sha256`, or `None` when absent,
    /// untrusted, corrupted or incompatible (then the file is removed so the next store
    /// replaces it).
    pub(crate) fn load(&self, engine: &Engine, wasm_sha256: &[u8; 32]) -> Option<Component> {
        let path = self.path_for(wasm_sha256);
        let bytes = match self.read_trusted(&path) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(Refused::Untrusted(reason)) => {
                tracing::warn!(target: "kubewasm::runtime", path = %path.display(), %reason,
                    "compile cache entry {} is not trusted: {reason}; not loaded, recompiling",
                    path.display());
                let _ = std::fs::remove_file(&path);
                return None;
            }
            Err(Refused::Io(e)) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read compile cache entry");
                return None;
            }
        };
        match verify(&bytes, wasm_sha256) {
            // SAFETY: the file is owned by this uid in a directory only this uid (or root) can
            // write (see the module doc), it was produced by `Component::serialize` of an engine
            // with the same compatibility hash (part of the file name), and its checksum, bound
            // to the wasm digest, matches.
            Some(artifact) => match unsafe { Component::deserialize(engine, artifact) } {
                Ok(c) => return Some(c),
                Err(e) => tracing::warn!(path = %path.display(), error = %e,
                    "compile cache entry rejected by wasmtime; recompiling"),
            },
            None => tracing::warn!(path = %path.display(),
                "compile cache entry does not verify (corrupted, renamed, or from an older \
                 kubewasm); recompiling"),
        }
        let _ = std::fs::remove_file(&path);
        None
    }

    /// Reads `path` if it exists and passes the ownership check, made on the open file so it
    /// cannot be swapped between check and read.
    fn read_trusted(&self, path: &Path) -> Result<Option<Vec<u8>>, Refused> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Refused::Io(e)),
        };
        let meta = file.metadata().map_err(Refused::Io)?;
        if !meta.is_file() {
            return Err(Refused::Untrusted(Untrusted::NotAFile));
        }
        check_owner_and_mode(&meta, self.uid).map_err(Refused::Untrusted)?;
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).map_err(Refused::Io)?;
        Ok(Some(bytes))
    }

    /// Stores a freshly compiled component; failures are logged, never fatal.
    pub(crate) fn store(&self, wasm_sha256: &[u8; 32], component: &Component) {
        match component.serialize() {
            Ok(artifact) => self.store_artifact(wasm_sha256, &artifact),
            Err(e) => {
                tracing::warn!(error = %e, "cannot serialize a compiled component for the cache")
            }
        }
    }

    /// Stores an artifact (`Component::serialize` output, e.g. from a compile worker) that
    /// this process has already loaded; failures are logged, never fatal.
    pub(crate) fn store_artifact(&self, wasm_sha256: &[u8; 32], artifact: &[u8]) {
        let path = self.path_for(wasm_sha256);
        if let Err(e) = self.try_store(&path, wasm_sha256, artifact) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write compile cache entry");
        }
    }

    fn try_store(
        &self,
        path: &Path,
        wasm_sha256: &[u8; 32],
        artifact: &[u8],
    ) -> std::io::Result<()> {
        let digest = trailer_digest(wasm_sha256, artifact);
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(artifact)?;
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

/// Why an artifact was not read.
enum Refused {
    /// Others could have written it (the reason says how).
    Untrusted(Untrusted),
    Io(std::io::Error),
}

/// The uid that owns the files this process creates.
fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail (POSIX).
    unsafe { libc::geteuid() }
}

/// Why the cache directory or an artifact is not trusted: who else could have written it, or
/// why that could not be ruled out.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Untrusted {
    /// The directory's metadata could not be read.
    #[error("cannot inspect it: {0}")]
    Inspect(#[source] std::io::Error),
    /// The cache path is something else than a directory.
    #[error("not a directory")]
    NotADirectory,
    /// An artifact is something else than a regular file.
    #[error("not a regular file")]
    NotAFile,
    /// The directory's absolute or canonical path could not be found.
    #[error("cannot resolve it: {0}")]
    Resolve(#[source] std::io::Error),
    /// A directory above it could not be inspected.
    #[error("cannot inspect its parent {}: {source}", .parent.display())]
    InspectParent {
        /// The directory above.
        parent: PathBuf,
        /// Why it could not be inspected.
        #[source]
        source: std::io::Error,
    },
    /// A directory above it belongs to another user.
    #[error(
        "its parent {} is owned by uid {owner}, neither this process's uid {uid} nor root",
        .parent.display()
    )]
    ParentOwner {
        /// The directory above.
        parent: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
    /// A directory above it others may write without the sticky bit (so they could rename
    /// the cache directory away and put their own in its place).
    #[error(
        "its parent {} is writable by group or others (mode {mode:04o}) without the sticky bit",
        .parent.display()
    )]
    ParentWritable {
        /// The directory above.
        parent: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It belongs to another user.
    #[error("owned by uid {owner}, not by this process's uid {uid}")]
    Owner {
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
    /// Group or others may write it.
    #[error("writable by group or others (mode {mode:04o}; fix with chmod go-w)")]
    Writable {
        /// Its permission bits.
        mode: u32,
    },
}

/// `Err(reason)` unless `dir` and every directory above it are safe from other users (rules in
/// the module doc).
pub(crate) fn check_directory(dir: &Path, uid: u32) -> Result<(), Untrusted> {
    let meta = std::fs::metadata(dir).map_err(Untrusted::Inspect)?;
    if !meta.is_dir() {
        return Err(Untrusted::NotADirectory);
    }
    check_owner_and_mode(&meta, uid)?;
    let given = std::path::absolute(dir).map_err(Untrusted::Resolve)?;
    let resolved = std::fs::canonicalize(dir).map_err(Untrusted::Resolve)?;
    for parent in given
        .ancestors()
        .skip(1)
        .chain(resolved.ancestors().skip(1))
    {
        let meta = std::fs::metadata(parent).map_err(|source| Untrusted::InspectParent {
            parent: parent.to_path_buf(),
            source,
        })?;
        if meta.uid() != uid && meta.uid() != 0 {
            return Err(Untrusted::ParentOwner {
                parent: parent.to_path_buf(),
                owner: meta.uid(),
                uid,
            });
        }
        if meta.mode() & GROUP_OTHER_WRITE != 0 && meta.mode() & STICKY == 0 {
            return Err(Untrusted::ParentWritable {
                parent: parent.to_path_buf(),
                mode: meta.mode() & 0o7777,
            });
        }
    }
    Ok(())
}

/// The rule for the cache directory and each artifact: ours, and only ours to write.
fn check_owner_and_mode(meta: &Metadata, uid: u32) -> Result<(), Untrusted> {
    if meta.uid() != uid {
        return Err(Untrusted::Owner {
            owner: meta.uid(),
            uid,
        });
    }
    if meta.mode() & GROUP_OTHER_WRITE != 0 {
        return Err(Untrusted::Writable {
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
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

/// Binds the artifact to the wasm it was compiled from, so an entry renamed to another key is
/// refused like a corrupted one.
fn trailer_digest(wasm_sha256: &[u8; 32], artifact: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(wasm_sha256);
    h.update(artifact);
    h.finalize().into()
}

/// The artifact part of a cache file if its trailer checks out for `wasm_sha256`.
fn verify<'a>(bytes: &'a [u8], wasm_sha256: &[u8; 32]) -> Option<&'a [u8]> {
    let split = bytes.len().checked_sub(TRAILER_LEN)?;
    let (artifact, trailer) = bytes.split_at(split);
    let (digest, magic) = trailer.split_at(32);
    (magic == TRAILER_MAGIC && trailer_digest(wasm_sha256, artifact) == digest).then_some(artifact)
}

/// A uniquely named private (0600) file in `dir` (pid + counter + time), opened for writing.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, File)> {
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
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok((path, file))
}
