//! The bad-input suite: every way a plugin file, a manifest or a guest can be wrong, each
//! asserting the clear error that names the culprit and that another plugin keeps receiving
//! events meanwhile. One API server and one host serve the whole table.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::runtime::CallOutcome;
use kubewasm::runtime::Limits;
use kubewasm_e2e::*;

use super::{FIXTURE, LOGGER, create, install};

/// What goes into the plugins directory for one case.
enum Files {
    /// Raw bytes as `NAME.wasm`.
    Bytes(Vec<u8>),
    /// A built guest, optionally with a manifest.
    Guest(PathBuf, Option<&'static str>),
    /// A file of this many bytes (sparse: costs no disk).
    Sparse(u64),
}

/// One load-time case: the plugin is refused and the error names it and says why.
struct LoadCase {
    name: &'static str,
    files: Files,
    /// Every string must appear in the error.
    expect: &'static [&'static str],
}

fn fixture_variant(v: &str) -> PathBuf {
    guest(&format!("rust-fixture-describe-{v}.wasm"))
}

fn load_cases() -> Vec<LoadCase> {
    let logger = std::fs::read(guest(LOGGER)).unwrap();
    let mut core_module = b"\0asm\x01\0\0\0".to_vec();
    core_module.extend_from_slice(&[0; 8]);
    let with = |p: &str, m: &'static str| Files::Guest(guest(p), Some(m));
    let variant = |v: &str, m: Option<&'static str>| Files::Guest(fixture_variant(v), m);
    vec![
        LoadCase {
            name: "garbage",
            files: Files::Bytes(b"this is not wasm at all".to_vec()),
            expect: &["garbage.wasm", "not a WebAssembly component"],
        },
        LoadCase {
            name: "empty",
            files: Files::Bytes(Vec::new()),
            expect: &["empty.wasm", "not a WebAssembly component"],
        },
        LoadCase {
            name: "core-module",
            files: Files::Bytes(core_module),
            expect: &["core-module.wasm", "core WebAssembly module"],
        },
        LoadCase {
            name: "truncated",
            files: Files::Bytes(logger[..logger.len() / 2].to_vec()),
            expect: &["truncated.wasm", "cannot compile"],
        },
        LoadCase {
            name: "one-gigabyte",
            files: Files::Sparse(1 << 30),
            expect: &["one-gigabyte.wasm", "1073741824 bytes", "limit"],
        },
        LoadCase {
            name: "manifest-syntax",
            files: with(LOGGER, "deadline-ms = = 5\n"),
            expect: &["manifest-syntax.toml", "invalid manifest"],
        },
        LoadCase {
            name: "manifest-typo",
            files: with(LOGGER, "deadline_ms = 5\n"),
            expect: &["manifest-typo.toml", "deadline_ms"],
        },
        LoadCase {
            name: "manifest-zero-deadline",
            files: with(LOGGER, "deadline-ms = 0\n"),
            expect: &["manifest-zero-deadline.toml", "deadline-ms"],
        },
        LoadCase {
            name: "manifest-huge-memory",
            files: with(LOGGER, "memory-limit-mib = 100000\n"),
            expect: &["manifest-huge-memory.toml", "memory-limit-mib"],
        },
        LoadCase {
            name: "manifest-zero-queue",
            files: with(LOGGER, "max-queued = 0\n"),
            expect: &["manifest-zero-queue.toml", "max-queued"],
        },
        LoadCase {
            name: "manifest-wrong-type",
            files: with(LOGGER, "deadline-ms = \"fast\"\n"),
            expect: &["manifest-wrong-type.toml", "deadline-ms"],
        },
        LoadCase {
            name: "memory-over-ceiling",
            files: with(LOGGER, "memory-limit-mib = 4000\n"),
            expect: &["memory-over-ceiling.wasm", "ceiling"],
        },
        LoadCase {
            name: "describe-sleeps",
            files: variant("sleep", Some("deadline-ms = 300\n")),
            expect: &["describe-sleeps.wasm", "describe() failed", "deadline"],
        },
        LoadCase {
            name: "describe-traps",
            files: variant("trap", None),
            expect: &["describe-traps.wasm", "describe() failed", "trap"],
        },
        LoadCase {
            name: "describe-10000-subscriptions",
            files: variant("many", None),
            expect: &["describe-10000-subscriptions.wasm", "10000 subscriptions"],
        },
        LoadCase {
            name: "describe-no-subscriptions",
            files: variant("none", None),
            expect: &["describe-no-subscriptions.wasm", "no subscriptions"],
        },
        LoadCase {
            name: "describe-bad-selector",
            files: variant("bad-selector", None),
            expect: &[
                "describe-bad-selector.wasm",
                "label-selector",
                "app in (web",
            ],
        },
        LoadCase {
            name: "describe-bad-namespace",
            files: variant("bad-namespace", None),
            expect: &[
                "describe-bad-namespace.wasm",
                "namespace",
                "kube-system/secrets?x=",
            ],
        },
        LoadCase {
            name: "describe-bad-kind",
            files: variant("bad-kind", None),
            expect: &["describe-bad-kind.wasm", "kind", "Config Map/../secrets"],
        },
        LoadCase {
            name: "describe-huge-name",
            files: variant("huge-name", None),
            expect: &["describe-huge-name.wasm", "name"],
        },
        LoadCase {
            name: "describe-bad-field",
            files: variant("bad-field", None),
            expect: &[
                "describe-bad-field.wasm",
                "field label not supported",
                "status.phase",
            ],
        },
        LoadCase {
            name: "describe-bad-field-syntax",
            files: variant("bad-field-syntax", None),
            expect: &[
                "describe-bad-field-syntax.wasm",
                "field-selector",
                "metadata.name",
            ],
        },
        LoadCase {
            name: "describe-bad-api-version",
            files: variant("bad-api-version", None),
            expect: &["describe-bad-api-version.wasm", "apps/v1/../../api/v1"],
        },
        LoadCase {
            name: "empty-component",
            files: Files::Bytes(b"\0asm\x0d\0\x01\0".to_vec()),
            expect: &["empty-component.wasm", "handler"],
        },
        LoadCase {
            name: "manifest-negative-deadline",
            files: with(LOGGER, "deadline-ms = -5\n"),
            expect: &["manifest-negative-deadline.toml", "deadline-ms"],
        },
        LoadCase {
            name: "name with spaces",
            files: Files::Guest(guest(LOGGER), None),
            expect: &["name with spaces.wasm", "' '"],
        },
        LoadCase {
            name: "describe-unknown-kind",
            files: variant("unknown-kind", None),
            expect: &["describe-unknown-kind.wasm", "example.com/v1/Widget"],
        },
        // Grants: a 0.1.0 subscription to Secrets is not granted by the built-in default.
        LoadCase {
            name: "secrets-by-default",
            files: variant("secrets", None),
            expect: &[
                "secrets-by-default.wasm",
                "not granted: watch v1 Secret in every namespace",
                "secrets-by-default.toml",
                r#"watch = [{ api-version = "v1", kind = "Secret" }]"#,
            ],
        },
        // A [grants] table replaces the default: what it leaves out is not granted.
        LoadCase {
            name: "grants-without-the-subscription",
            files: with(
                LOGGER,
                "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"a\"] }]\n",
            ),
            expect: &[
                "not granted: watch v1 ConfigMap in every namespace",
                "grants-without-the-subscription.toml",
            ],
        },
        // A 0.2.0 plugin asking for writes, Events and HTTP nobody granted.
        LoadCase {
            name: "asks-beyond-grants",
            files: Files::Guest(guest("rust-logger-v2-asks.wasm"), None),
            expect: &[
                "not granted: patch, apply v1 Service in namespace default",
                "not granted: record Events",
                "not granted: HTTP to http://127.0.0.1:9000",
                "events = true",
                r#"http = ["http://127.0.0.1:9000"]"#,
            ],
        },
        LoadCase {
            name: "grants-bad-origin",
            files: with(
                LOGGER,
                "[grants]\nhttp = [\"https://lb.example.com/api\"]\n",
            ),
            expect: &["grants-bad-origin.toml", "line 2", "no path"],
        },
        LoadCase {
            name: "grants-never-granted-subresource",
            files: with(
                LOGGER,
                "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Pod\", verbs = [\"patch\"], subresources = [\"scale\", \"exec\"] }]\n",
            ),
            expect: &[
                "grants-never-granted-subresource.toml",
                "line 2",
                "subresource \"exec\" is never granted",
            ],
        },
        LoadCase {
            name: "manifest-read-qps",
            files: with(LOGGER, "read-qps = 0\n"),
            expect: &["manifest-read-qps.toml", "read-qps must be above 0"],
        },
        LoadCase {
            name: "manifest-http-inflight",
            files: with(LOGGER, "http-max-inflight = 0\n"),
            expect: &[
                "manifest-http-inflight.toml",
                "http-max-inflight must be between 1 and 1024, got 0",
            ],
        },
        LoadCase {
            name: "grants-cidr-host-bits",
            files: with(LOGGER, "[grants]\nhttp = [\"http://10.0.0.1/8:*\"]\n"),
            expect: &[
                "grants-cidr-host-bits.toml",
                "10.0.0.1/8 has host bits set (the network is 10.0.0.0/8)",
            ],
        },
        LoadCase {
            name: "grants-private-address",
            files: with(
                LOGGER,
                "[grants]\nhttp = [{ origin = \"http://10.0.0.0/8:*\", private = true }]\n",
            ),
            expect: &["grants-private-address.toml", "`private` is for DNS names"],
        },
    ]
}

