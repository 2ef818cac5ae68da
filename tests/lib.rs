//! Shared helpers for the end-to-end tests: an embedded API server, a host against it, and
//! recorders that let a test await what handlers did instead of sleeping.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubewasm::host::{Host, HostBuilder};
use kubewasm::informer::ReflectorConfig;
use kubewasm::plugins::LoadOutcome;
use kubewasm::runtime::{
    CallEnded, CallKind, CallOutcome, GuestLogLevel, Limits, LoadFailed, Observer, PluginInfo,
    Quarantined, RuntimeConfig, SharedObserver, VersionLoaded,
};
use parking_lot::Mutex;
use tokio::sync::Notify;

pub mod cgroup;
pub mod host_objects;
pub mod process;
pub mod ring;

/// Upper bound for any awaited condition: a failure guard, never a synchronisation device.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Directory the example build scripts write components to (`bash guest-examples/build.sh`).
pub fn dist_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/dist")
}

/// Directory the test fixtures are built into (`bash tests/fixtures/build.sh`): guests that
/// exist only for the tests, never examples.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures")
}

/// A built component by file name: an example from [`dist_dir`] (`rust-configmap-logger.wasm`)
/// or a test fixture from [`fixtures_dir`] (`rust-test-fixture.wasm`); panics with the build
/// commands when neither holds it. The one place tests locate guests.
pub fn guest(file: &str) -> PathBuf {
    let fixture = fixtures_dir().join(file);
    if fixture.is_file() {
        return fixture;
    }
    let example = dist_dir().join(file);
    assert!(
        example.is_file(),
        "{file} is missing from {} and {}: build the examples with `bash guest-examples/build.sh` \
         and the test fixtures with `bash tests/fixtures/build.sh`",
        dist_dir().display(),
        fixtures_dir().display()
    );
    example
}

/// Starts an embedded API server with fast bookmarks and fault endpoints.
pub async fn start_server() -> apiserver::ApiServer {
    init_logging();
    apiserver::ApiServer::start(apiserver::Config {
        bookmark_interval: Duration::from_millis(500),
        ..apiserver::Config::default()
    })
    .await
    .expect("embedded API server starts")
}

/// Like [`start_server`], with `customise` changing its configuration first (e.g. a server that
/// ignores `shardSelector`, as one older than 1.36 does, or hands out deterministic uids).
pub async fn start_server_with(
    customise: impl FnOnce(apiserver::Config) -> apiserver::Config,
) -> apiserver::ApiServer {
    init_logging();
    apiserver::ApiServer::start(customise(apiserver::Config {
        bookmark_interval: Duration::from_millis(500),
        ..apiserver::Config::default()
    }))
    .await
    .expect("embedded API server starts")
}

/// A kube client for the server.
pub fn client(server: &apiserver::ApiServer) -> kube::Client {
    let config = kube::Config::new(server.url().parse().expect("server url"));
    kubewasm::identity::client(config).expect("client")
}

/// The User-Agent of the harness's own requests (`Target::client`); a server that names a
/// write's field manager after the User-Agent then records `kubewasm-e2e`, never `kubewasm`.
pub const HARNESS_USER_AGENT: &str = "kubewasm-e2e/0";

/// A client for `config` that identifies itself as the harness, not the host.
fn harness_client(config: kube::Config) -> kube::Client {
    let config = kubewasm::identity::with_user_agent(config, HARNESS_USER_AGENT);
    kube::Client::try_from(config).expect("client")
}

/// One guest log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestLine {
    /// Plugin name.
    pub plugin: String,
    /// Level.
    pub level: String,
    /// Message.
    pub message: String,
}

/// Collects guest log lines through the host's observer.
#[derive(Clone, Default)]
pub struct GuestLogs {
    lines: Arc<Mutex<Vec<GuestLine>>>,
    changed: Arc<Notify>,
}

