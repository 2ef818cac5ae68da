//! The attack suite (issue 31): every attack of this round and of the last, one after another,
//! against the real `kubewasm run` in a 512 MiB memory cgroup (tighter than
//! `deploy/deployment.yaml`'s 768 MiB) with the deploy's flags (`--leader-elect`, one compile at a time, JSON logs, the host's own Pod from `POD_NAME`/`POD_NAMESPACE`),
//! with the shipped examples loaded (`deploy/`'s configmap-logger and label-auditor,
//! `deploy-registry/`'s Python replicator and JavaScript notifier), a neighbour plugin, the
//! attack fixture under several manifests and four plugins followed from hostile registries.
//!
//! The table ([`table`]) names each attack, how it is set off (a ConfigMap the attack fixture
//! sees, a component dropped in as a hot reload, a registry that turns hostile, the CLI) and
//! what "refused or bounded" means for it. After each the suite checks that the host still runs,
//! was not OOM-killed and stayed under the limit; that `/healthz` and the neighbour's delivery
//! (median of [`SAMPLES`] probes taken while the attack runs) are within [`SLACK`] of their quiet
//! figures; and that the attack's own refusal is visible (its report, a host line, a metric).
//! Where the machine has no writable memory cgroup the host runs without one and its resident
//! size is checked instead (a message says so).
//!
//! Attacks 1 (unsent HTTP bodies) and 10 (per-instance bounds) have test functions of their own:
//! they need the per-plugin budget; without it the host is OOM-killed by attack 1 and writes
//! every instance's log burst in attack 10.
//!
//! Not here, and why: attack 8's blob redirect needs a new digest mid-suite
//! (`registry_hostile.rs` tests it); last round's missing-manifest half of "silent grant
//! changes" (`boundary_log.rs`). Each attack's own test (the module named in
//! the table) is the one that failed before its fix; this suite adds the deploy's memory limit,
//! the shipped examples and the latency bound around all of them at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Api;
use kubewasm::registry::{Artifact, build_artifact};
use kubewasm_e2e::host_objects::{HostObjects, create_json};
use kubewasm_e2e::process::{HostCommand, HostProcess, field, free_port, http_get, loaded};
use kubewasm_e2e::*;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::boundary_compile::{BINARY, compile_bomb, install_registry_pair, replace};
use super::boundary_http::peer;
use super::{LOGGER, install};

const ATTACK: &str = "rust-attack-fixture.wasm";
/// How much later than quiet `/healthz` and a neighbour's delivery may answer during an attack:
/// issue 31's acceptance ("within 100 ms of their quiet figures during each").
const SLACK: Duration = Duration::from_millis(100);
/// Probes per figure; the median is compared, so one scheduling hiccup of a loaded CI machine
/// does not decide.
const SAMPLES: usize = 5;
/// Guest log lines a plugin may write at once, and per second after (`runtime/guest_log.rs`).
const LOG_BURST: u64 = 2000;
const LOG_LINES_PER_SECOND: u64 = 200;

/// The host's Pod and what it names, as `deploy/` would make them.
const HOST: HostObjects<'static> = HostObjects {
    namespace: "kubewasm",
    deployment: "kubewasm",
    replica_set: "kubewasm-7c9d5f",
    pod: "kubewasm-7c9d5f-x2k9p",
    sources: "kubewasm-plugin-sources-5h8k2",
    secret: "kubewasm-registry",
};
/// Another replica of the host.
const SIBLING: &str = "kubewasm-7c9d5f-q9z2w";
/// The plugin whose deliveries are measured, and the namespace it alone watches.
const NEIGHBOUR: &str = "neighbour";

/// Every ConfigMap: what the logger and the attack fixture ask to watch (a grant cannot narrow a
/// subscription's namespaces).
const WATCH_CONFIGMAPS: &str =
    "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n";

/// The attack fixture's plugin, and the namespace its attacks are set off in.
const ATTACKER: &str = "attacker";
const ATK: &str = "atk";

/// The attacker's manifest in the main suite: the grants each attack needs at once (the
/// notifier's Pod patch and the replicator's ConfigMap apply aimed at the host's namespace;
/// Pods and ConfigMaps of its own namespace; Events; loopback HTTP by address and by name),
/// eight calls at once and a 1 s deadline.
fn attacker_manifest(port: u16) -> String {
    format!(
        "concurrency = 8\ndeadline-ms = 1000\nread-qps = 0.1\nread-burst = 5\n\n[grants]\n\
         watch = [{{ api-version = \"v1\", kind = \"ConfigMap\" }},\n\
                  {{ api-version = \"v1\", kind = \"Secret\", namespaces = [\"kubewasm\"] }}]\n\
         write = [{{ api-version = \"v1\", kind = \"Pod\", verbs = [\"patch\", \"update\"], namespaces = [\"{ATK}\", \"kubewasm\"] }},\n\
                  {{ api-version = \"v1\", kind = \"ConfigMap\", verbs = [\"apply\", \"create\", \"delete\", \"patch\"], namespaces = [\"{ATK}\", \"kubewasm\"] }},\n\
                  {{ api-version = \"v1\", kind = \"Secret\", verbs = [\"patch\"], namespaces = [\"kubewasm\"] }},\n\
                  {{ api-version = \"v1\", kind = \"ServiceAccount\", verbs = [\"patch\"], namespaces = [\"kubewasm\"] }},\n\
                  {{ api-version = \"apps/v1\", kind = \"ReplicaSet\", verbs = [\"patch\"], namespaces = [\"kubewasm\"] }},\n\
                  {{ api-version = \"policy/v1\", kind = \"PodDisruptionBudget\", verbs = [\"delete\"], namespaces = [\"kubewasm\"] }},\n\
                  {{ api-version = \"coordination.k8s.io/v1\", kind = \"Lease\", verbs = [\"patch\"], namespaces = [\"kubewasm\"] }}]\n\
         events = true\n\
         http = [\"http://127.0.0.1:{port}\", \"http://localhost:*\"]\n"
    )
}

