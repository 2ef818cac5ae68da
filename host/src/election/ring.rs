//! [`ShardRing`]: the task that performs the [`Membership`] machine's requests against the API
//! server, runs the drains, keeps the fence timer and publishes [`SlotOwnership`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::config::RingConfig;
use super::lease_lock::WriteError;
use super::member_lease::MemberLeases;
use super::membership::{Action, Input, Membership, Moment};
use super::ownership::SlotOwnership;
use super::ring_metrics::RingMetrics;

/// Implemented by the delivery layer (plugins); the election module knows nothing of plugins.
pub trait SlotDrain: Send + Sync + 'static {
    /// Called AFTER the ring has published an ownership without `released` (so no new call
    /// starts for those slots): resolves once no call for an object of those slots is in
    /// flight, or at `grace`. Only then does the ring write its Lease without them, which is
    /// what lets another replica take them.
    fn drain(&self, released: u64, grace: Duration) -> BoxFuture<'static, ()>;
}

/// A [`SlotDrain`] for a ring whose holder runs no calls (tests, tools): nothing to wait for.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCallsInFlight;

impl SlotDrain for NoCallsInFlight {
    fn drain(&self, _released: u64, _grace: Duration) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Membership of a shard ring in the background; see the module documentation of
/// [`crate::election`].
///
/// Dropping it is a crash: ownership reads `held = 0` at once and nothing is written, so the
/// other members take the slots over when this replica's Lease has expired.
pub struct ShardRing {
    ownership: Arc<watch::Sender<SlotOwnership>>,
    release: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    identity: String,
    lease_name: String,
}

impl ShardRing {
    /// Validates `config` and joins the ring it names.
    pub fn start(
        client: kube::Client,
        config: RingConfig,
        drain: Arc<dyn SlotDrain>,
        metrics: RingMetrics,
    ) -> anyhow::Result<ShardRing> {
        config.validate()?;
        let lease_name = config.lease_name();
        let leases = MemberLeases::new(
            client,
            &config.election.namespace,
            &config.election.lease_name,
            &lease_name,
            config.slots,
        );
        let ownership = Arc::new(watch::channel(SlotOwnership::none(config.slots)).0);
        let (release_tx, release_rx) = oneshot::channel();
        let identity = config.election.identity.clone();
        let task = tokio::spawn(drive(
            leases,
            config,
            ownership.clone(),
            drain,
            metrics,
            release_rx,
        ));
        Ok(ShardRing {
            ownership,
            release: Some(release_tx),
            task: Some(task),
            identity,
            lease_name,
        })
    }

    /// The slots this replica may handle, as they change (and on every renewal, which moves
    /// `valid_until`).
    pub fn ownership(&self) -> watch::Receiver<SlotOwnership> {
        self.ownership.subscribe()
    }

    /// This replica's holder identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The name of this replica's member Lease.
    pub fn lease_name(&self) -> &str {
        &self.lease_name
    }

    /// SIGTERM: publish held = 0, drain everything (bounded by the drain grace), then write
    /// the Lease with no slots and no holder and delete it, so the survivors take the slots at
    /// their next retry instead of after the lease duration.
    pub async fn release(mut self) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        clear(&self.ownership);
    }
}

impl Drop for ShardRing {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        clear(&self.ownership);
    }
}

/// Publishes that nothing is held (unless that is already what it says).
fn clear(ownership: &watch::Sender<SlotOwnership>) {
    ownership.send_if_modified(|o| {
        if o.held == 0 {
            return false;
        }
        o.held = 0;
        o.epoch += 1;
        true
    });
}

type Pending = Pin<Box<dyn Future<Output = Input> + Send>>;