impl Observer for GuestLogs {
    fn log_line(&self, plugin: &str, level: GuestLogLevel, message: &str) {
        self.lines.lock().push(GuestLine {
            plugin: plugin.to_string(),
            level: format!("{level:?}").to_lowercase(),
            message: message.to_string(),
        });
        self.changed.notify_waiters();
    }
}

impl GuestLogs {
    /// The observer to build a host with.
    pub fn observer(&self) -> SharedObserver {
        Arc::new(self.clone())
    }

    /// Lines logged by `plugin`, in order.
    pub fn of(&self, plugin: &str) -> Vec<String> {
        self.lines
            .lock()
            .iter()
            .filter(|l| l.plugin == plugin)
            .map(|l| l.message.clone())
            .collect()
    }

    /// Waits until `pred` holds for the lines of `plugin`; panics after [`PATIENCE`].
    pub async fn wait_for(
        &self,
        plugin: &str,
        what: &str,
        pred: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let notified = self.changed.notified();
            let lines = self.of(plugin);
            if pred(&lines) {
                return lines;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "timed out waiting for {plugin}: {what}; lines so far:\n{}",
                    self.of(plugin).join("\n")
                );
            }
        }
    }

    /// Waits until `plugin` logged a line equal to `line`.
    pub async fn wait_line(&self, plugin: &str, line: &str) -> Vec<String> {
        self.wait_for(plugin, line, |l| l.iter().any(|x| x == line))
            .await
    }
}

/// One handler call, as the host saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// Plugin version.
    pub version: u64,
    /// Export.
    pub call: CallKind,
    /// Object key.
    pub key: String,
    /// The delivered object's resourceVersion.
    pub resource_version: String,
    /// The call's flag.
    pub flag: bool,
    /// Outcome.
    pub outcome: CallOutcome,
}

/// Something the host did to a plugin, as a [`Recorder`] keeps it (calls are in
/// [`Recorder::calls`]).
#[derive(Clone, Debug)]
pub enum HostEvent {
    /// A version was loaded: the first, or one swapped in (then preceded by [`HostEvent::Swapped`]).
    Loaded {
        /// Plugin name (file stem).
        plugin: String,
        /// The version now running.
        version: u64,
        /// What its `describe()` returned (after manifest overrides).
        info: PluginInfo,
    },
    /// A version replaced the running one.
    Swapped {
        /// Plugin name.
        plugin: String,
        /// The version that stopped.
        from: u64,
        /// The version now running.
        to: u64,
    },
    /// A file could not be loaded; any previous version keeps running.
    LoadFailed {
        /// Plugin name.
        plugin: String,
        /// The offending file.
        path: PathBuf,
        /// The cause, naming the file.
        error: String,
    },
    /// A plugin was removed and its listeners detached.
    Unloaded {
        /// Plugin name.
        plugin: String,
        /// The version that stopped.
        version: u64,
    },
    /// A 0.2.0 handler's `on-synced` call ended.
    Synced {
        /// Plugin name.
        plugin: String,
        /// The version that handled it.
        version: u64,
        /// How it ended.
        outcome: CallOutcome,
    },
    /// A plugin was paused after calls that failed in a row.
    Quarantined {
        /// Plugin name.
        plugin: String,
        /// How long.
        pause: Duration,
    },
}

/// Records every call and lifecycle event of a host, per plugin, as one of its observers, and
/// lets tests await conditions.
#[derive(Clone, Default)]
pub struct Recorder {
    calls: Arc<Mutex<HashMap<String, Vec<Call>>>>,
    events: Arc<Mutex<Vec<HostEvent>>>,
    changed: Arc<Notify>,
}

