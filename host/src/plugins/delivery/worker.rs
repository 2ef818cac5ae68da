//! What drains one plugin version's [`Dispatcher`]: a thread that owns its guest, or a task.
//!
//! Each plugin version gets its own OS thread with a single-threaded Tokio runtime: a guest
//! that computes until its deadline only ever occupies its own thread, never a worker of the
//! host's shared runtime (informers, endpoints, other plugins). A panic on that thread (a host
//! bug, never a guest trap) marks the plugin Failed, returns the in-flight keys to the queue and
//! restarts the loop with fresh guests after a backoff, so the queue always has a consumer.
//! [`spawn_task`] runs the same loop, with the same restart, as a task on the caller's runtime
//! (`DeliveryMode::Inline`, the scenario runner's virtual clock).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::dispatch::{Dispatcher, Guest};
use super::state::StateEvent;
use crate::workqueue::ExponentialBackoff;

/// First pause before a panicked worker restarts; doubles per panic in a row up to
/// [`RESTART_BACKOFF_MAX`].
pub(crate) const RESTART_BACKOFF: Duration = Duration::from_secs(1);
/// Longest pause before a panicked worker restarts.
pub(crate) const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Starts the thread. `make_guest` builds each of the plugin's instances (lazily, up to its
/// concurrency), fresh at start and after every panic.
pub(crate) fn spawn_worker<G, F>(
    dispatcher: Arc<Dispatcher>,
    mut make_guest: F,
    restart_backoff: Duration,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    G: Guest,
    F: FnMut() -> G + Send + 'static,
{
    let name = format!("plugin-{}", dispatcher.plugin());
    std::thread::Builder::new().name(name).spawn(move || {
        let mut backoff = restart_backoff;
        loop {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(plugin = %dispatcher.plugin(), error = %e, "cannot start the plugin's runtime; plugin stopped");
                    dispatcher.report(StateEvent::WorkerPanicked {
                        message: format!("cannot start the plugin's runtime: {e}"),
                    });
                    return;
                }
            };
            let d = dispatcher.clone();
            let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
                rt.block_on(d.run(&mut make_guest));
            }));
            let Err(panic) = ran else { return };
            drop(rt);
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
            {
                Ok(rt) => rt,
                Err(_) => return,
            };
            if !rt.block_on(recover(&dispatcher, panic_message(panic.as_ref()), &mut backoff)) {
                return;
            }
        }
    })
}

/// Runs the dispatcher as a task on the current runtime (see `DeliveryMode::Inline`), with the
/// same restart after a panic as a worker thread, so a host bug is survived the same way
/// whichever mode runs it.
pub(crate) fn spawn_task<G, F>(
    dispatcher: Arc<Dispatcher>,
    mut make_guest: F,
    restart_backoff: Duration,
) -> tokio::task::JoinHandle<()>
where
    G: Guest + Send + 'static,
    F: FnMut() -> G + Send + 'static,
{
    tokio::spawn(async move {
        let mut backoff = restart_backoff;
        loop {
            let ran = AssertUnwindSafe(dispatcher.run(&mut make_guest))
                .catch_unwind()
                .await;
            let Err(panic) = ran else { return };
            if !recover(&dispatcher, panic_message(panic.as_ref()), &mut backoff).await {
                return;
            }
        }
    })
}

/// After a panic: logs and counts it, marks the plugin Failed, returns the in-flight key to
/// the queue and waits out the backoff (doubling it for next time). False when the dispatcher
/// was stopped meanwhile.
async fn recover(dispatcher: &Dispatcher, message: String, backoff: &mut Duration) -> bool {
    tracing::error!(plugin = %dispatcher.plugin(), panic = %message, backoff_ms = backoff.as_millis() as u64,
        "plugin worker panicked; restarting it with a fresh instance after a backoff");
    dispatcher.count_restart();
    dispatcher.report(StateEvent::WorkerPanicked { message });
    dispatcher.recover_in_flight();
    tokio::select! {
        _ = tokio::time::sleep(*backoff) => {}
        _ = dispatcher.stopped().cancelled() => return false,
    }
    *backoff = ExponentialBackoff::new(*backoff, RESTART_BACKOFF_MAX).delay(1);
    dispatcher.report(StateEvent::Resumed);
    true
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}
