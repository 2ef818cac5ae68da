//! One scenario run: an embedded API server and a host's pieces (informers, plugin manager,
//! runtime) on one single-threaded Tokio runtime whose clock is paused, the handler loaded
//! from a private plugins folder, and the steps carried out one by one.
//!
//! Time. Everything — the API server, informers, plugin deliveries and the guest itself (see
//! [`DeliveryMode::Inline`]) — runs on one thread with one paused clock. A blocking
//! task is kept alive for the whole run, which stops Tokio from moving the clock when the
//! thread idles; time moves only in an `advance` step, so resyncs, retry backoffs and
//! `on-synced` retries fire at their virtual instants without anyone waiting. A guest's CPU
//! deadline stays real: a handler that loops is stopped as in a host.
//!
//! Settling. After each step the runner waits until the host has done everything the step
//! caused: the API server sends a progress bookmark to every watch, and every informer must
//! have seen the server's newest resourceVersion and passed on all it got, every plugin must
//! be idle (nothing ready, no call in flight, no `on-synced` due), and the newest
//! resourceVersion must not have moved meanwhile (a handler's write restarts the wait).
//!
//! Calls. Each call starts only once every informer has seen the API server's newest
//! resourceVersion (a [`CallGate`]): a call reads in its cache what the calls before it wrote,
//! so a transcript never depends on whether a watch event or the next call came first.
//!
//! Advancing. `advance` moves the clock in ticks (5 ms after activity, doubling to 250 ms while
//! nothing happens) and settles after each, so a timer fires at most one tick late and what
//! it starts — a resync's calls, a request in flight — completes before the clock moves on
//! (a request's own timeout can never fire because the runner jumped past it). A call that
//! waits while nothing else happens (a guest that sleeps) gets time too: after 20 ms of real
//! stillness the clock moves 5 ms at a time until it returns (or its wall-clock limit ends it).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

mod api;
mod begin;

use begin::{Copies, check_load, start_host, start_server};

use super::file::{Action, ObjectKey, Scenario, Step};
use super::recorder::Recorder;
use super::transcript::{Entry, compare, flow, subset};
use crate::host::Host;

/// How long (real time) a step may take to settle before the run is declared stuck.
pub const SETTLE_PATIENCE: Duration = Duration::from_secs(60);

/// Shortest step of virtual time in an `advance`: the first retry backoff (5 ms) fires on time.
const MIN_TICK: Duration = Duration::from_millis(5);
/// Longest step: how late a timer may fire after a quiet stretch.
const MAX_TICK: Duration = Duration::from_millis(250);

/// How long (real time) a call may wait with nothing else happening before the virtual clock
/// moves for it.
const CALL_WAIT: Duration = Duration::from_millis(20);

/// The field manager of the runner's own writes.
const RUNNER_MANAGER: &str = "kubewasm-test";

/// The User-Agent of the runner's own requests (the host under test keeps the host's).
const RUNNER_USER_AGENT: &str = concat!("kubewasm-test/", env!("CARGO_PKG_VERSION"));

/// A client for `config` that identifies itself as the scenario runner, not the host.
fn runner_client(config: kube::Config) -> anyhow::Result<kube::Client> {
    let config = crate::identity::with_user_agent(config, RUNNER_USER_AGENT);
    Ok(kube::Client::try_from(config)?)
}

/// What one step did and how it compared.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    /// `steps` index in the file (`None` for an implied start).
    pub index: Option<usize>,
    /// Line in the file.
    pub line: usize,
    /// What the step did.
    pub label: String,
    /// The transcript it produced.
    pub actual: Vec<Entry>,
    /// Differences from the expectations (empty: passed).
    pub diffs: Vec<String>,
}

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The steps run (all of them unless `error` stopped the run).
    pub steps: Vec<StepOutcome>,
    /// Why the run stopped early: a step the server refused, a handler that would not load or
    /// settle. Names the file and line, and the user's own files (never the runner's copies).
    pub error: Option<String>,
    /// For a scenario that expects a refusal (`refused`): the grants the load was refused
    /// for, as the refusal names them; `None` when the handler would load.
    pub refused: Option<Vec<String>>,
    /// Whom the handler's `kube` calls acted as (each call's `Impersonate-User`, as the server
    /// recorded it and a real cluster's audit log would name it), each once.
    pub acting_as: Vec<String>,
}

