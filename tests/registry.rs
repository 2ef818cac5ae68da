//! Plugins from an OCI registry: Debian's `docker-registry` (CNCF distribution) started on
//! 127.0.0.1 by each test, `kubewasm push`'s library side, and hosts following a sources file.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::host::{Host, HostBuilder};
use kubewasm::plugins::PluginEvent;
use kubewasm::registry::{ArtifactRef, CredentialStore, Registry, RegistryError};
use kubewasm::runtime::RuntimeConfig;
use kubewasm_e2e::*;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{LOGGER, create};

/// bcrypt (cost 4) of `kubewasm-test`: distribution reads only bcrypt htpasswd entries.
const HTPASSWD: &str = "tester:$2b$04$VQt5sVGXkcLQWFX/Wv.0GuI3y4UYd9psWrcsXt32bW0EYpmwpDJim\n";
const MANIFEST: &str = "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n";

/// A `docker-registry serve` on a free loopback port, killed on drop.
struct TestRegistry {
    child: tokio::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl TestRegistry {
    /// Starts one (with htpasswd auth when `auth`) and returns once it listens.
    async fn start(auth: bool) -> TestRegistry {
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
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("docker-registry (apt-get install docker-registry; scripts/setup.sh does)");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
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
        TestRegistry {
            child,
            addr,
            _dir: dir,
        }
    }

    fn reference(&self, repo_tag: &str) -> ArtifactRef {
        ArtifactRef::parse(&format!("{}/{repo_tag}", self.addr)).unwrap()
    }

    async fn stop(&mut self) {
        self.child.kill().await.unwrap();
    }
}

fn anonymous() -> Registry {
    Registry::new(CredentialStore::default())
}

fn tester(registry: &TestRegistry, password: &str) -> Registry {
    let auth = base64_user_password("tester", password);
    Registry::new(
        CredentialStore::parse(&format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            registry.addr
        ))
        .unwrap(),
    )
}

