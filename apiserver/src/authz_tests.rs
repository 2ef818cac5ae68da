//! The RBAC evaluator against policy objects given as JSON, as `kubectl apply` would store them.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderValue, Method};
use serde_json::{Value, json};

use super::*;

/// Policy objects held in memory.
#[derive(Default)]
struct Objects {
    crbs: Vec<ClusterRoleBinding>,
    rbs: BTreeMap<String, Vec<RoleBinding>>,
    crs: BTreeMap<String, ClusterRole>,
    roles: BTreeMap<(String, String), Role>,
}

impl Policy for Objects {
    fn cluster_role_bindings(&self) -> Vec<ClusterRoleBinding> {
        self.crbs.clone()
    }
    fn role_bindings(&self, namespace: &str) -> Vec<RoleBinding> {
        self.rbs.get(namespace).cloned().unwrap_or_default()
    }
    fn cluster_role(&self, name: &str) -> Option<ClusterRole> {
        self.crs.get(name).cloned()
    }
    fn role(&self, namespace: &str, name: &str) -> Option<Role> {
        self.roles
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

impl Objects {
    fn role(mut self, ns: &str, name: &str, rules: Value) -> Objects {
        let r = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": ns}, "rules": rules}),
        );
        self.roles
            .insert((ns.into(), name.into()), r.expect("a Role"));
        self
    }
    fn cluster_role(mut self, name: &str, rules: Value) -> Objects {
        let r = serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}));
        self.crs.insert(name.into(), r.expect("a ClusterRole"));
        self
    }
    fn binding(mut self, ns: Option<&str>, kind: &str, role: &str, subjects: Value) -> Objects {
        let b = json!({
            "metadata": {"name": role, "namespace": ns},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": role},
            "subjects": subjects,
        });
        match ns {
            None => self
                .crbs
                .push(serde_json::from_value(b).expect("a ClusterRoleBinding")),
            Some(ns) => self
                .rbs
                .entry(ns.into())
                .or_default()
                .push(serde_json::from_value(b).expect("a RoleBinding")),
        }
        self
    }
}

const HOST: &str = "system:serviceaccount:kubewasm:kubewasm";
const PLUGIN: &str = "system:serviceaccount:kubewasm:kubewasm-plugin-repl";

fn sa(name: &str) -> Value {
    json!([{"kind": "ServiceAccount", "name": name, "namespace": "kubewasm"}])
}