impl Observer for Recorder {
    fn call_ended(&self, plugin: &str, call: &CallEnded<'_>) {
        match &call.object {
            Some(object) => self
                .calls
                .lock()
                .entry(plugin.to_string())
                .or_default()
                .push(Call {
                    version: call.version,
                    call: call.call,
                    key: object.key.to_string(),
                    resource_version: object.resource_version.to_string(),
                    flag: object.flag,
                    outcome: call.outcome.clone(),
                }),
            None => self.events.lock().push(HostEvent::Synced {
                plugin: plugin.to_string(),
                version: call.version,
                outcome: call.outcome.clone(),
            }),
        }
        self.changed.notify_waiters();
    }

    fn version_loaded(&self, plugin: &str, loaded: &VersionLoaded<'_>) {
        {
            let mut events = self.events.lock();
            if let Some(from) = loaded.replaced {
                events.push(HostEvent::Swapped {
                    plugin: plugin.to_string(),
                    from,
                    to: loaded.version,
                });
            }
            events.push(HostEvent::Loaded {
                plugin: plugin.to_string(),
                version: loaded.version,
                info: loaded.info.clone(),
            });
        }
        self.changed.notify_waiters();
    }

    fn load_failed(&self, plugin: &str, failed: &LoadFailed<'_>) {
        self.push(HostEvent::LoadFailed {
            plugin: plugin.to_string(),
            path: failed.path.to_path_buf(),
            error: failed.error.to_string(),
        });
    }

    fn quarantined(&self, plugin: &str, quarantined: &Quarantined) {
        self.push(HostEvent::Quarantined {
            plugin: plugin.to_string(),
            pause: quarantined.pause,
        });
    }

    fn unloaded(&self, plugin: &str, version: u64) {
        self.push(HostEvent::Unloaded {
            plugin: plugin.to_string(),
            version,
        });
    }
}

impl Recorder {
    /// The observer to build a host with ([`HostBuilder::observer`]), so it sees the first
    /// loads too.
    pub fn observer(&self) -> SharedObserver {
        Arc::new(self.clone())
    }

    fn push(&self, event: HostEvent) {
        self.events.lock().push(event);
        self.changed.notify_waiters();
    }

    /// Calls made to `plugin` so far.
    pub fn calls(&self, plugin: &str) -> Vec<Call> {
        self.calls.lock().get(plugin).cloned().unwrap_or_default()
    }

    /// Calls to `plugin` from the `from`-th on (for tests that fold calls incrementally).
    pub fn calls_since(&self, plugin: &str, from: usize) -> Vec<Call> {
        self.calls
            .lock()
            .get(plugin)
            .map(|c| c.get(from..).unwrap_or_default().to_vec())
            .unwrap_or_default()
    }

    /// Calls to `plugin` for object `key`.
    pub fn calls_for(&self, plugin: &str, key: &str) -> Vec<Call> {
        self.calls(plugin)
            .into_iter()
            .filter(|c| c.key == key)
            .collect()
    }

    /// Lifecycle events so far (calls are in [`Recorder::calls`]).
    pub fn events(&self) -> Vec<HostEvent> {
        self.events.lock().clone()
    }

    /// Waits until `pred` holds over the recorder; panics after [`PATIENCE`] with `what`.
    pub async fn wait(&self, what: &str, pred: impl Fn(&Recorder) -> bool) {
        self.wait_reporting(pred, || {
            format!(
                "waiting for: {what}\ncalls: {:#?}\nevents: {:#?}",
                self.calls.lock(),
                self.events.lock()
            )
        })
        .await
    }

    /// Like [`Recorder::wait`], but a timeout panics with `report()` rather than every event
    /// (for tests that record tens of thousands of calls).
    pub async fn wait_reporting(
        &self,
        mut pred: impl FnMut(&Recorder) -> bool,
        report: impl Fn() -> String,
    ) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let notified = self.changed.notified();
            if pred(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("timed out: {}", report());
            }
        }
    }

    /// Waits for a call to `plugin` matching `pred`.
    pub async fn wait_call(&self, plugin: &str, what: &str, pred: impl Fn(&Call) -> bool) {
        self.wait(what, |r| r.calls(plugin).iter().any(&pred)).await
    }
}

