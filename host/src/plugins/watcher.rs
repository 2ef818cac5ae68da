//! The plugins directory watcher: level-triggered reconciliation of the directory's `.wasm`
//! files against the running plugins, woken by `notify` and debounced.
//!
//! Reacting to "the directory changed, rescan it" rather than to individual file events makes
//! every way of replacing a file behave the same: in-place writes, atomic renames, editors'
//! temp-file dances and the `..data` symlink swap of Kubernetes ConfigMap volumes.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::lifecycle::{LoadError, PluginManager, plugin_name};

/// Quiet time after the last file-system event before the directory is rescanned: long enough
/// to coalesce one copy's many write events.
pub const DEBOUNCE: Duration = Duration::from_millis(30);

/// Quiet time after an event that says a file is complete (closed after writing, renamed into
/// place, a `..data` symlink swapped): just enough to gather the rest of the same burst, so a
/// hot swap is not delayed by the full [`DEBOUNCE`].
pub const SETTLE: Duration = Duration::from_millis(2);

/// How often plugins whose load failed for a transient reason are tried again.
pub const RETRY: Duration = Duration::from_secs(5);

/// Whether an event only reports that a file was opened, read or closed without writing.
fn is_read_only(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    matches!(kind, notify::EventKind::Access(a) if !matches!(a, AccessKind::Close(AccessMode::Write)))
}

/// Whether an event means "a file now has its final content" rather than "a write is going on".
fn completes_a_file(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, ModifyKind};
    matches!(
        kind,
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write))
            | notify::EventKind::Modify(ModifyKind::Name(_))
            | notify::EventKind::Remove(_)
    )
}

/// Whether a directory entry can be a plugin: `*.wasm`, not hidden, not an editor temp file.
pub fn is_plugin_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.')
        && !name.starts_with('#')
        && !name.ends_with('~')
        && path.extension().is_some_and(|e| e == "wasm")
}

/// What identifies a file's content cheaply; a change means "hash it again".
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
    manifest: Option<(u64, Option<SystemTime>, u64)>,
}

fn fingerprint(path: &Path) -> Option<Fingerprint> {
    use std::os::unix::fs::MetadataExt;
    // `metadata` follows symlinks, so a `..data` swap shows up as a different inode.
    let m = std::fs::metadata(path).ok()?;
    if !m.is_file() {
        return None;
    }
    let manifest = std::fs::metadata(path.with_extension("toml"))
        .ok()
        .map(|t| (t.len(), t.modified().ok(), t.ino()));
    Some(Fingerprint {
        len: m.len(),
        modified: m.modified().ok(),
        inode: m.ino(),
        manifest,
    })
}

/// Reconciles a plugins directory with a [`PluginManager`].
pub struct DirectoryWatcher {
    dir: PathBuf,
    manager: PluginManager,
    seen: HashMap<PathBuf, Fingerprint>,
    /// A load failed for a transient reason (API server unreachable): rescan on a timer.
    retry_pending: bool,
}

impl DirectoryWatcher {
    /// A watcher for `dir`; nothing happens until [`DirectoryWatcher::rescan`] or [`DirectoryWatcher::run`].
    pub fn new(dir: impl Into<PathBuf>, manager: PluginManager) -> Self {
        DirectoryWatcher {
            dir: dir.into(),
            manager,
            seen: HashMap::new(),
            retry_pending: false,
        }
    }

    /// Loads new and changed plugin files and unloads plugins whose file is gone. Errors are
    /// logged and published by the manager; they never stop the watcher.
    pub async fn rescan(&mut self) {
        self.retry_pending = false;
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read plugins directory");
                return;
            }
        };
        let mut present = HashSet::new();
        let mut candidates: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_plugin_file(p))
            .collect();
        candidates.sort();
        for path in candidates {
            let Some(fp) = fingerprint(&path) else {
                continue;
            };
            present.insert(plugin_name(&path));
            if self.seen.get(&path) == Some(&fp) {
                continue;
            }
            // Remember the fingerprint before loading: a half-written file fails validation, and
            // the write that completes it changes the fingerprint and brings us back here.
            self.seen.insert(path.clone(), fp);
            if let Some(Err(LoadError::Unavailable { .. })) =
                self.manager.reconcile_file(&path).await
            {
                // The server could not be asked; forget the file so the next rescan retries it.
                self.seen.remove(&path);
                self.retry_pending = true;
            }
        }
        // Only plugins this directory provided are unloaded: plugins loaded through the manager
        // by other means (an API, a test) are not the directory's to remove.
        let gone: HashSet<String> = self
            .seen
            .keys()
            .map(|p| plugin_name(p))
            .filter(|n| !present.contains(n))
            .collect();
        self.seen.retain(|p, _| present.contains(&plugin_name(p)));
        for name in gone {
            self.manager.unload(&name).await;
        }
    }

    /// Watches the directory until `stop` is cancelled, rescanning after each burst of events.
    pub async fn run(mut self, stop: CancellationToken) -> anyhow::Result<()> {
        let (tx, mut rx) = mpsc::unbounded_channel::<bool>();
        let mut watcher =
            notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
                // Reads (our own, when loading a file) are not changes; reacting to them would
                // rescan in a loop while a load keeps failing.
                Ok(event) if is_read_only(&event.kind) => {}
                Ok(event) => {
                    let _ = tx.send(completes_a_file(&event.kind));
                }
                Err(e) => tracing::warn!(error = %e, "plugins directory watch error"),
            })?;
        watcher.watch(&self.dir, RecursiveMode::NonRecursive)?;
        tracing::info!(dir = %self.dir.display(), "watching plugins directory");
        // Changes between the caller's first rescan and the watch being set up are not lost.
        self.rescan().await;
        loop {
            let retry = tokio::time::sleep(RETRY);
            let mut complete = tokio::select! {
                _ = stop.cancelled() => break,
                got = rx.recv() => match got {
                    Some(c) => c,
                    None => break,
                },
                _ = retry, if self.retry_pending => true,
            };
            // Debounce: wait until the directory has been quiet; briefly if the last event
            // completed a file, longer while writes are still coming.
            loop {
                let quiet = if complete { SETTLE } else { DEBOUNCE };
                match tokio::time::timeout(quiet, rx.recv()).await {
                    Ok(Some(c)) => complete = c,
                    Ok(None) | Err(_) => break,
                }
            }
            self.rescan().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_file_filter() {
        assert!(is_plugin_file(Path::new("/p/foo.wasm")));
        assert!(!is_plugin_file(Path::new("/p/.foo.wasm")));
        assert!(!is_plugin_file(Path::new("/p/foo.wasm~")));
        assert!(!is_plugin_file(Path::new("/p/#foo.wasm#")));
        assert!(!is_plugin_file(Path::new("/p/foo.wasm.swp")));
        assert!(!is_plugin_file(Path::new("/p/foo.toml")));
        assert!(!is_plugin_file(Path::new("/p/..data")));
    }
}