/// The host may impersonate the plugin's account; the plugin may read and apply ConfigMaps
/// in `team`, patch Deployments' `scale` cluster-wide, and get one Secret.
fn policy() -> Objects {
    Objects::default()
        .role(
            "kubewasm",
            "impersonate",
            json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"],
                "resourceNames": ["kubewasm-plugin-repl"]}]),
        )
        .binding(Some("kubewasm"), "Role", "impersonate", sa("kubewasm"))
        .role(
            "team",
            "repl",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
                   {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"],
                    "resourceNames": ["token"]}]),
        )
        .binding(Some("team"), "Role", "repl", sa("kubewasm-plugin-repl"))
        .cluster_role(
            "scaler",
            json!([{"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]}]),
        )
        .binding(None, "ClusterRole", "scaler", sa("kubewasm-plugin-repl"))
}

/// `o` where the host may impersonate every ServiceAccount and user.
fn may_impersonate(o: Objects) -> Objects {
    o.cluster_role(
        "imp",
        json!([{"apiGroups": [""], "resources": ["serviceaccounts", "users"], "verbs": ["impersonate"]}]),
    )
    .binding(None, "ClusterRole", "imp", json!([{"kind": "User", "name": HOST}]))
}

fn headers(user: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("impersonate-user", HeaderValue::from_str(user).unwrap());
    h
}

fn ask(p: &Objects, user: &str, method: Method, path: &str) -> Result<(), ApiError> {
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    judge(p, HOST, &method, path, query, &headers(user))
}

fn refused(r: Result<(), ApiError>) -> String {
    let e = r.expect_err("refused");
    assert_eq!((e.code, e.reason), (403, "Forbidden"), "{}", e.message);
    e.message
}

#[test]
fn request_info_derives_verbs_resources_and_names_as_kubernetes_does() {
    let info = |m: Method, p: &str| {
        let (p, q) = p.split_once('?').map_or((p, None), |(p, q)| (p, Some(q)));
        let a = request_info(&m, p, q);
        (
            a.verb,
            a.api_group,
            a.namespace,
            a.resource,
            a.subresource,
            a.name,
        )
    };
    let t = |v: &str, g: &str, ns: &str, r: &str, s: &str, n: &str| {
        (
            v.to_string(),
            g.to_string(),
            ns.to_string(),
            r.to_string(),
            s.to_string(),
            n.to_string(),
        )
    };
    assert_eq!(
        info(Method::GET, "/api/v1/namespaces/a/configmaps"),
        t("list", "", "a", "configmaps", "", "")
    );
    assert_eq!(
        info(Method::GET, "/api/v1/configmaps?watch=1&resourceVersion=3"),
        t("watch", "", "", "configmaps", "", "")
    );
    assert_eq!(
        info(
            Method::GET,
            "/api/v1/namespaces/a/configmaps?fieldSelector=metadata.name%3Dx&watch=true"
        ),
        t("watch", "", "a", "configmaps", "", "x")
    );
    assert_eq!(
        info(Method::GET, "/api/v1/watch/namespaces/a/pods/p"),
        t("watch", "", "a", "pods", "", "p")
    );
    assert_eq!(
        info(
            Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/d/scale"
        ),
        t("patch", "apps", "a", "deployments", "scale", "d")
    );
    assert_eq!(
        info(Method::DELETE, "/api/v1/namespaces/a/pods"),
        t("deletecollection", "", "a", "pods", "", "")
    );
    assert_eq!(
        info(Method::POST, "/apis/events.k8s.io/v1/namespaces/a/events"),
        t("create", "events.k8s.io", "a", "events", "", "")
    );
    // A Namespace is its own namespace; its `status` and `finalize` are its subresources.
    assert_eq!(
        info(Method::PUT, "/api/v1/namespaces/a/finalize"),
        t("update", "", "a", "namespaces", "finalize", "a")
    );
    assert_eq!(
        info(Method::GET, "/api/v1/namespaces/a"),
        t("get", "", "a", "namespaces", "", "a")
    );
    assert!(!request_info(&Method::GET, "/apis/apps/v1", None).resource_request);
    assert!(!request_info(&Method::GET, "/version", None).resource_request);
}

#[test]
fn bound_rules_allow_exactly_their_verbs_resources_and_namespaces() {
    let p = policy();
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::GET,
            "/api/v1/namespaces/team/configmaps/x"
        )
        .is_ok()
    );
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::POST,
            "/api/v1/namespaces/team/configmaps"
        )
        .is_ok()
    );
    // Another verb, namespace or group is refused, as kube-apiserver words it.
    assert_eq!(
        refused(ask(
            &p,
            PLUGIN,
            Method::DELETE,
            "/api/v1/namespaces/team/configmaps/x"
        )),
        format!(
            "configmaps \"x\" is forbidden: User \"{PLUGIN}\" cannot delete resource \
             \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    refused(ask(
        &p,
        PLUGIN,
        Method::GET,
        "/api/v1/namespaces/other/configmaps/x",
    ));
    assert_eq!(
        refused(ask(&p, PLUGIN, Method::GET, "/api/v1/configmaps")),
        format!(
            "configmaps is forbidden: User \"{PLUGIN}\" cannot list resource \"configmaps\" \
             in API group \"\" at the cluster scope"
        )
    );
    // A Role's rules apply in its namespace only; a ClusterRoleBinding's everywhere.
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::PATCH,
            "/apis/apps/v1/namespaces/any/deployments/d/scale"
        )
        .is_ok()
    );
    // Non-resource paths are always allowed.
    assert!(ask(&p, PLUGIN, Method::GET, "/apis").is_ok());
    assert!(ask(&p, PLUGIN, Method::GET, "/version").is_ok());
}

#[test]
fn subresources_are_granted_by_name_or_by_star_slash() {
    let p = policy();
    // `deployments/scale` grants neither the Deployment nor its status.
    assert_eq!(
        refused(ask(
            &p,
            PLUGIN,
            Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/d"
        )),
        format!(
            "deployments.apps \"d\" is forbidden: User \"{PLUGIN}\" cannot patch resource \
             \"deployments\" in API group \"apps\" in the namespace \"a\""
        )
    );
    assert_eq!(
        refused(ask(
            &p,
            PLUGIN,
            Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/d/status"
        )),
        format!(
            "deployments.apps \"d\" is forbidden: User \"{PLUGIN}\" cannot patch resource \
             \"deployments/status\" in API group \"apps\" in the namespace \"a\""
        )
    );
    // `configmaps` does not grant a subresource of it; `*/status` grants every status.
    refused(ask(
        &p,
        PLUGIN,
        Method::PATCH,
        "/api/v1/namespaces/team/configmaps/x/status",
    ));
    let p = p
        .cluster_role(
            "status",
            json!([{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}]),
        )
        .binding(None, "ClusterRole", "status", sa("kubewasm-plugin-repl"));
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/d/status"
        )
        .is_ok()
    );
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::PUT,
            "/api/v1/namespaces/a/pods/p/status"
        )
        .is_ok()
    );
    refused(ask(
        &p,
        PLUGIN,
        Method::GET,
        "/api/v1/namespaces/a/pods/p/log",
    ));
    refused(ask(
        &p,
        PLUGIN,
        Method::PATCH,
        "/api/v1/namespaces/a/pods/p",
    ));
}