impl RunOutcome {
    /// Whether every step matched and nothing went wrong.
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.steps.iter().all(|s| s.diffs.is_empty())
    }
}

/// Settings shared by every scenario of one `kubewasm test`.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The handler component.
    pub handler: PathBuf,
    /// Compile cache folder.
    pub cache_dir: Option<PathBuf>,
}

/// Runs `scenario` on a fresh runtime, API server and host; never panics on bad input.
pub fn run(config: &RunConfig, scenario: &Scenario) -> RunOutcome {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return RunOutcome {
                steps: Vec::new(),
                error: Some(format!("cannot start a runtime: {e}")),
                refused: None,
                acting_as: Vec::new(),
            };
        }
    };
    let outcome = rt.block_on(async {
        let hold = Hold::new();
        let mut steps = Vec::new();
        let world = match World::start(config, scenario).await {
            Ok(Begun::Running(w, v2)) => match scenario.check_exports(v2, &config.handler) {
                Ok(()) => w,
                Err(e) => {
                    w.stop().await;
                    return RunOutcome {
                        steps,
                        error: Some(e.to_string()),
                        refused: None,
                        acting_as: Vec::new(),
                    };
                }
            },
            Ok(Begun::Refused(missing)) => return refusal_outcome(scenario, missing),
            Err(e) => {
                return RunOutcome {
                    steps,
                    error: Some(format!("{}: {e:#}", scenario.path.display())),
                    refused: None,
                    acting_as: Vec::new(),
                };
            }
        };
        let mut error = None;
        for step in &scenario.steps {
            let at = if step.line > 0 {
                format!("{}:{}", scenario.path.display(), step.line)
            } else {
                scenario.path.display().to_string()
            };
            if let Err(e) = world.act(step).await {
                let e = world.paths.shown(&e.to_string());
                error = Some(format!("{at}: {}: {e}", step.action.label()));
                break;
            }
            if let Err(e) = world.settle().await {
                error = Some(format!("{at}: {}: {e}", step.action.label()));
                break;
            }
            let actual = world.recorder.take();
            let mut diffs = match &step.expect {
                Some(expect) => compare(expect, &actual),
                None => Vec::new(),
            };
            match world.check_state(step).await {
                Ok(more) => diffs.extend(more),
                Err(e) => {
                    error = Some(format!("{at}: {e}"));
                    break;
                }
            }
            steps.push(StepOutcome {
                index: step.index,
                line: step.line,
                label: step.action.label(),
                actual,
                diffs,
            });
        }
        let acting_as = world.acting_as();
        world.stop().await;
        drop(hold);
        RunOutcome {
            steps,
            error,
            refused: None,
            acting_as,
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    outcome
}

/// Keeps Tokio from moving the paused clock while it lives: a blocking task in flight stops
/// auto-advance on a current-thread runtime. Dropping it drops the sender, which ends the task.
struct Hold {
    _release: std::sync::mpsc::Sender<()>,
}

impl Hold {
    fn new() -> Hold {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            let _ = rx.recv();
        });
        Hold { _release: tx }
    }
}

/// How a run began: the handler loaded and runs, or (a scenario expecting a refusal) the
/// load was checked and nothing runs.
enum Begun {
    /// Loaded; whether it exports `on-synced`.
    Running(Box<World>, bool),
    /// A `refused` scenario: the grants it was refused for (`None`: it would load).
    Refused(Option<Vec<String>>),
}

/// The outcome of a `refused` scenario: one check, at the line of `refused`, that the load was
/// refused for exactly the grants listed (when they are listed).
fn refusal_outcome(scenario: &Scenario, missing: Option<Vec<String>>) -> RunOutcome {
    let expected = scenario
        .refused
        .as_ref()
        .expect("only for refused scenarios");
    let mut diffs = Vec::new();
    match (&missing, &expected.missing) {
        (None, _) => diffs.push(
            "- refused   (the handler loads: its grants cover everything it asks for)".to_string(),
        ),
        (Some(got), Some(want)) => {
            for w in want.iter().filter(|w| !got.contains(w)) {
                diffs.push(format!("- missing: {w}   (the refusal does not name it)"));
            }
            for g in got.iter().filter(|g| !want.contains(g)) {
                diffs.push(format!("+ missing: {g}   (unexpected)"));
            }
        }
        (Some(_), None) => {}
    }
    RunOutcome {
        steps: vec![StepOutcome {
            index: None,
            line: expected.line,
            label: "start (refused)".into(),
            actual: Vec::new(),
            diffs,
        }],
        error: None,
        refused: missing,
        acting_as: Vec::new(),
    }
}

