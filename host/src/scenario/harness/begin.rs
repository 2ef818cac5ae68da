//! The steps that begin a run: the embedded server, private copies of the user's handler and
//! manifest, the host wired as production wires it (on the paused clock, with a call gate), and
//! the load check that stops a run the host would refuse.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use super::{Begun, RunConfig, UserPaths};
use crate::host::{Host, HostBuilder};
use crate::informer::{BackoffConfig, InformerFactory, ReflectorConfig};
use crate::plugins::{CallGate, DeliveryMode, GrantError, GrantPolicy, describe_file, plugin_name};
use crate::runtime::{Limits, RuntimeConfig};
use crate::scenario::file::Scenario;
use crate::scenario::recorder::Recorder;

/// How long (real time) a call waits for the informers to catch up before it starts anyway
/// (a watch the step holds, an informer that cannot sync): the step's settle reports those.
const GATE_PATIENCE: Duration = Duration::from_secs(1);

/// The namespace the scenario host runs in, as `deploy/` installs it: plugins' ServiceAccounts
/// live there.
const SCENARIO_HOST_NAMESPACE: &str = "kubewasm";

/// The embedded server a run talks to, with bookmarks on demand and deterministic uids.
pub(super) async fn start_server(scenario: &Scenario) -> anyhow::Result<apiserver::ApiServer> {
    apiserver::ApiServer::start(apiserver::Config {
        // Bookmarks come when the runner asks for them (`bookmark_now`).
        bookmark_interval: Duration::from_secs(24 * 3600),
        deterministic_uids: true,
        // Opt-in (`workloads: true`): Pods start on the virtual clock, and the runner
        // settles only once the kubelet's pending starts are done (`controllers_idle`).
        workloads: scenario.workloads.then(apiserver::WorkloadConfig::default),
        ..apiserver::Config::default()
    })
    .await
}

/// The private plugins folder holding copies of the user's handler and manifest (the scenario's
/// `concurrency` written into the copy), and the grants the load is checked against.
pub(super) struct Copies {
    pub(super) dir: tempfile::TempDir,
    pub(super) plugin: String,
    pub(super) plugin_path: PathBuf,
    pub(super) grants: GrantPolicy,
    pub(super) paths: UserPaths,
}

