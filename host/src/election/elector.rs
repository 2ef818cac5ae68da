//! [`LeaderElector`]: the task that performs the [`Election`] machine's actions against the API
//! server and publishes leadership on a watch channel.

use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::config::ElectionConfig;
use super::lease_lock::{LeaseLock, WriteError};
use super::metrics::ElectionMetrics;
use super::state::{Action, Election, Input, Moment, Transition};

/// Competes for a Lease in the background; see the module documentation of
/// [`crate::election`].
///
/// Dropping it abandons the Lease without releasing it (as a crash would): leadership reads
/// `false` at once, and another replica takes over when the lease duration has passed.
pub struct LeaderElector {
    leadership: Arc<watch::Sender<bool>>,
    release: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    identity: String,
}

impl LeaderElector {
    /// Validates `config` and starts competing for the Lease it names.
    pub fn start(
        client: kube::Client,
        config: ElectionConfig,
        metrics: ElectionMetrics,
    ) -> anyhow::Result<LeaderElector> {
        config.validate()?;
        let lock = LeaseLock::new(client, &config.namespace, &config.lease_name);
        let leadership = Arc::new(watch::channel(false).0);
        let (release_tx, release_rx) = oneshot::channel();
        let identity = config.identity.clone();
        let task = tokio::spawn(drive(lock, config, leadership.clone(), metrics, release_rx));
        Ok(LeaderElector {
            leadership,
            release: Some(release_tx),
            task: Some(task),
            identity,
        })
    }

    /// Leadership as it changes: `true` while this replica may act as the leader.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leadership.subscribe()
    }

    /// Whether this replica leads right now.
    pub fn is_leader(&self) -> bool {
        *self.leadership.borrow()
    }

    /// This replica's holder identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Stops leading (leadership reads `false` before anything else happens), then clears the
    /// holder of the Lease so a standby takes over at its next retry instead of waiting for the
    /// lease to expire. Bounded by the renew deadline; on SIGTERM.
    pub async fn release(mut self) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.leadership.send_replace(false);
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.leadership.send_replace(false);
    }
}

/// The elector task: one state, one pending action, one step per outcome.
async fn drive(
    lock: LeaseLock,
    cfg: ElectionConfig,
    leadership: Arc<watch::Sender<bool>>,
    metrics: ElectionMetrics,
    mut release: oneshot::Receiver<()>,
) {
    let lease = format!("{}/{}", cfg.namespace, cfg.lease_name);
    let (mut state, mut action) = Election::start();
    let mut release_asked = false;
    loop {
        // Every request is bounded: by the leader's renew deadline, else by one renew deadline,
        // so a hung connection can neither keep a leader leading nor stall a standby.
        let deadline = state
            .deadline(&cfg)
            .unwrap_or_else(|| Instant::now() + cfg.renew_deadline);
        let input = tokio::select! {
            biased;
            asked = &mut release, if !release_asked => {
                release_asked = true;
                match asked {
                    Ok(()) => Input::Release,
                    // The handle was dropped: abandon the Lease as a crash would.
                    Err(_) => return,
                }
            }
            input = perform(&lock, &action, deadline, &lease) => input,
        };
        let step = state.step(input, &Moment::now(), &cfg);
        state = step.state;
        if let Some(t) = step.transition {
            // Logged before it is published, so whatever the new leader does is logged after.
            if t == Transition::Acquired {
                tracing::info!(lease = %lease, identity = %cfg.identity, "became the leader");
            }
            // Published before the next action runs: a releasing leader has stopped before the
            // write that frees the Lease is sent. A loss is published before it is logged, so
            // nothing delays stepping down.
            leadership.send_replace(state.is_leader());
            metrics.set_leader(state.is_leader());
            match t {
                Transition::Acquired => {}
                Transition::Lost(why) => tracing::warn!(
                    lease = %lease, identity = %cfg.identity, cause = %why,
                    "stopped leading; back to standby"
                ),
                Transition::Released => {
                    tracing::info!(lease = %lease, identity = %cfg.identity, "released leadership")
                }
            }
        }
        action = step.action;
        if action == Action::Stop {
            return;
        }
    }
}

/// Performs one action and reports its outcome.
async fn perform(lock: &LeaseLock, action: &Action, deadline: Instant, lease: &str) -> Input {
    match action {
        Action::Wait(until) => {
            tokio::time::sleep_until(*until).await;
            Input::Tick
        }
        Action::Fetch => match tokio::time::timeout_at(deadline, lock.get()).await {
            Ok(Ok(found)) => Input::Fetched(found),
            Ok(Err(e)) => {
                tracing::warn!(lease = %lease, error = %e, "cannot read the leader Lease");
                Input::Failed
            }
            Err(_) => Input::Failed,
        },
        Action::Write { record, base } => {
            let sent = Instant::now();
            match tokio::time::timeout_at(deadline, lock.write(record, base.as_ref())).await {
                Ok(Ok(written)) => Input::Written {
                    lease: written,
                    sent,
                },
                Ok(Err(WriteError::Conflict)) => Input::Conflict,
                Ok(Err(WriteError::Api(e))) => {
                    tracing::warn!(lease = %lease, error = %e, "cannot write the leader Lease");
                    Input::Failed
                }
                Err(_) => Input::Failed,
            }
        }
        Action::Stop => std::future::pending().await,
    }
}