/// A host on the embedded server with recorders attached.
pub struct TestHost {
    /// The host.
    pub host: Host,
    /// Call and lifecycle events.
    pub recorder: Recorder,
    /// Guest log lines.
    pub logs: GuestLogs,
}

/// A host (default limits, no plugins directory) with the one plugin `wasm` loaded, its
/// manifest beside it: how the example handlers' tests start.
pub async fn start_host_with_plugin(server: &apiserver::ApiServer, wasm: &Path) -> TestHost {
    start_host_with_plugin_on(client(server), wasm).await
}

/// Like [`start_host_with_plugin`], on any API server `client` reaches.
pub async fn start_host_with_plugin_on(client: kube::Client, wasm: &Path) -> TestHost {
    let t = start_host_on(client, None, Limits::default(), ReflectorConfig::default()).await;
    let out = t
        .host
        .manager()
        .load_file(wasm)
        .await
        .unwrap_or_else(|e| panic!("{} loads: {e}", wasm.display()));
    assert!(matches!(out, LoadOutcome::Loaded { .. }), "{out:?}");
    t
}

/// Starts a host against `server`, optionally watching `plugins_dir`.
pub async fn start_host(
    server: &apiserver::ApiServer,
    plugins_dir: Option<PathBuf>,
    limits: Limits,
) -> TestHost {
    start_host_with(server, plugins_dir, limits, ReflectorConfig::default()).await
}

/// The one compile cache of the test command: every host a test starts (in this process or as
/// a `kubewasm` process), the CLI tests, `scripts/scenarios.sh` and the SDK component runs use
/// `<target>/test-cache/kubewasm`, so a component (an 18 MB Python or a 13 MB JavaScript one
/// takes seconds of Cranelift) is compiled once per test command, not once per host or process,
/// and a second run compiles nothing. Entries are keyed by the component's bytes and the
/// engine's settings, so sharing never loads the wrong code. Tests whose subject is a compile
/// (an empty cache, a compile bomb, a slow compile) keep a cache of their own.
pub fn shared_compile_cache() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| test_cache_home().join("kubewasm"))
        .clone()
}

/// `<target>/test-cache`: what the test command's `kubewasm` processes get as `XDG_CACHE_HOME`,
/// so their default compile cache is [`shared_compile_cache`]. `<target>` is found from this
/// test binary (`<target>/release/deps/NAME`), so `CARGO_TARGET_DIR` is honoured.
pub fn test_cache_home() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .expect("a test binary lives in <target>/<profile>/deps")
        .join("test-cache")
}

/// Like [`start_host`], with informer settings other than the defaults.
pub async fn start_host_with(
    server: &apiserver::ApiServer,
    plugins_dir: Option<PathBuf>,
    limits: Limits,
    informers: ReflectorConfig,
) -> TestHost {
    start_host_on(client(server), plugins_dir, limits, informers).await
}

/// Like [`start_host_with`], on any API server `client` reaches (a [`Target`]'s, possibly
/// impersonating the ServiceAccount `kubewasm rbac` bound).
pub async fn start_host_on(
    client: kube::Client,
    plugins_dir: Option<PathBuf>,
    limits: Limits,
    informers: ReflectorConfig,
) -> TestHost {
    start_host_built(client, plugins_dir, limits, informers, |b| b).await
}

