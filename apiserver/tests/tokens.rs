//! ServiceAccount tokens through kube-rs: issued by the TokenRequest subresource, answered 401
//! when they do not verify, judged by their account's RBAC (and, impersonating, as the
//! impersonator), and named in the audit log.

use std::io::Write;
use std::sync::Arc;

use apiserver::{ApiServer, AuditSink, Authorization, Config};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

fn config(server: &ApiServer) -> kube::Config {
    kube::Config::new(server.url().parse().unwrap())
}

fn admin(server: &ApiServer) -> Client {
    Client::try_from(config(server)).unwrap()
}

fn with_token(server: &ApiServer, token: &str, impersonate: Option<&str>) -> Client {
    let mut c = config(server);
    c.auth_info.token = Some(token.to_string().into());
    c.auth_info.impersonate = impersonate.map(str::to_string);
    Client::try_from(c).unwrap()
}

fn obj<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The audit lines written so far.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn events(&self) -> Vec<Value> {
        String::from_utf8(self.0.lock().clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }
}

async fn start(authorization: bool, audit: Option<Lines>) -> ApiServer {
    ApiServer::start(Config {
        authorization: authorization.then(Authorization::default),
        audit: audit.map(AuditSink::writer),
        ..Config::default()
    })
    .await
    .unwrap()
}