/// The ring task: one state, one outstanding request, drains beside it.
async fn drive(
    leases: MemberLeases,
    cfg: RingConfig,
    ownership: Arc<watch::Sender<SlotOwnership>>,
    drain: Arc<dyn SlotDrain>,
    metrics: RingMetrics,
    mut release: oneshot::Receiver<()>,
) {
    let ring = format!("{}/{}", cfg.election.namespace, cfg.election.lease_name);
    let (mut state, first) = Membership::start(Instant::now());
    let mut pending: Pending = perform(&leases, first, &cfg);
    let mut drains: FuturesUnordered<BoxFuture<'static, u64>> = FuturesUnordered::new();
    let mut release_asked = false;
    loop {
        let fence_at = state.fence_at();
        let (input, ended_request) = tokio::select! {
            biased;
            asked = &mut release, if !release_asked => {
                release_asked = true;
                match asked {
                    Ok(()) => (Input::Release, false),
                    // The handle was dropped: abandon the Lease as a crash would.
                    Err(_) => return,
                }
            }
            // Before anything else that is ready: a process resuming from a pause fences
            // itself before it looks at any reply.
            () = sleep_until_some(fence_at) => (Input::Expired, false),
            Some(slots) = drains.next(), if !drains.is_empty() => (Input::Drained(slots), false),
            input = &mut pending => (input, true),
        };
        if ended_request && matches!(input, Input::Failed | Input::Conflict) && state.writing() {
            metrics.renew_failed();
        }
        let step = state.step(input, &Moment::now(), &cfg);
        state = step.state;
        for notice in &step.notices {
            tracing::error!(ring = %ring, member = %cfg.member, "{notice}");
        }
        if let Some(o) = step.publish {
            // Published before the next request or drain starts: a release has stopped new
            // calls before the drain begins, and before the write that frees the slots.
            // The gauge moves first so that anyone who sees the new set sees it counted.
            let before = ownership.borrow().held;
            metrics.set_held(before, o.held);
            ownership.send_replace(o.clone());
            if before != o.held {
                tracing::info!(
                    ring = %ring, member = %cfg.member, held = %super::member_lease::format_slots(o.held),
                    epoch = o.epoch, "shard slots changed"
                );
            }
        }
        metrics.set_fenced(state.is_fenced());
        metrics.set_members(state.view().members);
        if let Some(slots) = step.drain {
            let grace = cfg.drain_grace;
            let d = drain.drain(slots, grace);
            drains.push(Box::pin(async move {
                // The grace bounds the drain even if the delivery layer's does not.
                let _ = tokio::time::timeout(grace, d).await;
                slots
            }));
        }
        match step.action {
            Some(Action::Stop) => return,
            Some(action) => pending = perform(&leases, action, &cfg),
            None if ended_request => {
                // Cannot happen (every reply leads to a request); keep the rounds going.
                pending = perform(
                    &leases,
                    Action::Wait(Instant::now() + cfg.election.retry_period),
                    &cfg,
                );
            }
            None => {}
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Starts one request; its future reports the outcome. Every request is bounded by the renew
/// deadline, so a hung connection cannot stall the rounds.
fn perform(leases: &MemberLeases, action: Action, cfg: &RingConfig) -> Pending {
    let leases = leases.clone();
    let bound = cfg.election.renew_deadline;
    Box::pin(async move {
        match action {
            Action::Wait(until) => {
                tokio::time::sleep_until(until).await;
                Input::Tick
            }
            Action::List => match tokio::time::timeout(bound, leases.list()).await {
                Ok(Ok(found)) => Input::Listed(found),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot list the shard ring's Leases");
                    Input::Failed
                }
                Err(_) => Input::Failed,
            },
            Action::Write { record, base } => {
                let sent = Instant::now();
                let write = leases.write(&record, base.as_ref(), Timestamp::now());
                match tokio::time::timeout(bound, write).await {
                    Ok(Ok(lease)) => Input::Written { lease, sent },
                    Ok(Err(WriteError::Conflict)) => Input::Conflict,
                    Ok(Err(WriteError::Api(e))) => {
                        tracing::warn!(error = %e, "cannot write the shard member Lease");
                        Input::Failed
                    }
                    Err(_) => Input::Failed,
                }
            }
            Action::Delete { base } => {
                match tokio::time::timeout(bound, leases.delete(&base)).await {
                    Ok(Ok(())) => Input::Deleted,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "cannot delete the shard member Lease");
                        Input::Failed
                    }
                    Err(_) => Input::Failed,
                }
            }
            Action::Stop => std::future::pending().await,
        }
    })
}