/// Like [`start_host_on`], with `customise` setting what the harness leaves at its default
/// (the host's Pod, plugin identities, …) on the builder before it starts.
pub async fn start_host_built(
    client: kube::Client,
    plugins_dir: Option<PathBuf>,
    limits: Limits,
    informers: ReflectorConfig,
    customise: impl FnOnce(HostBuilder) -> HostBuilder,
) -> TestHost {
    let (logs, recorder) = (GuestLogs::default(), Recorder::default());
    let mut builder = HostBuilder::new(client)
        .runtime(RuntimeConfig {
            cache_dir: Some(shared_compile_cache()),
            ..RuntimeConfig::default()
        })
        .informers(informers)
        .limits(limits)
        .health_addr(Some("127.0.0.1:0".parse().unwrap()))
        // Short, so tests that leave a guest sleeping shut down quickly.
        .shutdown_grace(Duration::from_secs(2))
        .observer(logs.observer())
        .observer(recorder.observer());
    if let Some(dir) = plugins_dir {
        builder = builder.plugins_dir(dir);
    }
    let host = customise(builder).start().await.expect("host starts");
    TestHost {
        host,
        recorder,
        logs,
    }
}

/// Like [`start_host`] (default limits, no directory), delivering only while `leadership` holds
/// `true`: how a test takes leadership away from a host without an election.
pub async fn start_host_following(
    server: &apiserver::ApiServer,
    leadership: tokio::sync::watch::Receiver<bool>,
) -> TestHost {
    let (logs, recorder) = (GuestLogs::default(), Recorder::default());
    let host = HostBuilder::new(client(server))
        .runtime(RuntimeConfig {
            cache_dir: Some(shared_compile_cache()),
            ..RuntimeConfig::default()
        })
        .health_addr(Some("127.0.0.1:0".parse().unwrap()))
        .shutdown_grace(Duration::from_secs(2))
        .observer(logs.observer())
        .observer(recorder.observer())
        .follow(leadership)
        .start()
        .await
        .expect("host starts");
    TestHost {
        host,
        recorder,
        logs,
    }
}

/// One line the host wrote about a plugin (an event with a `plugin` field at INFO or above),
/// guest output excluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLine {
    /// Plugin name.
    pub plugin: String,
    /// `INFO`, `WARN` or `ERROR`.
    pub level: String,
    /// The event's target.
    pub target: String,
    /// The message.
    pub message: String,
}

/// Every host line about a plugin this test binary wrote, as a tracing layer saw it: how tests
/// count what a guest made the host log (guest lines have [`GuestLogs`]). Process-wide: tests
/// filter by their plugins' names.
#[derive(Clone, Default)]
pub struct HostLines {
    lines: Arc<Mutex<Vec<HostLine>>>,
    changed: Arc<Notify>,
}

static HOST_LINES: std::sync::OnceLock<HostLines> = std::sync::OnceLock::new();

/// The process's [`HostLines`] (empty until [`start_server`] installed the layer).
pub fn host_lines() -> HostLines {
    HOST_LINES.get_or_init(HostLines::default).clone()
}

impl HostLines {
    /// Lines about `plugin`, in order.
    pub fn of(&self, plugin: &str) -> Vec<HostLine> {
        self.lines
            .lock()
            .iter()
            .filter(|l| l.plugin == plugin)
            .cloned()
            .collect()
    }

    /// Waits until `pred` holds for the lines about `plugin`; panics after [`PATIENCE`].
    pub async fn wait_for(
        &self,
        plugin: &str,
        what: &str,
        pred: impl Fn(&[HostLine]) -> bool,
    ) -> Vec<HostLine> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let notified = self.changed.notified();
            let lines = self.of(plugin);
            if pred(&lines) {
                return lines;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let last: Vec<_> = lines.iter().rev().take(20).collect();
                panic!("timed out waiting for host lines about {plugin}: {what}; last: {last:#?}");
            }
        }
    }
}

/// Picks the `plugin` field and the message out of an event.
#[derive(Default)]
struct LineVisitor {
    plugin: Option<String>,
    message: String,
}

impl tracing::field::Visit for LineVisitor {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "plugin" => self.plugin = Some(value.to_string()),
            "message" => self.message = value.to_string(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            // `plugin = %name` arrives as Display wrapped in Debug: no quotes.
            "plugin" => self.plugin = Some(format!("{value:?}")),
            "message" => self.message = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for HostLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() == "kubewasm::guest" {
            return;
        }
        let mut v = LineVisitor::default();
        event.record(&mut v);
        let Some(plugin) = v.plugin else { return };
        self.lines.lock().push(HostLine {
            plugin,
            level: meta.level().to_string(),
            target: meta.target().to_string(),
            message: v.message,
        });
        self.changed.notify_waiters();
    }
}