/// The runner loads the user's handler and manifest from copies in a private folder; messages
/// about those copies name the user's files instead.
struct UserPaths {
    /// `(the runner's copy, the user's file)`.
    pairs: Vec<(String, String)>,
}

impl UserPaths {
    fn shown(&self, message: &str) -> String {
        self.pairs
            .iter()
            .fold(message.to_string(), |m, (copy, user)| m.replace(copy, user))
    }
}

struct World {
    paths: UserPaths,
    server: apiserver::ApiServer,
    client: kube::Client,
    host: Host,
    leader: watch::Sender<bool>,
    recorder: Arc<Recorder>,
    /// The private plugins folder; removed at the end.
    _dir: tempfile::TempDir,
    plugin: String,
    plugin_path: PathBuf,
    /// The API server's resourceVersion at the last settle.
    settled_rv: AtomicU64,
}

impl World {
    /// Starts a run in named steps: the server, the private copies of the user's files, the
    /// host, the load check (a refusal stops here), then the scenario's objects.
    async fn start(config: &RunConfig, scenario: &Scenario) -> anyhow::Result<Begun> {
        let server = start_server(scenario).await?;
        let server_config = kube::Config::new(server.url().parse()?);
        // The runner's own writes carry its own User-Agent (and field manager), so the server
        // and `managedFields` never take them for the host's.
        let client = runner_client(server_config.clone())?;
        let recorder = Arc::new(Recorder::default());
        recorder.set_stubs(&scenario.http);
        let copies = Copies::make(config, scenario)?;
        let (leader, leadership) = watch::channel(scenario.leader);
        let host = start_host(
            config,
            scenario,
            &server,
            server_config,
            &recorder,
            &copies,
            leadership,
        )
        .await?;
        let v2 = match check_load(&host, &copies, scenario.refused.is_some()).await {
            Ok(v2) => v2,
            Err(stop) => {
                host.shutdown().await;
                server.shutdown().await;
                return stop.into_begun(&copies.paths);
            }
        };
        let Copies {
            dir,
            plugin,
            plugin_path,
            paths,
            ..
        } = copies;
        let world = World {
            paths,
            server,
            client,
            host,
            leader,
            recorder,
            _dir: dir,
            plugin,
            plugin_path,
            settled_rv: AtomicU64::new(0),
        };
        for (i, o) in scenario.objects.iter().enumerate() {
            world.apply(o).await.map_err(|e| {
                let key = ObjectKey::of(o).map_or_else(String::new, |k| format!(" ({k})"));
                anyhow::anyhow!("objects[{i}]{key}: {e}")
            })?;
        }
        Ok(Begun::Running(Box::new(world), v2))
    }

    async fn act(&self, step: &Step) -> anyhow::Result<()> {
        match &step.action {
            Action::Start => self.load().await,
            Action::Apply(o) => self.apply(o).await,
            Action::Patch(p) => self.patch(p).await,
            Action::Delete(k) => {
                let url = self.url(k, None).await?;
                self.send(http::Method::DELETE, url, None).await.map(drop)
            }
            Action::Advance(d) => {
                // In ticks, settling after each, so that what a timer starts (a resync's
                // calls, a request in flight) finishes before the clock moves on; a tick is
                // short after activity and grows while nothing happens.
                let end = tokio::time::Instant::now() + *d;
                let mut tick = MIN_TICK;
                loop {
                    let now = tokio::time::Instant::now();
                    if now >= end {
                        break;
                    }
                    tokio::time::advance(tick.min(end - now)).await;
                    let busy = self.settle().await?;
                    tick = if busy {
                        MIN_TICK
                    } else {
                        (tick * 2).min(MAX_TICK)
                    };
                }
                Ok(())
            }
            Action::Relist {
                apply,
                patch,
                delete,
            } => {
                let faults = self.server.faults();
                faults.pause_watches();
                let written = async {
                    for o in apply {
                        self.apply(o).await?;
                    }
                    for p in patch {
                        self.patch(p).await?;
                    }
                    for k in delete {
                        let url = self.url(k, None).await?;
                        self.send(http::Method::DELETE, url, None).await?;
                    }
                    anyhow::Ok(())
                }
                .await;
                faults.compact();
                faults.end_watches();
                faults.resume_watches();
                written
            }
            Action::Restart => {
                self.host.manager().unload(&self.plugin).await;
                self.load().await
            }
            Action::Swap(path) => {
                std::fs::copy(path, &self.plugin_path)
                    .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
                self.load().await
            }
            Action::LoseLeadership => {
                self.leader.send_replace(false);
                Ok(())
            }
            Action::GainLeadership => {
                self.leader.send_replace(true);
                Ok(())
            }
            Action::Http(stubs) => {
                self.recorder.set_stubs(stubs);
                Ok(())
            }
        }
    }