fn write_case(dir: &Path, case: &LoadCase) {
    let wasm = dir.join(format!("{}.wasm", case.name));
    match &case.files {
        Files::Bytes(b) => std::fs::write(&wasm, b).unwrap(),
        Files::Sparse(len) => {
            let f = std::fs::File::create(&wasm).unwrap();
            f.set_len(*len).unwrap();
        }
        Files::Guest(src, manifest) => {
            if let Some(m) = manifest {
                std::fs::write(dir.join(format!("{}.toml", case.name)), m).unwrap();
            }
            install(src, dir, &format!("{}.wasm", case.name));
        }
    }
}

/// The error of the first failed load of `plugin`, awaited.
async fn load_error(t: &TestHost, plugin: &str) -> String {
    let find = |r: &Recorder| {
        r.events().into_iter().find_map(|e| match e {
            HostEvent::LoadFailed {
                plugin: p, error, ..
            } if p == plugin => Some(error),
            _ => None,
        })
    };
    t.recorder
        .wait(&format!("{plugin} refused"), |r| find(r).is_some())
        .await;
    find(&t.recorder).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_plugin_files_are_refused_with_errors_naming_them() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = tempfile::tempdir().unwrap();
    install(&guest(LOGGER), dir.path(), "good.wasm");
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let cases = load_cases();
    assert!(cases.len() >= 27);
    for (i, case) in cases.iter().enumerate() {
        write_case(dir.path(), case);
        let err = load_error(&t, case.name).await;
        for want in case.expect {
            assert!(
                err.contains(want),
                "case {}: {err:?} lacks {want:?}",
                case.name
            );
        }
        // Another plugin keeps receiving events meanwhile.
        let name = format!("after-{i}");
        let rv = create(&api, &name, &[]).await;
        t.logs
            .wait_line("good", &format!("add default/{name} rv={rv} init=false"))
            .await;
    }
    // No refused plugin runs; the good one does.
    assert_eq!(t.host.manager().names().await, ["good"]);
    let status = t.host.manager().status().await;
    let failed = status.iter().filter(|s| s.state.name() == "failed").count();
    assert_eq!(failed, cases.len(), "{status:#?}");
    // The refused Secrets subscriber loads once its manifest grants what the error suggested
    // (a manifest edit is a new version of the plugin).
    std::fs::write(
        dir.path().join("secrets-by-default.toml"),
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Secret\" }]\n",
    )
    .unwrap();
    t.recorder
        .wait("secrets-by-default loaded", |r| {
            r.events().iter().any(
                |e| matches!(e, HostEvent::Loaded { plugin, .. } if plugin == "secrets-by-default"),
            )
        })
        .await;
    let status = t.host.manager().status().await;
    let granted = status
        .iter()
        .find(|s| s.name == "secrets-by-default")
        .unwrap();
    let grants = granted
        .grants
        .as_ref()
        .expect("a running version has grants");
    assert!(grants.allows_read("v1", "Secret", None));
    assert!(!grants.allows_read("v1", "ConfigMap", None));
    let good = status.iter().find(|s| s.name == "good").unwrap();
    assert_eq!(
        good.grants.as_deref(),
        Some(&kubewasm::plugins::Grants::builtin_default())
    );
    t.host.shutdown().await;
}

