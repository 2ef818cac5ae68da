//! `deploy/`: the kustomize base renders, its Deployment's arguments are flags kubewasm accepts,
//! and the real `kubectl` applies it to the embedded API server — server-side dry run first
//! (nothing stored), then for real, then a changed handler updates the plugins ConfigMap in place
//! without touching the Deployment (the hot-reload path). Skipped with a notice without kubectl;
//! needs the Rust guests (`bash guest-examples/build.sh rust`) and the test fixtures
//! (`bash tests/fixtures/build.sh`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role};
use kube::Api;
use kubewasm_e2e::{client, guest, start_server};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn kubectl_available() -> bool {
    std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct Kubectl {
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut c = tokio::process::Command::new("kubectl");
        c.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(120), c.output())
            .await
            .expect("kubectl timed out")
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }
}

/// A copy of `deploy/` with the example handlers synced in by `deploy/sync-plugins.sh`, so the
/// test never writes into the source tree.
fn staged_base(into: &Path) -> PathBuf {
    guest("rust-configmap-logger.wasm");
    guest("rust-label-auditor.wasm");
    let base = into.join("deploy");
    std::fs::create_dir_all(base.join("plugins")).unwrap();
    for entry in std::fs::read_dir(repo().join("deploy")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, base.join(path.file_name().unwrap())).unwrap();
        }
    }
    let status = std::process::Command::new("bash")
        .arg(repo().join("deploy/sync-plugins.sh"))
        .arg(base.join("plugins"))
        .status()
        .expect("bash runs");
    assert!(status.success(), "deploy/sync-plugins.sh failed");
    base
}

/// What `kubectl kustomize` renders of the variant `dir` (with `home` as kubectl's HOME), one
/// document per object.
fn kustomize(dir: &Path, home: &Path) -> Vec<Value> {
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .env("HOME", home)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8(out.stdout).unwrap())
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML"))
        .collect()
}

