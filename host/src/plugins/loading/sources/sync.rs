//! Keeping one plugin equal to what its source names: pull, check, hand the component to the
//! same lifecycle as a dropped file, and poll a followed tag.
//!
//! The component and its manifest are written into the host's private staging directory as
//! `NAME.wasm` and `NAME.toml` (atomic renames), then loaded exactly as a file in the plugins
//! directory is: compile cache, describe, grants, hot swap without overlap. A failed pull or
//! load leaves the running version alone and says why.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::file::Source;
use super::metrics::{PullResult, SourceMetrics};
use crate::plugins::loading::lifecycle::PluginManager;
use crate::plugins::loading::watcher::{RETRY, RETRY_MAX};
use crate::registry::{Registry, RegistryError};
use crate::workqueue::ExponentialBackoff;

/// Where one source stands; [`SyncState::step`] moves it after each attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SyncState {
    /// Nothing pulled or loaded yet, or the last attempt found nothing new.
    Idle {
        /// Manifest digest of the running version, if any.
        running: Option<String>,
    },
    /// The last attempt failed for a reason that may pass by itself (registry unreachable,
    /// artifact not pushed yet, plugin's kind not served yet): retried with backoff.
    Retrying {
        /// Manifest digest of the running version, if any.
        running: Option<String>,
        /// Failed attempts in a row.
        attempts: u32,
    },
    /// This digest failed for good (not a component, refused grants, ...): not pulled again
    /// until the followed tag moves.
    Refused {
        /// Manifest digest of the running version, if any.
        running: Option<String>,
        /// The refused digest.
        digest: String,
    },
}

/// What one attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The digest is what runs.
    Current,
    /// This digest now runs.
    Loaded(String),
    /// May pass by itself.
    Transient,
    /// This digest will not load.
    Permanent(String),
}

impl SyncState {
    /// The state after `attempt`.
    pub(crate) fn step(self, attempt: Attempt) -> SyncState {
        let running = self.running().cloned();
        match attempt {
            Attempt::Current => SyncState::Idle { running },
            Attempt::Loaded(d) => SyncState::Idle { running: Some(d) },
            Attempt::Transient => SyncState::Retrying {
                running,
                attempts: match self {
                    SyncState::Retrying { attempts, .. } => attempts.saturating_add(1),
                    _ => 1,
                },
            },
            Attempt::Permanent(digest) => SyncState::Refused { running, digest },
        }
    }

    /// Manifest digest of the running version.
    pub(crate) fn running(&self) -> Option<&String> {
        match self {
            SyncState::Idle { running }
            | SyncState::Retrying { running, .. }
            | SyncState::Refused { running, .. } => running.as_ref(),
        }
    }

    /// How long to wait before the next attempt; `None` when only a change of the sources
    /// file could help (a pinned digest that runs, or one refused for good).
    pub(crate) fn wait(&self, follow: Option<Duration>) -> Option<Duration> {
        match self {
            SyncState::Retrying { attempts, .. } => {
                Some(ExponentialBackoff::new(RETRY, RETRY_MAX).after_failures(*attempts))
            }
            SyncState::Idle { .. } | SyncState::Refused { .. } => follow,
        }
    }
}

/// One source's worker: its state, and what it needs to pull and load.
pub(crate) struct SourceSync {
    pub(crate) source: Source,
    pub(crate) state: SyncState,
    registry: Registry,
    manager: PluginManager,
    staging: PathBuf,
    metrics: SourceMetrics,
}

impl SourceSync {
    pub(crate) fn new(
        source: Source,
        registry: Registry,
        manager: PluginManager,
        staging: &Path,
        metrics: SourceMetrics,
    ) -> Self {
        SourceSync {
            source,
            state: SyncState::Idle { running: None },
            registry,
            manager,
            staging: staging.to_path_buf(),
            metrics,
        }
    }

    /// One attempt, its outcome folded into the state.
    pub(crate) async fn attempt(&mut self) {
        let attempt = self.try_once().await;
        let name = &self.source.name;
        let reference = &self.source.reference;
        self.state =
            std::mem::replace(&mut self.state, SyncState::Idle { running: None }).step(attempt);
        if let (SyncState::Retrying { attempts, .. }, Some(wait)) =
            (&self.state, self.state.wait(self.source.follow))
        {
            tracing::info!(plugin = %name, reference = %reference, attempts,
                retry_in_ms = wait.as_millis() as u64, "plugin source: retrying in {wait:?}");
        }
    }