    /// Waits until the host has handled everything so far (see the module doc).
    async fn settle(&self) -> anyhow::Result<bool> {
        let started = std::time::Instant::now();
        let entries = self.recorder.len();
        let mut target = self.settled_rv.load(Ordering::Relaxed);
        let mut busy = false;
        let mut quiet = 0;
        let mut rounds = 0u64;
        let mut last_moved = (usize::MAX, 0, false);
        let mut still_since = std::time::Instant::now();
        loop {
            let now = self.server.resource_version();
            if now != target || (busy && rounds.is_multiple_of(200)) {
                busy |= now != target;
                target = now;
                self.server.faults().bookmark_now();
            }
            rounds += 1;
            let informers = self.host.factory().caught_up(target);
            let plugins = self.host.manager().is_idle();
            // The server's own controllers (the garbage collector, namespace teardown) idle
            // too: what they have yet to write is part of "everything so far".
            let controllers = self.server.controllers_idle();
            if informers && plugins && controllers && self.server.resource_version() == target {
                quiet += 1;
                if quiet >= 3 {
                    self.settled_rv.store(target, Ordering::Relaxed);
                    return Ok(busy || self.recorder.len() != entries);
                }
            } else {
                quiet = 0;
                busy = true;
            }
            // A call in flight while nothing else moves waits for the clock (a guest that
            // sleeps, a host call's backoff): time passes for it as it would in a host.
            let moved = (
                self.recorder.len(),
                self.server.resource_version(),
                informers,
            );
            if moved != last_moved || plugins {
                last_moved = moved;
                still_since = std::time::Instant::now();
            } else if still_since.elapsed() > CALL_WAIT {
                tokio::time::advance(MIN_TICK).await;
            }
            if started.elapsed() > SETTLE_PATIENCE {
                let what = match (informers, plugins) {
                    (false, _) => "the informers did not catch up with the API server",
                    (true, false) => "the handler kept busy (calls in flight or queued)",
                    _ => "the API server kept changing",
                };
                anyhow::bail!(
                    "did not settle within {} s: {what}",
                    SETTLE_PATIENCE.as_secs()
                );
            }
            if busy {
                // Lets sockets and other tasks run for a moment; a blocking sleep keeps the
                // clock frozen.
                let _ =
                    tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1)))
                        .await;
            } else {
                // Nothing happened (yet): a yield lets every woken task and ready socket run.
                tokio::task::yield_now().await;
            }
        }
    }

    async fn check_state(&self, step: &Step) -> anyhow::Result<Vec<String>> {
        let mut diffs = Vec::new();
        for want in &step.state {
            let key = ObjectKey::of(want).expect("checked when parsed");
            match self.get(&key).await? {
                None => diffs.push(format!("- state {key}   (does not exist)")),
                Some(got) => {
                    if !subset(want, &got) {
                        diffs.push(format!("- state {key}: {}", flow(want)));
                        diffs.push(format!("+ state {key}: {}", flow(&strip(got))));
                    }
                }
            }
        }
        for key in &step.absent {
            if self.get(key).await?.is_some() {
                diffs.push(format!("- absent {key}   (it exists)"));
            }
        }
        Ok(diffs)
    }

    /// The distinct users the server saw impersonated, in order of first use.
    fn acting_as(&self) -> Vec<String> {
        let mut users: Vec<String> = Vec::new();
        for line in self.server.stats().impersonated {
            let user = line.split(' ').next().unwrap_or_default().to_string();
            if !users.contains(&user) {
                users.push(user);
            }
        }
        users
    }

    async fn stop(self) {
        self.host.shutdown().await;
        self.server.shutdown().await;
    }
}

/// An object as shown in a state diff: without `managedFields`.
fn strip(mut v: Value) -> Value {
    if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        md.remove("managedFields");
    }
    v
}