/// The test binary's subscriber: `RUST_LOG` (default `warn`) to the harness's captured output,
/// as `kubewasm::cli::init_logging_for_tests` does, and every INFO-or-above host line about a
/// plugin into [`host_lines`].
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(filter),
        )
        .with(host_lines().with_filter(tracing_subscriber::filter::LevelFilter::INFO))
        .try_init();
}

/// The variable naming a cluster-admin kubeconfig: set, the target-agnostic tests run against
/// that cluster instead of the embedded API server.
pub const KUBECONFIG_VAR: &str = "KUBEWASM_E2E_KUBECONFIG";

/// The API server a target-agnostic test runs against: the embedded one (the default, and CI's),
/// or a real cluster named by [`KUBECONFIG_VAR`] (kind, k3s, envtest's binaries).
pub enum Target {
    /// The embedded API server, started for this test.
    Embedded(apiserver::ApiServer),
    /// A real cluster, shared with whatever else runs there.
    Real {
        /// The kubeconfig's current context (boxed: a Config is large).
        config: Box<kube::Config>,
        /// The kubeconfig file, for processes the test starts.
        kubeconfig: PathBuf,
    },
}

impl Target {
    /// The cluster [`KUBECONFIG_VAR`] names, else a fresh embedded server.
    pub async fn from_env() -> Target {
        let Some(path) = std::env::var_os(KUBECONFIG_VAR) else {
            init_logging();
            // Authorizing as a cluster does: a ServiceAccount token's requests and impersonated
            // ones are judged by the RBAC applied, so a missing rule fails a test here too.
            let server = apiserver::ApiServer::start(apiserver::Config {
                bookmark_interval: Duration::from_millis(500),
                authorization: Some(apiserver::Authorization::default()),
                ..apiserver::Config::default()
            })
            .await
            .expect("embedded API server starts");
            return Target::Embedded(server);
        };
        init_logging();
        let kubeconfig = PathBuf::from(path);
        let file = kube::config::Kubeconfig::read_from(&kubeconfig)
            .unwrap_or_else(|e| panic!("{KUBECONFIG_VAR}={}: {e}", kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("{KUBECONFIG_VAR}={}: {e}", kubeconfig.display()));
        Target::Real {
            config: Box::new(config),
            kubeconfig,
        }
    }

    /// Whether this is a real cluster (no fault injection, other tenants).
    pub fn is_real(&self) -> bool {
        matches!(self, Target::Real { .. })
    }

    /// The embedded server, for the fault injection only it offers.
    pub fn embedded(&self) -> Option<&apiserver::ApiServer> {
        match self {
            Target::Embedded(server) => Some(server),
            Target::Real { .. } => None,
        }
    }

    /// The client configuration (the kubeconfig's identity on a real cluster).
    pub fn config(&self) -> kube::Config {
        match self {
            Target::Embedded(server) => {
                kube::Config::new(server.url().parse().expect("server url"))
            }
            Target::Real { config, .. } => (**config).clone(),
        }
    }

    /// The test harness's client, with the kubeconfig's (on a real cluster: cluster-admin)
    /// identity and a User-Agent of its own ([`HARNESS_USER_AGENT`]), so the harness's writes
    /// are not mistaken for the host's in `managedFields` or an audit log.
    pub fn client(&self) -> kube::Client {
        harness_client(self.config())
    }

    /// A client for a host under test: the kubeconfig's identity with the host's User-Agent.
    pub fn host_client(&self) -> kube::Client {
        kubewasm::identity::client(self.config()).expect("client")
    }

    /// A client impersonating `user` (`system:serviceaccount:NS:NAME`), so the target judges
    /// every request by that user's RBAC (the embedded server, which [`Target::from_env`]
    /// starts authorizing, takes the caller to be [`apiserver::Authorization::default`]'s).
    pub fn client_as(&self, user: &str) -> kube::Client {
        let mut config = self.config();
        config.auth_info.impersonate = Some(user.to_string());
        harness_client(config)
    }

    /// A kubeconfig file in `dir` for this target whose user is nothing but the bearer `token`
    /// (a ServiceAccount's, from a TokenRequest): a host started with it runs as that account,
    /// as in a Pod, not as the admin of the test's kubeconfig.
    pub fn kubeconfig_with_token(&self, dir: &Path, token: &str) -> PathBuf {
        let mut kc = kube::config::Kubeconfig::read_from(self.kubeconfig(dir))
            .expect("the target's kubeconfig reads");
        let context = kc.current_context.clone().expect("a current context");
        let user = kc
            .contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .and_then(|c| c.user.clone())
            .expect("the current context names a user");
        for auth in kc.auth_infos.iter_mut().filter(|a| a.name == user) {
            auth.auth_info = Some(kube::config::AuthInfo {
                token: Some(token.to_string().into()),
                ..Default::default()
            });
        }
        let path = dir.join("kubeconfig-token");
        std::fs::write(&path, serde_yaml::to_string(&kc).expect("YAML")).expect("write");
        path
    }

    /// A host's client from [`Target::kubeconfig_with_token`]'s file: the ServiceAccount's
    /// identity with the host's User-Agent.
    pub async fn host_client_with_token(&self, dir: &Path, token: &str) -> kube::Client {
        let path = self.kubeconfig_with_token(dir, token);
        let kc = kube::config::Kubeconfig::read_from(&path).expect("reads");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("a client configuration");
        kubewasm::identity::client(config).expect("client")
    }

    /// A kubeconfig file for processes the test starts: the given one, or the embedded
    /// server's written into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        match self {
            Target::Embedded(server) => {
                let path = dir.join("kubeconfig");
                server.write_kubeconfig(&path).expect("write kubeconfig");
                path
            }
            Target::Real { kubeconfig, .. } => kubeconfig.clone(),
        }
    }

    /// A fresh namespace `PREFIX-XXXXXX`, deleted (with what [`TestNamespace::delete_later`]
    /// adds) when dropped, so tests running side by side on one cluster never meet.
    pub async fn namespace(&self, prefix: &str) -> TestNamespace {
        use rand::Rng as _;
        let name = format!(
            "{prefix}-{:06x}",
            rand::rng().random_range(0..0x100_0000u32)
        );
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        kube::Api::all(self.client())
            .create(&Default::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        TestNamespace {
            name,
            config: self.config(),
            others: Mutex::new(Vec::new()),
        }
    }

    /// Stops the embedded server; a real cluster is left as found.
    pub async fn shutdown(self) {
        if let Target::Embedded(server) = self {
            server.shutdown().await;
        }
    }
}

