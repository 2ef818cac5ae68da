//! What deploying kubewasm and electing its leader need from the server, through kube-rs:
//! Leases with optimistic concurrency, ServiceAccounts, RBAC, Deployments, PodDisruptionBudgets,
//! ConfigMaps with `binaryData`, Namespaces, their validation, and `dryRun=All` on every write.

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver::{ApiServer, Config};
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{
    Api, DeleteParams, GroupVersionKind, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::discovery::{Discovery, Scope};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const GUARD: Duration = Duration::from_secs(20);

fn client(server: &ApiServer) -> Client {
    Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

fn obj<K: DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

fn code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_kinds_are_discovered_with_their_scope() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server);
    let d = Discovery::new(c).run_aggregated().await.unwrap();
    for (g, k, scope) in [
        ("", "ServiceAccount", Scope::Namespaced),
        ("", "Namespace", Scope::Cluster),
        ("coordination.k8s.io", "Lease", Scope::Namespaced),
        ("apps", "Deployment", Scope::Namespaced),
        ("policy", "PodDisruptionBudget", Scope::Namespaced),
        ("rbac.authorization.k8s.io", "Role", Scope::Namespaced),
        (
            "rbac.authorization.k8s.io",
            "RoleBinding",
            Scope::Namespaced,
        ),
        ("rbac.authorization.k8s.io", "ClusterRole", Scope::Cluster),
        (
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            Scope::Cluster,
        ),
    ] {
        let (_, caps) = d
            .resolve_gvk(&GroupVersionKind::gvk(g, "v1", k))
            .unwrap_or_else(|| panic!("{k} not discovered"));
        assert_eq!(caps.scope, scope, "{k}");
        assert!(caps.supports_operation("watch"), "{k}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_updates_are_optimistic_and_validated() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client(&server), "default");
    let created = leases
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "kubewasm"},
                "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})),
        )
        .await
        .unwrap();
    // Two replicas read the same version; the first write wins, the second is 409 Conflict.
    let mut by_a = created.clone();
    by_a.spec.as_mut().unwrap().renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    let mut by_b = created.clone();
    by_b.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let a = leases
        .replace("kubewasm", &PostParams::default(), &by_a)
        .await
        .unwrap();
    assert_ne!(a.resource_version(), created.resource_version());
    let (status, msg) = code(
        leases
            .replace("kubewasm", &PostParams::default(), &by_b)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409, "{msg}");
    let stored = leases.get("kubewasm").await.unwrap();
    assert_eq!(stored.spec.unwrap().holder_identity.as_deref(), Some("a"));
    // A second create of the same name is 409 AlreadyExists.
    let (status, _) = code(
        leases
            .create(&PostParams::default(), &created)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    let (status, msg) = code(
        leases
            .create(
                &PostParams::default(),
                &obj(json!({"metadata": {"name": "bad"}, "spec": {"leaseDurationSeconds": 0}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 422);
    assert!(msg.contains("spec.leaseDurationSeconds"), "{msg}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_service_accounts_budgets_and_namespaces_round_trip_and_validate() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server);
    let pp = PostParams::default();
    Api::<Namespace>::all(c.clone())
        .create(&pp, &obj(json!({"metadata": {"name": "kubewasm"}})))
        .await
        .unwrap();
    let sa = Api::<ServiceAccount>::namespaced(c.clone(), "kubewasm")
        .create(&pp, &obj(json!({"metadata": {"name": "kubewasm"}})))
        .await
        .unwrap();
    assert_eq!(sa.namespace().as_deref(), Some("kubewasm"));

    let rule = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]);
    Api::<ClusterRole>::all(c.clone())
        .create(
            &pp,
            &obj(json!({"metadata": {"name": "read"}, "rules": rule})),
        )
        .await
        .unwrap();
    let roles: Api<Role> = Api::namespaced(c.clone(), "kubewasm");
    roles
        .create(
            &pp,
            &obj(json!({"metadata": {"name": "lease"}, "rules": rule})),
        )
        .await
        .unwrap();
    let (status, msg) = code(
        roles
            .create(
                &pp,
                &obj(json!({"metadata": {"name": "empty"},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": []}]})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 422);
    assert!(msg.contains("rules[0].verbs"), "{msg}");

    let subject = json!([{"kind": "ServiceAccount", "name": "kubewasm", "namespace": "kubewasm"}]);
    let crbs: Api<ClusterRoleBinding> = Api::all(c.clone());
    let crb = crbs
        .create(
            &pp,
            &obj(json!({"metadata": {"name": "read"}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "read"}})),
        )
        .await
        .unwrap();
    assert_eq!(crb.namespace(), None, "cluster-scoped");
    let (status, msg) = code(
        crbs.patch(
            "read",
            &PatchParams::default(),
            &Patch::Merge(json!({"roleRef": {"name": "other"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(status, 422);
    assert!(msg.contains("cannot change roleRef"), "{msg}");
    Api::<RoleBinding>::namespaced(c.clone(), "kubewasm")
        .create(
            &pp,
            &obj(json!({"metadata": {"name": "lease"}, "subjects": [{"kind": "ServiceAccount", "name": "kubewasm"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"}})),
        )
        .await
        .unwrap();

    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "kubewasm");
    let pdb = pdbs
        .create(
            &pp,
            &obj(
                json!({"metadata": {"name": "kubewasm"}, "spec": {"maxUnavailable": 1,
                "selector": {"matchLabels": {"app": "kubewasm"}}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(pdb.metadata.generation, Some(1));
    let (status, _) = code(
        pdbs.create(
            &pp,
            &obj(json!({"metadata": {"name": "both"}, "spec": {"maxUnavailable": 1, "minAvailable": 1}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(status, 422);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_maps_carry_binary_data_within_the_size_limit() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let wasm: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("plugins".into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "handler.wasm".to_string(),
            ByteString(wasm.clone()),
        )])),
        data: Some(BTreeMap::from([(
            "handler.toml".to_string(),
            "deadline-ms = 250".to_string(),
        )])),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let back = cms.get("plugins").await.unwrap();
    assert_eq!(back.binary_data.unwrap()["handler.wasm"].0, wasm);
    // Over 1 MiB in total is refused, as etcd-backed servers do.
    let mut big = cm.clone();
    big.metadata.name = Some("big".into());
    big.binary_data = Some(BTreeMap::from([(
        "handler.wasm".to_string(),
        ByteString(vec![0; 1024 * 1024]),
    )]));
    let (status, msg) = code(cms.create(&PostParams::default(), &big).await.unwrap_err());
    assert_eq!(status, 422);
    assert!(msg.contains("Too long"), "{msg}");
    // The same key in data and binaryData is refused.
    let (status, msg) = code(
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "dup"}, "data": {"k": "v"}, "binaryData": {"k": "AA=="}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((status, msg.contains("duplicate")), (422, true), "{msg}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_answers_as_if_written_and_changes_nothing() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let c = client(&server);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let existing = cms
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "real"}, "data": {"a": "1"}})),
        )
        .await
        .unwrap();
    let rv = existing.resource_version().unwrap();
    let writes = server.stats().writes;
    let mut events = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    // create: a full answer (uid, timestamp), no resourceVersion used, nothing stored
    let created = cms
        .create(
            &dry(),
            &obj(json!({"metadata": {"name": "ghost"}, "data": {"a": "1"}})),
        )
        .await
        .unwrap();
    assert!(created.uid().is_some() && created.creation_timestamp().is_some());
    assert_eq!(created.resource_version(), None);
    assert!(cms.get_opt("ghost").await.unwrap().is_none());
    // validation still runs
    let (status, _) = code(
        cms.create(&dry(), &obj(json!({"metadata": {"name": "Bad_Name"}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 422);

    // update and patch: the new content at the current version; the stored object unchanged
    let mut changed = existing.clone();
    changed.data = Some(BTreeMap::from([("a".into(), "2".into())]));
    let updated = cms.replace("real", &dry(), &changed).await.unwrap();
    assert_eq!(updated.data.as_ref().unwrap()["a"], "2");
    assert_eq!(updated.resource_version().as_deref(), Some(rv.as_str()));
    let patched = cms
        .patch(
            "real",
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"b": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.as_ref().unwrap()["b"], "3");
    let applied = cms
        .patch(
            "applied-ghost",
            &PatchParams::apply("test").dry_run(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied-ghost"}, "data": {"x": "y"}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.name_any(), "applied-ghost");
    assert!(cms.get_opt("applied-ghost").await.unwrap().is_none());

    // delete: answered, still there
    cms.delete(
        "real",
        &DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    let stored = cms.get("real").await.unwrap();
    assert_eq!(stored.data.unwrap()["a"], "1");
    assert_eq!(
        stored.metadata.resource_version,
        existing.metadata.resource_version
    );
    assert_eq!(server.stats().writes, writes, "no write reached the store");

    // Unknown dryRun values are refused rather than treated as real writes.
    let req = http::Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces/default/configmaps?dryRun=Yes")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"metadata": {"name": "typo"}})).unwrap())
        .unwrap();
    let (status, msg) = code(c.request::<Value>(req).await.unwrap_err());
    assert_eq!(status, 422);
    assert!(msg.contains("dryRun"), "{msg}");
    assert!(cms.get_opt("typo").await.unwrap().is_none());
    let req = http::Request::builder()
        .method("DELETE")
        .uri("/api/v1/namespaces/default/configmaps/real")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"kind": "DeleteOptions", "dryRun": ["Al"]})).unwrap())
        .unwrap();
    let (status, _) = code(c.request::<Value>(req).await.unwrap_err());
    assert_eq!(status, 422);
    assert!(cms.get_opt("real").await.unwrap().is_some());

    // No watch event came from any of it: the first one is the next real write.
    cms.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "after"}})),
    )
    .await
    .unwrap();
    let first = tokio::time::timeout(GUARD, events.next())
        .await
        .expect("an event")
        .expect("stream open")
        .unwrap();
    match first {
        WatchEvent::Added(cm) => assert_eq!(cm.name_any(), "after"),
        other => panic!("expected ADDED after, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_names_are_dns_subdomains() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    for name in ["a.b", "a-1.example.com", "0"] {
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": name}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{name:?}: {e}"));
    }
    // An empty part between dots is refused as by a real server, not only a bad first or
    // last character.
    for name in ["a..b", ".a", "a.", "a.-b", "A", "a_b"] {
        let (status, message) = code(
            cms.create(
                &PostParams::default(),
                &obj(json!({"metadata": {"name": name}})),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(status, 422, "{name:?}");
        assert!(
            message.contains(&format!(
                "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must"
            )),
            "{name:?}: {message}"
        );
    }
    server.shutdown().await;
}