async fn token_for(client: &Client, ns: &str, name: &str, seconds: i64) -> (String, String) {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let _ = sas
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": name}})),
        )
        .await;
    let req: TokenRequest = obj(json!({"spec": {"audiences": [], "expirationSeconds": seconds}}));
    let answer = sas
        .create_token_request(name, &PostParams::default(), &req)
        .await
        .unwrap();
    let answer = serde_json::to_value(&answer).unwrap();
    assert_eq!(answer["spec"]["expirationSeconds"], seconds, "{answer}");
    let status = &answer["status"];
    (
        status["token"].as_str().expect("a token").to_string(),
        status["expirationTimestamp"]
            .as_str()
            .expect("an expiry")
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_request_issues_a_token_the_server_authenticates() {
    let server = start(false, None).await;
    let admin = admin(&server);
    let before = chrono::Utc::now();
    let (token, expires) = token_for(&admin, "default", "robot", 1200).await;
    let expires = chrono::DateTime::parse_from_rfc3339(&expires).unwrap();
    let lifetime = (expires.with_timezone(&chrono::Utc) - before).num_seconds();
    assert!((1199..=1201).contains(&lifetime), "{lifetime}");
    // Without authorization the account may do anything, as every client may.
    let cms: Api<ConfigMap> = Api::namespaced(with_token(&server, &token, None), "default");
    cms.list(&ListParams::default()).await.unwrap();

    // A token no server issued, or one of this server's with its signature changed.
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    for bad in ["garbage", forged.as_str()] {
        let cms: Api<ConfigMap> = Api::namespaced(with_token(&server, bad, None), "default");
        let s = status(cms.list(&ListParams::default()).await.unwrap_err());
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str(), s.status),
            (
                401,
                "Unauthorized",
                "Unauthorized",
                Some(kube::core::response::StatusSummary::Failure)
            )
        );
    }
    // The account's deletion revokes its tokens.
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    sas.delete("robot", &Default::default()).await.unwrap();
    let s = status(cms.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(s.code, 401);
    // No account, no token; too short a lifetime is refused as kube-apiserver refuses it.
    let req: TokenRequest = obj(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}));
    let s = status(
        sas.create_token_request("robot", &PostParams::default(), &req)
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 404, "{s:?}");
    sas.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "robot"}})),
    )
    .await
    .unwrap();
    let req: TokenRequest = obj(json!({"spec": {"audiences": [], "expirationSeconds": 60}}));
    let s = status(
        sas.create_token_request("robot", &PostParams::default(), &req)
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422, "{s:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_authorization_a_token_is_judged_by_its_accounts_rbac_and_as_the_impersonator() {
    let server = start(true, None).await;
    let admin = admin(&server);
    let (token, _) = token_for(&admin, "default", "host", 3600).await;
    let as_host = with_token(&server, &token, None);
    let cms: Api<ConfigMap> = Api::namespaced(as_host.clone(), "default");
    let s = status(cms.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        s.message,
        "configmaps is forbidden: User \"system:serviceaccount:default:host\" cannot list \
         resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    let apply = |yaml: Value| {
        let admin = admin.clone();
        async move {
            let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "rbac.authorization.k8s.io",
                "v1",
                yaml["kind"].as_str().unwrap(),
            ));
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(admin, "default", &ar);
            api.create(&PostParams::default(), &obj(yaml))
                .await
                .unwrap();
        }
    };
    let rbac = "rbac.authorization.k8s.io/v1";
    apply(
        json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "read"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await;
    apply(
        json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "host-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read"},
        "subjects": [{"kind": "ServiceAccount", "name": "host", "namespace": "default"}]}),
    )
    .await;
    cms.list(&ListParams::default()).await.unwrap();
    // The account's RBAC allows list, nothing else.
    let s = status(
        cms.create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "x"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(s.code, 403, "{s:?}");

    // Impersonating with a token: the token's account is the impersonator, not
    // `Authorization::impersonator`.
    let plugin = "system:serviceaccount:default:plugin";
    let cms_as_plugin: Api<ConfigMap> =
        Api::namespaced(with_token(&server, &token, Some(plugin)), "default");
    let s = status(
        cms_as_plugin
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        "serviceaccounts \"plugin\" is forbidden: User \"system:serviceaccount:default:host\" \
         cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \
         \"default\""
    );
    apply(
        json!({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "impersonate"},
        "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"],
            "resourceNames": ["plugin"]}]}),
    )
    .await;
    apply(
        json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "host-impersonates"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "impersonate"},
        "subjects": [{"kind": "ServiceAccount", "name": "host", "namespace": "default"}]}),
    )
    .await;
    // Now the impersonated account's own RBAC decides: it has none.
    let s = status(
        cms_as_plugin
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        "configmaps is forbidden: User \"system:serviceaccount:default:plugin\" cannot list \
         resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    // A client without a token is still the superuser.
    Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(server.stats().forbidden, 4);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_names_the_user_and_the_impersonated_user_of_every_request() {
    let lines = Lines::default();
    let server = start(true, Some(lines.clone())).await;
    let admin = admin(&server);
    let (token, _) = token_for(&admin, "default", "host", 3600).await;
    let plugin = "system:serviceaccount:default:plugin";
    let cms: Api<ConfigMap> = Api::namespaced(with_token(&server, &token, Some(plugin)), "default");
    let _ = cms.get("settings").await.unwrap_err();
    let events = lines.events();
    let sa_created = events
        .iter()
        .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "serviceaccounts")
        .expect("the ServiceAccount's creation");
    assert_eq!(sa_created["user"]["username"], "system:admin");
    assert_eq!(sa_created["responseStatus"]["code"], 201);
    let token_req = events
        .iter()
        .find(|e| e["objectRef"]["subresource"] == "token")
        .expect("the TokenRequest");
    assert_eq!(
        token_req["requestURI"],
        "/api/v1/namespaces/default/serviceaccounts/host/token"
    );
    let last = events.last().unwrap();
    let id = last["auditID"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    assert_eq!(
        (
            last["kind"].as_str(),
            last["apiVersion"].as_str(),
            last["level"].as_str(),
            last["stage"].as_str(),
            last["verb"].as_str(),
        ),
        (
            Some("Event"),
            Some("audit.k8s.io/v1"),
            Some("Metadata"),
            Some("ResponseComplete"),
            Some("get")
        )
    );
    assert_eq!(
        last["user"],
        json!({"username": "system:serviceaccount:default:host", "groups":
            ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]})
    );
    assert_eq!(last["impersonatedUser"]["username"], plugin);
    assert_eq!(
        last["objectRef"],
        json!({"resource": "configmaps", "namespace": "default", "name": "settings",
            "apiVersion": "v1"})
    );
    assert_eq!(last["responseStatus"]["code"], 403);
    assert_eq!(
        last["requestURI"],
        "/api/v1/namespaces/default/configmaps/settings"
    );
    for t in ["requestReceivedTimestamp", "stageTimestamp"] {
        let t = last[t].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(t).is_ok(), "{t}");
    }
    // No object content, ever: the ServiceAccount's token is in no line.
    let raw = String::from_utf8(lines.0.lock().clone()).unwrap();
    assert!(!raw.contains(&token));
    server.shutdown().await;
}