/// The attacker's manifest for attacks 1 and 10: no grant beyond the watch, eight calls at
/// once, a deadline long enough for the hoard to finish if nothing stops it.
fn hoarder_manifest() -> String {
    format!("concurrency = 8\ndeadline-ms = 20000\n\n{WATCH_CONFIGMAPS}")
}

/// How a hostile registry answers.
#[derive(Clone, Debug, PartialEq)]
enum Mode {
    /// A proper one-layer wasm artifact (the Rust logger), anonymously.
    Good,
    /// Manifests: 256 MiB in 1 MiB chunks, no `Content-Length` (attack 6).
    Huge,
    /// Manifests: headers, then a byte every 200 ms, under any read timeout (attack 7).
    Drip,
    /// Every request: `401` with a Bearer realm at this URL (attack 8).
    Realm(String),
    /// Manifests: `400` with [`FORGED`] and 8 KiB more (attack 11).
    ErrorBody,
}

/// What a hostile registry sends as an error body: a line break and a log line of its own, a
/// terminal sequence.
const FORGED: &str =
    "denied\n{\"level\":\"INFO\",\"message\":\"plugin loaded\",\"plugin\":\"forged\"}\x1b[2J\r";

struct RegistryState {
    mode: Mutex<Mode>,
    artifact: Artifact,
    /// Manifest bytes handed over while [`Mode::Huge`].
    sent: AtomicU64,
    /// Dripping answers started.
    drips: AtomicU64,
}

/// A registry of one repository that answers well until told otherwise; a test-local cut of
/// `registry_hostile.rs`'s, one server per followed plugin so each turns hostile alone.
struct HostileRegistry {
    state: Arc<RegistryState>,
    addr: SocketAddr,
}

impl HostileRegistry {
    async fn start() -> HostileRegistry {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(RegistryState {
            mode: Mutex::new(Mode::Good),
            artifact: build_artifact(std::fs::read(guest(LOGGER)).unwrap()),
            sent: AtomicU64::new(0),
            drips: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .fallback(registry_answer)
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        HostileRegistry { state, addr }
    }

    fn set(&self, mode: Mode) {
        *self.state.mode.lock() = mode;
    }
}

async fn registry_answer(State(s): State<Arc<RegistryState>>, uri: Uri) -> Response {
    let mode = s.mode.lock().clone();
    let path = uri.path();
    if let Mode::Realm(realm) = &mode {
        return (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                format!("Bearer realm=\"{realm}\",service=\"hostile\""),
            )],
        )
            .into_response();
    }
    if path == "/v2/" {
        return StatusCode::OK.into_response();
    }
    let a = &s.artifact;
    if path.contains("/manifests/") {
        return match mode {
            Mode::Huge => {
                let state = s.clone();
                let chunks = futures::stream::iter(0..256).map(move |_| {
                    state.sent.fetch_add(1 << 20, Ordering::Relaxed);
                    Ok::<_, std::io::Error>(vec![b' '; 1 << 20])
                });
                Response::new(Body::from_stream(chunks))
            }
            Mode::Drip => {
                s.drips.fetch_add(1, Ordering::Relaxed);
                let bytes = futures::stream::unfold(s.clone(), |s| async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    (*s.mode.lock() == Mode::Drip)
                        .then(|| (Ok::<_, std::io::Error>(b" ".to_vec()), s.clone()))
                });
                Response::new(Body::from_stream(bytes))
            }
            Mode::ErrorBody => (
                StatusCode::BAD_REQUEST,
                format!("{FORGED}{}", "x".repeat(8 << 10)),
            )
                .into_response(),
            _ => (
                [(
                    header::CONTENT_TYPE,
                    "application/vnd.oci.image.manifest.v1+json",
                )],
                a.manifest.data.clone(),
            )
                .into_response(),
        };
    }
    if let Some((_, digest)) = path.split_once("/blobs/") {
        for blob in [&a.layer, &a.config] {
            if blob.digest == digest {
                return blob.data.clone().into_response();
            }
        }
    }
    StatusCode::NOT_FOUND.into_response()
}

/// The plugins followed from hostile registries (one registry each).
const REGISTRY_PLUGINS: [&str; 4] = ["reg-huge", "reg-drip", "reg-realm", "reg-error"];

