//! Randomized convergence: seeded schedules of writes, relists after 410 with writes the watch
//! missed, watch closes, very short and cut watches, hot swaps, plugin removals, and guests that
//! trap or sleep past their deadline. After every schedule each running plugin's view, rebuilt
//! from the calls it received, must equal the server's state, and no plugin version may receive a
//! callback for an object after its delete (or an older state after a newer one).
//!
//! A failing schedule names its seed and number; `KUBEWASM_SEED` and `KUBEWASM_SCHEDULES`
//! replay or lengthen a run, and the ignored `convergence_long` runs ten times as many.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubewasm::informer::{BackoffConfig, ReflectorConfig};
use kubewasm::runtime::CallKind;
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{FIXTURE, LOGGER, cm, install};

/// The plugins of every run: two fixtures that trap or sleep on labelled objects (one with a
/// tiny queue cap, so notifications coalesce) and a logger.
const PLUGINS: [(&str, &str); 3] = [("alpha", FIXTURE), ("beta", FIXTURE), ("gamma", LOGGER)];

/// Manifest of `plugin` in its `generation`-th form: every rewrite is a new version (a swap);
/// each plugin runs up to `concurrency` calls at once.
fn manifest(plugin: &str, generation: u32, concurrency: usize) -> String {
    let queue = if plugin == "beta" {
        "max-queued = 3\n"
    } else {
        ""
    };
    format!(
        "deadline-ms = {}\nconcurrency = {concurrency}\n{queue}",
        150 + generation
    )
}

