//! A hostile registry (issue 31, attacks 6, 7, 8 and 11's registry half): a small axum server
//! on 127.0.0.1 speaking the few OCI distribution endpoints a pull needs, answering as an
//! attacker would: huge or lying manifests, bytes dripped under the read timeout, auth realms
//! and blob redirects to internal addresses, error bodies carrying a forged log line.
//!
//! Each test failed on the code before the fix: `oci-client` read the whole manifest before
//! checking its size, had no total deadline, fetched any realm and followed any redirect, and
//! put the registry's error body raw into its message; the sources loop waited on a pull
//! before the plugins directory was watched and before a stop. Nothing here sends traffic to a
//! non-loopback address: the refused targets are refused before any connection.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use kubewasm::host::HostBuilder;
use kubewasm::registry::{
    Artifact, ArtifactRef, CredentialStore, Registry, RegistryError, build_artifact,
};
use kubewasm::runtime::RuntimeConfig;
use kubewasm_e2e::*;
use parking_lot::Mutex;

use super::LOGGER;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// What the hostile registry sends as an error body: a line break and a log line of its own,
/// a terminal sequence, then filler.
const FORGED: &str =
    "denied\n2026-11-27T00:00:00.000000Z  INFO kubewasm: plugin source: pulled\x1b[2J\r";

/// How the hostile registry answers.
#[derive(Clone, Debug, PartialEq)]
enum Mode {
    /// A proper one-layer wasm artifact, anonymously.
    Good,
    /// The same, behind a Bearer challenge whose realm is on the registry itself.
    OwnRealm,
    /// Manifests: 256 MiB streamed in chunks, no `Content-Length`.
    HugeChunked,
    /// Manifests: `Content-Length: 2 GiB`, then bytes.
    HugeDeclared,
    /// Manifests: headers, then one byte every 200 ms (well under the read timeout), until
    /// the mode changes.
    Drip,
    /// `401` with a Bearer challenge whose realm is this URL.
    Realm(String),
    /// Blobs: `307` to this location.
    BlobRedirect(String),
    /// Manifests: `400` with [`FORGED`] and 8 KiB more.
    ErrorBody,
}

struct Shared {
    mode: Mutex<Mode>,
    artifact: Artifact,
    /// Manifest bytes handed to the connection so far.
    sent: AtomicU64,
    /// Dripping answers started.
    drips: AtomicU64,
    /// Requests for the own realm's token.
    tokens: AtomicU64,
    port: u16,
}

struct Hostile {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl Hostile {
    async fn start(mode: Mode) -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let wasm = std::fs::read(guest(LOGGER)).unwrap();
        let shared = Arc::new(Shared {
            mode: Mutex::new(mode),
            artifact: build_artifact(wasm),
            sent: AtomicU64::new(0),
            drips: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            port: addr.port(),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Hostile { shared, addr }
    }

    fn set(&self, mode: Mode) {
        *self.shared.mode.lock() = mode;
    }

    fn reference(&self, repo_tag: &str) -> ArtifactRef {
        ArtifactRef::parse(&format!("{}/{repo_tag}", self.addr)).unwrap()
    }

    /// The artifact's reference pinned by its manifest digest.
    fn pinned(&self) -> ArtifactRef {
        self.reference("handlers/x:v1")
            .pinned(&self.shared.artifact.manifest.digest)
    }

    fn wasm(&self) -> Vec<u8> {
        self.shared.artifact.layer.data.clone()
    }
}

fn challenge(realm: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            format!("Bearer realm=\"{realm}\",service=\"hostile\""),
        )],
        "{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"token needed\"}]}",
    )
        .into_response()
}

async fn answer(State(s): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    let mode = s.mode.lock().clone();
    let path = uri.path();
    let own_realm = format!("http://127.0.0.1:{}/token", s.port);
    if path == "/token" {
        s.tokens.fetch_add(1, Ordering::Relaxed);
        return "{\"token\":\"let-me-in\"}".into_response();
    }
    let authorized = headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v == "Bearer let-me-in");
    match &mode {
        Mode::Realm(realm) => return challenge(realm),
        Mode::OwnRealm if !authorized => return challenge(&own_realm),
        _ => {}
    }
    if path == "/v2/" {
        return StatusCode::OK.into_response();
    }
    let a = &s.artifact;
    if path.starts_with("/redirected/") {
        return a.layer.data.clone().into_response();
    }
    if path.contains("/manifests/") {
        return match mode {
            Mode::HugeChunked => huge(s.clone(), None),
            Mode::HugeDeclared => huge(s.clone(), Some(2 << 30)),
            Mode::Drip => drip(s.clone()),
            Mode::ErrorBody => (
                StatusCode::BAD_REQUEST,
                format!("{FORGED}{}", "x".repeat(8 << 10)),
            )
                .into_response(),
            _ => (
                [(header::CONTENT_TYPE, OCI_MANIFEST)],
                a.manifest.data.clone(),
            )
                .into_response(),
        };
    }
    if let Some((_, digest)) = path.split_once("/blobs/") {
        if let Mode::BlobRedirect(to) = mode {
            return (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response();
        }
        for blob in [&a.layer, &a.config] {
            if blob.digest == digest {
                return blob.data.clone().into_response();
            }
        }
    }
    StatusCode::NOT_FOUND.into_response()
}