/// One object a test made outside its namespace: kind, namespace (`None`: cluster-scoped), name.
type Made = (kube::core::ApiResource, Option<String>, String);

/// A namespace of one test: deleted when dropped (a failing test included), with every object
/// the test made elsewhere (cluster-wide RBAC, a Role in `default`).
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
    config: kube::Config,
    others: Mutex<Vec<Made>>,
}

impl TestNamespace {
    /// Deletes `name` (in `namespace`, or cluster-scoped) with the namespace.
    pub fn delete_later(&self, kind: kube::core::ApiResource, namespace: Option<&str>, name: &str) {
        self.others
            .lock()
            .push((kind, namespace.map(str::to_string), name.to_string()));
    }

    /// Server-side applies every document of `yaml` (what `kubewasm rbac` prints) and deletes
    /// the objects with the namespace.
    pub async fn apply_all(&self, client: &kube::Client, yaml: &str) {
        use kube::api::{DynamicObject, Patch, PatchParams};
        use serde::Deserialize as _;
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            let obj = DynamicObject::deserialize(doc).expect("a Kubernetes object");
            let types = obj.types.clone().expect("apiVersion and kind");
            let (group, version) = types
                .api_version
                .split_once('/')
                .unwrap_or(("", &types.api_version));
            let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                group,
                version,
                &types.kind,
            ));
            let name = obj.metadata.name.clone().expect("a name");
            let namespace = obj.metadata.namespace.clone();
            let api: kube::Api<DynamicObject> = match &namespace {
                Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
                None => kube::Api::all_with(client.clone(), &ar),
            };
            api.patch(
                &name,
                &PatchParams::apply("kubewasm-e2e").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {} {name}: {e}", types.kind));
            self.delete_later(ar, namespace.as_deref(), &name);
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let config = self.config.clone();
        let name = self.name.clone();
        let others = std::mem::take(&mut *self.others.lock());
        // Drop cannot await: a thread of its own runs the deletes on a runtime of its own, with
        // a client of its own (the test's may belong to a runtime that is shutting down).
        let deleted = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let client = kubewasm::identity::client(config).expect("client");
                let dp = kube::api::DeleteParams::background();
                let mut failed = Vec::new();
                for (ar, ns, obj) in others {
                    let api: kube::Api<kube::api::DynamicObject> = match &ns {
                        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
                        None => kube::Api::all_with(client.clone(), &ar),
                    };
                    if let Err(e) = api.delete(&obj, &dp).await {
                        failed.push(format!("{} {obj}: {e}", ar.kind));
                    }
                }
                let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                    kube::Api::all(client);
                if let Err(e) = namespaces.delete(&name, &dp).await {
                    failed.push(format!("namespace {name}: {e}"));
                }
                failed
            })
        });
        let failed = deleted.join().unwrap_or_default();
        if !failed.is_empty() {
            eprintln!("test namespace cleanup left: {}", failed.join("; "));
        }
    }
}

