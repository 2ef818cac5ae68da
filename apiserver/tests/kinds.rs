//! The served kinds are exactly k8s-openapi's listable kinds for the version the server names,
//! with their scope, subresources and discovery names; ResourceQuota (a Namespace → quota
//! controller's target) works end to end; an unserved kind is refused with what to do.

use std::collections::BTreeSet;
use std::path::PathBuf;

use apiserver::{ApiServer, Config};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};
use serde_json::json;

async fn client(server: &ApiServer) -> Client {
    Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// k8s-openapi's source directory, from `cargo metadata` (the crate the server derives its list
/// from, read independently of the server's code).
fn k8s_openapi_src() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "k8s-openapi")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("k8s-openapi in the dependency graph");
    PathBuf::from(manifest).parent().unwrap().join("src")
}

/// `(group/version, kind, plural, namespaced)` of every `ListableResource` in the version's sources.
fn k8s_openapi_kinds() -> BTreeSet<(String, String, String, bool)> {
    let dir = k8s_openapi_src().join(format!(
        "v{}",
        apiserver::KUBERNETES_VERSION.replace('.', "_")
    ));
    assert!(dir.is_dir(), "{} missing", dir.display());
    let mut out = BTreeSet::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let src = std::fs::read_to_string(&p).unwrap();
            if !src.contains("impl crate::ListableResource for") {
                continue;
            }
            let konst = |name: &str| -> String {
                let at = src
                    .find(&format!("const {name}: &'static str = \""))
                    .unwrap();
                let rest = &src[at..];
                let start = rest.find('"').unwrap() + 1;
                rest[start..start + rest[start..].find('"').unwrap()].to_string()
            };
            out.insert((
                konst("API_VERSION"),
                konst("KIND"),
                konst("URL_PATH_SEGMENT"),
                src.contains("type Scope = crate::NamespaceResourceScope;"),
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_every_k8s_openapi_kind() {
    let expected = k8s_openapi_kinds();
    assert!(expected.len() > 80, "{expected:?}");
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let discovery = Discovery::new(c.clone()).run_aggregated().await.unwrap();
    let mut served = BTreeSet::new();
    for group in discovery.groups() {
        for version in group.versions() {
            for (ar, caps) in group.versioned_resources(version) {
                served.insert((
                    ar.api_version.clone(),
                    ar.kind.clone(),
                    ar.plural.clone(),
                    caps.scope == Scope::Namespaced,
                ));
            }
        }
    }
    let missing: Vec<_> = expected.difference(&served).collect();
    let extra: Vec<_> = served.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "not served: {missing:?}\nserved but not in k8s-openapi: {extra:?}"
    );
    // The legacy discovery documents list the same kinds.
    let legacy = Discovery::new(c.clone()).run().await.unwrap();
    let legacy_count: usize = legacy
        .groups()
        .map(|g| {
            g.versions()
                .map(|v| g.versioned_resources(v).len())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(legacy_count, expected.len());

    // Names, categories and subresources kubectl relies on.
    let raw = |path: &'static str| {
        let c = c.clone();
        async move {
            let req = http::Request::get(path).body(Vec::new()).unwrap();
            c.request::<serde_json::Value>(req).await.unwrap()
        }
    };
    let apps = raw("/apis/apps/v1").await;
    let entry = |name: &str| {
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {apps}"))
            .clone()
    };
    assert_eq!(entry("deployments")["shortNames"], json!(["deploy"]));
    assert_eq!(entry("deployments")["categories"], json!(["all"]));
    assert_eq!(entry("statefulsets")["shortNames"], json!(["sts"]));
    let scale = entry("deployments/scale");
    assert_eq!(
        (&scale["group"], &scale["version"], &scale["kind"]),
        (&json!("autoscaling"), &json!("v1"), &json!("Scale"))
    );
    entry("replicasets/scale");
    entry("daemonsets/status");
    let core = raw("/api/v1").await;
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for n in [
        "resourcequotas",
        "resourcequotas/status",
        "replicationcontrollers/scale",
        "nodes/status",
        "persistentvolumeclaims",
        "limitranges",
    ] {
        assert!(names.contains(&n), "{n} not in {names:?}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_quota_and_unserved_kinds() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(c.clone(), "default");
    let q: ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "team", "labels": {"quota": "small"}},
        "spec": {"hard": {"pods": "10", "requests.cpu": "4"}},
        "status": {"used": {"pods": "99"}},
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &q).await.unwrap();
    // A controller reports usage through /status; a spec write leaves it alone.
    quotas
        .patch_status(
            "team",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": {"pods": "10"}, "used": {"pods": "3"}}})),
        )
        .await
        .unwrap();
    let updated = quotas
        .patch(
            "team",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "20"}}})),
        )
        .await
        .unwrap();
    assert_eq!(updated.labels()["quota"], "small");
    let status = updated.status.unwrap();
    assert_eq!(status.used.unwrap()["pods"].0, "3");
    assert_eq!(updated.spec.unwrap().hard.unwrap()["pods"].0, "20");
    assert_eq!(
        quotas.list(&Default::default()).await.unwrap().items.len(),
        1
    );

    // An unserved resource: 404 naming what is served and what to do.
    let req = http::Request::get("/api/v1/namespaces/default/widgets")
        .body(Vec::new())
        .unwrap();
    let body = c.request_text(req).await;
    let msg = match body {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 404);
            s.message
        }
        other => panic!("expected a 404, got {other:?}"),
    };
    assert!(msg.contains("does not serve \"widgets\" in v1"), "{msg}");
    assert!(msg.contains("resourcequotas"), "{msg}");
    assert!(msg.contains("CustomResourceDefinition"), "{msg}");
    server.shutdown().await;
}

