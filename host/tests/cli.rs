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