/// 256 MiB of manifest in 1 MiB chunks, counted as they are handed over.
fn huge(s: Arc<Shared>, declared: Option<u64>) -> Response {
    let chunks = futures::stream::iter(0..256).map(move |_| {
        s.sent.fetch_add(1 << 20, Ordering::Relaxed);
        Ok::<_, std::io::Error>(vec![b' '; 1 << 20])
    });
    let mut r = Response::new(Body::from_stream(chunks));
    if let Some(len) = declared {
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, len.to_string().parse().unwrap());
    }
    r
}

/// One byte every 200 ms while the mode is [`Mode::Drip`].
fn drip(s: Arc<Shared>) -> Response {
    s.drips.fetch_add(1, Ordering::Relaxed);
    let bytes = futures::stream::unfold(s, |s| async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        (*s.mode.lock() == Mode::Drip).then(|| (Ok::<_, std::io::Error>(b" ".to_vec()), s.clone()))
    });
    Response::new(Body::from_stream(bytes))
}

use futures::StreamExt as _;

fn anonymous() -> Registry {
    Registry::new(CredentialStore::default())
}

/// Waits until `cond` holds; panics after [`PATIENCE`].
async fn until(what: &str, cond: impl Fn() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hostile_registry_serves_a_good_artifact_anonymously_and_behind_its_own_realm() {
    let reg = Hostile::start(Mode::Good).await;
    let pulled = anonymous().pull(&reg.pinned(), true).await.unwrap();
    assert_eq!(pulled.wasm, reg.wasm());
    reg.set(Mode::OwnRealm);
    let pulled = anonymous()
        .pull(&reg.reference("handlers/x:v1"), true)
        .await
        .unwrap();
    assert_eq!(pulled.wasm, reg.wasm());
    assert!(reg.shared.tokens.load(Ordering::Relaxed) >= 1);
    // A redirect to the registry's own host is followed.
    reg.set(Mode::BlobRedirect(format!(
        "http://{}/redirected/blob",
        reg.addr
    )));
    let pulled = anonymous().pull(&reg.pinned(), true).await.unwrap();
    assert_eq!(pulled.wasm, reg.wasm());
}

/// Attack 6: a manifest of 256 MiB (even for a digest-pinned reference) is refused once 4 MiB
/// arrived, or at once when the header says so; before, all of it was read first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_manifest_is_refused_while_it_streams_not_after() {
    let reg = Hostile::start(Mode::HugeChunked).await;
    for reference in [reg.pinned(), reg.reference("handlers/x:v1")] {
        let before = reg.shared.sent.load(Ordering::Relaxed);
        let e = anonymous().pull(&reference, true).await.unwrap_err();
        assert!(matches!(e, RegistryError::NotAnArtifact { .. }), "{e}");
        assert!(e.to_string().contains("limit"), "{e}");
        let sent = reg.shared.sent.load(Ordering::Relaxed) - before;
        // What the sockets' buffers hold at most: far from the 256 MiB offered.
        assert!(sent < 32 << 20, "{} MiB handed over", sent >> 20);
    }
    reg.set(Mode::HugeDeclared);
    let e = anonymous()
        .resolve(&reg.reference("handlers/x:v1"), true)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::NotAnArtifact { .. }), "{e}");
    assert!(e.to_string().contains("2147483648"), "{e}");
}

/// Attack 7: one byte every 200 ms never trips a read timeout; the pull's total deadline ends
/// it (before, it went on as long as the registry liked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_registry_is_given_up_on_at_the_pull_deadline() {
    let reg = Hostile::start(Mode::Drip).await;
    let r = anonymous().with_pull_deadline(Duration::from_secs(2));
    let e = tokio::time::timeout(PATIENCE, r.pull(&reg.pinned(), true))
        .await
        .expect("the pull ends at its deadline")
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("deadline"), "{e}");
}

fn sources_file(dir: &Path, reference: &ArtifactRef) -> std::path::PathBuf {
    let path = dir.join("sources.toml");
    std::fs::write(
        &path,
        format!(
            "[[plugin]]\nname = \"followed\"\nreference = \"{reference}\"\nfollow = \"1s\"\n\
             plain-http = true\n[plugin.manifest.grants]\n\
             watch = [{{ api-version = \"v1\", kind = \"ConfigMap\" }}]\n"
        ),
    )
    .unwrap();
    path
}

/// `GET path` on the host's endpoints: the whole answer, or empty when nothing listens yet.
async fn get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    let _ = s
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