fn write_atomic(dir: &Path, name: &str, content: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// What one plugin version has seen, folded call by call.
#[derive(Default)]
struct View {
    objects: BTreeMap<String, u64>,
    deleted: HashSet<String>,
}

/// Every plugin's views, per version, folded incrementally from the recorder.
#[derive(Default)]
struct Views {
    read: HashMap<String, usize>,
    by_version: HashMap<(String, u64), View>,
    violations: Vec<String>,
}

impl Views {
    fn update(&mut self, recorder: &Recorder) {
        for (plugin, _) in PLUGINS {
            let from = self.read.get(plugin).copied().unwrap_or(0);
            let calls = recorder.calls_since(plugin, from);
            self.read.insert(plugin.to_string(), from + calls.len());
            for c in calls {
                let rv: u64 = c.resource_version.parse().unwrap_or(0);
                let view = self
                    .by_version
                    .entry((plugin.to_string(), c.version))
                    .or_default();
                let seen = view.objects.get(&c.key).copied();
                let wrong = match (c.call, seen) {
                    (CallKind::Add, Some(_)) => Some("an add for an object it already has"),
                    (CallKind::Update | CallKind::Delete, None)
                        if view.deleted.contains(&c.key) =>
                    {
                        Some("a callback after the object's delete")
                    }
                    (CallKind::Update | CallKind::Delete, None) => {
                        Some("a callback for an object it never saw added")
                    }
                    (CallKind::Update, Some(old)) if rv < old => {
                        Some("an older state after a newer one")
                    }
                    _ => None,
                };
                if let Some(what) = wrong {
                    self.violations.push(format!(
                        "{plugin} v{}: {what}: {:?} {} rv={} (had {seen:?})",
                        c.version, c.call, c.key, c.resource_version
                    ));
                }
                match c.call {
                    CallKind::Add | CallKind::Update => {
                        view.deleted.remove(&c.key);
                        view.objects.insert(c.key, rv);
                    }
                    CallKind::Delete => {
                        view.objects.remove(&c.key);
                        view.deleted.insert(c.key);
                    }
                    // Never a `Called` event: `on-synced` has no object; the handlers here are
                    // not controllers.
                    CallKind::Synced | CallKind::Reconcile | CallKind::KeysFor => {}
                }
            }
        }
    }

    /// What `plugin` at `version` holds of namespace `ns` (on a shared cluster the plugins
    /// also see other tenants' ConfigMaps).
    fn of(&self, plugin: &str, version: u64, ns: &str) -> BTreeMap<String, u64> {
        let prefix = format!("{ns}/");
        self.by_version
            .get(&(plugin.to_string(), version))
            .map(|v| {
                v.objects
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, rv)| (k.clone(), *rv))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The run's state: which plugins are installed, at which version and manifest generation.
pub(crate) struct Run {
    dir: tempfile::TempDir,
    t: TestHost,
    /// ConfigMaps in the run's namespace: the only ones written and compared.
    api: Api<ConfigMap>,
    ns: String,
    /// Deletes a namespace of the run's own when the run ends (none in `default`).
    _namespace: Option<TestNamespace>,
    target: Target,
    /// Running version of each plugin (`None` while removed).
    running: HashMap<&'static str, Option<u64>>,
    /// Newest version each plugin ever had.
    newest: HashMap<&'static str, u64>,
    generation: u32,
    concurrency: usize,
    views: Views,
}

impl Run {
    async fn start(concurrency: usize) -> Run {
        let target = Target::Embedded(start_server().await);
        Run::start_on(target, None, concurrency).await
    }

    /// A run on `target` writing in `namespace` (else `default`): plugins watch every
    /// namespace, views are compared with the server's in this one.
    pub(crate) async fn start_on(
        target: Target,
        namespace: Option<TestNamespace>,
        concurrency: usize,
    ) -> Run {
        let ns = namespace
            .as_ref()
            .map_or("default".to_string(), |n| n.name.clone());
        let api: Api<ConfigMap> = Api::namespaced(target.client(), &ns);
        let dir = tempfile::tempdir().unwrap();
        for (plugin, wasm) in PLUGINS {
            write_atomic(
                dir.path(),
                &format!("{plugin}.toml"),
                &manifest(plugin, 0, concurrency),
            );
            install(&guest(wasm), dir.path(), &format!("{plugin}.wasm"));
        }
        // client-go's relist backoff (800 ms doubling to 30 s, reset after 2 quiet minutes)
        // would make every schedule after a few short watches wait half a minute.
        let informers = ReflectorConfig {
            backoff: BackoffConfig {
                initial: Duration::from_millis(5),
                max: Duration::from_millis(50),
                reset_after: Duration::from_secs(1),
                ..BackoffConfig::default()
            },
            ..ReflectorConfig::default()
        };
        let t = start_host_on(
            target.host_client(),
            Some(dir.path().to_path_buf()),
            Limits::default(),
            informers,
        )
        .await;
        let mut run = Run {
            dir,
            t,
            api,
            ns,
            _namespace: namespace,
            target,
            running: HashMap::new(),
            newest: HashMap::new(),
            generation: 0,
            concurrency,
            views: Views::default(),
        };
        for (plugin, _) in PLUGINS {
            let v = run.await_version(plugin, 0).await;
            run.running.insert(plugin, Some(v));
            run.newest.insert(plugin, v);
        }
        run
    }

    /// Waits for a Loaded or Swapped event making `plugin` newer than version `than`.
    async fn await_version(&self, plugin: &str, than: u64) -> u64 {
        let find = |r: &Recorder| {
            r.events()
                .iter()
                .filter_map(|e| match e {
                    HostEvent::Loaded {
                        plugin: p, version, ..
                    } if p == plugin => Some(*version),
                    HostEvent::Swapped { plugin: p, to, .. } if p == plugin => Some(*to),
                    _ => None,
                })
                .filter(|v| *v > than)
                .max()
        };
        let what = format!("{plugin} gets a version newer than {than}");
        self.t.recorder.wait(&what, |r| find(r).is_some()).await;
        find(&self.t.recorder).unwrap()
    }

    fn pick_plugin(rng: &mut StdRng) -> &'static str {
        PLUGINS[rng.random_range(0..PLUGINS.len())].0
    }

    /// Rewrites a running plugin's manifest (a new version) or reinstalls a removed one.
    async fn swap_or_reinstall(&mut self, plugin: &'static str) {
        let than = self.newest[plugin];
        match self.running[plugin] {
            Some(_) => {
                self.generation += 1;
                write_atomic(
                    self.dir.path(),
                    &format!("{plugin}.toml"),
                    &manifest(plugin, self.generation, self.concurrency),
                );
            }
            None => {
                let wasm = PLUGINS.iter().find(|(p, _)| *p == plugin).unwrap().1;
                install(&guest(wasm), self.dir.path(), &format!("{plugin}.wasm"));
            }
        }
        let v = self.await_version(plugin, than).await;
        self.running.insert(plugin, Some(v));
        self.newest.insert(plugin, v);
    }

    async fn remove(&mut self, plugin: &'static str) {
        let Some(current) = self.running[plugin] else {
            return self.swap_or_reinstall(plugin).await;
        };
        std::fs::remove_file(self.dir.path().join(format!("{plugin}.wasm"))).unwrap();
        self.t
            .recorder
            .wait(&format!("{plugin} unloaded"), |r| {
                r.events().iter().any(|e| {
                    matches!(e, HostEvent::Unloaded { plugin: p, version } if p == plugin && *version == current)
                })
            })
            .await;
        self.running.insert(plugin, None);
    }

    /// The server's ConfigMaps in the run's namespace, as key → resourceVersion.
    async fn server_state(&self) -> BTreeMap<String, u64> {
        self.api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|c| {
                let ns = c.metadata.namespace.unwrap_or_default();
                let name = c.metadata.name.unwrap_or_default();
                let rv = c.metadata.resource_version.unwrap_or_default();
                (format!("{ns}/{name}"), rv.parse().unwrap())
            })
            .collect()
    }

    /// Prints the run's figures and shuts the host down.
    pub(crate) async fn report_and_stop(self, what: &str) {
        let calls: usize = PLUGINS
            .iter()
            .map(|(p, _)| self.t.recorder.calls(p).len())
            .sum();
        let newest = self.newest.values().max().copied().unwrap_or(0);
        eprintln!("convergence: {what}, {calls} calls, versions up to {newest}");
        self.t.host.shutdown().await;
    }

    /// Waits until every running plugin's view equals the server's state.
    pub(crate) async fn converge(&mut self, label: &str) {
        let want = self.server_state().await;
        let ns = self.ns.as_str();
        let running: Vec<(&str, u64)> = self
            .running
            .iter()
            .filter_map(|(p, v)| v.map(|v| (*p, v)))
            .collect();
        let views = std::sync::Mutex::new(std::mem::take(&mut self.views));
        self.t
            .recorder
            .wait_reporting(
                |r| {
                    let mut views = views.lock().unwrap();
                    views.update(r);
                    running.iter().all(|(p, v)| views.of(p, *v, ns) == want)
                },
                || {
                    let views = views.lock().unwrap();
                    let mut out = format!("{label}: views do not converge\nserver: {want:?}\n");
                    for (p, v) in &running {
                        out += &format!("{p} v{v}: {:?}\n", views.of(p, *v, ns));
                    }
                    out
                },
            )
            .await;
        self.views = views.into_inner().unwrap();
        assert!(
            self.views.violations.is_empty(),
            "{label}: {}",
            self.views.violations.join("\n")
        );
    }
}

/// The labels a new object gets: rarely one that makes the fixtures trap or sleep past their
/// deadline (the logger ignores it).
fn labels(rng: &mut StdRng) -> Vec<(&'static str, &'static str)> {
    match rng.random_range(0..100) {
        0..4 => vec![("kubewasm.io/action", "trap")],
        4..7 => vec![("kubewasm.io/action", "sleep")],
        _ => vec![],
    }
}

async fn write(api: &Api<ConfigMap>, rng: &mut StdRng, names: &[String]) {
    let name = &names[rng.random_range(0..names.len())];
    let existing = api.get_opt(name).await.unwrap();
    match (existing, rng.random_range(0..10)) {
        (None, _) => {
            api.create(&PostParams::default(), &cm(name, &labels(rng)))
                .await
                .unwrap();
        }
        (Some(_), 0..3) => {
            api.delete(name, &DeleteParams::default()).await.unwrap();
        }
        (Some(_), _) => {
            let value: u32 = rng.random();
            let p = serde_json::json!({"data": {"k": value.to_string()}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&p))
                .await
                .unwrap();
        }
    }
}

/// One schedule of `ops` random steps on a pool of object names, then a convergence check, then
/// the pool is cleared (checked by the next schedule) so failing objects do not pile up. On a
/// real cluster (no fault injection) a fault step is a write instead.
pub(crate) async fn schedule(run: &mut Run, seed: u64, n: u64, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let names: Vec<String> = (0..6).map(|i| format!("s{n}-{i}")).collect();
    for _ in 0..ops {
        let step = rng.random_range(0..100);
        let Some(server) = run.target.embedded() else {
            match step {
                87..95 => run.swap_or_reinstall(Run::pick_plugin(&mut rng)).await,
                95.. => run.remove(Run::pick_plugin(&mut rng)).await,
                _ => write(&run.api, &mut rng, &names).await,
            }
            continue;
        };
        match step {
            0..70 => write(&run.api, &mut rng, &names).await,
            70..76 => {
                // A relist after 410 that must find writes the watch never delivered.
                server.faults().pause_watches();
                for _ in 0..rng.random_range(1..4) {
                    write(&run.api, &mut rng, &names).await;
                }
                server.faults().compact();
                server.faults().end_watches();
                server.faults().resume_watches();
            }
            76..81 => server.faults().end_watches(),
            81..85 => {
                server.faults().short_watches(2);
                server.faults().end_watches();
            }
            85..87 => {
                server.faults().drop_next_streams(1);
                server.faults().end_watches();
            }
            87..95 => {
                let plugin = Run::pick_plugin(&mut rng);
                run.swap_or_reinstall(plugin).await;
            }
            _ => {
                let plugin = Run::pick_plugin(&mut rng);
                run.remove(plugin).await;
            }
        }
    }
    run.converge(&format!("seed {seed} schedule {n}")).await;
    for name in &names {
        if run.api.get_opt(name).await.unwrap().is_some() {
            run.api
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
        }
    }
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

async fn run_schedules(default_count: u64, concurrency: usize) {
    let seed = env_u64("KUBEWASM_SEED").unwrap_or(0x6b75_6265);
    let count = env_u64("KUBEWASM_SCHEDULES").unwrap_or(default_count);
    let mut run = Run::start(concurrency).await;
    for n in 0..count {
        schedule(&mut run, seed, n, 12).await;
    }
    run.converge(&format!("seed {seed} after {count} schedules"))
        .await;
    run.report_and_stop(&format!("seed {seed}, {count} schedules"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_schedules_converge_to_the_server_state() {
    run_schedules(200, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: ten times the CI schedules"]
async fn convergence_long() {
    run_schedules(2000, 1).await;
}

/// The same schedules with up to eight calls in flight per plugin (issue 21): swaps, traps and
/// coalescing with concurrent calls still converge to the server's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_schedules_converge_at_concurrency_eight() {
    run_schedules(100, 8).await;
}