/// As kube-apiserver's strategies: a built-in kind with a status subresource is created without
/// the status the request carried (by POST or by server-side apply), keeping only what the
/// server sets (a Pod's phase and QoS class, a Namespace's phase, a Service's empty load
/// balancer); a Node keeps its status (the kubelet registers it so); `/status` then writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_cleared_on_create_as_kube_apiserver_does() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server).await;
    let pp = PostParams::default();

    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "nginx"}]}}},
        "status": {"replicas": 5, "readyReplicas": 5},
    }))
    .unwrap();
    let created = deployments.create(&pp, &d).await.unwrap();
    assert_eq!(created.status.unwrap_or_default(), Default::default());
    let written = deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(
        written.status.unwrap().replicas,
        Some(5),
        "/status writes it"
    );

    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pod = |name: &str, resources: serde_json::Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "nginx", "resources": resources}]},
            "status": {"phase": "Running", "podIP": "10.0.0.7"},
        }))
        .unwrap()
    };
    let limits = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    let requests = json!({"requests": {"cpu": "100m"}});
    for (name, resources, qos) in [
        ("best", json!({}), "BestEffort"),
        ("guaranteed", limits, "Guaranteed"),
        ("burstable", requests, "Burstable"),
    ] {
        let status = pods
            .create(&pp, &pod(name, resources))
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"), "{name}");
        assert_eq!(status.qos_class.as_deref(), Some(qos), "{name}");
        assert_eq!(status.pod_ip, None, "{name}");
    }

    let namespaces: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "team"}, "status": {"phase": "Terminating"},
    }))
    .unwrap();
    let created = namespaces.create(&pp, &ns).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));

    // Server-side apply creates the same way.
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}},
    });
    let created = services
        .patch("lb", &PatchParams::apply("test"), &Patch::Apply(&svc))
        .await
        .unwrap();
    let lb = created.status.unwrap().load_balancer.unwrap();
    assert_eq!(lb.ingress, None, "{lb:?}");

    let nodes: Api<Node> = Api::all(c.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1"}, "status": {"capacity": {"pods": "110"}},
    }))
    .unwrap();
    let created = nodes.create(&pp, &node).await.unwrap();
    assert_eq!(created.status.unwrap().capacity.unwrap()["pods"].0, "110");
    server.shutdown().await;
}