/// Attack 7: while a registry drips the first pull, the plugins directory's own plugins load
/// and the directory is watched (before, the watcher started only after every pull); readiness
/// waits for the pull, within its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_first_pull_does_not_hold_the_plugins_directory() {
    let server = start_server().await;
    let reg = Hostile::start(Mode::Drip).await;
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(guest(LOGGER), plugins.join("dir-a.wasm")).unwrap();
    let sources = sources_file(dir.path(), &reg.reference("handlers/x:v1"));
    let health = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let builder = HostBuilder::new(client(&server))
        .runtime(RuntimeConfig::default())
        .health_addr(Some(health))
        .plugins_dir(&plugins)
        // Long enough that only taking pulls off the directory's path can pass this test.
        .plugin_sources(
            &sources,
            anonymous().with_pull_deadline(Duration::from_secs(600)),
        );
    let checks = async {
        until("the first pull drips", || {
            reg.shared.drips.load(Ordering::Relaxed) >= 1
        })
        .await;
        let listed =
            |name: &'static str| async move { get(health, "/plugins").await.contains(name) };
        tokio::time::timeout(PATIENCE, async {
            while !listed("dir-a").await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the directory's plugin loads while the registry drips");
        std::fs::copy(guest(LOGGER), plugins.join("dir-b.wasm")).unwrap();
        tokio::time::timeout(PATIENCE, async {
            while !listed("dir-b").await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("a file dropped in while the registry drips is loaded: the directory is watched");
        assert!(
            get(health, "/readyz").await.contains(" 503 "),
            "readiness waits for the first pull"
        );
        // The registry stops dripping (the manifest ends unparsable): the start settles.
        reg.set(Mode::Good);
    };
    let (host, ()) = tokio::join!(builder.start(), checks);
    host.unwrap().shutdown().await;
}

/// Attack 7: a followed tag whose registry starts dripping does not hold a stop (before,
/// shutdown waited for the poll, so the Lease was released only after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_does_not_wait_for_a_dripping_poll() {
    let server = start_server().await;
    let reg = Hostile::start(Mode::Good).await;
    let dir = tempfile::tempdir().unwrap();
    let sources = sources_file(dir.path(), &reg.reference("handlers/x:v1"));
    let host = HostBuilder::new(client(&server))
        .runtime(RuntimeConfig::default())
        .plugin_sources(
            &sources,
            anonymous().with_pull_deadline(Duration::from_secs(600)),
        )
        .start()
        .await
        .unwrap();
    assert_eq!(host.manager().names().await, ["followed"]);
    reg.set(Mode::Drip);
    until("a poll drips", || {
        reg.shared.drips.load(Ordering::Relaxed) >= 1
    })
    .await;
    tokio::time::timeout(Duration::from_secs(20), host.shutdown())
        .await
        .expect("shutdown (and the Lease release in it) does not wait for the poll");
}

/// Attack 8: auth realms and blob redirects to internal addresses other than the registry's
/// own host are refused before any connection; before, they were fetched (the realm on every
/// poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realms_and_redirects_to_internal_addresses_are_refused() {
    let reg = Hostile::start(Mode::Good).await;
    let port = reg.addr.port();
    for (mode, class) in [
        (
            Mode::Realm("http://169.254.169.254/latest/meta-data/iam/security-credentials/".into()),
            "cloud metadata",
        ),
        (Mode::Realm("http://10.0.0.1:8080/token".into()), "private"),
        // A DNS name that resolves to loopback is not the registry's host 127.0.0.1.
        (
            Mode::Realm(format!("http://localhost:{port}/token")),
            "loopback",
        ),
        (
            Mode::BlobRedirect("http://169.254.169.254/latest/user-data".into()),
            "cloud metadata",
        ),
        (Mode::BlobRedirect("http://10.1.2.3/blob".into()), "private"),
        (
            Mode::BlobRedirect(format!("http://127.0.0.2:{port}/redirected/blob")),
            "loopback",
        ),
    ] {
        reg.set(mode.clone());
        let e = anonymous().pull(&reg.pinned(), true).await.unwrap_err();
        assert!(matches!(e, RegistryError::Refused { .. }), "{mode:?}: {e}");
        assert!(e.to_string().contains(class), "{mode:?}: {e}");
        assert!(
            e.to_string().contains("registry's own host"),
            "{mode:?}: {e}"
        );
    }
    assert_eq!(
        reg.shared.tokens.load(Ordering::Relaxed),
        0,
        "no token was asked for"
    );
}

/// Attack 11: an error body with a line break, a forged log line and a terminal sequence
/// reaches the error (and so the log) escaped and cut; before, it arrived raw and whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_error_body_cannot_forge_a_log_line() {
    let reg = Hostile::start(Mode::ErrorBody).await;
    let e = anonymous().pull(&reg.pinned(), true).await.unwrap_err();
    let text = e.to_string();
    assert!(!text.contains(['\n', '\r', '\x1b']), "{text:?}");
    assert!(text.contains("denied\\n2026-11-27"), "{text}");
    assert!(text.len() < 1024, "{} bytes", text.len());
}