impl Copies {
    pub(super) fn make(config: &RunConfig, scenario: &Scenario) -> anyhow::Result<Copies> {
        let dir = tempfile::tempdir()?;
        let plugin = plugin_name(&config.handler);
        let plugin_path = dir.path().join(format!("{plugin}.wasm"));
        std::fs::copy(&config.handler, &plugin_path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", config.handler.display()))?;
        let beside = config.handler.with_extension("toml");
        let manifest = scenario
            .manifest
            .clone()
            .or_else(|| beside.is_file().then(|| beside.clone()));
        let manifest_copy = dir.path().join(format!("{plugin}.toml"));
        let grants = match &manifest {
            Some(m) => {
                std::fs::copy(m, &manifest_copy)
                    .map_err(|e| anyhow::anyhow!("manifest {}: cannot read: {e}", m.display()))?;
                if let Some(n) = scenario.concurrency {
                    set_in_copy(
                        &manifest_copy,
                        "concurrency",
                        toml::Value::Integer(n as i64),
                    )?;
                }
                GrantPolicy::default()
            }
            None => GrantPolicy::EverythingAsked,
        };
        if let Some(settings) = &scenario.settings {
            // Without a manifest the copy holds only the settings, and everything asked is
            // still granted.
            if manifest.is_none() {
                std::fs::write(&manifest_copy, "")?;
            }
            set_in_copy(
                &manifest_copy,
                "settings",
                toml::Value::Table(settings.clone()),
            )?;
        }
        // Without a manifest a grants error suggests one beside the handler, where the user
        // would write it.
        let user_manifest = manifest.unwrap_or(beside);
        let paths = UserPaths {
            pairs: vec![
                (
                    plugin_path.display().to_string(),
                    config.handler.display().to_string(),
                ),
                (
                    manifest_copy.display().to_string(),
                    user_manifest.display().to_string(),
                ),
            ],
        };
        Ok(Copies {
            dir,
            plugin,
            plugin_path,
            grants,
            paths,
        })
    }
}

/// The host as production assembles it, with the runner's recorder as its observer and HTTP
/// stub, inline delivery behind a call gate, and informers that relist without backoff.
pub(super) async fn start_host(
    config: &RunConfig,
    scenario: &Scenario,
    server: &apiserver::ApiServer,
    server_config: kube::Config,
    recorder: &Arc<Recorder>,
    copies: &Copies,
    leadership: watch::Receiver<bool>,
) -> anyhow::Result<Host> {
    let host_client = crate::identity::client(server_config)?;
    // Each call starts once the informers have seen every write so far, the handler's own
    // included: which of a watch event and the next call comes first is then never left to
    // chance, and a transcript is the same on every run.
    let informers = Arc::new(OnceLock::<InformerFactory>::new());
    let gate = {
        let (faults, informers) = (server.shared_faults(), informers.clone());
        CallGate::new(move || {
            let (faults, factory) = (faults.clone(), informers.get().cloned());
            Box::pin(async move {
                if let Some(factory) = factory {
                    catch_up(&faults, &factory).await;
                }
            })
        })
    };
    let host = HostBuilder::new(host_client)
        .runtime(RuntimeConfig {
            cache_dir: config.cache_dir.clone(),
            max_instances: 16,
            http_stub: Some(recorder.clone()),
            ..RuntimeConfig::default()
        })
        .informers(ReflectorConfig {
            // Relists and re-watches happen at once: the frozen clock would hold a backoff
            // until the next `advance`.
            backoff: BackoffConfig {
                initial: Duration::ZERO,
                max: Duration::ZERO,
                jitter: 0.0,
                ..BackoffConfig::default()
            },
            ..ReflectorConfig::default()
        })
        .grants(copies.grants.clone())
        // Without a manifest the scenario's `concurrency` is the plugin's (with one, the
        // copy says it).
        .default_concurrency(scenario.concurrency.unwrap_or(1))
        .shutdown_grace(Duration::from_secs(1))
        .follow(leadership)
        // As deployed: each `kube` call impersonates the plugin's own ServiceAccount, so
        // the report can say whom a real cluster's RBAC and audit log would see.
        .plugin_accounts(Some(SCENARIO_HOST_NAMESPACE.to_string()))
        .observer(recorder.clone())
        .delivery(DeliveryMode::Inline(Some(gate)))
        .start()
        .await?;
    let _ = informers.set(host.factory().clone());
    Ok(host)
}

/// Why a run stops before its first step.
pub(super) enum LoadStop {
    /// The handler is not a component the host loads.
    Broken(String),
    /// A `refused` scenario: the grants it was refused for (`None`: it would load).
    ExpectedRefusal(Option<Vec<String>>),
    /// Refused although the scenario expected it to load: the grant error, when there is one.
    Refused(Option<String>),
}

impl LoadStop {
    /// What the run reports, naming the user's files rather than the runner's copies.
    pub(super) fn into_begun(self, paths: &UserPaths) -> anyhow::Result<Begun> {
        match self {
            LoadStop::Broken(e) => anyhow::bail!("the handler does not load: {}", paths.shown(&e)),
            LoadStop::ExpectedRefusal(missing) => Ok(Begun::Refused(missing)),
            LoadStop::Refused(e) => {
                let e = e.map_or_else(
                    || "its grants do not cover what it asks for".to_string(),
                    |e| paths.shown(&e),
                );
                anyhow::bail!("the handler does not load: {e}")
            }
        }
    }
}

/// Refuses what would not load (bad component, missing grants) before anything runs, so the
/// host never tries the load and logs nothing of its own about it; for a handler that loads,
/// tells whether it exports `on-synced` (the 0.2.0 world).
pub(super) async fn check_load(
    host: &Host,
    copies: &Copies,
    expects_refusal: bool,
) -> Result<bool, LoadStop> {
    let described = {
        let (runtime, path, grants) = (
            host.runtime().clone(),
            copies.plugin_path.clone(),
            copies.grants.clone(),
        );
        tokio::task::spawn_blocking(move || {
            describe_file(&runtime, &path, Limits::default(), &grants)
        })
        .await
        .map_err(|e| LoadStop::Broken(e.to_string()))?
    };
    let d = described.map_err(|e| LoadStop::Broken(e.to_string()))?;
    let refusal = match d.grants.check(&d.info) {
        Err(GrantError::Missing(m)) => Some((
            m.iter().map(ToString::to_string).collect::<Vec<_>>(),
            d.grant_error(&copies.plugin, &copies.plugin_path),
        )),
        _ => None,
    };
    match (expects_refusal, refusal) {
        (false, None) => Ok(d.compiled.world().has_synced()),
        (true, refusal) => Err(LoadStop::ExpectedRefusal(refusal.map(|(m, _)| m))),
        (false, Some((_, e))) => Err(LoadStop::Refused(e.map(|e| e.to_string()))),
    }
}

/// Sets one top-level key in the runner's copy of the manifest (the scenario's `concurrency`
/// and `settings` override the manifest's); a copy that is not TOML is left for the load to
/// report.
fn set_in_copy(manifest: &std::path::Path, key: &str, value: toml::Value) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(manifest)?;
    let Ok(mut table) = text.parse::<toml::Table>() else {
        return Ok(());
    };
    table.insert(key.into(), value);
    std::fs::write(manifest, toml::to_string(&table)?)?;
    Ok(())
}

/// Waits until every informer has seen the API server's newest resourceVersion and passed on
/// all it got (or [`GATE_PATIENCE`] of real time went by).
async fn catch_up(faults: &apiserver::Faults, factory: &InformerFactory) {
    let started = std::time::Instant::now();
    let mut asked = None;
    loop {
        let target = faults.resource_version();
        if factory.caught_up(target) || started.elapsed() > GATE_PATIENCE {
            return;
        }
        if asked != Some(target) {
            // Informers of kinds that did not change learn the version from a bookmark.
            faults.bookmark_now();
            asked = Some(target);
        }
        // A blocking sleep lets sockets and tasks run while keeping the clock frozen.
        let _ = tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1))).await;
    }
}
