//! The `kubewasm` binary as users run it.

use std::path::PathBuf;
use std::process::Command;

fn kubewasm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    // Keep the compile cache out of the user's home.
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("kubewasm-cli-test-cache"),
    );
    c
}

fn dist() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/dist")
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
    for f in files {
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
        let v2 = ["rust-logger-v2.wasm", "rust-http-fixture.wasm"]
            .iter()
            .any(|n| f.file_name().unwrap() == *n);
        assert_eq!(v["world"], if v2 { "0.2.0" } else { "0.1.0" }, "{stdout}");
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
        dist().join("rust-test-fixture.wasm"),
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
    assert!(text.contains("in-flight call abandoned"), "{text}");
    rt.block_on(server.shutdown());
}