/// One call-time case: a guest action that must end in a failed call naming a cause among
/// `expect`.
struct CallCase {
    action: &'static str,
    expect: &'static [&'static str],
}

const CALL_CASES: &[CallCase] = &[
    CallCase {
        action: "trap",
        expect: &["guest trapped"],
    },
    CallCase {
        action: "loop",
        expect: &["deadline"],
    },
    CallCase {
        action: "oom",
        expect: &["memory cap"],
    },
    CallCase {
        action: "sleep",
        expect: &["deadline"],
    },
    CallCase {
        action: "poll",
        expect: &["deadline"],
    },
    CallCase {
        action: "pollables",
        // The table cap traps the guest (asserted in the runtime's own tests); with this
        // manifest's 300 ms on a loaded machine, the deadline may end the call first. Either
        // way the call fails alone and a fresh instance serves the next one.
        expect: &["guest trapped", "deadline"],
    },
    CallCase {
        action: "stack-overflow",
        expect: &["guest trapped"],
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_calls_fail_cleanly_while_others_keep_receiving() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = tempfile::tempdir().unwrap();
    install(&guest(LOGGER), dir.path(), "good.wasm");
    install(&guest(FIXTURE), dir.path(), "bad.wasm");
    // A high quarantine threshold is not configurable; failures alternate with successes below.
    std::fs::write(
        dir.path().join("bad.toml"),
        "deadline-ms = 300\nmemory-limit-mib = 16\n",
    )
    .unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    for case in CALL_CASES {
        let name = format!("call-{}", case.action);
        let rv = create(&api, &name, &[("kubewasm.io/action", case.action)]).await;
        let key = format!("default/{name}");
        t.recorder
            .wait_call("bad", case.action, |c| {
                c.key == key
                    && matches!(&c.outcome, CallOutcome::Failed(m) if case.expect.iter().any(|e| m.contains(e)))
            })
            .await;
        t.logs
            .wait_line("good", &format!("add default/{name} rv={rv} init=false"))
            .await;
        // A fresh instance serves the next call (and keeps the failures from piling up into
        // a quarantine).
        let ok = format!("ok-after-{}", case.action);
        create(&api, &ok, &[("kubewasm.io/action", "hello")]).await;
        t.logs.wait_line("bad", &format!("ok default/{ok}")).await;
    }
    // Output a guest cannot use against the host: each case is bounded or escaped.
    for action in [
        "log-huge",
        "print-huge",
        "log-forge",
        "log-flood",
        "retry-huge",
    ] {
        let name = format!("out-{action}");
        create(&api, &name, &[("kubewasm.io/action", action)]).await;
        let key = format!("default/{name}");
        t.recorder.wait_call("bad", action, |c| c.key == key).await;
    }
    let lines = t.logs.of("bad");
    assert!(
        lines.iter().all(|l| l.len() <= 17 * 1024),
        "a guest line over the cap reached the log"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.contains('\n') && !l.contains('\u{1b}')),
        "a guest forged a log line"
    );
    let flood = lines.iter().filter(|l| l.starts_with("flood ")).count();
    assert!(flood < 3000, "the flood was rate-limited ({flood} lines)");
    let retry = t
        .recorder
        .calls_for("bad", "default/out-retry-huge")
        .into_iter()
        .find_map(|c| match c.outcome {
            CallOutcome::Retry(m) => Some(m),
            _ => None,
        })
        .expect("retry-huge answered retry");
    assert!(
        retry.len() <= 17 * 1024,
        "retry message of {} bytes",
        retry.len()
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_files_that_map_to_one_name_are_both_refused() {
    use std::os::unix::ffi::OsStrExt;
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    // Both decode (lossily) to "bad\u{FFFD}": neither may run under a name it shares.
    for raw in [&b"bad\xff.wasm"[..], &b"bad\xfe.wasm"[..]] {
        let tmp = dir.path().join(".incoming");
        std::fs::copy(guest(LOGGER), &tmp).unwrap();
        std::fs::rename(&tmp, dir.path().join(std::ffi::OsStr::from_bytes(raw))).unwrap();
    }
    let refusals = |r: &Recorder| {
        r.events()
            .iter()
            .filter_map(|e| match e {
                HostEvent::LoadFailed { path, error, .. } => Some((path.clone(), error.clone())),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    t.recorder
        .wait("both refused", |r| {
            let paths: std::collections::HashSet<_> =
                refusals(r).into_iter().map(|(p, _)| p).collect();
            paths.len() == 2
        })
        .await;
    for (_, error) in refusals(&t.recorder) {
        assert!(error.contains("not valid UTF-8"), "{error}");
    }
    assert!(t.host.manager().names().await.is_empty());
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_for_a_kind_served_later_loads_by_itself() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    // Subscribes to example.com/v1 Widget, which no CRD defines yet.
    install(&fixture_variant("unknown-kind"), dir.path(), "widgets.wasm");
    let err = load_error(&t, "widgets").await;
    assert!(err.contains("example.com/v1"), "{err}");
    assert!(
        t.host.manager().status().await[0].state.name() == "failed",
        "the plugin waits for a retry"
    );
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client(&server))
        .create(&Default::default(), &crd)
        .await
        .unwrap();
    // Nothing in the plugins directory changes: the retry with backoff loads it.
    t.recorder
        .wait("widgets loaded after its CRD", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Loaded { plugin, .. } if plugin == "widgets"))
        })
        .await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_becomes_readable_later_loads_then() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join(".later-target");
    std::os::unix::fs::symlink(&target, dir.path().join("later.wasm")).unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    assert!(t.host.manager().names().await.is_empty());
    std::fs::copy(guest(LOGGER), &target).unwrap();
    // The symlink itself did not change: only a rescan (here, the next directory event) sees
    // the target now.
    std::fs::write(dir.path().join("nudge.txt"), b"x").unwrap();
    t.recorder
        .wait("later loaded", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Loaded { plugin, .. } if plugin == "later"))
        })
        .await;
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_swap_never_overlaps_two_versions() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = tempfile::tempdir().unwrap();
    install(&guest(FIXTURE), dir.path(), "swap.wasm");
    std::fs::write(dir.path().join("swap.toml"), "deadline-ms = 5000\n").unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    create(&api, "nap", &[("kubewasm.io/action", "nap")]).await;
    t.logs.wait_line("swap", "nap begin default/nap").await;
    // A manifest change is a new version: swap while v1 is in its call.
    std::fs::write(dir.path().join("swap.toml"), "deadline-ms = 5001\n").unwrap();
    t.recorder
        .wait("swapped", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Swapped { plugin, .. } if plugin == "swap"))
        })
        .await;
    // v2's replay naps on the same object; its begin must follow v1's end.
    let lines = t
        .logs
        .wait_for("swap", "v2 replay", |l| {
            l.iter().filter(|x| x.starts_with("nap end")).count() >= 2
        })
        .await;
    let naps: Vec<_> = lines.iter().filter(|l| l.starts_with("nap ")).collect();
    assert_eq!(
        naps,
        [
            "nap begin default/nap",
            "nap end default/nap",
            "nap begin default/nap",
            "nap end default/nap"
        ],
        "two versions ran calls at the same time"
    );
    t.host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_stuck_in_describe_or_a_call_delays_nobody() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let dir = tempfile::tempdir().unwrap();
    let t = start_host(&server, Some(dir.path().to_path_buf()), Limits::default()).await;
    let health = t.host.health_addr().unwrap();

    // Stuck in describe() for up to a minute.
    std::fs::write(dir.path().join("stuck.toml"), "deadline-ms = 60000\n").unwrap();
    install(&fixture_variant("sleep"), dir.path(), "stuck.wasm");
    // Stuck in a call for up to a minute, then deleted while its call sleeps.
    std::fs::write(dir.path().join("sleeper.toml"), "deadline-ms = 60000\n").unwrap();
    install(&guest(FIXTURE), dir.path(), "sleeper.wasm");
    t.recorder
        .wait("sleeper loaded", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Loaded { plugin, .. } if plugin == "sleeper"))
        })
        .await;
    create(&api, "zzz", &[("kubewasm.io/action", "sleep")]).await;
    t.logs.wait_line("sleeper", "sleep begin default/zzz").await;
    std::fs::remove_file(dir.path().join("sleeper.wasm")).unwrap();

    // Meanwhile: another plugin loads and receives, and the endpoints answer.
    install(&guest(LOGGER), dir.path(), "good.wasm");
    t.recorder
        .wait("good loaded", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Loaded { plugin, .. } if plugin == "good"))
        })
        .await;
    // Its initial list first (`zzz`), so that `meanwhile` is a live add rather than part of
    // a replay that had not started yet.
    t.logs
        .wait_for("good", "its initial list", |l| {
            l.iter()
                .any(|x| x.starts_with("add default/zzz ") && x.ends_with(" init=true"))
        })
        .await;
    let rv = create(&api, "meanwhile", &[]).await;
    t.logs
        .wait_line("good", &format!("add default/meanwhile rv={rv} init=false"))
        .await;
    let body = reqwest_get(health, "/plugins").await;
    assert!(body.contains("\"stuck\""), "{body}");
    let ready = reqwest_get(health, "/readyz").await;
    assert!(ready.contains("stuck"), "{ready}");
    // Shutdown abandons the describe() and the sleeping call after the grace period.
    t.host.shutdown().await;
}

/// A plain HTTP GET of `path` on `addr`, answering the body.
async fn reqwest_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}
