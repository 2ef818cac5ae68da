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
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::describe::plugin_name;
use super::lifecycle::PluginManager;
use crate::workqueue::ExponentialBackoff;

/// Quiet time after the last file-system event before the directory is rescanned: long enough
/// to coalesce one copy's many write events.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(30);

/// Quiet time after an event that says a file is complete (closed after writing, renamed into
/// place, a `..data` symlink swapped): just enough to gather the rest of the same burst, so a
/// hot swap is not delayed by the full [`DEBOUNCE`].
pub(crate) const SETTLE: Duration = Duration::from_millis(2);

/// First retry of a plugin whose load failed for a transient reason (server unreachable, kind
/// not served yet, no free instance slot); doubles per failure up to [`RETRY_MAX`].
pub(crate) const RETRY: Duration = Duration::from_secs(1);
/// Longest wait between retries of one plugin.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(60);

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
/// Names that are not UTF-8 count too, so that loading refuses them with an error naming the
/// file instead of ignoring them silently.
pub(crate) fn is_plugin_file(path: &Path) -> bool {
    let Some(name) = path.file_name().map(|n| n.as_encoded_bytes()) else {
        return false;
    };
    !name.starts_with(b".")
        && !name.starts_with(b"#")
        && !name.ends_with(b"~")
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
///
/// Every load and unload runs as its own task, so a plugin that takes its whole deadline in
/// `describe()` never delays what happens to another file; the manager orders operations on
/// one plugin.
pub(crate) struct DirectoryWatcher {
    dir: PathBuf,
    manager: PluginManager,
    seen: HashMap<PathBuf, Fingerprint>,
    /// Files whose load failed for a transient reason, with their backoff.
    retries: HashMap<PathBuf, Retry>,
}

/// A transient failure's backoff: retried at `at` unless the file changes first.
struct Retry {
    attempts: u32,
    at: Instant,
    fingerprint: Fingerprint,
}

/// One reconciliation step.
enum Op {
    Load(PathBuf, Fingerprint),
    Unload(String),
}

/// How a load ended, reported back to the watcher: a transient failure is retried.
enum Done {
    Failed(PathBuf, Fingerprint),
    Settled(PathBuf),
}

async fn run_op(manager: PluginManager, op: Op) -> Option<Done> {
    match op {
        Op::Load(path, fp) => match manager.reconcile_file(&path).await {
            Some(Err(e)) if e.is_retriable() => Some(Done::Failed(path, fp)),
            _ => Some(Done::Settled(path)),
        },
        Op::Unload(name) => {
            manager.unload(&name).await;
            None
        }
    }
}

impl DirectoryWatcher {
    /// A watcher for `dir`; nothing happens until [`DirectoryWatcher::rescan`] or [`DirectoryWatcher::run`].
    pub(crate) fn new(dir: impl Into<PathBuf>, manager: PluginManager) -> Self {
        DirectoryWatcher {
            dir: dir.into(),
            manager,
            seen: HashMap::new(),
            retries: HashMap::new(),
        }
    }

    /// Loads new and changed plugin files and unloads plugins whose file is gone, all at once,
    /// and waits for every operation. Errors are logged and published by the manager; they
    /// never stop the watcher.
    pub(crate) async fn rescan(&mut self) {
        let ops = self.plan();
        let manager = self.manager.clone();
        let failed =
            futures::future::join_all(ops.into_iter().map(|op| run_op(manager.clone(), op))).await;
        for done in failed.into_iter().flatten() {
            self.settle(done);
        }
    }

    /// What the directory needs now: loads of new or changed files (and of files due for a
    /// retry), unloads of plugins whose file is gone.
    fn plan(&mut self) -> Vec<Op> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read plugins directory");
                return Vec::new();
            }
        };
        let now = Instant::now();
        let mut ops = Vec::new();
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
            // Names are file stems, unique in a directory; only names that are not UTF-8 can
            // decode to the same one, and loading refuses each of those with its own error.
            present.insert(plugin_name(&path));
            if self.seen.get(&path) == Some(&fp) {
                continue;
            }
            if let Some(r) = self.retries.get(&path)
                && r.fingerprint == fp
                && r.at > now
            {
                continue;
            }
            // Remember the fingerprint before loading: a half-written file fails validation,
            // and the write that completes it changes the fingerprint and brings us back here.
            self.seen.insert(path.clone(), fp.clone());
            if let Some(r) = self.retries.get_mut(&path) {
                // In progress: not due again until this attempt reports back.
                r.at = now + RETRY_MAX * 1000;
            }
            ops.push(Op::Load(path, fp));
        }
        // Only plugins this directory provided are unloaded: plugins loaded through the manager
        // by other means (an API, a test) are not the directory's to remove.
        let gone: HashSet<String> = self
            .seen
            .keys()
            .chain(self.retries.keys())
            .map(|p| plugin_name(p))
            .filter(|n| !present.contains(n))
            .collect();
        self.seen.retain(|p, _| present.contains(&plugin_name(p)));
        self.retries
            .retain(|p, _| present.contains(&plugin_name(p)));
        ops.extend(gone.into_iter().map(Op::Unload));
        ops
    }

    fn settle(&mut self, done: Done) {
        match done {
            Done::Failed(path, fp) => self.schedule_retry(path, fp),
            Done::Settled(path) => {
                self.retries.remove(&path);
            }
        }
    }

    fn schedule_retry(&mut self, path: PathBuf, fingerprint: Fingerprint) {
        // Forget the file so the next plan loads it again.
        self.seen.remove(&path);
        let attempts = self.retries.get(&path).map_or(0, |r| r.attempts) + 1;
        let wait = ExponentialBackoff::new(RETRY, RETRY_MAX).after_failures(attempts);
        tracing::info!(path = %path.display(), attempts, retry_in_ms = wait.as_millis() as u64, "plugin load failed for a transient reason; retrying");
        self.retries.insert(
            path,
            Retry {
                attempts,
                at: Instant::now() + wait,
                fingerprint,
            },
        );
    }

    fn next_retry(&self) -> Option<Instant> {
        self.retries.values().map(|r| r.at).min()
    }

    /// Watches the directory until `stop` is cancelled, reconciling after each burst of events
    /// and when a retry is due.
    pub(crate) async fn run(mut self, stop: CancellationToken) -> anyhow::Result<()> {
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
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
        let mut pending = true; // changes between the first rescan and the watch set-up
        loop {
            if pending {
                pending = false;
                for op in self.plan() {
                    let (manager, done) = (self.manager.clone(), done_tx.clone());
                    tokio::spawn(async move {
                        if let Some(f) = run_op(manager, op).await {
                            let _ = done.send(f);
                        }
                    });
                }
            }
            let retry_at = self.next_retry();
            let mut complete = tokio::select! {
                _ = stop.cancelled() => break,
                got = rx.recv() => match got {
                    Some(c) => c,
                    None => break,
                },
                Some(done) = done_rx.recv() => {
                    self.settle(done);
                    continue;
                }
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    pending = true;
                    continue;
                }
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
            pending = true;
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