/// A sources file following `repo:v1` of each registry every second, over plain HTTP.
fn sources_file(dir: &Path, registries: &BTreeMap<&'static str, HostileRegistry>) -> PathBuf {
    let mut text = String::new();
    for (name, reg) in registries {
        text.push_str(&format!(
            "[[plugin]]\nname = \"{name}\"\nreference = \"{}/{name}:v1\"\nfollow = \"1s\"\n\
             plain-http = true\n[plugin.manifest.grants]\n\
             watch = [{{ api-version = \"v1\", kind = \"ConfigMap\" }}]\n\n",
            reg.addr
        ));
    }
    let path = dir.join("sources.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A copy of the Rust logger whose component exports one more name: `name`, which holds a line
/// break and a log line of its own (wasmparser's refusal quotes it).
fn export_name_forgery() -> Vec<u8> {
    let mut bytes = std::fs::read(guest(LOGGER)).unwrap();
    let name = "x\n{\"level\":\"INFO\",\"message\":\"plugin loaded\",\"plugin\":\"forged\"}";
    // A component export section: one export, a plain name, sort `func`, index 0, no type.
    let mut payload = vec![1, 0x00];
    payload.push(name.len() as u8);
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(&[0x01, 0x00, 0x00]);
    bytes.push(11);
    bytes.push(payload.len() as u8);
    bytes.extend_from_slice(&payload);
    bytes
}

/// How an attack is set off.
enum Trigger {
    /// `copies` ConfigMaps in [`ATK`], each naming `attack` with `params` for the
    /// [`ATTACKER`] (so `copies` calls run at its concurrency).
    Objects {
        attack: &'static str,
        params: Vec<(&'static str, String)>,
        copies: usize,
    },
    /// `bytes` written over plugin `plugin`'s component, as a hot reload arrives.
    Drop {
        plugin: &'static str,
        bytes: fn() -> Vec<u8>,
    },
    /// Plugin `plugin`'s registry turns to `mode`; the next poll meets it.
    Registry { plugin: &'static str, mode: Mode },
    /// Plugin `plugin`'s manifest rewritten to `manifest`, as an operator's (or anyone's)
    /// change of the ConfigMap arrives.
    Manifest {
        plugin: &'static str,
        manifest: &'static str,
    },
    /// `kubewasm rbac` of a plugin granted `kind = "*"`.
    RbacStar,
}

/// A check over what the attack left: `Ok` with a summary, `Err` with what went wrong.
type Verdict = Result<String, String>;

/// What "refused or bounded" means for an attack, and when it is over.
enum Refusal {
    /// `copies` guest lines of `plugin` starting `attack: {prefix}` arrived (within `patience`);
    /// `ok` judges every `attack: …` line of the plugin since the trigger.
    Reports {
        plugin: &'static str,
        prefix: String,
        copies: usize,
        patience: Duration,
        ok: fn(&[String]) -> Verdict,
    },
    /// A host line about `plugin` that `pred` accepts.
    HostLine {
        plugin: &'static str,
        what: &'static str,
        pred: fn(&Value) -> bool,
    },
    /// The counter `metric` (summed over the series naming `plugin`) grew; `then` judges the
    /// host's lines since the trigger.
    Metric {
        metric: &'static str,
        plugin: &'static str,
        then: fn(&[Value]) -> Verdict,
    },
    /// The registry of `plugin` is dripping an answer to the host.
    Dripping { plugin: &'static str },
    /// `kubewasm rbac`'s output `ok` accepts.
    Rbac { ok: fn(&str) -> Verdict },
}

/// One row of the table.
struct Attack {
    /// The hole: `31.N` (this round's N) or `30: …` (last round's).
    id: &'static str,
    /// What the attacker does.
    what: &'static str,
    trigger: Trigger,
    refusal: Refusal,
}

/// The `attack: …` report after `prefix` of the lines, if any.
fn report<'a>(lines: &'a [String], prefix: &str) -> Option<&'a str> {
    let prefix = format!("attack: {prefix}");
    lines.iter().find_map(|l| l.strip_prefix(&prefix))
}

/// Every answer of a `<try> -> <answer>` report was a refusal containing `why`.
fn all_refused(lines: &[String], why: &str) -> Verdict {
    let answers: Vec<&String> = lines.iter().filter(|l| l.contains(" -> ")).collect();
    if answers.is_empty() {
        return Err(format!("no answers reported: {lines:#?}"));
    }
    match answers
        .iter()
        .find(|a| !(a.contains("-> 4") && a.contains(why)))
    {
        Some(a) => Err(format!("not refused as {why:?}: {a}")),
        None => Ok(format!("{} tries refused ({why})", answers.len())),
    }
}

/// The number after `key=` in `line`.
fn number_after(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Whether any string in `line` holds a raw control character (a forged line or terminal
/// sequence that reached the log unescaped).
fn has_raw_control(line: &Value) -> bool {
    match line {
        Value::String(s) => s.chars().any(|c| c.is_control()),
        Value::Object(m) => m.values().any(has_raw_control),
        Value::Array(a) => a.iter().any(has_raw_control),
        _ => false,
    }
}

/// No line since the trigger is forged: every one is JSON and none carries raw control
/// characters or claims to be the forged plugin's.
fn no_forged_line(lines: &[Value]) -> Verdict {
    if let Some(l) = lines.iter().find(|l| {
        l.get("unparsed").is_some() || has_raw_control(l) || field(l, "plugin") == "forged"
    }) {
        return Err(format!("a forged or raw line: {l}"));
    }
    Ok(format!("{} lines since, all escaped", lines.len()))
}

/// The table: this round's attacks (issue 31's numbering) but 1 and 10, and last round's that a
/// guest or registry can set off.
fn table(peer: SocketAddr, per_ms: u64) -> Vec<Attack> {
    let stall = format!("http://127.0.0.1:{}/stall", peer.port());
    vec![
        Attack {
            id: "31.2+31.3",
            what: "patch the host's Pod image, a sibling, the ReplicaSet; apply the sources ConfigMap; \
                   patch and read the mounted Secret; delete the PDB (boundary_identity)",
            trigger: Trigger::Objects {
                attack: "ident-host",
                params: vec![
                    ("namespace", HOST.namespace.into()),
                    ("pod", HOST.pod.into()),
                    ("sibling", SIBLING.into()),
                    ("configmap", HOST.sources.into()),
                    ("secret", HOST.secret.into()),
                    ("replicaset", HOST.replica_set.into()),
                    ("pdb", HOST.deployment.into()),
                ],
                copies: 1,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "ident-host done".into(),
                copies: 1,
                patience: PATIENCE,
                ok: |l| {
                    report(l, "ident-host done: 0 accepted")
                        .ok_or_else(|| format!("accepted: {l:#?}"))?;
                    all_refused(l, "one of the host's own objects")
                },
            },
        },
        Attack {
            id: "31.4",
            what: "8 calls at once each kube.create 3 MiB of JSON 5 times without a write grant (more would fail the 1 s deadline: the bodies are read on the plugin's time) (boundary_flood)",
            trigger: Trigger::Objects {
                attack: "flood-create",
                params: vec![("n", "5".into())],
                copies: 8,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "flood-create n=5 ".into(),
                copies: 8,
                patience: PATIENCE,
                ok: |l| {
                    let done: Vec<_> = l
                        .iter()
                        .filter(|x| x.starts_with("attack: flood-create"))
                        .collect();
                    match done.iter().find(|x| !x.ends_with("refused=5 other=0")) {
                        Some(x) => Err(format!("not every create refused: {x}")),
                        None => Ok(format!("{} × 5 creates refused (403)", done.len())),
                    }
                },
            },
        },
        Attack {
            id: "31.5",
            what: "a compile bomb (6 MB of unused straight-line code) dropped in as a hot reload (boundary_compile)",
            trigger: Trigger::Drop {
                plugin: "bomb-victim",
                bytes: compile_bomb,
            },
            refusal: Refusal::HostLine {
                plugin: "bomb-victim",
                what: "the bomb refused at the compile child's memory limit",
                pred: |l| {
                    field(l, "message")
                        == "new version not loaded; the running version keeps running"
                        && field(l, "error").contains("memory limit")
                },
            },
        },
        Attack {
            id: "31.6",
            what: "a followed tag's registry answers a 256 MiB manifest (registry_hostile)",
            trigger: Trigger::Registry {
                plugin: "reg-huge",
                mode: Mode::Huge,
            },
            refusal: Refusal::HostLine {
                plugin: "reg-huge",
                what: "the manifest refused while it streams",
                pred: |l| {
                    field(l, "message").starts_with("plugin source not pulled")
                        && field(l, "message").contains("limit")
                },
            },
        },
        Attack {
            id: "31.8",
            what: "a followed tag's registry sends a Bearer realm at the cloud metadata address (registry_hostile)",
            trigger: Trigger::Registry {
                plugin: "reg-realm",
                mode: Mode::Realm(
                    "http://169.254.169.254/latest/meta-data/iam/security-credentials/".into(),
                ),
            },
            refusal: Refusal::HostLine {
                plugin: "reg-realm",
                what: "the realm refused",
                pred: |l| {
                    let m = field(l, "message");
                    m.starts_with("plugin source not pulled") && m.contains("cloud metadata")
                },
            },
        },
        Attack {
            id: "31.9",
            what: "three calls of ~250 ms CPU each share a plugin's thread under a 1 s deadline (boundary_flood)",
            // 250 ms, not boundary_flood's 400: the suite runs beside the other tests on two
            // cores, where a calibrated burn was seen to take 2.4 times as long; this row is
            // about the host under CPU pressure, and boundary_flood asserts whose time the
            // deadline counts.
            trigger: Trigger::Objects {
                attack: "cpu-burn",
                params: vec![("rounds", (per_ms * 250).to_string())],
                copies: 3,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "cpu-burn ".into(),
                copies: 3,
                patience: PATIENCE,
                ok: |l| {
                    let n = l
                        .iter()
                        .filter(|x| x.starts_with("attack: cpu-burn"))
                        .count();
                    (n >= 3)
                        .then(|| format!("{n} calls finished within their own 1 s"))
                        .ok_or_else(|| format!("{l:#?}"))
                },
            },
        },
        Attack {
            id: "31.11a",
            what: "a component export name carrying a line break and a forged JSON line, as a hot reload",
            trigger: Trigger::Drop {
                plugin: "forge-victim",
                bytes: export_name_forgery,
            },
            refusal: Refusal::HostLine {
                plugin: "forge-victim",
                what: "the component refused, its export name escaped",
                pred: |l| {
                    field(l, "message")
                        == "new version not loaded; the running version keeps running"
                        && !has_raw_control(l)
                },
            },
        },
        Attack {
            id: "31.11b",
            what: "a followed tag's registry answers an error body with a forged line and a terminal sequence",
            trigger: Trigger::Registry {
                plugin: "reg-error",
                mode: Mode::ErrorBody,
            },
            refusal: Refusal::HostLine {
                plugin: "reg-error",
                what: "the error logged escaped and cut",
                pred: |l| {
                    let m = field(l, "message");
                    m.starts_with("plugin source not pulled")
                        && m.contains("denied\\n")
                        && !has_raw_control(l)
                        && m.len() < 2048
                },
            },
        },
        Attack {
            id: "31.12+30.10",
            what: "`kubewasm rbac` for a plugin granted kind = \"*\"",
            trigger: Trigger::RbacStar,
            refusal: Refusal::Rbac {
                ok: |out| {
                    if out.contains("'*'") || out.contains("\"*\"") || out.contains("- '*/*'") {
                        return Err(format!("a wildcard resource: {out}"));
                    }
                    if out.contains("nodes/proxy")
                        || out.contains("pods/log")
                        || out.contains("secrets")
                    {
                        return Err(format!("a subresource or Secrets: {out}"));
                    }
                    out.contains("configmaps")
                        .then(|| "named resources, no subresources, no Secrets".to_string())
                        .ok_or_else(|| format!("no ConfigMaps: {out}"))
                },
            },
        },
        Attack {
            id: "30: leaked connections",
            what: "300 requests to a stalling peer, forgotten, then one more (boundary_http)",
            trigger: Trigger::Objects {
                attack: "http-hold",
                params: vec![("target", stall.clone()), ("count", "300".into())],
                copies: 1,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "http-hold sent".into(),
                copies: 1,
                patience: PATIENCE,
                ok: |l| {
                    let r = report(l, "http-hold sent").unwrap_or_default();
                    r.contains("connection limit reached")
                        .then(|| format!("held at the per-plugin limit: {r}"))
                        .ok_or_else(|| format!("not bounded: {r}"))
                },
            },
        },
        Attack {
            id: "30: subresources",
            what: "patches of ephemeralcontainers, resize, proxy, exec and proxy-syntax names (boundary_kube)",
            trigger: Trigger::Objects {
                attack: "kube-subresource",
                params: Vec::new(),
                copies: 1,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "kube-subresource done".into(),
                copies: 1,
                patience: PATIENCE,
                ok: |l| {
                    report(l, "kube-subresource done: 0 accepted")
                        .map(|_| "every try refused".to_string())
                        .ok_or_else(|| format!("{l:#?}"))
                },
            },
        },
        Attack {
            id: "30: Events outside the grants",
            what: "an Event about a Secret in kube-system (boundary_kube)",
            trigger: Trigger::Objects {
                attack: "event-elsewhere",
                params: Vec::new(),
                copies: 1,
            },
            refusal: Refusal::Metric {
                metric: "kubewasm_plugin_events_dropped",
                plugin: ATTACKER,
                then: |_| Ok("the Event dropped and counted".into()),
            },
        },
        Attack {
            id: "30: log floods",
            what: "5,000 refused deletes of a kube-system Secret in one call (boundary_log)",
            trigger: Trigger::Objects {
                attack: "log-denied-kube",
                params: vec![("n", "5000".into())],
                copies: 1,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "log-denied-kube n=5000 ".into(),
                copies: 1,
                patience: PATIENCE,
                ok: |l| {
                    report(l, "log-denied-kube n=5000 refused=5000")
                        .map(|_| "5,000 refused".to_string())
                        .ok_or_else(|| format!("{l:#?}"))
                },
            },
        },
        Attack {
            id: "30: read floods",
            what: "30 kube.get of one object in a loop (boundary_kube)",
            trigger: Trigger::Objects {
                attack: "kube-read-flood",
                params: vec![("n", "30".into())],
                copies: 1,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "kube-read-flood ok=".into(),
                copies: 1,
                patience: PATIENCE,
                ok: |l| {
                    let r = report(l, "kube-read-flood ok=").unwrap_or_default();
                    match number_after(r, "throttled") {
                        Some(t) if t > 0 => Ok(format!("{t} of 30 reads throttled")),
                        _ => Err(format!("not throttled: {r}")),
                    }
                },
            },
        },
        Attack {
            id: "30: internal addresses",
            what: "a granted name (localhost) resolving to a loopback port not granted by address (boundary_http)",
            trigger: Trigger::Objects {
                attack: "http-internal",
                // Any port but the peer's: 127.0.0.1 is granted by address for that one only.
                params: vec![("target", "http://localhost:9/".to_string())],
                copies: 1,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "http-internal".into(),
                copies: 1,
                patience: PATIENCE,
                ok: |l| {
                    let r = report(l, "http-internal").unwrap_or_default();
                    (!r.contains("reached") && r.contains("Prohibited"))
                        .then(|| format!("refused: {r}"))
                        .ok_or_else(|| format!("reached: {r}"))
                },
            },
        },
        Attack {
            id: "30: deadline evasion",
            what: "a non-blocking read of a stalled body, then an 8 s sleep under a 1 s deadline (boundary_http)",
            trigger: Trigger::Objects {
                attack: "http-evade",
                params: vec![("target", stall), ("sleep-ms", "8000".into())],
                copies: 1,
            },
            refusal: Refusal::HostLine {
                plugin: ATTACKER,
                what: "the call failed its deadline",
                pred: |l| l.to_string().contains("deadline"),
            },
        },
        Attack {
            id: "30: the host's own objects",
            what: "writes to the plugins ConfigMap, the Lease, the ServiceAccount (boundary_kube)",
            trigger: Trigger::Objects {
                attack: "kube-own-objects",
                params: vec![("namespace", HOST.namespace.into())],
                copies: 1,
            },
            refusal: Refusal::Reports {
                plugin: ATTACKER,
                prefix: "kube-own-objects done".into(),
                copies: 1,
                patience: PATIENCE,
                ok: |l| {
                    report(l, "kube-own-objects done in kubewasm: 0 accepted")
                        .map(|_| "every write refused".to_string())
                        .ok_or_else(|| format!("{l:#?}"))
                },
            },
        },
        Attack {
            id: "30: silent grant changes",
            what: "a manifest widened under a running plugin (boundary_log)",
            trigger: Trigger::Manifest {
                plugin: "grant-victim",
                manifest: "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
                           http = [\"http://127.0.0.1:9\"]\n",
            },
            refusal: Refusal::HostLine {
                plugin: "grant-victim",
                what: "the widening said, as a warning",
                pred: |l| {
                    field(l, "level") == "WARN"
                        && field(l, "message").starts_with("grants changed")
                        && field(l, "message").contains("added: http \"http://127.0.0.1:9\"")
                },
            },
        },
        // Last: the drip goes on until the host stops, which the suite checks at its end.
        Attack {
            id: "31.7",
            what: "a followed tag's registry drips its manifest a byte every 200 ms (registry_hostile)",
            trigger: Trigger::Registry {
                plugin: "reg-drip",
                mode: Mode::Drip,
            },
            refusal: Refusal::Dripping { plugin: "reg-drip" },
        },
    ]
}

/// Attack 1: no grant needed; refused once the plugin's budget is spent.
fn attack_1() -> Attack {
    Attack {
        id: "31.1",
        // 600 MiB: past the cgroup's limit with the host's own ~100 MiB, whatever the allocator
        // keeps back.
        what: "600 outgoing-requests with 1 MiB bodies written, never handled (boundary_budget)",
        trigger: Trigger::Objects {
            attack: "hoard-bodies",
            params: vec![("count", "600".into())],
            copies: 1,
        },
        refusal: Refusal::Metric {
            metric: "kubewasm_runtime_memory_budget_refused",
            plugin: ATTACKER,
            then: |lines| {
                let ran = lines.iter().any(|l| {
                    field(l, "plugin") == ATTACKER
                        && field(l, "message").starts_with("attack: hoard-bodies")
                });
                (!ran)
                    .then(|| "refused at the plugin's budget".to_string())
                    .ok_or_else(|| "hoard-bodies ran to its end".to_string())
            },
        },
    }
}

/// Attack 10: eight instances of one plugin write a burst each.
fn attack_10() -> Attack {
    let n = LOG_BURST;
    Attack {
        id: "31.10",
        what: "8 calls at once each write the per-plugin log burst (boundary_budget)",
        trigger: Trigger::Objects {
            attack: "hoard-lines",
            params: vec![("n", n.to_string()), ("sleep-ms", "300".into())],
            copies: 8,
        },
        refusal: Refusal::Metric {
            metric: "kubewasm_runtime_guest_log_dropped",
            plugin: ATTACKER,
            then: |_| Ok("lines over the plugin's budget dropped".into()),
        },
    }
}

/// The measured figures of one attack (medians).
#[derive(Clone, Copy, Debug)]
struct Figures {
    healthz: Duration,
    delivery: Duration,
}

/// The host, its servers and what the suite measured.
struct Suite {
    server: apiserver::ApiServer,
    host: HostProcess,
    health: SocketAddr,
    metrics: SocketAddr,
    plugins: PathBuf,
    registries: BTreeMap<&'static str, HostileRegistry>,
    probes: AtomicU64,
    quiet: Figures,
    /// Names the cgroup and the log file.
    name: String,
    _dir: tempfile::TempDir,
}

impl Suite {
    /// The embedded API server with the host's objects, the registries, and the host with
    /// every plugin loaded and ready; the quiet figures measured.
    async fn start(name: &str, attacker: &str) -> Suite {
        let server = start_server().await;
        let c = client(&server);
        let rs_uid = HOST.create(&c).await;
        create_json(
            Api::<Pod>::namespaced(c.clone(), HOST.namespace),
            HOST.pod_json(SIBLING, &rs_uid),
        )
        .await;
        for ns in [ATK, NEIGHBOUR] {
            create_json(
                Api::<Namespace>::all(c.clone()),
                json!({"metadata": {"name": ns}}),
            )
            .await;
        }
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();

        // The shipped examples, under the manifests deploy/ and deploy-registry/ ship.
        let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/plugins");
        let mut names: Vec<String> = Vec::new();
        for shipped in ["configmap-logger", "label-auditor"] {
            install(
                &guest(&format!("rust-{shipped}.wasm")),
                &plugins,
                &format!("{shipped}.wasm"),
            );
            std::fs::copy(
                deploy.join(format!("{shipped}.toml")),
                plugins.join(format!("{shipped}.toml")),
            )
            .unwrap();
            names.push(shipped.into());
        }
        names.extend(install_registry_pair(&plugins).map(String::from));
        for name in [NEIGHBOUR, "bomb-victim", "forge-victim", "grant-victim"] {
            std::fs::write(plugins.join(format!("{name}.toml")), WATCH_CONFIGMAPS).unwrap();
            install(&guest(LOGGER), &plugins, &format!("{name}.wasm"));
            names.push(name.into());
        }
        std::fs::write(plugins.join(format!("{ATTACKER}.toml")), attacker).unwrap();
        install(&guest(ATTACK), &plugins, &format!("{ATTACKER}.wasm"));
        names.push(ATTACKER.into());
        let mut registries = BTreeMap::new();
        for name in REGISTRY_PLUGINS {
            registries.insert(name, HostileRegistry::start().await);
            names.push(name.into());
        }
        let sources = sources_file(dir.path(), &registries);

        let (health, metrics) = (free_port(), free_port());
        let host = HostProcess::start(HostCommand {
            binary: BINARY.as_ref(),
            plugins: &plugins,
            kubeconfig: &kubeconfig,
            cache_dir: shared_compile_cache(),
            name,
            args: vec![
                "--leader-elect".into(),
                "--leader-election-id=kubewasm".into(),
                format!("--leader-election-namespace={}", HOST.namespace),
                format!("--metrics-bind-address={metrics}"),
                format!("--health-probe-bind-address={health}"),
                format!("--plugin-sources={}", sources.display()),
                // What the in-cluster client's namespace would be: the Pod's.
                format!("--host-namespace={}", HOST.namespace),
                "--shutdown-grace-ms=2000".into(),
                "--compile-memory-budget-mib=384".into(),
            ],
            env: vec![
                ("POD_NAME".into(), HOST.pod.into()),
                ("POD_NAMESPACE".into(), HOST.namespace.into()),
            ],
        })
        .await;
        for name in &names {
            host.wait_line(&format!("{name} loaded"), loaded(name))
                .await;
        }
        let mut suite = Suite {
            server,
            host,
            health,
            metrics,
            plugins,
            registries,
            probes: AtomicU64::new(0),
            quiet: Figures {
                healthz: Duration::ZERO,
                delivery: Duration::ZERO,
            },
            name: name.to_string(),
            _dir: dir,
        };
        suite.until_ready().await;
        // Warm: the neighbour serves (so this replica leads) before anything is measured.
        suite.delivery_time().await;
        suite.quiet = suite.figures().await;
        assert!(
            suite.quiet.healthz < PATIENCE && suite.quiet.delivery < PATIENCE,
            "no quiet figures: {:?}",
            suite.quiet
        );
        eprintln!(
            "quiet: /healthz {:?}, neighbour delivery {:?}; host memory {} MiB ({})",
            suite.quiet.healthz,
            suite.quiet.delivery,
            suite.host.current_bytes() >> 20,
            if suite.host.in_cgroup() {
                "in a 512 MiB memory cgroup"
            } else {
                "no memory cgroup: resident size checked"
            }
        );
        suite.host.assert_alive_and_within_the_limit();
        suite
    }

    /// Polls `/readyz` until it answers 200; panics after [`PATIENCE`].
    async fn until_ready(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some((200, _)) = http_get(self.health, "/readyz").await {
                return;
            }
            assert!(
                Instant::now() < deadline && !self.host.exited(),
                "/readyz never answered 200"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How long `GET /healthz` takes to answer 200 ([`Duration::MAX`]: it did not).
    async fn healthz_time(&self) -> Duration {
        let started = Instant::now();
        match http_get(self.health, "/healthz").await {
            Some((200, _)) => started.elapsed(),
            _ => Duration::MAX,
        }
    }

    /// How long from creating a ConfigMap the neighbour watches until it logged the add
    /// ([`Duration::MAX`]: never, within [`PATIENCE`] or before the host exited).
    async fn delivery_time(&self) -> Duration {
        let n = self.probes.fetch_add(1, Ordering::Relaxed);
        let name = format!("probe-{n}");
        let from = self.host.line_count();
        let started = Instant::now();
        create_json(
            Api::<ConfigMap>::namespaced(client(&self.server), NEIGHBOUR),
            json!({"metadata": {"name": name}}),
        )
        .await;
        let line = format!("add {NEIGHBOUR}/{name} ");
        let delivered =
            |l: &Value| field(l, "plugin") == NEIGHBOUR && field(l, "message").starts_with(&line);
        match self.host.find_line_since(from, PATIENCE, delivered).await {
            Some(_) => started.elapsed(),
            None => Duration::MAX,
        }
    }

    /// Medians of [`SAMPLES`] probes of each.
    async fn figures(&self) -> Figures {
        let (mut healthz, mut delivery) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            healthz.push(self.healthz_time().await);
            delivery.push(self.delivery_time().await);
            if self.host.exited() {
                return Figures {
                    healthz: Duration::MAX,
                    delivery: Duration::MAX,
                };
            }
        }
        healthz.sort();
        delivery.sort();
        Figures {
            healthz: healthz[SAMPLES / 2],
            delivery: delivery[SAMPLES / 2],
        }
    }

    /// The sum of counter `metric` over the series naming `plugin` (`None`: no answer).
    async fn metric(&self, metric: &str, plugin: &str) -> Option<f64> {
        let (_, text) = http_get(self.metrics, "/metrics").await?;
        let label = format!("plugin=\"{plugin}\"");
        Some(
            text.lines()
                .filter(|l| l.starts_with(metric) && l.contains(&label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        )
    }

    /// Guest `attack: …` lines of `plugin` from the `from`-th host line on.
    fn reports(&self, plugin: &str, from: usize) -> Vec<String> {
        self.host
            .lines_since(from)
            .iter()
            .filter(|l| field(l, "plugin") == plugin && field(l, "target") == "kubewasm::guest")
            .map(|l| field(l, "message").to_string())
            .filter(|m| m.starts_with("attack: "))
            .collect()
    }

    /// Sets the attack off.
    async fn trigger(&self, a: &Attack, tag: usize) -> Option<String> {
        match &a.trigger {
            Trigger::Objects {
                attack,
                params,
                copies,
            } => {
                let api: Api<ConfigMap> = Api::namespaced(client(&self.server), ATK);
                for i in 0..*copies {
                    let mut data: serde_json::Map<String, Value> = params
                        .iter()
                        .map(|(k, v)| (k.to_string(), json!(v)))
                        .collect();
                    data.insert("attack".into(), json!(attack));
                    create_json(
                        api.clone(),
                        json!({"metadata": {"name": format!("{attack}-{tag}-{i}")}, "data": data}),
                    )
                    .await;
                }
                None
            }
            Trigger::Drop { plugin, bytes } => {
                replace(&self.plugins.join(format!("{plugin}.wasm")), &bytes());
                None
            }
            Trigger::Registry { plugin, mode } => {
                self.registries[plugin].set(mode.clone());
                None
            }
            Trigger::Manifest { plugin, manifest } => {
                replace(
                    &self.plugins.join(format!("{plugin}.toml")),
                    manifest.as_bytes(),
                );
                None
            }
            Trigger::RbacStar => {
                let dir = tempfile::tempdir().unwrap();
                install(&guest(LOGGER), dir.path(), "star.wasm");
                std::fs::write(
                    dir.path().join("star.toml"),
                    "[grants]\nwatch = [{ api-version = \"*\", kind = \"*\" }]\n",
                )
                .unwrap();
                Some(kubewasm_e2e::process::printed_rbac(BINARY, &[dir.path()]).await)
            }
        }
    }

    /// Waits until the attack is over or refused, and judges it.
    async fn refusal(&self, a: &Attack, from: usize, before: f64, cli: Option<String>) -> Verdict {
        match &a.refusal {
            Refusal::Reports {
                plugin,
                prefix,
                copies,
                patience,
                ok,
            } => {
                let want = format!("attack: {prefix}");
                let deadline = Instant::now() + *patience;
                loop {
                    let lines = self.reports(plugin, from);
                    if lines.iter().filter(|l| l.starts_with(&want)).count() >= *copies {
                        return ok(&lines);
                    }
                    if Instant::now() > deadline || self.host.exited() {
                        return Err(format!("no {copies} × {want:?}: {lines:#?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Refusal::HostLine { plugin, what, pred } => {
                let found = self.host.find_line_since(from, PATIENCE, |l| {
                    field(l, "plugin") == *plugin
                        && field(l, "target") != "kubewasm::guest"
                        && pred(l)
                });
                match found.await {
                    Some(line) => Ok(format!("{what}: {}", shorten(&line.to_string()))),
                    None => Err(format!("no host line: {what}")),
                }
            }
            Refusal::Metric {
                metric,
                plugin,
                then,
            } => {
                let deadline = Instant::now() + PATIENCE;
                loop {
                    let now = self.metric(metric, plugin).await.unwrap_or(before);
                    if now > before {
                        let lines = self.host.lines_since(from);
                        return then(&lines)
                            .map(|s| format!("{metric}{{plugin={plugin}}} {before} → {now}; {s}"));
                    }
                    if Instant::now() > deadline || self.host.exited() {
                        return Err(format!("{metric} for {plugin} stayed at {before}"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Refusal::Dripping { plugin } => {
                let reg = &self.registries[plugin];
                let deadline = Instant::now() + PATIENCE;
                while reg.state.drips.load(Ordering::Relaxed) == 0 {
                    if Instant::now() > deadline {
                        return Err("the host never asked the dripping registry".into());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // Readiness does not wait on a followed pull.
                match http_get(self.health, "/readyz").await {
                    Some((200, _)) => Ok("dripping; /readyz 200 meanwhile".into()),
                    other => Err(format!("/readyz while dripping: {other:?}")),
                }
            }
            Refusal::Rbac { ok } => ok(cli.as_deref().unwrap_or_default()),
        }
    }

    /// Runs one attack: sets it off, measures while it runs, judges it. The row for the report,
    /// and what failed.
    async fn run(&mut self, a: &Attack, tag: usize) -> (String, Vec<String>) {
        let from = self.host.line_count();
        let before = match &a.refusal {
            Refusal::Metric { metric, plugin, .. } => {
                self.metric(metric, plugin).await.expect("/metrics answers")
            }
            _ => 0.0,
        };
        let started = Instant::now();
        let cli = self.trigger(a, tag).await;
        let (during, verdict) = tokio::join!(self.figures(), self.refusal(a, from, before, cli));
        let took = started.elapsed();
        let mut failed = Vec::new();
        if let Err(e) = &verdict {
            failed.push(format!("{}: not refused: {e}", a.id));
        }
        // Whatever the attack, nothing it sent reached the log raw.
        let since = self.host.lines_since(from);
        if let Err(e) = no_forged_line(&since) {
            failed.push(format!("{}: {e}", a.id));
        }
        let alive = self.host.alive();
        let (oom, peak) = (self.host.oom_kills(), self.host.peak_bytes());
        if !alive || oom > 0 || peak >= cgroup::DEPLOY_MEMORY_LIMIT {
            failed.push(format!(
                "{}: host alive {alive}, {oom} OOM kills, peak {} MiB",
                a.id,
                peak >> 20
            ));
        }
        if during.healthz > self.quiet.healthz.saturating_add(SLACK) {
            failed.push(format!(
                "{}: /healthz {:?} during, {:?} quiet",
                a.id, during.healthz, self.quiet.healthz
            ));
        }
        if during.delivery > self.quiet.delivery.saturating_add(SLACK) {
            failed.push(format!(
                "{}: the neighbour's delivery {:?} during, {:?} quiet",
                a.id, during.delivery, self.quiet.delivery
            ));
        }
        let row = format!(
            "{:<32} {:<4} /healthz {:>6.1?} delivery {:>7.1?} peak {:>3} MiB {:>6.1?}  {}",
            a.id,
            if failed.is_empty() { "ok" } else { "FAIL" },
            during.healthz,
            during.delivery,
            peak >> 20,
            took,
            shorten(&match verdict {
                Ok(s) => s,
                Err(e) => e,
            })
        );
        eprintln!("{row}\n    ({})", a.what);
        (row, failed)
    }

    /// Runs `attacks` in turn; panics naming every failure once all ran.
    async fn run_all(&mut self, attacks: &[Attack]) {
        let started = Instant::now();
        let mut failed = Vec::new();
        let mut rows = Vec::new();
        for (i, a) in attacks.iter().enumerate() {
            let (row, f) = self.run(a, i).await;
            rows.push(row);
            failed.extend(f);
            if self.host.exited() {
                failed.push(format!("the host exited during {}", a.id));
                break;
            }
        }
        // The host's whole log, for whoever reads a failure.
        let log = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../target/boundary-suite-{}.jsonl", self.name));
        let text: Vec<String> = self.host.lines().iter().map(Value::to_string).collect();
        let _ = std::fs::write(&log, text.join("\n"));
        eprintln!(
            "host log: {}\nquiet /healthz {:?}, delivery {:?}; {} attacks in {:?}:\n{}",
            log.display(),
            self.quiet.healthz,
            self.quiet.delivery,
            rows.len(),
            started.elapsed(),
            rows.join("\n")
        );
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(160).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Rounds of the fixture's CPU burn per millisecond on this machine, measured by the guest.
async fn calibrate(suite: &Suite) -> u64 {
    let from = suite.host.line_count();
    create_json(
        Api::<ConfigMap>::namespaced(client(&suite.server), ATK),
        json!({"metadata": {"name": "cpu-calibrate"},
            "data": {"attack": "cpu-calibrate", "ms": "200"}}),
    )
    .await;
    let line = suite
        .host
        .wait_line_since(from, "calibration", PATIENCE, |l| {
            field(l, "plugin") == ATTACKER
                && field(l, "message").starts_with("attack: cpu-calibrate")
        })
        .await;
    (number_after(field(&line, "message"), "rounds").unwrap_or(0) / 200).max(1)
}

/// Every attack but 1 and 10, in one host in the deploy's memory limit; then a stop while a
/// registry drips, which must release the Lease on time (attack 7's second half).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_the_host_survives_every_attack_in_the_deploys_memory_limit() {
    let peer = peer();
    let mut suite = Suite::start("suite", &attacker_manifest(peer.port())).await;
    let leases: Api<Lease> = Api::namespaced(client(&suite.server), HOST.namespace);
    let lease = leases
        .get("kubewasm")
        .await
        .expect("this replica holds the Lease");
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert!(holder.is_some(), "the Lease has a holder");
    let per_ms = calibrate(&suite).await;
    let attacks = table(peer, per_ms);
    suite.run_all(&attacks).await;

    // Not lost under any attack: the same holder, never handed over.
    let spec = leases.get("kubewasm").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity, holder, "the Lease changed hands");
    assert!(
        spec.lease_transitions.unwrap_or(0) <= 1,
        "the Lease was lost and retaken: {spec:?}"
    );
    // A stop while a followed pull drips: the host exits within its grace and gives the Lease up.
    let stopped = Instant::now();
    let status = suite.host.terminate(Duration::from_secs(10)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the host did not stop cleanly within 10 s of SIGTERM: {status:?}"
    );
    let spec = leases.get("kubewasm").await.unwrap().spec.unwrap();
    eprintln!(
        "stopped in {:?} during the drip; Lease holder then {:?}",
        stopped.elapsed(),
        spec.holder_identity
    );
    assert_ne!(spec.holder_identity, holder, "the Lease was not released");
}

/// Attack 1 alone: green once the per-plugin budget (issue 31, "budget") has merged; before it
/// the host is OOM-killed in the cgroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_attack_1_unsent_http_bodies_in_the_deploys_memory_limit() {
    let mut suite = Suite::start("attack-1", &hoarder_manifest()).await;
    suite.run_all(&[attack_1()]).await;
}

/// Attack 10 alone: green once the guest log budget is per plugin (issue 31, "budget"); before
/// it each of the eight instances writes a burst of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_attack_10_per_plugin_bounds_in_the_deploys_memory_limit() {
    let mut suite = Suite::start("attack-10", &hoarder_manifest()).await;
    let a = attack_10();
    let from = suite.host.line_count();
    let started = Instant::now();
    suite.run_all(std::slice::from_ref(&a)).await;
    // Every call wrote its lines or had them dropped; those written stay within the plugin's
    // one budget.
    let total = 8 * (LOG_BURST + 1);
    let deadline = Instant::now() + PATIENCE;
    let written = loop {
        let written = suite
            .host
            .lines()
            .iter()
            .skip(from)
            .filter(|l| field(l, "plugin") == ATTACKER && field(l, "target") == "kubewasm::guest")
            .count() as u64;
        let dropped = suite
            .metric("kubewasm_runtime_guest_log_dropped", ATTACKER)
            .await
            .expect("/metrics answers") as u64;
        if written + dropped >= total {
            break written;
        }
        assert!(
            Instant::now() < deadline,
            "{written} written, {dropped} dropped of {total}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = started.elapsed().as_secs();
    let bound = LOG_BURST + LOG_LINES_PER_SECOND * (elapsed + 1);
    assert!(
        written <= bound,
        "{written} lines from 8 calls in {elapsed} s, over the plugin's bound of {bound}"
    );
}