fn by_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// What `kubectl kustomize` rendered must be a deployable kubewasm: checked field by field.
fn check_rendered(docs: &[Value], plugins: &Path) {
    // The host's ServiceAccount and one per shipped plugin (`kubewasm rbac`'s identities); the
    // host's reads, and each plugin's; leader election and the host's `impersonate`.
    for (kind, n) in [
        ("Namespace", 1),
        ("ServiceAccount", 3),
        ("ClusterRole", 3),
        ("ClusterRoleBinding", 3),
        ("Role", 2),
        ("RoleBinding", 2),
        ("ConfigMap", 1),
        ("Deployment", 1),
        ("PodDisruptionBudget", 1),
    ] {
        assert_eq!(by_kind(docs, kind).len(), n, "{n} {kind} in the base");
    }
    for d in docs.iter().filter(|d| d["kind"] != "Namespace") {
        let cluster = ["ClusterRole", "ClusterRoleBinding"].contains(&d["kind"].as_str().unwrap());
        if !cluster {
            assert_eq!(d["metadata"]["namespace"], "kubewasm", "{}", d["kind"]);
        }
    }

    // Plugins: binaryData under a fixed name, byte for byte the synced components.
    let cm = by_kind(docs, "ConfigMap")[0];
    assert_eq!(cm["metadata"]["name"], "kubewasm-plugins", "no hash suffix");
    for name in ["configmap-logger.wasm", "label-auditor.wasm"] {
        // kustomize wraps the base64 at 70 columns, as Go's decoder allows.
        let b64: String = cm["binaryData"][name]
            .as_str()
            .expect("binaryData entry")
            .split_whitespace()
            .collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(bytes, std::fs::read(plugins.join(name)).unwrap(), "{name}");
    }

    // RBAC: read-only on what the example plugins watch; Leases for election.
    let cr = by_kind(docs, "ClusterRole")[0];
    for rule in cr["rules"].as_array().unwrap() {
        let verbs: Vec<&str> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            verbs.iter().all(|v| ["get", "list", "watch"].contains(v)),
            "plugin rules are read-only: {verbs:?}"
        );
    }
    assert!(cr["rules"].to_string().contains("configmaps"));
    let roles: String = by_kind(docs, "Role")
        .iter()
        .map(|r| r.to_string())
        .collect();
    assert!(
        roles.contains("leases") && roles.contains("update"),
        "{roles}"
    );
    assert!(
        roles.contains("impersonate") && roles.contains("resourceNames"),
        "{roles}"
    );

    // The Deployment: two replicas electing a leader, probes, metrics, hardened, cache on an
    // emptyDir, plugins from the ConfigMap as a whole directory (no subPath).
    let d = by_kind(docs, "Deployment")[0];
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let ports = c["ports"].to_string();
    assert!(
        ports.contains("\"metrics\"") && ports.contains("8080"),
        "{ports}"
    );
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(args.contains(&"--leader-elect".to_string()), "{args:?}");
    // Each replica names itself by its pod (Events' reportingInstance, the Lease holder).
    let pod_name = c["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "POD_NAME"))
        .expect("POD_NAME in the container's env");
    assert_eq!(
        pod_name["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    // Every argument is one kubewasm accepts.
    let argv = std::iter::once("kubewasm".to_string()).chain(args.iter().cloned());
    if let Err(e) = kubewasm::cli::Cli::try_parse_from(argv) {
        panic!("the Deployment's args are not valid kubewasm flags: {e}");
    }
    let mount = |name: &str| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("volume {name} mounted"))
            .clone()
    };
    assert!(
        mount("plugins").get("subPath").is_none(),
        "subPath defeats the ..data swap"
    );
    assert!(args.contains(&format!(
        "--plugins={}",
        mount("plugins")["mountPath"].as_str().unwrap()
    )));
    assert!(args.contains(&format!(
        "--cache-dir={}",
        mount("cache")["mountPath"].as_str().unwrap()
    )));
    let volumes = pod["volumes"].as_array().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).unwrap();
    assert_eq!(volume("plugins")["configMap"]["name"], "kubewasm-plugins");
    assert!(volume("cache").get("emptyDir").is_some());

    let pdb = by_kind(docs, "PodDisruptionBudget")[0];
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        d["spec"]["selector"]["matchLabels"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_base_renders_and_applies_to_the_embedded_server() {
    if !kubectl_available() {
        eprintln!("NOTICE: kubectl not found on PATH; skipping the deploy/ test");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = staged_base(tmp.path());
    let server = start_server().await;
    let k = Kubectl {
        kubeconfig: tmp.path().join("kubeconfig"),
        home: tmp.path().join("home"),
    };
    std::fs::create_dir_all(&k.home).unwrap();
    server.write_kubeconfig(&k.kubeconfig).unwrap();
    let base_arg = base.display().to_string();

    let rendered = k.ok(&["kustomize", &base_arg]).await;
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&rendered)
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML"))
        .collect();
    check_rendered(&docs, &base.join("plugins"));

    // As on a real cluster, a server-side dry run cannot create objects inside a namespace it
    // only pretended to create.
    let writes = server.stats().writes;
    let (ok, _, err) = k.run(&["apply", "--dry-run=server", "-k", &base_arg]).await;
    assert!(
        !ok && err.contains("namespaces \"kubewasm\" not found"),
        "{err}"
    );
    assert_eq!(server.stats().writes, writes, "a dry run stores nothing");

    // With the namespace in place, the server-side dry run deploy/README.md gives passes and stores
    // nothing. (Client-side apply is not what deploy/README.md gives: the plugins ConfigMap outgrows the
    // 256 KiB last-applied annotation, as it would on a real cluster.)
    let ns = base.join("namespace.yaml").display().to_string();
    k.ok(&["apply", "-f", &ns]).await;
    let writes = server.stats().writes;
    let out = k
        .ok(&[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-k",
            &base_arg,
        ])
        .await;
    assert_eq!(
        out.matches("(server dry run)").count(),
        docs.len(),
        "every object answered: {out}"
    );
    assert_eq!(server.stats().writes, writes, "dry runs store nothing");
    let c = client(&server);
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "kubewasm");
    assert!(deployments.get_opt("kubewasm").await.unwrap().is_none());

    // For real (server-side apply: no last-applied annotation to outgrow its 256 KiB limit).
    k.ok(&["apply", "--server-side", "-k", &base_arg]).await;
    let d = deployments.get("kubewasm").await.unwrap();
    assert_eq!(d.spec.replicas, Some(2));
    let generation = d.metadata.generation;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "kubewasm");
    let cm = cms.get("kubewasm-plugins").await.unwrap();
    let stored = cm.binary_data.unwrap();
    assert_eq!(
        stored["configmap-logger.wasm"].0,
        std::fs::read(base.join("plugins/configmap-logger.wasm")).unwrap()
    );
    Api::<ServiceAccount>::namespaced(c.clone(), "kubewasm")
        .get("kubewasm")
        .await
        .unwrap();
    Api::<Role>::namespaced(c.clone(), "kubewasm")
        .get("kubewasm-leader-election")
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(c.clone())
        .get("kubewasm-plugins")
        .await
        .unwrap();
    Api::<PodDisruptionBudget>::namespaced(c.clone(), "kubewasm")
        .get("kubewasm")
        .await
        .unwrap();
    let listed = k
        .ok(&[
            "get",
            "pdb,roles,rolebindings,sa,deploy",
            "-n",
            "kubewasm",
            "-o",
            "name",
        ])
        .await;
    // The PDB; the Roles and bindings of the leader election and of the host's impersonation;
    // the host's ServiceAccount and one per shipped plugin; the Deployment.
    assert_eq!(listed.lines().count(), 9, "{listed}");
    for sa in [
        "kubewasm-plugin-configmap-logger",
        "kubewasm-plugin-label-auditor",
    ] {
        assert!(
            listed.contains(&format!("serviceaccount/{sa}\n")),
            "{listed}"
        );
    }

    // A new handler version: the same ConfigMap changes in place and the Deployment does not
    // (no rollout; the kubelet's `..data` swap brings the file to the running pods).
    std::fs::copy(
        guest("rust-test-fixture.wasm"),
        base.join("plugins/label-auditor.wasm"),
    )
    .unwrap();
    let out = k.ok(&["apply", "--server-side", "-k", &base_arg]).await;
    assert!(
        out.contains("configmap/kubewasm-plugins serverside-applied"),
        "{out}"
    );
    let cm2 = cms.get("kubewasm-plugins").await.unwrap();
    assert_eq!(
        cm2.binary_data.unwrap()["label-auditor.wasm"].0,
        std::fs::read(guest("rust-test-fixture.wasm")).unwrap()
    );
    assert_ne!(cm2.metadata.resource_version, cm.metadata.resource_version);
    let d2 = deployments.get("kubewasm").await.unwrap();
    assert_eq!(
        d2.metadata.generation, generation,
        "the pods are not rolled"
    );
    assert_eq!(d2.metadata.resource_version, d.metadata.resource_version);
}