/// The user `tester` with password `kubewasm-test` (bcrypt, cost 4) of [`TestRegistry`]'s
/// auth: distribution reads only bcrypt htpasswd entries.
pub const HTPASSWD: &str = "tester:$2b$04$VQt5sVGXkcLQWFX/Wv.0GuI3y4UYd9psWrcsXt32bW0EYpmwpDJim\n";

/// A `docker-registry serve` (Debian's CNCF distribution, installed by `scripts/setup.sh`) on a
/// free loopback port, killed on drop: the registry the OCI tests and benches push to.
pub struct TestRegistry {
    child: tokio::process::Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    dir: tempfile::TempDir,
}

impl TestRegistry {
    /// Starts one (with htpasswd auth when `auth`) and returns once it listens.
    pub async fn start(auth: bool) -> TestRegistry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            dir.path().join("data").display()
        );
        if auth {
            std::fs::write(dir.path().join("htpasswd"), HTPASSWD).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: kubewasm-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let mut child = tokio::process::Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("docker-registry (apt-get install docker-registry; scripts/setup.sh does)");
        use tokio::io::AsyncBufReadExt as _;
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::time::timeout(PATIENCE, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("listening on") {
                    return;
                }
            }
            panic!("docker-registry exited before listening");
        })
        .await
        .expect("docker-registry listens");
        // Keep draining its log so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        TestRegistry { child, addr, dir }
    }

    /// `REPO:TAG` in this registry.
    pub fn reference(&self, repo_tag: &str) -> kubewasm::registry::ArtifactRef {
        kubewasm::registry::ArtifactRef::parse(&format!("{}/{repo_tag}", self.addr)).unwrap()
    }

    /// Where the registry stores blob `digest` (its filesystem driver's layout).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Kills it: as a registry that went away.
    pub async fn stop(&mut self) {
        self.child.kill().await.unwrap();
    }
}