#[test]
fn wildcards_cover_every_verb_group_and_resource_with_subresources() {
    let p = may_impersonate(Objects::default())
        .cluster_role(
            "all",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        )
        .binding(None, "ClusterRole", "all", sa("kubewasm-plugin-repl"));
    for (m, path) in [
        (Method::DELETE, "/api/v1/namespaces/a/secrets"),
        (Method::GET, "/api/v1/nodes/n/proxy"),
        (Method::POST, "/apis/example.com/v1/widgets"),
    ] {
        assert!(ask(&p, PLUGIN, m, path).is_ok(), "{path}");
    }
    // `*` in one field only widens that field.
    let p = may_impersonate(Objects::default())
        .cluster_role(
            "reads",
            json!([{"apiGroups": [""], "resources": ["*"], "verbs": ["get", "list"]}]),
        )
        .binding(None, "ClusterRole", "reads", sa("kubewasm-plugin-repl"));
    assert!(ask(&p, PLUGIN, Method::GET, "/api/v1/namespaces/a/pods/p/log").is_ok());
    refused(ask(&p, PLUGIN, Method::GET, "/apis/apps/v1/deployments"));
    refused(ask(&p, PLUGIN, Method::GET, "/api/v1/pods?watch=true"));
}

#[test]
fn resource_names_match_named_requests_only() {
    let p = policy();
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::GET,
            "/api/v1/namespaces/team/secrets/token"
        )
        .is_ok()
    );
    refused(ask(
        &p,
        PLUGIN,
        Method::GET,
        "/api/v1/namespaces/team/secrets/other",
    ));
    // A list or watch names nothing, unless a field selector requires the name.
    refused(ask(
        &p,
        PLUGIN,
        Method::GET,
        "/api/v1/namespaces/team/secrets",
    ));
    refused(ask(
        &p,
        PLUGIN,
        Method::GET,
        "/api/v1/namespaces/team/secrets?watch=1",
    ));
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::GET,
            "/api/v1/namespaces/team/secrets?fieldSelector=metadata.name%3Dtoken&watch=1"
        )
        .is_ok()
    );
    refused(ask(
        &p,
        PLUGIN,
        Method::GET,
        "/api/v1/namespaces/team/secrets?fieldSelector=metadata.name%3Dother",
    ));
    // Nor do create and deletecollection, whose requests carry no name.
    let p = p
        .role(
            "team",
            "named-writes",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete", "deletecollection"],
                "resourceNames": ["token"]}]),
        )
        .binding(Some("team"), "Role", "named-writes", sa("kubewasm-plugin-repl"));
    refused(ask(
        &p,
        PLUGIN,
        Method::POST,
        "/api/v1/namespaces/team/secrets",
    ));
    refused(ask(
        &p,
        PLUGIN,
        Method::DELETE,
        "/api/v1/namespaces/team/secrets",
    ));
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::DELETE,
            "/api/v1/namespaces/team/secrets/token"
        )
        .is_ok()
    );
}

#[test]
fn subjects_match_by_user_group_and_service_account_namespace() {
    let read = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
    let get = |p: &Objects, user: &str| ask(p, user, Method::GET, "/api/v1/namespaces/team/pods/p");
    let other = "system:serviceaccount:elsewhere:kubewasm-plugin-repl";
    let may = may_impersonate;
    // A RoleBinding's ServiceAccount subject without a namespace is of the binding's.
    let p = may(Objects::default().role("team", "r", read.clone()).binding(
        Some("team"),
        "Role",
        "r",
        json!([{"kind": "ServiceAccount", "name": "kubewasm-plugin-repl"}]),
    ));
    assert!(get(&p, "system:serviceaccount:team:kubewasm-plugin-repl").is_ok());
    refused(get(&p, PLUGIN));
    // Groups every ServiceAccount has, per namespace and in all.
    for (group, ok) in [
        ("system:serviceaccounts:kubewasm", true),
        ("system:serviceaccounts", true),
        ("system:authenticated", true),
        ("system:serviceaccounts:team", false),
    ] {
        let p = may(Objects::default().cluster_role("r", read.clone()).binding(
            None,
            "ClusterRole",
            "r",
            json!([{"kind": "Group", "name": group}]),
        ));
        assert_eq!(get(&p, PLUGIN).is_ok(), ok, "{group}");
        assert_eq!(
            get(&p, other).is_ok(),
            ok && group != "system:serviceaccounts:kubewasm",
            "{group}"
        );
    }
    // A User subject names one user; a RoleBinding may bind a ClusterRole in its namespace.
    let p = may(Objects::default().cluster_role("r", read.clone()).binding(
        Some("team"),
        "ClusterRole",
        "r",
        json!([{"kind": "User", "name": "alice"}]),
    ));
    assert!(get(&p, "alice").is_ok());
    refused(get(&p, "bob"));
    refused(ask(
        &p,
        "alice",
        Method::GET,
        "/api/v1/namespaces/other/pods/p",
    ));
}