    async fn try_once(&mut self) -> Attempt {
        let name = self.source.name.clone();
        let reference = self.source.reference.clone();
        let plain = self.source.plain_http;
        let fail = |e: &RegistryError, result| {
            let running = self.state.running().is_some();
            self.metrics.count(&name, result);
            let then = if running {
                "the running version keeps running"
            } else {
                "the plugin is not loaded"
            };
            tracing::error!(plugin = %name, reference = %reference, running,
                "plugin source not pulled: {e}; {then}");
        };
        let digest = match self.registry.resolve(&reference, plain).await {
            Ok(d) => d,
            Err(e) => {
                fail(&e, PullResult::from(&e));
                return transient_or(&e, None);
            }
        };
        if self.state.running() == Some(&digest) {
            return Attempt::Current;
        }
        if matches!(&self.state, SyncState::Refused { digest: d, .. } if *d == digest) {
            return Attempt::Permanent(digest);
        }
        let pinned = reference.pinned(&digest);
        let pulled = match self
            .registry
            .pull_signed(&pinned, &self.source.keys, plain)
            .await
        {
            Ok(p) => p,
            Err(e) => {
                fail(&e, PullResult::from(&e));
                return transient_or(&e, Some(digest));
            }
        };
        self.metrics.count(&name, PullResult::Pulled);
        let path = match self.stage(&pulled.wasm) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(plugin = %name, error = %e, "plugin source: cannot stage the component");
                return Attempt::Transient;
            }
        };
        tracing::info!(plugin = %name, reference = %pulled.reference, bytes = pulled.wasm.len(), "plugin source: pulled");
        // The manager logs, counts and publishes a failed load itself.
        match self.manager.load_file(&path).await {
            Ok(_) => Attempt::Loaded(digest),
            Err(e) if e.is_retriable() => Attempt::Transient,
            Err(_) => Attempt::Permanent(digest),
        }
    }

    /// Writes `NAME.wasm` and `NAME.toml` into the staging directory by atomic renames.
    fn stage(&self, wasm: &[u8]) -> std::io::Result<PathBuf> {
        let name = &self.source.name;
        let path = self.staging.join(format!("{name}.wasm"));
        let manifest = self.staging.join(format!("{name}.toml"));
        match &self.source.manifest {
            Some(text) => write_atomic(&manifest, text.as_bytes())?,
            None => match std::fs::remove_file(&manifest) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
        }
        write_atomic(&path, wasm)?;
        Ok(path)
    }

    /// Attempts until `stop`, which also abandons an attempt under way: a followed tag is
    /// polled, a failure retried with backoff.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        loop {
            let Some(wait) = self.state.wait(self.source.follow) else {
                stop.cancelled().await;
                return;
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            // A registry may hold a pull up to its deadline: a stop does not wait for it.
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.attempt() => {}
            }
        }
    }
}

/// A registry failure as an attempt: retriable ones ([`RegistryError::is_retriable`]:
/// unreachable, not pushed yet, not signed yet) are retried with backoff; any other refuses the
/// digest it is about (none when the tag could not even be resolved, which is retried too).
fn transient_or(e: &RegistryError, digest: Option<String>) -> Attempt {
    match digest {
        Some(d) if !e.is_retriable() => Attempt::Permanent(d),
        _ => Attempt::Transient,
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_failures_are_retried_only_when_the_error_says_so() {
        use crate::registry::{Refusal, Said, Unverified};
        let reference = || "127.0.0.1:5000/a:v1".to_string();
        let d = || Some("sha256:1".to_string());
        let not_yet_pushed = RegistryError::NotFound {
            reference: reference(),
            said: Said::text("404", 10),
        };
        assert_eq!(transient_or(&not_yet_pushed, d()), Attempt::Transient);
        let not_yet_signed = RegistryError::Unverified {
            reference: reference(),
            cause: Unverified::Unsigned { tag: "t".into() },
        };
        assert_eq!(transient_or(&not_yet_signed, d()), Attempt::Transient);
        let other_key = RegistryError::Unverified {
            reference: reference(),
            cause: Unverified::NoKey {
                count: 1,
                keys: "k".into(),
            },
        };
        assert_eq!(
            transient_or(&other_key, d()),
            Attempt::Permanent("sha256:1".into())
        );
        let refused = RegistryError::Refused {
            reference: reference(),
            cause: Refusal::PlainHttpCredentials,
        };
        assert_eq!(
            transient_or(&refused, None),
            Attempt::Transient,
            "no digest to refuse"
        );
    }

    #[test]
    fn the_state_machine_keeps_the_running_digest_and_backs_off() {
        let s = SyncState::Idle { running: None };
        let s = s.step(Attempt::Transient);
        assert_eq!(s.wait(None), Some(RETRY));
        let s = s.step(Attempt::Transient);
        assert_eq!(s.wait(None), Some(RETRY * 2));
        let s = s.step(Attempt::Loaded("d1".into()));
        assert_eq!(
            s,
            SyncState::Idle {
                running: Some("d1".into())
            }
        );
        assert_eq!(
            s.wait(None),
            None,
            "a pinned digest that runs is not polled"
        );
        let follow = Some(Duration::from_secs(60));
        let s = s.step(Attempt::Permanent("d2".into()));
        assert_eq!(
            s.running(),
            Some(&"d1".to_string()),
            "a refused digest keeps the old one"
        );
        assert_eq!(s.wait(follow), follow);
        let s = s.step(Attempt::Current);
        assert_eq!(
            s,
            SyncState::Idle {
                running: Some("d1".into())
            }
        );
        let mut s = s;
        for _ in 0..40 {
            s = s.step(Attempt::Transient);
        }
        assert_eq!(s.wait(None), Some(RETRY_MAX));
    }
}
