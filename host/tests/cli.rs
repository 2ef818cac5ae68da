//! The `kubewasm` binary as users run it.

use std::path::PathBuf;
use std::process::Command;

fn kubewasm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    // The test command's one compile cache (`<target>/test-cache/kubewasm`, shared with the
    // end-to-end tests and scripts/scenarios.sh), never the user's home.
    c.env("XDG_CACHE_HOME", target_dir().join("test-cache"));
    c
}

/// The target folder these tests were built in (`CARGO_TARGET_TMPDIR` is `<target>/tmp`).
fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
        .to_path_buf()
}

/// The examples' components and manifests (`bash guest-examples/build.sh`).
fn dist() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/dist")
}

/// A test fixture (`bash tests/fixtures/build.sh`), never an example.
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/fixtures")
        .join(name)
}

#[test]
fn check_prints_describe_of_every_example() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dist())
        .expect("guest-examples/dist exists: run `bash guest-examples/build.sh`")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    files.sort();
    for lang in ["rust", "python", "javascript", "c"] {
        assert!(
            files
                .iter()
                .any(|f| f.file_name().unwrap().to_string_lossy()
                    == format!("{lang}-configmap-logger.wasm")),
            "{lang}-configmap-logger.wasm is built"
        );
    }
    // Every example ships the manifest granting what it asks for; build.sh installs it beside
    // the component (`NAME.wasm` + `NAME.toml`), where `check` reads it, as a user installs it.
    for f in files {
        assert!(
            f.with_extension("toml").is_file(),
            "{}: no manifest beside it",
            f.display()
        );
        let out = kubewasm().arg("check").arg(&f).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(&stdout).expect("check prints JSON");
        assert!(
            v["describe"]["name"]
                .as_str()
                .is_some_and(|n| !n.is_empty()),
            "{stdout}"
        );
        assert!(
            !v["describe"]["subscriptions"]
                .as_array()
                .unwrap()
                .is_empty(),
            "{stdout}"
        );
        // The loggers (the cross-language conformance reference) and the label-auditor stay on
        // the 0.1.0 world; every other example acts: the site-controllers are 0.3.0
        // controllers, the Rust SDK builds 0.3.0 handlers, the other handlers are 0.2.0 (so
        // every world keeps an example that loads beside the newer ones).
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let world = if name.ends_with("configmap-logger.wasm") || name == "rust-label-auditor.wasm"
        {
            "0.1.0"
        } else if name.ends_with("site-controller.wasm") {
            "0.3.0-controller"
        } else if name.starts_with("rust-") {
            "0.3.0"
        } else {
            "0.2.0"
        };
        assert_eq!(v["world"], world, "{stdout}");
        if f.file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with("configmap-logger.wasm")
        {
            assert_eq!(v["describe"]["name"], "configmap-logger", "{stdout}");
            assert_eq!(
                v["describe"]["subscriptions"][0]["kind"], "ConfigMap",
                "{stdout}"
            );
            assert_eq!(
                v["describe"]["subscriptions"][0]["api_version"], "v1",
                "{stdout}"
            );
        }
    }
}

#[test]
fn check_rejects_bad_files_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"this is not wasm").unwrap();
    let core = dir.path().join("core.wasm");
    // A valid core module that is not a component.
    std::fs::write(&core, [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]).unwrap();
    for f in [&junk, &core] {
        let out = kubewasm().arg("check").arg(f).output().unwrap();
        assert!(!out.status.success(), "{} must fail", f.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&*f.to_string_lossy()),
            "error names the file: {stderr}"
        );
    }
    let out = kubewasm()
        .arg("check")
        .arg(dir.path().join("missing.wasm"))
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// SIGTERM while a handler sleeps in a call (deadline 10 min): the process exits 0 once the
/// shutdown grace period has abandoned the call, without panic text.
#[test]
fn sigterm_stops_a_host_whose_handler_sleeps_in_a_call() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;

    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async {
        let server = apiserver::ApiServer::start(apiserver::Config::default())
            .await
            .unwrap();
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let cm = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "zzz", "labels": {"kubewasm.io/action": "sleep"}},
        }))
        .unwrap();
        api.create(&Default::default(), &cm).await.unwrap();
        server
    });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(
        fixture("rust-test-fixture.wasm"),
        plugins.join("sleeper.wasm"),
    )
    .unwrap();
    std::fs::write(plugins.join("sleeper.toml"), "deadline-ms = 600000\n").unwrap();

    let mut child = kubewasm()
        .args(["run", "--plugins"])
        .arg(&plugins)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--shutdown-grace-ms=500",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let mut output = Vec::new();
    let wait_for = |needle: &str, output: &mut Vec<String>| loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let hit = line.contains(needle);
                output.push(line);
                if hit {
                    return;
                }
            }
            Err(e) => panic!("no {needle:?} ({e}); output:\n{}", output.join("\n")),
        }
    };
    wait_for("sleep begin default/zzz", &mut output);
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // The failure guard: without a bounded shutdown the call would sleep for ten minutes.
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => output.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break child.wait().unwrap(),
            Err(e) => {
                let _ = child.kill();
                panic!("host still running ({e}); output:\n{}", output.join("\n"));
            }
        }
    };
    output.extend(rx.iter());
    let text = output.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(text.contains("in-flight calls abandoned"), "{text}");
    rt.block_on(server.shutdown());
}

