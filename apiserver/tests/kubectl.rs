//! Drives the real `kubectl` against the embedded server (skipped with a notice when kubectl is missing).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use apiserver::{ApiServer, Config};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

pub(crate) struct Kubectl {
    kubeconfig: PathBuf,
    home: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.args(args)
            .arg("--cache-dir")
            .arg(self.home.join("cache"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Run kubectl, returning (success, stdout, stderr).
    pub(crate) async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .expect("kubectl timed out")
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Run kubectl and require success; returns stdout.
    pub(crate) async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }

    fn file(&self, name: &str, content: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p.display().to_string()
    }
}

fn kubectl_available() -> bool {
    std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wg]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1
        ports: [{containerPort: 80}]
      - name: sidecar
        image: busybox:1
"#;

async fn wait_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    want: &[&str],
) -> String {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("kubectl get -w ended early");
            if want.iter().all(|w| line.contains(w)) {
                return line;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no line with {want:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_end_to_end() {
    let Some((server, k, _tmp)) = start().await else {
        return;
    };
    assert!(Path::new(&k.kubeconfig).exists());

    // version: the dispatcher must run 1.32
    let v = k.ok(&["version", "-o", "json"]).await;
    assert!(v.contains("\"minor\": \"32\""), "{v}");

    // create -f: ConfigMap, Deployment, CRD then a custom resource
    let cm = k.file(
        "cm1.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\ndata:\n  a: \"1\"\n",
    );
    assert!(
        k.ok(&["create", "-f", &cm])
            .await
            .contains("configmap/cm1 created")
    );
    let (ok, _, err) = k.run(&["create", "-f", &cm]).await;
    assert!(!ok && err.contains("AlreadyExists"), "{err}");
    let dep = k.file("deploy.yaml", DEPLOYMENT);
    assert!(
        k.ok(&["create", "-f", &dep])
            .await
            .contains("deployment.apps/web created")
    );
    let crd = k.file("crd.yaml", CRD);
    assert!(
        k.ok(&["create", "-f", &crd])
            .await
            .contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.com created")
    );
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ])
    .await;
    let w = k.file(
        "w1.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n",
    );
    assert!(
        k.ok(&["create", "-f", &w])
            .await
            .contains("widget.example.com/w1 created")
    );

    // get, get -o json
    let out = k.ok(&["get", "configmaps"]).await;
    assert!(out.contains("cm1"), "{out}");
    assert!(
        out.starts_with("NAME") && out.lines().next().unwrap().contains("DATA"),
        "server-side Table columns: {out}"
    );
    let out = k.ok(&["get", "cm", "cm1", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"]["a"], "1");
    let out = k.ok(&["get", "wg", "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"][0]["spec"]["size"], 3);
    assert!(k.ok(&["get", "deployments"]).await.contains("web"));

    // apply (client-side), twice, then server-side
    let cm2 = k.file(
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm2\ndata:\n  x: \"1\"\n  y: \"2\"\n",
    );
    assert!(
        k.ok(&["apply", "-f", &cm2])
            .await
            .contains("configmap/cm2 created")
    );
    let cm2b = k.file(
        "cm2b.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm2\ndata:\n  x: \"9\"\n",
    );
    assert!(
        k.ok(&["apply", "-f", &cm2b])
            .await
            .contains("configmap/cm2 configured")
    );
    let v: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cm2", "-o", "json"]).await).unwrap();
    assert_eq!(
        v["data"],
        serde_json::json!({"x": "9"}),
        "client-side apply removes y"
    );
    let w2 = k.file(
        "w1b.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 5\n",
    );
    assert!(
        k.ok(&["apply", "-f", &w2])
            .await
            .contains("widget.example.com/w1 configured")
    );
    let cm3 = k.file(
        "cm3.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm3\ndata:\n  s: \"1\"\n",
    );
    assert!(
        k.ok(&["apply", "--server-side", "-f", &cm3])
            .await
            .contains("serverside-applied")
    );
    let cm3b = k.file(
        "cm3b.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm3\ndata:\n  t: \"2\"\n",
    );
    k.ok(&["apply", "--server-side", "-f", &cm3b]).await;
    let v: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cm3", "-o", "json"]).await).unwrap();
    assert_eq!(
        v["data"],
        serde_json::json!({"t": "2"}),
        "SSA drops fields no longer applied"
    );
    k.ok(&["apply", "--server-side", "-f", &cm3b]).await;
    let again: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cm3", "-o", "json"]).await).unwrap();
    assert_eq!(
        again["metadata"]["resourceVersion"], v["metadata"]["resourceVersion"],
        "no-op apply"
    );
    assert!(
        k.ok(&["apply", "--server-side", "-f", &cm2b])
            .await
            .contains("serverside-applied")
    );

    // patch: merge, json, strategic
    k.ok(&[
        "patch",
        "cm",
        "cm1",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "cm",
        "cm1",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/data/c","value":"3"}]"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "deployment",
        "web",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:2"}]}}}}"#,
    ])
    .await;
    let v: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cm1", "-o", "json"]).await).unwrap();
    assert_eq!(v["data"], serde_json::json!({"a": "1", "b": "2", "c": "3"}));
    let v: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "deploy", "web", "-o", "json"]).await).unwrap();
    let containers = v["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 2, "strategic merge keeps the sidecar");
    assert_eq!(containers[0]["image"], "nginx:2");
    assert_eq!(v["metadata"]["generation"], 2);
    let (ok, _, err) = k
        .run(&[
            "patch",
            "wg",
            "w1",
            "--type",
            "strategic",
            "-p",
            r#"{"spec":{"size":1}}"#,
        ])
        .await;
    assert!(
        !ok && err.contains("UnsupportedMediaType")
            || err.contains("415")
            || err.contains("strategic"),
        "{err}"
    );

    // label + selector
    assert!(
        k.ok(&["label", "cm", "cm1", "env=test"])
            .await
            .contains("labeled")
    );
    let out = k.ok(&["get", "cm", "-l", "env=test", "-o", "name"]).await;
    assert_eq!(out.trim(), "configmap/cm1");

    // replace -f
    let cm1r = k.file(
        "cm1r.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\ndata:\n  z: \"26\"\n",
    );
    assert!(
        k.ok(&["replace", "-f", &cm1r])
            .await
            .contains("configmap/cm1 replaced")
    );
    let v: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cm1", "-o", "json"]).await).unwrap();
    assert_eq!(v["data"], serde_json::json!({"z": "26"}));

    // get -w shows ADDED / MODIFIED / DELETED
    let mut child = k
        .command(&["get", "configmaps", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    wait_line(&mut lines, &["ADDED", "cm1"]).await;
    let cmw = k.file(
        "cmw.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cmw\ndata:\n  a: \"1\"\n",
    );
    k.ok(&["create", "-f", &cmw]).await;
    wait_line(&mut lines, &["ADDED", "cmw"]).await;
    k.ok(&["label", "cm", "cmw", "x=y"]).await;
    wait_line(&mut lines, &["MODIFIED", "cmw"]).await;
    k.ok(&["delete", "cm", "cmw"]).await;
    wait_line(&mut lines, &["DELETED", "cmw"]).await;
    child.kill().await.unwrap();

    // delete (and the CRD takes its custom resources with it)
    assert!(k.ok(&["delete", "cm", "cm1"]).await.contains("deleted"));
    let (ok, _, err) = k.run(&["get", "cm", "cm1"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
    k.ok(&["delete", "widget", "w1"]).await;
    k.ok(&["delete", "crd", "widgets.example.com"]).await;
    let out = k.ok(&["api-resources"]).await;
    assert!(!out.contains("widgets"), "{out}");
    assert!(out.contains("deployments"), "{out}");
    server.shutdown().await;
}

const LB_SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: lb
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"#;

const EVENT: &str = r#"apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: lb.1
eventTime: "2026-01-01T00:00:00.000000Z"
regarding: {apiVersion: v1, kind: Service, namespace: default, name: lb}
reportingController: kubewasm/lb-controller
reportingInstance: host-1
action: Ensure
reason: EnsureFailed
note: cloud said 503
type: Warning
"#;

/// Start a server and a kubectl pointed at it, or `None` (with a notice) when kubectl is missing.
async fn start() -> Option<(ApiServer, Kubectl, tempfile::TempDir)> {
    start_with(Config::default()).await
}

/// A server with `config` and a kubectl pointed at it (`None` without kubectl).
pub(crate) async fn start_with(config: Config) -> Option<(ApiServer, Kubectl, tempfile::TempDir)> {
    if !kubectl_available() {
        eprintln!("NOTICE: kubectl not found on PATH; skipping the kubectl suite");
        return None;
    }
    let server = ApiServer::start(config).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let k = Kubectl {
        kubeconfig: tmp.path().join("kubeconfig"),
        home: tmp.path().join("home"),
        dir: tmp.path().into(),
    };
    std::fs::create_dir_all(&k.home).unwrap();
    server.write_kubeconfig(&k.kubeconfig).unwrap();
    Some((server, k, tmp))
}

fn json_of(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_controller_features() {
    let Some((server, k, _tmp)) = start().await else {
        return;
    };

    // Service status: only /status writes it, and `get` shows the load balancer's address.
    let svc = k.file("svc.yaml", LB_SERVICE);
    k.ok(&["create", "-f", &svc]).await;
    let out = k.ok(&["get", "svc", "lb"]).await;
    assert!(out.contains("<pending>"), "{out}");
    k.ok(&[
        "patch",
        "svc",
        "lb",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"10.0.0.1"}]}}}"#,
    ])
    .await;
    let out = k.ok(&["get", "svc", "lb"]).await;
    assert!(out.contains("10.0.0.1"), "{out}");
    let out = k
        .ok(&[
            "patch",
            "svc",
            "lb",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"6.6.6.6"}]}}}"#,
        ])
        .await;
    assert!(
        out.contains("no change"),
        "the main resource ignores status: {out}"
    );
    let v = json_of(
        &k.ok(&["get", "svc", "lb", "--subresource=status", "-o", "json"])
            .await,
    );
    assert_eq!(v["status"]["loadBalancer"]["ingress"][0]["ip"], "10.0.0.1");
    assert!(
        k.ok(&["get", "--raw", "/api/v1"])
            .await
            .contains("\"services/status\"")
    );

    // Server-side apply: conflicts name the owner and the field; --force-conflicts moves ownership;
    // a field a manager stops applying goes unless someone else owns it.
    let apply = |file: &str, manager: &str| {
        vec![
            "apply".to_string(),
            "--server-side".into(),
            format!("--field-manager={manager}"),
            "-f".into(),
            file.to_string(),
        ]
    };
    let cm = |name: &str, data: &str| {
        k.file(
            name,
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\ndata:\n{data}"),
        )
    };
    let alice = cm("alice.yaml", "  color: red\n  alice-only: \"1\"\n");
    let bob = cm("bob.yaml", "  color: blue\n");
    let args = apply(&alice, "alice");
    k.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    let args = apply(&bob, "bob");
    let (ok, _, err) = k
        .run(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert!(!ok, "bob must conflict with alice");
    assert!(
        err.contains("conflict with \"alice\"") && err.contains(".data.color"),
        "{err}"
    );
    let mut forced = apply(&bob, "bob");
    forced.push("--force-conflicts".into());
    k.ok(&forced.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    let v = json_of(
        &k.ok(&["get", "cm", "shared", "-o", "json", "--show-managed-fields"])
            .await,
    );
    let owners: Vec<(String, serde_json::Value)> = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_string(),
                e["fieldsV1"].clone(),
            )
        })
        .collect();
    assert_eq!(
        owners,
        vec![
            (
                "alice".to_string(),
                serde_json::json!({"f:data": {"f:alice-only": {}}})
            ),
            (
                "bob".to_string(),
                serde_json::json!({"f:data": {"f:color": {}}})
            ),
        ]
    );
    let alice2 = cm("alice2.yaml", "  alice-new: \"2\"\n");
    let args = apply(&alice2, "alice");
    k.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    let v = json_of(&k.ok(&["get", "cm", "shared", "-o", "json"]).await);
    assert_eq!(
        v["data"],
        serde_json::json!({"alice-new": "2", "color": "blue"})
    );

    // events.k8s.io Events: the series may be patched, what happened may not.
    let ev = k.file("event.yaml", EVENT);
    k.ok(&["create", "-f", &ev]).await;
    k.ok(&[
        "patch",
        "events.events.k8s.io",
        "lb.1",
        "--type=merge",
        "-p",
        r#"{"series":{"count":2,"lastObservedTime":"2026-01-01T00:05:00.000000Z"}}"#,
    ])
    .await;
    let v = json_of(
        &k.ok(&["get", "events.events.k8s.io", "lb.1", "-o", "json"])
            .await,
    );
    assert_eq!(v["series"]["count"], 2);
    let (ok, _, err) = k
        .run(&[
            "patch",
            "events.events.k8s.io",
            "lb.1",
            "--type=merge",
            "-p",
            r#"{"note":"rewritten"}"#,
        ])
        .await;
    assert!(!ok && err.contains("field is immutable"), "{err}");
    let out = k.ok(&["get", "events.events.k8s.io"]).await;
    let header = out.lines().next().unwrap_or("");
    assert!(
        header.contains("LAST SEEN") && header.contains("OBJECT"),
        "{out}"
    );
    assert!(
        out.contains("service/lb") && out.contains("EnsureFailed"),
        "{out}"
    );

    // Finalizers: `kubectl delete` marks the Service and waits; removing the finalizer completes it.
    let fin = k.file(
        "fin.yaml",
        &LB_SERVICE.replace("name: lb", "name: fin\n  finalizers: [kubewasm.io/lb]"),
    );
    k.ok(&["create", "-f", &fin]).await;
    let mut delete = k
        .command(&["delete", "svc", "fin", "--timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(delete.stdout.take().unwrap()).lines();
    wait_line(&mut lines, &["service \"fin\" deleted"]).await;
    let v = json_of(&k.ok(&["get", "svc", "fin", "-o", "json"]).await);
    assert!(v["metadata"]["deletionTimestamp"].is_string(), "{v}");
    assert!(
        delete.try_wait().unwrap().is_none(),
        "kubectl delete waits for the finalizer"
    );
    k.ok(&[
        "patch",
        "svc",
        "fin",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    let status = tokio::time::timeout(Duration::from_secs(30), delete.wait())
        .await
        .expect("kubectl delete returns once the Service is gone")
        .unwrap();
    assert!(status.success());
    let (ok, _, err) = k.run(&["get", "svc", "fin"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
    server.shutdown().await;
}

const DEPLOY_KINDS: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: lease, namespace: team}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, update]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lease, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease}
subjects: [{kind: ServiceAccount, name: runner}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: read-cm}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: read-cm}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: read-cm}
subjects: [{kind: ServiceAccount, name: runner, namespace: team}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: runner, namespace: team}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: runner}}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: runner, namespace: team}
spec: {holderIdentity: a, leaseDurationSeconds: 15}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: plugins, namespace: team}
binaryData:
  handler.wasm: |
    AGFzbQ0AAQAH
    SgFCBAFt
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_dry_run_and_deploy_kinds() {
    let Some((server, k, _tmp)) = start().await else {
        return;
    };
    let ns = k.file(
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n",
    );
    k.ok(&["apply", "-f", &ns]).await;
    let file = k.file("kinds.yaml", DEPLOY_KINDS);
    let writes = server.stats().writes;

    // Server-side dry run: every object answered, none stored.
    let out = k.ok(&["apply", "--dry-run=server", "-f", &file]).await;
    assert_eq!(out.matches("created (server dry run)").count(), 8, "{out}");
    assert_eq!(server.stats().writes, writes);
    let out = k
        .ok(&[
            "get",
            "sa,roles,rolebindings,pdb,leases,cm",
            "-n",
            "team",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(out, "", "nothing stored");

    // For real; then a dry-run delete leaves the object in place.
    let out = k.ok(&["apply", "-f", &file]).await;
    assert_eq!(out.matches(" created").count(), 8, "{out}");
    let out = k
        .ok(&[
            "get",
            "sa,roles,rolebindings,pdb,leases,cm",
            "-n",
            "team",
            "-o",
            "name",
        ])
        .await;
    for name in [
        "serviceaccount/runner",
        "role.rbac.authorization.k8s.io/lease",
        "rolebinding.rbac.authorization.k8s.io/lease",
        "poddisruptionbudget.policy/runner",
        "lease.coordination.k8s.io/runner",
        "configmap/plugins",
    ] {
        assert!(out.lines().any(|l| l == name), "{name} in {out}");
    }
    let out = k
        .ok(&["delete", "--dry-run=server", "role", "lease", "-n", "team"])
        .await;
    assert!(out.contains("(server dry run)"), "{out}");
    k.ok(&["get", "role", "lease", "-n", "team"]).await;
    let out = k
        .ok(&["get", "cm", "plugins", "-n", "team", "-o", "json"])
        .await;
    let v = json_of(&out);
    assert_eq!(
        v["binaryData"]["handler.wasm"], "AGFzbQ0AAQAHSgFCBAFt",
        "served unwrapped"
    );
    let (ok, _, err) = k
        .run(&["get", "clusterrolebinding", "read-cm", "-o", "name"])
        .await;
    assert!(ok, "{err}");
    server.shutdown().await;
}

/// The commands a newcomer types first: the generators (protobuf bodies), scale (the `/scale`
/// subresource), rollout status (a watch on status the test sets), edit, label, annotate, get -w
/// and delete --wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_everyday_commands() {
    let Some((server, k, _tmp)) = start().await else {
        return;
    };
    let ns: &[&str] = &["-n", "team"];
    let get = |what: &'static str| {
        let k = &k;
        async move {
            let args: Vec<&str> = what
                .split(' ')
                .chain(["-n", "team", "-o", "json"])
                .collect();
            json_of(&k.ok(&[&["get"][..], &args[..]].concat()).await)
        }
    };

    // create …: kubectl's typed clients send these as protobuf.
    assert!(
        k.ok(&["create", "namespace", "team"])
            .await
            .contains("namespace/team created")
    );
    k.ok(&[
        &[
            "create",
            "configmap",
            "cfg",
            "--from-literal=a=one",
            "--from-literal=b=two",
        ][..],
        ns,
    ]
    .concat())
        .await;
    k.ok(&[
        &[
            "create",
            "secret",
            "generic",
            "sec",
            "--from-literal=pw=hunter2",
        ][..],
        ns,
    ]
    .concat())
        .await;
    k.ok(&[
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1",
            "--replicas=2",
            "--port=80",
        ][..],
        ns,
    ]
    .concat())
        .await;
    k.ok(&[
        &["create", "service", "clusterip", "web", "--tcp=80:8080"][..],
        ns,
    ]
    .concat())
        .await;
    assert_eq!(
        json_of(&k.ok(&["get", "ns", "team", "-o", "json"]).await)["status"]["phase"],
        "Active"
    );
    let cm = get("cm cfg").await;
    assert_eq!(cm["data"], serde_json::json!({"a": "one", "b": "two"}));
    let sec = get("secret sec").await;
    assert_eq!(sec["type"], "Opaque");
    assert_eq!(sec["data"]["pw"], "aHVudGVyMg==");
    let d = get("deploy web").await;
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "web");
    let c0 = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (&c0["image"], &c0["ports"][0]["containerPort"]),
        (&serde_json::json!("nginx:1"), &serde_json::json!(80))
    );
    let svc = get("svc web").await;
    let p0 = &svc["spec"]["ports"][0];
    assert_eq!(
        (&p0["port"], &p0["targetPort"]),
        (&serde_json::json!(80), &serde_json::json!(8080))
    );
    assert_eq!(svc["spec"]["selector"]["app"], "web");

    // scale writes spec.replicas through /scale.
    k.ok(&[&["scale", "deployment/web", "--replicas=3"][..], ns].concat())
        .await;
    assert_eq!(get("deploy web").await["spec"]["replicas"], 3);
    let scale = json_of(
        &k.ok(&[
            "get",
            "--raw",
            "/apis/apps/v1/namespaces/team/deployments/web/scale",
        ])
        .await,
    );
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");

    // rollout status waits until the status a controller (here: the test) reports is complete.
    let mut rollout = k
        .command(
            &[
                &["rollout", "status", "deployment/web", "--timeout=60s"][..],
                ns,
            ]
            .concat(),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(rollout.stdout.take().unwrap()).lines();
    wait_line(&mut lines, &["Waiting for deployment"]).await;
    let generation = get("deploy web").await["metadata"]["generation"].clone();
    let status = serde_json::json!({"status": {"observedGeneration": generation, "replicas": 3,
        "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3}})
    .to_string();
    k.ok(&[
        &[
            "patch",
            "deploy",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ][..],
        ns,
    ]
    .concat())
        .await;
    wait_line(&mut lines, &["successfully rolled out"]).await;
    let exit = tokio::time::timeout(Duration::from_secs(30), rollout.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success());

    // label and annotate.
    k.ok(&[&["label", "cm", "cfg", "tier=backend"][..], ns].concat())
        .await;
    k.ok(&[&["annotate", "cm", "cfg", "owner=alice"][..], ns].concat())
        .await;
    let cm = get("cm cfg").await;
    assert_eq!(cm["metadata"]["labels"]["tier"], "backend");
    assert_eq!(cm["metadata"]["annotations"]["owner"], "alice");

    // get -w sees what edit (with an editor script) changes.
    let mut watch = k
        .command(
            &[
                &[
                    "get",
                    "cm",
                    "cfg",
                    "-w",
                    "-o",
                    "custom-columns=NAME:.metadata.name,A:.data.a",
                ][..],
                ns,
            ]
            .concat(),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut wlines = BufReader::new(watch.stdout.take().unwrap()).lines();
    wait_line(&mut wlines, &["cfg", "one"]).await;
    let editor = k.file(
        "editor.sh",
        "#!/bin/sh\nsed -i 's/^  a: one$/  a: edited/' \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        k.command(&[&["edit", "cm", "cfg"][..], ns].concat())
            .env("KUBE_EDITOR", &editor)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configmap/cfg edited"));
    wait_line(&mut wlines, &["cfg", "edited"]).await;
    watch.kill().await.unwrap();
    assert_eq!(get("cm cfg").await["data"]["a"], "edited");

    // delete --wait returns once the objects are gone.
    k.ok(&[&["delete", "deployment", "web", "--wait=true"][..], ns].concat())
        .await;
    let (ok, _, err) = k.run(&[&["get", "deploy", "web"][..], ns].concat()).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
    k.ok(&["delete", "namespace", "team", "--wait=true"]).await;
    let (ok, _, err) = k.run(&["get", "ns", "team"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
    server.shutdown().await;
}

/// `kubectl create token` works against the server (its protobuf TokenRequest included) and
/// refuses an account that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_issues_a_token() {
    if !kubectl_available() {
        eprintln!("NOTICE: kubectl not found on PATH; skipping");
        return;
    }
    let server = ApiServer::start(Config {
        authorization: Some(apiserver::Authorization::default()),
        ..Config::default()
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let k = Kubectl {
        kubeconfig: tmp.path().join("kubeconfig"),
        home: tmp.path().join("home"),
        dir: tmp.path().into(),
    };
    std::fs::create_dir_all(&k.home).unwrap();
    server.write_kubeconfig(&k.kubeconfig).unwrap();
    let sa = k.file(
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: robot}\n",
    );
    k.ok(&["apply", "-f", &sa]).await;
    let (ok, _, err) = k.run(&["create", "token", "nobody"]).await;
    assert!(!ok && err.contains("not found"), "{err}");
    let token = k
        .ok(&["create", "token", "robot", "--duration", "15m"])
        .await;
    let token = token.trim();
    assert_eq!(token.split('.').count(), 3, "{token}");
    // kubectl sends no bearer token over plain HTTP, so what the token authenticates is
    // checked through kube-rs (`tests/tokens.rs`).
}