fn base64_user_password(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// A sources file of `entries` (TOML `[[plugin]]` bodies) in a temporary directory.
fn sources_file(dir: &Path, entries: &[String]) -> PathBuf {
    let text: String = entries
        .iter()
        .map(|e| {
            format!(
                "[[plugin]]\n{e}\n[plugin.manifest]\n{}\n",
                MANIFEST.replace("[grants]", "[plugin.manifest.grants]")
            )
        })
        .collect();
    let path = dir.join("sources.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A host on `server` following `sources`, with a recorder subscribed before the first load.
async fn host_from(
    server: &apiserver::ApiServer,
    sources: &Path,
    registry: Registry,
) -> (Host, Recorder) {
    let host = HostBuilder::new(client(server))
        .runtime(RuntimeConfig {
            cache_dir: Some(shared_cache()),
            ..RuntimeConfig::default()
        })
        .start()
        .await
        .unwrap();
    let recorder = Recorder::start(host.manager.subscribe());
    let host = host
        .follow_sources(sources.to_path_buf(), registry)
        .await
        .unwrap();
    (host, recorder)
}

fn shared_cache() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap().keep())
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_then_pull_checks_every_digest_and_bad_references_say_why() {
    let mut reg = TestRegistry::start(false).await;
    let wasm = std::fs::read(guest(LOGGER)).unwrap();
    let r = anonymous();
    let pinned = r
        .push(&reg.reference("handlers/logger:v1"), wasm.clone(), true)
        .await
        .unwrap();
    assert!(pinned.to_string().contains(":v1@sha256:"), "{pinned}");
    let again = r
        .push(&reg.reference("handlers/logger:v1"), wasm.clone(), true)
        .await
        .unwrap();
    assert_eq!(again, pinned, "the same bytes push to the same digest");

    let pulled = r.pull(&pinned, true).await.unwrap();
    assert_eq!(pulled.wasm, wasm);
    assert_eq!(pulled.reference, pinned);
    let by_tag = r
        .pull(&reg.reference("handlers/logger:v1"), true)
        .await
        .unwrap();
    assert_eq!(by_tag.digest, pulled.digest);

    // A digest that names nothing, an unknown tag, a tag over HTTPS to a plain registry.
    let other = format!("sha256:{}", "1".repeat(64));
    let e = r.pull(&pinned.pinned(&other), true).await.unwrap_err();
    assert!(matches!(e, RegistryError::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("handlers/logger"), "{e}");
    let e = r
        .pull(&reg.reference("handlers/logger:nope"), true)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::NotFound { .. }), "{e}");
    let e = r.pull(&pinned, false).await.unwrap_err();
    assert!(
        e.is_transient() || matches!(e, RegistryError::Refused { .. }),
        "{e}"
    );

    // Credentials never travel over plain HTTP to another machine.
    let remote = ArtifactRef::parse("registry.example.com/a:v1").unwrap();
    let with_secret = Registry::new(
        CredentialStore::parse(r#"{"auths": {"registry.example.com": {"auth": "dTpw"}}}"#).unwrap(),
    );
    let e = with_secret.pull(&remote, true).await.unwrap_err();
    assert!(e.to_string().contains("plain HTTP"), "{e}");

    reg.stop().await;
    let e = r.pull(&pinned, true).await.unwrap_err();
    assert!(e.is_transient(), "a stopped registry is unreachable: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn htpasswd_auth_accepts_the_right_password_only() {
    let reg = TestRegistry::start(true).await;
    let wasm = std::fs::read(guest(LOGGER)).unwrap();
    let reference = reg.reference("handlers/logger:v1");
    let e = anonymous()
        .push(&reference, wasm.clone(), true)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unauthorized { .. }), "{e}");
    let e = tester(&reg, "wrong")
        .push(&reference, wasm.clone(), true)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unauthorized { .. }), "{e}");
    let pinned = tester(&reg, "kubewasm-test")
        .push(&reference, wasm.clone(), true)
        .await
        .unwrap();
    assert_eq!(
        tester(&reg, "kubewasm-test")
            .pull(&pinned, true)
            .await
            .unwrap()
            .wasm,
        wasm
    );
    let e = anonymous().pull(&pinned, true).await.unwrap_err();
    assert!(matches!(e, RegistryError::Unauthorized { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_run_from_a_registry_and_a_followed_tag_swaps_or_keeps_running() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv = create(&api, "hello", &[]).await;
    let mut reg = TestRegistry::start(false).await;
    let r = anonymous();
    let v1 = std::fs::read(guest(LOGGER)).unwrap();
    let v2 = std::fs::read(guest("rust-logger-v2.wasm")).unwrap();
    let pinned = r
        .push(&reg.reference("handlers/logger:v1"), v1.clone(), true)
        .await
        .unwrap();
    r.push(&reg.reference("handlers/moving:stable"), v1.clone(), true)
        .await
        .unwrap();
    let nowhere = pinned.pinned(&format!("sha256:{}", "2".repeat(64)));
    let dir = tempfile::tempdir().unwrap();
    let sources = sources_file(
        dir.path(),
        &[
            format!("name = \"pinned\"\nreference = \"{pinned}\"\nplain-http = true"),
            format!(
                "name = \"followed\"\nreference = \"{}\"\nfollow = \"1s\"\nplain-http = true",
                reg.reference("handlers/moving:stable")
            ),
            format!("name = \"missing\"\nreference = \"{nowhere}\"\nplain-http = true"),
        ],
    );
    let (host, recorder) = host_from(&server, &sources, anonymous()).await;
    for plugin in ["pinned", "followed"] {
        recorder
            .wait_call(plugin, "the initial add", |c| {
                c.flag && c.resource_version == rv
            })
            .await;
    }
    host_lines()
        .wait_for(
            "missing",
            "a pinned digest the registry does not have, named",
            |l| {
                l.iter().any(|x| {
                    x.message.contains("not found") && x.message.contains(&nowhere.to_string())
                })
            },
        )
        .await;
    assert_eq!(host.manager.names().await, ["followed", "pinned"]);

    // The tag moves: the new digest is pulled and swapped in without overlap.
    r.push(&reg.reference("handlers/moving:stable"), v2, true)
        .await
        .unwrap();
    recorder
        .wait("the followed plugin swapped to the new digest", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, PluginEvent::Swapped { plugin, .. } if plugin == "followed"))
        })
        .await;

    // The tag moves to something that is not a component: refused, the running one stays.
    r.push(
        &reg.reference("handlers/moving:stable"),
        b"\0asm\x01\0\0\0".to_vec(),
        true,
    )
    .await
    .unwrap();
    recorder
        .wait("the bad version is refused", |r| {
            r.events().iter().any(
                |e| matches!(e, PluginEvent::LoadFailed { plugin, .. } if plugin == "followed"),
            )
        })
        .await;
    assert_eq!(host.manager.names().await, ["followed", "pinned"]);

    // The registry goes away: nothing changes, retries are logged.
    reg.stop().await;
    host_lines()
        .wait_for("followed", "an unreachable registry, retried", |l| {
            l.iter()
                .any(|x| x.message.contains("unreachable") && x.message.contains("keeps running"))
                && l.iter().any(|x| x.message.contains("retrying"))
        })
        .await;
    assert_eq!(host.manager.names().await, ["followed", "pinned"]);
    let rv2 = create(&api, "later", &[]).await;
    recorder
        .wait_call("followed", "events still arrive", |c| {
            c.resource_version == rv2
        })
        .await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_replicator_and_the_javascript_notifier_run_from_a_registry() {
    let server = start_server().await;
    let kube = client(&server);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(kube.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "copies"}})).unwrap();
    namespaces
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .unwrap();
    let reg = TestRegistry::start(false).await;
    let r = anonymous();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples");
    let mut entries = Vec::new();
    for (name, file, manifest) in [
        (
            "replicator",
            "python-replicator.wasm",
            "python/replicator/replicator.toml",
        ),
        (
            "notifier",
            "javascript-notifier.wasm",
            "javascript/notifier/notifier.toml",
        ),
    ] {
        let pinned = r
            .push(
                &reg.reference(&format!("handlers/{name}:0.1.0")),
                std::fs::read(guest(file)).unwrap(),
                true,
            )
            .await
            .unwrap();
        entries.push(format!(
            "[[plugin]]\nname = \"{name}\"\nreference = \"{pinned}\"\nplain-http = true\nmanifest-file = \"{}\"\n",
            examples.join(manifest).display()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let sources = dir.path().join("sources.toml");
    std::fs::write(&sources, entries.concat()).unwrap();
    let (host, recorder) = host_from(&server, &sources, anonymous()).await;
    assert_eq!(host.manager.names().await, ["notifier", "replicator"]);

    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), "default");
    let source: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shared", "annotations": {"kubewasm.io/replicate-to": "copies"}},
        "data": {"k": "v"},
    }))
    .unwrap();
    api.create(&kube::api::PostParams::default(), &source)
        .await
        .unwrap();
    let copies: Api<ConfigMap> = Api::namespaced(kube.clone(), "copies");
    tokio::time::timeout(
        PATIENCE,
        kube::runtime::wait::await_condition(copies, "shared", |c: Option<&ConfigMap>| c.is_some()),
    )
    .await
    .expect("the replicator pulled from the registry copies the ConfigMap")
    .unwrap();
    recorder
        .wait_call(
            "notifier",
            "the notifier pulled from the registry handles events",
            |_| true,
        )
        .await;
    host.shutdown().await;
}