#[test]
fn a_binding_to_a_missing_role_is_reported_as_rbac_does() {
    let p = policy()
        .binding(Some("team"), "Role", "gone", sa("kubewasm-plugin-repl"))
        .binding(None, "ClusterRole", "gone-too", sa("kubewasm-plugin-repl"));
    assert_eq!(
        refused(ask(
            &p,
            PLUGIN,
            Method::DELETE,
            "/api/v1/namespaces/team/pods/p"
        )),
        format!(
            "pods \"p\" is forbidden: User \"{PLUGIN}\" cannot delete resource \"pods\" in API \
             group \"\" in the namespace \"team\": RBAC: [clusterrole.rbac.authorization.k8s.io \
             \"gone-too\" not found, role.rbac.authorization.k8s.io \"gone\" not found]"
        )
    );
    // What the remaining bindings grant still holds.
    assert!(
        ask(
            &p,
            PLUGIN,
            Method::GET,
            "/api/v1/namespaces/team/configmaps/x"
        )
        .is_ok()
    );
}

#[test]
fn impersonation_needs_the_callers_impersonate_right_on_that_account() {
    let p = policy();
    // A plugin account the impersonate Role does not name: refused before its own RBAC.
    let stranger = "system:serviceaccount:kubewasm:kubewasm-plugin-other";
    assert_eq!(
        refused(ask(
            &p,
            stranger,
            Method::GET,
            "/api/v1/namespaces/team/configmaps/x"
        )),
        format!(
            "serviceaccounts \"kubewasm-plugin-other\" is forbidden: User \"{HOST}\" cannot \
             impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"kubewasm\""
        )
    );
    // A ServiceAccount's username is checked as the ServiceAccount only, as kube-apiserver
    // does: `users` impersonate rights do not cover it.
    let p = Objects::default()
        .cluster_role(
            "users",
            json!([{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}]),
        )
        .binding(None, "ClusterRole", "users", sa("kubewasm"))
        .cluster_role(
            "reads",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
        )
        .binding(None, "ClusterRole", "reads", sa("kubewasm-plugin-repl"))
        .binding(
            None,
            "ClusterRole",
            "reads",
            json!([{"kind": "User", "name": "alice"}]),
        );
    refused(ask(
        &p,
        PLUGIN,
        Method::GET,
        "/api/v1/namespaces/a/configmaps/x",
    ));
    assert!(
        ask(
            &p,
            "alice",
            Method::GET,
            "/api/v1/namespaces/a/configmaps/x"
        )
        .is_ok()
    );
    assert_eq!(
        refused(ask(
            &p,
            "bob",
            Method::GET,
            "/api/v1/namespaces/a/configmaps/x"
        )),
        "configmaps \"x\" is forbidden: User \"bob\" cannot get resource \"configmaps\" in API \
         group \"\" in the namespace \"a\""
    );
    // A named group needs `groups` impersonate as well.
    let mut h = headers("alice");
    h.insert("impersonate-group", HeaderValue::from_static("admins"));
    let e = judge(
        &p,
        HOST,
        &Method::GET,
        "/api/v1/namespaces/a/configmaps/x",
        None,
        &h,
    )
    .expect_err("refused");
    assert_eq!(
        e.message,
        format!(
            "groups \"admins\" is forbidden: User \"{HOST}\" cannot impersonate resource \
             \"groups\" in API group \"\" at the cluster scope"
        )
    );
    // No impersonation: nothing is judged (the server has no authentication).
    let p = Objects::default();
    assert!(
        judge(
            &p,
            HOST,
            &Method::DELETE,
            "/api/v1/namespaces/a/pods",
            None,
            &HeaderMap::new()
        )
        .is_ok()
    );
}