/// A plugins directory holding `files` (copied from `guest-examples/dist` or the fixtures) and
/// manifests.
fn plugins_dir(files: &[(&str, PathBuf)], manifests: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, src) in files {
        std::fs::copy(src, dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    for (name, text) in manifests {
        std::fs::write(dir.path().join(format!("{name}.toml")), text).unwrap();
    }
    dir
}

const ASKS_GRANTED: &str = r#"
[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" }, { api-version = "v1", kind = "Service", namespaces = ["default"] }]
write = [{ api-version = "v1", kind = "Service", verbs = ["patch", "apply"], namespaces = ["default"] }]
events = true
http = ["http://127.0.0.1:*"]
"#;

/// The configmap-logger's manifest as deploy/ ships it: `kubewasm rbac` derives rules from
/// grants, and without a manifest the default grants read every kind.
const LOGGER_GRANTED: &str = r#"
[grants]
watch = [{ api-version = "v1", kind = "ConfigMap" }]
"#;

#[test]
fn check_lists_what_a_plugin_asks_for_beyond_its_grants_and_fails() {
    let dir = plugins_dir(&[("asks", fixture("rust-logger-v2-asks.wasm"))], &[]);
    let out = kubewasm()
        .arg("check")
        .arg(dir.path().join("asks.wasm"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !out.status.success(),
        "missing grants fail the check: {stderr}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON even when refused");
    // logger-v2 is built on the Rust SDK: a 0.3.0 handler.
    assert_eq!(v["world"], "0.3.0");
    assert_eq!(v["describe"]["events"], true, "{stdout}");
    assert_eq!(v["granted"]["source"]["from"], "built-in", "{stdout}");
    assert_eq!(
        v["missing"],
        serde_json::json!([
            "patch, apply v1 Service in namespace default",
            "record Events",
            "HTTP to http://127.0.0.1:9000",
        ]),
        "{stdout}"
    );
    let lines: Vec<&str> = v["grant_with"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(lines[0], "[grants]");
    assert!(lines.contains(&"events = true"), "{lines:?}");
    assert!(
        stderr.contains("asks.toml") && stderr.contains("not granted: record Events"),
        "{stderr}"
    );

    // The suggested lines, written to the manifest, make the check pass.
    std::fs::write(dir.path().join("asks.toml"), lines.join("\n")).unwrap();
    let out = kubewasm()
        .arg("check")
        .arg(dir.path().join("asks.wasm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["missing"], serde_json::json!([]));
    assert_eq!(v["granted"]["source"]["from"], "manifest");
}

#[test]
fn check_warns_when_a_grant_covers_the_hosts_own_objects() {
    let dir = plugins_dir(
        &[("wide", dist().join("rust-configmap-logger.wasm"))],
        &[(
            "wide",
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
             write = [{ api-version = \"v1\", kind = \"ConfigMap\", verbs = [\"apply\"] }]\n",
        )],
    );
    let out = kubewasm()
        .arg("check")
        .arg(dir.path().join("wide.wasm"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // A warning, not an error: the grant loads, and the host refuses those writes at the call.
    assert!(out.status.success(), "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // deploy/'s names: the plugins ConfigMap and deploy-registry/'s sources ConfigMap.
    assert_eq!(
        v["never_writable"],
        serde_json::json!([
            "ConfigMap kubewasm/kubewasm-plugins",
            "ConfigMap kubewasm/kubewasm-plugin-sources",
            "ConfigMap kubewasm/kubewasm-plugin-sources-*"
        ])
    );
    assert!(
        stderr.contains("warning: wide: the write grants cover the host's own ConfigMap kubewasm/kubewasm-plugins, ConfigMap kubewasm/kubewasm-plugin-sources, ConfigMap kubewasm/kubewasm-plugin-sources-*: writes to them are refused at the call whatever the grants, the rest of the grant works as given (nothing to change)"),
        "{stderr}"
    );
}

#[test]
fn check_refuses_a_secrets_subscription_unless_granted() {
    let dir = plugins_dir(&[("s", fixture("rust-fixture-describe-secrets.wasm"))], &[]);
    let run = |extra: &[&str]| {
        kubewasm()
            .arg("check")
            .args(extra)
            .arg(dir.path().join("s.wasm"))
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not granted: watch v1 Secret in every namespace"),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"watch = [{ api-version = "v1", kind = "Secret" }]"#),
        "{stderr}"
    );
    // A host-wide default that names Secrets grants them.
    let defaults = dir.path().join("defaults.grants");
    std::fs::write(
        &defaults,
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Secret\" }]\n",
    )
    .unwrap();
    let out = run(&["--default-grants", defaults.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rbac_covers_the_granted_watches_writes_and_events() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use serde::Deserialize;

    let dir = plugins_dir(
        &[
            ("logger", dist().join("rust-configmap-logger.wasm")),
            ("asks", fixture("rust-logger-v2-asks.wasm")),
        ],
        &[("asks", ASKS_GRANTED), ("logger", LOGGER_GRANTED)],
    );
    let out = kubewasm()
        .args([
            "rbac",
            "--shared-identity",
            "--service-account",
            "sa",
            "--namespace",
            "ops",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cluster_role = None;
    let mut role = None;
    let mut bindings = 0;
    for doc in serde_yaml::Deserializer::from_str(&stdout) {
        let v = serde_yaml::Value::deserialize(doc).unwrap();
        match v["kind"].as_str().unwrap() {
            "ClusterRole" => cluster_role = Some(serde_yaml::from_value::<ClusterRole>(v).unwrap()),
            "Role" => role = Some(serde_yaml::from_value::<Role>(v).unwrap()),
            "ClusterRoleBinding" => {
                let b: ClusterRoleBinding = serde_yaml::from_value(v).unwrap();
                let s = &b.subjects.unwrap()[0];
                assert_eq!(
                    (s.name.as_str(), s.namespace.as_deref()),
                    ("sa", Some("ops"))
                );
                bindings += 1;
            }
            "RoleBinding" => {
                let b: RoleBinding = serde_yaml::from_value(v).unwrap();
                assert_eq!(b.metadata.namespace.as_deref(), Some("default"));
                assert_eq!(b.role_ref.kind, "Role");
                bindings += 1;
            }
            k => panic!("unexpected {k}"),
        }
    }
    assert_eq!(bindings, 2, "{stdout}");
    let rules = |rules: Option<Vec<k8s_openapi::api::rbac::v1::PolicyRule>>| -> Vec<String> {
        rules
            .unwrap()
            .into_iter()
            .map(|r| {
                format!(
                    "{}/{}: {}",
                    r.api_groups.unwrap().join(","),
                    r.resources.unwrap().join(","),
                    r.verbs.join(",")
                )
            })
            .collect()
    };
    assert_eq!(
        rules(cluster_role.expect("a ClusterRole").rules),
        [
            "/configmaps: get,list,watch",
            "events.k8s.io/events: create,patch"
        ]
    );
    let role = role.expect("a Role in default");
    assert_eq!(role.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        rules(role.rules),
        [
            "/services: create,get,list,patch,watch",
            "/services/status: patch"
        ],
        "the Service watch grant gives get/list/watch, apply needs create and patch"
    );
}

#[test]
fn rbac_reports_a_plugin_that_would_not_load() {
    let dir = plugins_dir(
        &[
            ("logger", dist().join("rust-configmap-logger.wasm")),
            ("asks", fixture("rust-logger-v2-asks.wasm")),
        ],
        &[("logger", LOGGER_GRANTED)],
    );
    let out = kubewasm().arg("rbac").arg(dir.path()).output().unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("asks.wasm") && stderr.contains("not granted"),
        "{stderr}"
    );
    assert!(
        stdout.contains("configmaps") && !stdout.contains("services"),
        "{stdout}"
    );
}

/// `kubewasm dev` grants what plugins ask for and says so once; the asking 0.2.0 plugin loads.
#[test]
fn dev_grants_what_plugins_ask_for_and_warns() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;

    let dir = plugins_dir(&[("asks", fixture("rust-logger-v2-asks.wasm"))], &[]);
    let mut child = kubewasm()
        .args(["dev", "--port", "0", "--plugins"])
        .arg(dir.path())
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .args(["--metrics-bind-address=0", "--health-probe-bind-address=0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let mut output = Vec::new();
    let loaded = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let done = line.contains("plugin loaded") || line.contains("not loaded");
                output.push(line);
                if done {
                    break output.last().unwrap().contains("plugin loaded");
                }
            }
            Err(e) => {
                let _ = child.kill();
                panic!("no load result ({e}); output:\n{}", output.join("\n"));
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let text = output.join("\n");
    assert!(loaded, "{text}");
    let warnings = output
        .iter()
        .filter(|l| l.contains("kubewasm dev grants every plugin whatever its describe() asks for"))
        .count();
    assert_eq!(warnings, 1, "{text}");
}

/// The canonical controller under `kubewasm dev`, driven by kubectl as a user drives it: the
/// Site's CRD, then a Site (its Deployment, Service and ConfigMap appear, owned by it, and its
/// status follows the Deployment's Pods, which `dev` runs without nodes), an owned ConfigMap
/// edited behind the controller's back (put back), and the Site deleted (what it owned goes with
/// it, by the embedded server's garbage collector).
#[test]
fn dev_runs_the_site_controller_driven_by_kubectl() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let example =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/rust/site-controller");
    let dir = plugins_dir(
        &[("site-controller", dist().join("rust-site-controller.wasm"))],
        &[],
    );
    std::fs::copy(
        example.join("site-controller.toml"),
        dir.path().join("site-controller.toml"),
    )
    .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = kubewasm()
        .args(["dev", "--port", "0", "--plugins"])
        .arg(dir.path())
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(target_dir().join("test-cache/kubewasm"))
        .args(["--metrics-bind-address=0", "--health-probe-bind-address=0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let output = output.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                output.lock().unwrap().push(line);
            }
        });
    }
    let kubectl = |args: &[&str]| -> (bool, String) {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .expect("kubectl is installed");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let mut until = |what: &str, cond: &mut dyn FnMut() -> bool| {
        let started = Instant::now();
        while !cond() {
            if started.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                panic!(
                    "never: {what}; output:\n{}",
                    output.lock().unwrap().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    until("the kubeconfig", &mut || kubeconfig.is_file());
    until("the server", &mut || kubectl(&["get", "namespaces"]).0);
    let crd = example.join("crd.yaml");
    until("the CRD applied", &mut || {
        kubectl(&["apply", "-f", crd.to_str().unwrap()]).0
    });
    let site = example.join("site.yaml");
    until("the Site applied", &mut || {
        kubectl(&["apply", "-f", site.to_str().unwrap()]).0
    });
    let owner = |kind: &str, name: &str| {
        kubectl(&[
            "get",
            kind,
            name,
            "-o",
            "jsonpath={.metadata.ownerReferences[0].kind}",
        ])
        .1 == "Site"
    };
    until("the owned Deployment", &mut || owner("deployment", "web"));
    until("the owned Service", &mut || owner("service", "web"));
    until("the owned ConfigMap", &mut || {
        owner("configmap", "web-content")
    });
    until("the Site's status from the Deployment's Pods", &mut || {
        kubectl(&[
            "get",
            "site",
            "web",
            "-o",
            "jsonpath={.status.availableReplicas}",
        ])
        .1 == "2"
    });
    let message = || {
        kubectl(&[
            "get",
            "configmap",
            "web-content",
            "-o",
            "jsonpath={.data.message}",
        ])
        .1
    };
    let want = message();
    assert!(!want.is_empty());
    let (ok, out) = kubectl(&[
        "patch",
        "configmap",
        "web-content",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"message":"edited behind its back"}}"#,
    ]);
    assert!(ok, "{out}");
    until("the ConfigMap put back", &mut || message() == want);
    let (ok, out) = kubectl(&["delete", "site", "web"]);
    assert!(ok, "{out}");
    until("what the Site owned gone with it", &mut || {
        kubectl(&["get", "deployment", "web"])
            .1
            .contains("NotFound")
            && kubectl(&["get", "configmap", "web-content"])
                .1
                .contains("NotFound")
    });
    let _ = child.kill();
    let _ = child.wait();
    let text = output.lock().unwrap().join("\n");
    // `code=403` as the host logs a refused call (a bare "403" turns up in timestamps).
    assert!(
        !text.contains("code=403") && !text.contains("Forbidden"),
        "{text}"
    );
}

/// What `kubewasm rbac` prints is accepted by an API server (`kubectl apply --server-side`).
#[test]
fn rbac_output_applies_with_kubectl() {
    use std::io::Write;
    use std::process::Stdio;

    let dir = plugins_dir(
        &[
            ("logger", dist().join("rust-configmap-logger.wasm")),
            ("asks", fixture("rust-logger-v2-asks.wasm")),
        ],
        &[("asks", ASKS_GRANTED)],
    );
    let out = kubewasm()
        .args(["rbac", "--shared-identity"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(apiserver::ApiServer::start(apiserver::Config::default()))
        .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut kubectl = Command::new("kubectl")
        .env("KUBECONFIG", &kubeconfig)
        .args(["apply", "--server-side", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    kubectl
        .stdin
        .take()
        .unwrap()
        .write_all(&out.stdout)
        .unwrap();
    let applied = kubectl.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&applied.stdout);
    assert!(
        applied.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    for object in [
        "clusterrole.rbac.authorization.k8s.io/kubewasm-plugins",
        "clusterrolebinding.rbac.authorization.k8s.io/kubewasm-plugins",
        "role.rbac.authorization.k8s.io/kubewasm-plugins",
        "rolebinding.rbac.authorization.k8s.io/kubewasm-plugins",
    ] {
        assert!(text.contains(object), "{text}");
    }
    rt.block_on(server.shutdown());
}

/// A production build has no `kubewasm test`, and says how to get one instead of leaving the
/// user with clap's "unrecognized subcommand".
#[test]
#[cfg(not(feature = "scenario"))]
fn test_without_the_scenario_feature_says_how_to_build_it() {
    let (code, out, err) = run_scenario(
        std::path::Path::new("h.wasm"),
        std::path::Path::new("s.yaml"),
        &["--update"],
    );
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("--features scenario"), "{err}");
}

/// Runs `kubewasm test HANDLER SCENARIO [args]`; returns (exit code, stdout, stderr).
fn run_scenario(
    handler: &std::path::Path,
    scenario: &std::path::Path,
    args: &[&str],
) -> (i32, String, String) {
    let out = kubewasm()
        .arg("test")
        .arg(handler)
        .arg(scenario)
        .args(args)
        .output()
        .expect("kubewasm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every kind of step against logger-v2: replay and on-synced, a write the handler reacts to
/// with an Event, resyncs on the virtual clock (an hour takes no real hour), a relist after
/// 410 Gone that turns a delete the watch missed into a tombstone, restart and leadership.
const LOGGER_V2_SCENARIO: &str = r#"
manifest: logger-v2.toml
objects:
  - {apiVersion: v1, kind: ConfigMap, metadata: {namespace: default, name: first}}
steps:
  - start: {}
    expect:
      - {call: on-add, object: v1/ConfigMap default/first, is-in-initial-list: true, result: ok}
      - {call: on-synced, result: ok}
      - {log: info, message: synced}
  - apply:
      apiVersion: v1
      kind: ConfigMap
      metadata: {namespace: default, name: second, labels: {kubewasm.io/try: event}}
    expect:
      - {call: on-add, object: v1/ConfigMap default/second, is-in-initial-list: false, result: ok}
      - {event: Normal, regarding: v1/ConfigMap default/second, reason: Seen}
  - advance: 25s
    expect:
      - {call: on-update, object: v1/ConfigMap default/first, is-sync: true}
      - {call: on-update, object: v1/ConfigMap default/second, is-sync: true}
      - {call: on-update, object: v1/ConfigMap default/first, is-sync: true}
      - {call: on-update, object: v1/ConfigMap default/second, is-sync: true}
  - advance: 1h
  - relist:
      delete: [v1/ConfigMap default/first]
    expect:
      - {call: on-update, object: v1/ConfigMap default/second, is-sync: true}
      - {call: on-delete, object: v1/ConfigMap default/first, final-state-unknown: true, result: ok}
    absent: [v1/ConfigMap default/first]
    state:
      - {apiVersion: v1, kind: ConfigMap, metadata: {namespace: default, name: second, labels: {kubewasm.io/try: event}}}
  - restart: {}
    expect:
      - {call: on-add, object: v1/ConfigMap default/second, is-in-initial-list: true}
      - {call: on-synced}
  - lose-leadership: {}
    expect: []
  - gain-leadership: {}
    expect:
      - {call: on-add, object: v1/ConfigMap default/second, is-in-initial-list: true}
      - {call: on-synced}
"#;

#[test]
#[cfg_attr(
    not(feature = "scenario"),
    ignore = "kubewasm test needs --features scenario"
)]
fn test_runs_scenarios_and_shows_differences() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("logger-v2.toml"),
        "resync-period-ms = 10000\n[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\nevents = true\n",
    )
    .unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, LOGGER_V2_SCENARIO).unwrap();
    let (code, out, err) = run_scenario(&dist().join("rust-logger-v2.wasm"), &good, &[]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("PASS"), "{out}");
    // The Event it records goes out as the plugin's own ServiceAccount, as deployed.
    assert!(
        out.contains(
            "kube calls acted as: system:serviceaccount:kubewasm:kubewasm-plugin-rust-logger-v2"
        ),
        "{out}"
    );

    // One expectation wrong: exit 1, the step's line, the expected and the actual entry.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        LOGGER_V2_SCENARIO.replace("final-state-unknown: true", "final-state-unknown: false"),
    )
    .unwrap();
    let (code, out, _) = run_scenario(&dist().join("rust-logger-v2.wasm"), &bad, &[]);
    assert_eq!(code, 1, "{out}");
    let line = LOGGER_V2_SCENARIO
        .lines()
        .position(|l| l.contains("- relist:"))
        .unwrap()
        + 1;
    assert!(out.contains(&format!("bad.yaml:{line}")), "{out}");
    assert!(
        out.contains(
            "- {call: on-delete, object: v1/ConfigMap default/first, final-state-unknown: false"
        ) && out.contains(
            "+ {call: on-delete, object: v1/ConfigMap default/first, final-state-unknown: true"
        ),
        "{out}"
    );
    let (code, out, _) = run_scenario(
        &dist().join("rust-logger-v2.wasm"),
        &bad,
        &["--format", "junit"],
    );
    assert_eq!(code, 1);
    assert!(
        out.starts_with("<?xml") && out.contains("<failure"),
        "{out}"
    );
}

/// The 0.3.0 controller fixture's scenarios: reconciles by key with an owned object's event
/// mapped to its owner, requeue-after on the virtual clock, retries backing off, fatal not
/// retried, an owned object repaired, a watched kind mapped by name and by `keys-for`, and
/// settings given by the scenario.
#[test]
#[cfg_attr(
    not(feature = "scenario"),
    ignore = "kubewasm test needs --features scenario"
)]
fn test_runs_a_controllers_scenarios() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/rust/controller-fixture/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    let out = kubewasm()
        .arg("test")
        .arg(fixture("rust-controller-fixture.wasm"))
        .args(&files)
        .output()
        .expect("kubewasm runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains(&format!("{} passed, 0 failed", files.len())),
        "{stdout}"
    );
}

#[test]
#[cfg_attr(
    not(feature = "scenario"),
    ignore = "kubewasm test needs --features scenario"
)]
fn test_update_writes_the_transcript_back_as_expectations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("golden.yaml");
    std::fs::write(
        &path,
        "objects:\n  - {apiVersion: v1, kind: ConfigMap, metadata: {namespace: default, name: a, labels: {kubewasm.io/action: trap}}}\nsteps:\n  - delete: v1/ConfigMap default/a\n",
    )
    .unwrap();
    let (code, out, err) = run_scenario(&fixture("rust-test-fixture.wasm"), &path, &["--update"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let text = std::fs::read_to_string(&path).unwrap();
    // The implied start became a step of its own; a trap is a result like any other.
    assert!(text.contains("- start: {}"), "{text}");
    assert!(
        text.contains(
            "{call: on-add, object: v1/ConfigMap default/a, is-in-initial-list: true, result: trap"
        ),
        "{text}"
    );
    assert!(
        text.contains("{call: on-delete, object: v1/ConfigMap default/a, final-state-unknown: false, result: ok"),
        "{text}"
    );
    let (code, out, _) = run_scenario(&fixture("rust-test-fixture.wasm"), &path, &[]);
    assert_eq!(code, 0, "the updated file passes as it is:\n{out}");
}

#[test]
#[cfg_attr(
    not(feature = "scenario"),
    ignore = "kubewasm test needs --features scenario"
)]
fn test_refuses_bad_scenarios_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &str, &str); 5] = [
        (
            "rust-configmap-logger.wasm",
            "steps:\n  - advance: 1m\n    colour: red\n",
            ":3",
            "colour",
        ),
        (
            "rust-configmap-logger.wasm",
            "steps:\n  - advance: soon\n",
            ":2",
            "duration",
        ),
        (
            "rust-configmap-logger.wasm",
            "steps:\n  - advance: 1m\n    expect:\n      - {call: on-synced}\n",
            ":2",
            "does not export",
        ),
        (
            "rust-configmap-logger.wasm",
            "steps:\n  - apply: {apiVersion: v1, kind: ConfigMap, metadata: {namespace: nowhere, name: a}}\n",
            ":2",
            "namespaces \"nowhere\" not found",
        ),
        (
            "rust-configmap-logger.wasm",
            "steps:\n  - delete: v1/Gizmo default/a\n",
            ":2",
            "Gizmo",
        ),
    ];
    for (i, (handler, text, line, needle)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("case{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run_scenario(&dist().join(handler), &path, &[]);
        let all = format!("{out}{err}");
        assert_eq!(code, 2, "case {i}: {all}");
        assert!(
            all.contains(&format!("case{i}.yaml{line}")) && all.contains(needle),
            "case {i}: {all}"
        );
        assert!(!all.contains("panicked"), "case {i}: {all}");
    }
}

/// What a scenario can say beyond calls: an expected load refusal (with the missing grants),
/// "none of this kind" in a step that does other things; and each way those fail, with errors
/// that name the user's own files, once.
#[test]
#[cfg_attr(
    not(feature = "scenario"),
    ignore = "kubewasm test needs --features scenario"
)]
fn test_expects_refusals_and_nones_and_names_the_users_files() {
    let dir = tempfile::tempdir().unwrap();
    let handler = dist().join("rust-logger-v2.wasm");
    // Grants a Secret watch only: logger-v2's ConfigMap subscription is not covered.
    let narrow = dir.path().join("narrow.toml");
    std::fs::write(
        &narrow,
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Secret\" }]\n",
    )
    .unwrap();
    let wide = dir.path().join("wide.toml");
    std::fs::write(
        &wide,
        "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\nevents = true\n",
    )
    .unwrap();
    let run = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run_scenario(&handler, &path, &[]);
        (code, format!("{out}{err}"))
    };
    let missing = "watch v1 ConfigMap in every namespace";

    // The refusal expected, with its missing grants: passes.
    let (code, all) = run(
        "refused.yaml",
        &format!("manifest: narrow.toml\nrefused:\n  missing: [{missing}]\n"),
    );
    assert_eq!(code, 0, "{all}");
    assert!(all.contains("PASS"), "{all}");
    // Another list of missing grants: a difference, at the line of `refused`.
    let (code, all) = run(
        "other-missing.yaml",
        "manifest: narrow.toml\nrefused:\n  missing: [record Events]\n",
    );
    assert_eq!(code, 1, "{all}");
    assert!(all.contains("other-missing.yaml:2"), "{all}");
    assert!(all.contains("- missing: record Events"), "{all}");
    assert!(all.contains(&format!("+ missing: {missing}")), "{all}");
    // The handler loads after all: a difference.
    let (code, all) = run("loads.yaml", "manifest: wide.toml\nrefused: {}\n");
    assert_eq!(code, 1, "{all}");
    assert!(all.contains("the handler loads"), "{all}");
    // Not expected: bad input, naming the user's manifest (not the runner's copy), once.
    let (code, all) = run("unexpected.yaml", "manifest: narrow.toml\n");
    assert_eq!(code, 2, "{all}");
    assert!(all.contains(&narrow.display().to_string()), "{all}");
    assert!(
        !all.contains("rust-logger-v2.toml"),
        "a runner's copy: {all}"
    );
    assert_eq!(all.matches(missing).count(), 1, "printed once: {all}");
    // `refused` beside steps: refused as bad input.
    let (code, all) = run(
        "refused-steps.yaml",
        "manifest: narrow.toml\nrefused: {}\nsteps:\n  - advance: 1m\n",
    );
    assert_eq!(code, 2, "{all}");
    assert!(
        all.contains("refused-steps.yaml:2") && all.contains("no steps"),
        "{all}"
    );

    // "None of this kind" in a step that calls the handler: passes while it holds...
    let quiet = "manifest: wide.toml\nsteps:\n  - apply: {apiVersion: v1, kind: ConfigMap, metadata: {namespace: default, name: a}}\n    expect:\n      - {call: on-add, object: v1/ConfigMap default/a}\n      - {writes: []}\n      - {events: []}\n      - {http: []}\n";
    let (code, all) = run("none.yaml", quiet);
    assert_eq!(code, 0, "{all}");
    // ...and fails, naming the entry, when the step does record an Event.
    let noisy = quiet.replace("name: a}", "name: a, labels: {kubewasm.io/try: event}}");
    let (code, all) = run("none-but-some.yaml", &noisy);
    assert_eq!(code, 1, "{all}");
    assert!(
        all.contains("none-but-some.yaml:3")
            && all.contains("(unexpected: the step expects events: [])"),
        "{all}"
    );
    // A "none" beside an expectation of its kind is a contradiction: bad input.
    let (code, all) = run(
        "contradiction.yaml",
        &quiet.replace("- {http: []}", "- {event: Normal}"),
    );
    assert_eq!(code, 2, "{all}");
    assert!(all.contains("contradiction.yaml:8"), "{all}");
}

// ---- kubewasm new ---------------------------------------------------------------------------

/// Runs `kubewasm new ARGS` in `dir`.
fn kubewasm_new(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    kubewasm()
        .current_dir(dir)
        .arg("new")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn new_refuses_bad_input_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], i32, &str); 6] = [
        (&["Bad_Name", "--lang", "rust"], 2, "RFC 1123 label"),
        (&["-x", "--lang", "rust"], 2, "-x"),
        (&["ok", "--lang", "cobol"], 2, "cobol"),
        (
            &["ok", "--lang", "c", "--resource", "apps/v1/deployment"],
            2,
            "CamelCase",
        ),
        (
            &["ok", "--lang", "go", "--resource", "Deployment"],
            2,
            "KIND",
        ),
        (
            &["ok", "--lang", "c", "--kind", "reconcile"],
            1,
            "--kind reconcile has templates for rust, python and javascript, not c",
        ),
    ];
    for (args, code, says) in cases {
        let out = kubewasm_new(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?} should say {says:?}: {stderr}"
        );
        assert!(!dir.path().join("ok").exists(), "{args:?} created a folder");
    }
    // A folder that exists and holds anything is never written into.
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("keep.txt"), "mine").unwrap();
    let out = kubewasm_new(dir.path(), &["taken", "--lang", "python"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("exists and is not empty"), "{stderr}");
    assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 1);
    // An empty one is used.
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let out = kubewasm_new(dir.path(), &["empty", "--lang", "javascript"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("empty/handler.js").is_file());
}