/// `deploy/plugins-rbac.yaml` is what `kubewasm rbac` prints for the plugins the base ships, so
/// the ServiceAccount can do exactly what their subscriptions and grants need.
#[test]
fn the_plugins_rbac_is_what_kubewasm_rbac_prints_for_the_shipped_plugins() {
    let tmp = tempfile::tempdir().unwrap();
    let base = staged_base(tmp.path());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubewasm-replica"))
        .arg("rbac")
        .arg(base.join("plugins"))
        .output()
        .expect("kubewasm rbac runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = |text: &str| -> Vec<Value> {
        serde_yaml::Deserializer::from_str(text)
            .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
            .collect()
    };
    let shipped = std::fs::read_to_string(repo().join("deploy/plugins-rbac.yaml")).unwrap();
    assert_eq!(
        docs(&shipped),
        docs(&String::from_utf8(out.stdout).unwrap()),
        "deploy/plugins-rbac.yaml is stale: regenerate it with `kubewasm rbac deploy/plugins`"
    );
}

/// `deploy-registry/`, the variant pulling handlers from a registry: it renders over the base,
/// its Deployment's flags are ones kubewasm accepts, and its sources file and manifests are
/// what the host reads at start.
#[test]
fn the_registry_variant_renders_with_a_sources_file_the_host_accepts() {
    if !kubectl_available() {
        eprintln!("NOTICE: kubectl not found on PATH; skipping the deploy-registry/ test");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    staged_base(tmp.path());
    let variant = tmp.path().join("deploy-registry");
    std::fs::create_dir_all(&variant).unwrap();
    for entry in std::fs::read_dir(repo().join("deploy-registry")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, variant.join(path.file_name().unwrap())).unwrap();
    }
    let docs = kustomize(&variant, tmp.path());
    let d = by_kind(&docs, "Deployment")[0];
    let pod = &d["spec"]["template"]["spec"];
    let args: Vec<String> = pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(
        args.contains(&"--plugin-sources=/sources/sources.toml".to_string()),
        "{args:?}"
    );
    let argv = std::iter::once("kubewasm".to_string()).chain(args.iter().cloned());
    if let Err(e) = kubewasm::cli::Cli::try_parse_from(argv) {
        panic!("the Deployment's args are not valid kubewasm flags: {e}");
    }
    // The sources ConfigMap (name hashed by kustomize) is the one the pod mounts.
    let sources = by_kind(&docs, "ConfigMap")
        .into_iter()
        .find(|c| {
            c["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("kubewasm-plugin-sources")
        })
        .expect("the sources ConfigMap");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "sources")
        .expect("the sources volume");
    assert_eq!(
        volume["configMap"]["name"], sources["metadata"]["name"],
        "the pod mounts the rendered ConfigMap"
    );
    // What the pod would see at /sources: the host reads it as at start.
    let mounted = tmp.path().join("mounted");
    std::fs::create_dir_all(&mounted).unwrap();
    for (file, text) in sources["data"].as_object().unwrap() {
        std::fs::write(mounted.join(file), text.as_str().unwrap()).unwrap();
    }
    let names = kubewasm::plugins::read_sources_file(&mounted.join("sources.toml"))
        .unwrap_or_else(|e| panic!("deploy-registry/sources.toml: {e}"));
    assert_eq!(names, ["python-replicator", "javascript-notifier"]);
    // The manifests grant what the examples' own manifests grant.
    for (file, example) in [
        (
            "python-replicator.toml",
            "python/replicator/replicator.toml",
        ),
        (
            "javascript-notifier.toml",
            "javascript/notifier/notifier.toml",
        ),
    ] {
        let read = |p: PathBuf| -> toml::Table {
            toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
        };
        assert_eq!(
            read(mounted.join(file)),
            read(repo().join("guest-examples").join(example)),
            "deploy-registry/{file} differs from guest-examples/{example}"
        );
    }
}

/// `deploy-sharded/`, the base with `deploy/components/sharded`: three active replicas with
/// `--sharding` (flags kubewasm accepts), the base's disruption budget taking one at a time,
/// and the Lease permissions a ring member needs.
#[test]
fn the_sharded_variant_runs_three_active_replicas() {
    if !kubectl_available() {
        eprintln!("NOTICE: kubectl not found on PATH; skipping the deploy-sharded/ test");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = staged_base(tmp.path());
    let component = base.join("components/sharded");
    std::fs::create_dir_all(&component).unwrap();
    std::fs::copy(
        repo().join("deploy/components/sharded/kustomization.yaml"),
        component.join("kustomization.yaml"),
    )
    .unwrap();
    let variant = tmp.path().join("deploy-sharded");
    std::fs::create_dir_all(&variant).unwrap();
    std::fs::copy(
        repo().join("deploy-sharded/kustomization.yaml"),
        variant.join("kustomization.yaml"),
    )
    .unwrap();
    let docs = kustomize(&variant, tmp.path());
    let d = by_kind(&docs, "Deployment")[0];
    assert_eq!(d["spec"]["replicas"], 3);
    let args: Vec<String> = d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(args.contains(&"--sharding".to_string()), "{args:?}");
    let argv = std::iter::once("kubewasm".to_string()).chain(args.iter().cloned());
    if let Err(e) = kubewasm::cli::Cli::try_parse_from(argv) {
        panic!("the Deployment's args are not valid kubewasm flags: {e}");
    }
    let pdb = by_kind(&docs, "PodDisruptionBudget")[0];
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    // A member lists and watches the ring's Leases besides writing its own.
    let lease_verbs: Vec<&str> = by_kind(&docs, "Role")
        .iter()
        .flat_map(|r| r["rules"].as_array().unwrap().iter())
        .filter(|rule| {
            rule["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == "leases"))
        })
        .flat_map(|rule| rule["verbs"].as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap())
        .collect();
    for verb in ["get", "list", "watch", "create", "update"] {
        assert!(lease_verbs.contains(&verb), "leases: {lease_verbs:?}");
    }
}