/// Each language's fresh template builds with the toolchains `guest-examples/install-toolchains.sh`
/// installs (found through KUBEWASM_REPO, which defaults to this checkout), passes `kubewasm check`
/// with the manifest it ships, and passes its scenario under `kubewasm test`. One test looping
/// over the languages, so two guest builds (and two cargo runs) never share the machine's cores.
/// `KUBEWASM_NEW_LANGS=rust,go` limits the languages.
#[test]
#[cfg_attr(
    not(feature = "scenario"),
    ignore = "kubewasm test needs --features scenario"
)]
fn new_templates_build_check_and_pass_their_scenario() {
    let langs = std::env::var("KUBEWASM_NEW_LANGS")
        .unwrap_or_else(|_| "rust,python,javascript,c,go".to_string());
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    // The Rust guests' own target folder (guest_target_dir in guest-examples/lib.sh), where the
    // examples' build left the wasm32 dependencies the template shares (same lock, same
    // profile): only the template and its copy of the SDK compile here. Not the host's target
    // folder, whose lock this `cargo test` holds.
    let guests = target_dir().join("guests");
    let mut timings = Vec::new();
    // Every language on the default resource, and C (the quickest build) on a resource of a
    // named group and on a cluster-scoped one (the server's own namespaces are in the replay),
    // which change the subscription, the manifest and the scenario's objects.
    // The languages with a controller template also as a controller (`--kind reconcile`).
    let mut cases: Vec<(&str, &str, &str)> = langs
        .split(',')
        .filter(|l| !l.is_empty())
        .map(|l| (l, "v1/ConfigMap", "handler"))
        .collect();
    if cases.iter().any(|(l, _, _)| *l == "c") {
        cases.push(("c", "apps/v1/Deployment", "handler"));
        cases.push(("c", "v1/Namespace", "handler"));
    }
    for lang in ["rust", "python", "javascript"] {
        if cases.iter().any(|(l, _, _)| *l == lang) {
            cases.push((lang, "v1/ConfigMap", "reconcile"));
        }
    }
    for (lang, resource, what) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (api_version, kind) = resource.rsplit_once('/').unwrap();
        let name = format!("hello-{lang}-{}-{what}", kind.to_lowercase());
        let start = std::time::Instant::now();
        let out = kubewasm_new(
            dir.path(),
            &[
                &name,
                "--lang",
                lang,
                "--resource",
                resource,
                "--kind",
                what,
            ],
        );
        assert!(
            out.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let folder = dir.path().join(&name);
        // Guest builds go to this test's target, never into the folder or the repository.
        let mut build = Command::new("bash");
        // The C examples' build made the tool already (scripts/test.sh): no second build.
        let tool = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../guest-examples/tool/target/release/kubewasm-guest-tool");
        if tool.is_file() && std::env::var_os("KUBEWASM_GUEST_TOOL").is_none() {
            build.env("KUBEWASM_GUEST_TOOL", &tool);
        }
        let out = build
            .arg(folder.join("build.sh"))
            .env("CARGO_TARGET_DIR", &guests)
            .env(
                "KUBEWASM_TOOL_TARGET_DIR",
                std::env::var_os("KUBEWASM_TOOL_TARGET_DIR")
                    .unwrap_or_else(|| tmp.join("guest-tool").into_os_string()),
            )
            .output()
            .unwrap();
        let built = start.elapsed();
        assert!(
            out.status.success(),
            "{lang}: build.sh failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let wasm = folder.join(format!("{name}.wasm"));
        assert!(wasm.is_file(), "{lang}: {} not built", wasm.display());
        timings.push(format!(
            "{lang} {resource} {what}: new -> built {:.1} s",
            built.as_secs_f64()
        ));

        let out = kubewasm().arg("check").arg(&wasm).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{lang}: check failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        // The Rust SDK builds 0.3.0 handlers; the other templates' handlers stay on 0.2.0.
        let world = match (what, lang) {
            ("reconcile", _) => "0.3.0-controller",
            (_, "rust") => "0.3.0",
            _ => "0.2.0",
        };
        assert_eq!(report["world"], world, "{lang}: {stdout}");
        assert_eq!(
            report["describe"]["name"],
            name.as_str(),
            "{lang}: {stdout}"
        );
        assert_eq!(report["describe"]["events"], true, "{lang}: {stdout}");
        let subs = &report["describe"]["subscriptions"];
        assert_eq!(subs[0]["api_version"], api_version, "{lang}: {stdout}");
        assert_eq!(subs[0]["kind"], kind, "{lang}: {stdout}");
        assert_eq!(report["missing"], serde_json::json!([]), "{lang}: {stdout}");

        // The scenario passes as generated: Event, calls and log lines of every step.
        let out = kubewasm()
            .current_dir(&folder)
            .args(["test", &format!("{name}.wasm"), "scenarios/basic.yaml"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{lang}: kubewasm test failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        timings.push(format!(
            "{lang} {resource} {what}: new -> scenario passed {:.1} s",
            start.elapsed().as_secs_f64()
        ));
    }
    eprintln!("{}", timings.join("\n"));
}
