//! Opt-in RBAC authorization, judged as kube-apiserver judges requests.
//!
//! A request carrying a ServiceAccount token (`authn.rs`) is that account's; one without is the
//! server's superuser, as it always was. With [`Authorization`] on, a token's request is judged
//! by its account's RBAC, and a request that impersonates is judged twice, in kube-apiserver's
//! order: first whether the caller (the token's account, else [`Authorization::impersonator`],
//! whom the server takes an unauthenticated impersonating client for) may `impersonate` the
//! named ServiceAccount (resource `serviceaccounts` of the account's namespace), user, groups,
//! extras or uid; then whether the impersonated user may make the request (`RequestInfo`
//! derived from method, path and query the way `k8s.io/apiserver`'s `RequestInfoFactory` does),
//! by the Roles, ClusterRoles and bindings in the server's own store. Refusals are the 403
//! `Status` a real server writes, message included, so clients and tests see what a cluster
//! would say.
//!
//! Not modelled: aggregated ClusterRoles (`aggregationRule`; only a ClusterRole's own `rules`
//! count), the bootstrap roles a cluster ships (none exist unless created, so an impersonated
//! user can do nothing it is not bound to), and `nonResourceURLs` rules: discovery, `/version`,
//! `/healthz` and `/openapi` are always allowed, as the bootstrap `system:discovery` role allows
//! them to everyone on a cluster.

use http::{HeaderMap, Method};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde::de::DeserializeOwned;

use crate::App;
use crate::status::ApiError;
use crate::store::Store;

/// The name kube-apiserver gives a ServiceAccount's user: `system:serviceaccount:NS:NAME`.
const SA_PREFIX: &str = "system:serviceaccount:";
/// Group of every authenticated user.
const AUTHENTICATED: &str = "system:authenticated";
/// Group of every ServiceAccount (and, with `:NS`, of those of one namespace).
const SA_GROUP: &str = "system:serviceaccounts";
/// The RBAC API group, where the policy objects are stored.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// How the server authorizes impersonated requests ([`crate::Config::authorization`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// Who a request that impersonates is taken to come from: its `impersonate` rights are
    /// checked. The default is the host's ServiceAccount as `deploy/` names it, which is what
    /// `kubewasm rbac` binds the `impersonate` Role to.
    pub impersonator: String,
}

impl Default for Authorization {
    fn default() -> Authorization {
        Authorization {
            impersonator: format!("{SA_PREFIX}kubewasm:kubewasm"),
        }
    }
}

/// A user as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserInfo {
    pub(crate) name: String,
    pub(crate) groups: Vec<String>,
}

impl UserInfo {
    /// A user with the groups kube-apiserver gives it when no groups are named: a
    /// ServiceAccount's two groups, and `system:authenticated` for everyone.
    pub(crate) fn new(name: &str) -> UserInfo {
        let mut groups = Vec::new();
        if let Some((ns, _)) = split_sa(name) {
            groups.push(SA_GROUP.to_string());
            groups.push(format!("{SA_GROUP}:{ns}"));
        }
        groups.push(AUTHENTICATED.to_string());
        UserInfo {
            name: name.to_string(),
            groups,
        }
    }
}

/// `(namespace, name)` of a ServiceAccount's username.
fn split_sa(user: &str) -> Option<(&str, &str)> {
    let (ns, name) = user.strip_prefix(SA_PREFIX)?.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// What a request asks to do (Kubernetes' `authorizer.Attributes`, user aside).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub(crate) verb: String,
    pub(crate) resource_request: bool,
    pub(crate) api_group: String,
    pub(crate) api_version: String,
    pub(crate) namespace: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) name: String,
}

/// The attributes of a request as `RequestInfoFactory::NewRequestInfo` derives them; a path
/// outside `/api` and `/apis/G/V` is a non-resource request.
pub(crate) fn request_info(method: &Method, path: &str, query: Option<&str>) -> Attributes {
    let mut parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut a = Attributes {
        verb: verb.to_string(),
        ..Attributes::default()
    };
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, ..] => ("", *v, 2),
        ["apis", g, v, ..] => (*g, *v, 3),
        _ => return a,
    };
    a.api_group = group.to_string();
    a.api_version = version.to_string();
    parts.drain(..rest);
    if parts.is_empty() || parts[0].is_empty() {
        return a;
    }
    a.resource_request = true;
    // The deprecated `/watch/` prefix.
    if parts[0] == "watch" {
        parts.remove(0);
        a.verb = "watch".into();
        if parts.is_empty() {
            return a;
        }
    }
    if parts[0] == "namespaces" && parts.len() > 1 {
        a.namespace = parts[1].to_string();
        // `namespaces/NS/status` and `namespaces/NS/finalize` are the Namespace's.
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts.drain(..2);
        }
    }
    if parts.len() >= 3 {
        a.subresource = parts[2].to_string();
    }
    if parts.len() >= 2 {
        a.name = parts[1].to_string();
    }
    a.resource = parts[0].to_string();
    if a.name.is_empty() && a.verb == "get" {
        let q = query_pairs(query);
        let watch = q
            .iter()
            .any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
        a.verb = if watch { "watch" } else { "list" }.into();
        if let Some(name) = q
            .iter()
            .filter(|(k, _)| k == "fieldSelector")
            .find_map(|(_, v)| exact_name(v))
        {
            a.name = name;
        }
    }
    if a.name.is_empty() && a.verb == "delete" {
        a.verb = "deletecollection".into();
    }
    a
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The name a field selector requires exactly (`metadata.name=N` or `==`), which list and
/// watch are then judged by, as `resourceNames` rules allow.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let (k, v) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .filter(|(k, _)| !k.ends_with('!'))?;
        (k.trim() == "metadata.name" && !v.is_empty() && !v.contains('/'))
            .then(|| v.trim().to_string())
    })
}

/// Where the policy objects come from: the server's store, or a test's objects.
pub(crate) trait Policy {
    /// Every ClusterRoleBinding.
    fn cluster_role_bindings(&self) -> Vec<ClusterRoleBinding>;
    /// The RoleBindings of `namespace`.
    fn role_bindings(&self, namespace: &str) -> Vec<RoleBinding>;
    /// A ClusterRole.
    fn cluster_role(&self, name: &str) -> Option<ClusterRole>;
    /// A Role of `namespace`.
    fn role(&self, namespace: &str, name: &str) -> Option<Role>;
}

fn parse<T: DeserializeOwned>(v: &serde_json::Value) -> Option<T> {
    // Stored objects passed validation; one that does not parse grants nothing.
    serde_json::from_value(v.clone()).ok()
}

impl Policy for Store {
    fn cluster_role_bindings(&self) -> Vec<ClusterRoleBinding> {
        let (_, items) = self.list(&format!("{RBAC_GROUP}/clusterrolebindings"), None);
        items.iter().filter_map(|o| parse(&o.value)).collect()
    }
    fn role_bindings(&self, namespace: &str) -> Vec<RoleBinding> {
        let (_, items) = self.list(&format!("{RBAC_GROUP}/rolebindings"), Some(namespace));
        items.iter().filter_map(|o| parse(&o.value)).collect()
    }
    fn cluster_role(&self, name: &str) -> Option<ClusterRole> {
        parse(
            &self
                .get(&format!("{RBAC_GROUP}/clusterroles"), "", name)?
                .value,
        )
    }
    fn role(&self, namespace: &str, name: &str) -> Option<Role> {
        parse(
            &self
                .get(&format!("{RBAC_GROUP}/roles"), namespace, name)?
                .value,
        )
    }
}

/// Whether a subject of a binding in `binding_ns` (`""`: a ClusterRoleBinding) names `user`.
fn applies_to(user: &UserInfo, s: &Subject, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => user.name == s.name,
        "Group" => user.groups.contains(&s.name),
        "ServiceAccount" => {
            // A RoleBinding's subject without a namespace means the binding's own.
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            !ns.is_empty() && user.name == format!("{SA_PREFIX}{ns}:{}", s.name)
        }
        _ => false,
    }
}

/// A binding whose `roleRef` leads nowhere, in kube-apiserver's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RoleRefError {
    /// The ClusterRole does not exist.
    #[error("clusterrole.{RBAC_GROUP} {name:?} not found")]
    ClusterRoleNotFound {
        /// Its name.
        name: String,
    },
    /// The Role does not exist in the binding's namespace.
    #[error("role.{RBAC_GROUP} {name:?} not found")]
    RoleNotFound {
        /// Its name.
        name: String,
    },
    /// Neither `ClusterRole` nor (in a RoleBinding) `Role`.
    #[error("unsupported role reference kind: {kind:?}")]
    UnsupportedKind {
        /// The kind named.
        kind: String,
    },
}

/// Why RBAC refused a request: no rule bound to the user allows it. The message is empty
/// unless some binding pointed at a missing role: then `RBAC: <errors>`, as kube-apiserver
/// appends to its 403.
#[derive(Debug, thiserror::Error)]
pub(crate) struct Denied {
    /// The bindings that could not be followed, each once.
    unresolved: Vec<RoleRefError>,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.unresolved.as_slice() {
            [] => Ok(()),
            [one] => write!(f, "RBAC: {one}"),
            many => {
                f.write_str("RBAC: [")?;
                for (i, e) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// The rules a binding's `roleRef` points at, or why there are none.
fn referenced_rules(
    p: &dyn Policy,
    r: &RoleRef,
    binding_ns: &str,
) -> Result<Vec<PolicyRule>, RoleRefError> {
    match r.kind.as_str() {
        "ClusterRole" => p
            .cluster_role(&r.name)
            .map(|c| c.rules.unwrap_or_default())
            .ok_or_else(|| RoleRefError::ClusterRoleNotFound {
                name: r.name.clone(),
            }),
        "Role" if !binding_ns.is_empty() => p
            .role(binding_ns, &r.name)
            .map(|c| c.rules.unwrap_or_default())
            .ok_or_else(|| RoleRefError::RoleNotFound {
                name: r.name.clone(),
            }),
        kind => Err(RoleRefError::UnsupportedKind {
            kind: kind.to_string(),
        }),
    }
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// `RuleAllows` of Kubernetes' RBAC for a resource request.
pub(crate) fn rule_allows(a: &Attributes, rule: &PolicyRule) -> bool {
    if !a.resource_request {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resources = rule.resources.as_deref().unwrap_or_default();
    let resource_matches = resources.iter().any(|r| {
        r == "*"
            || *r == combined
            // `*/status` is the status subresource of every resource.
            || (!a.subresource.is_empty()
                && r.strip_prefix("*/") == Some(a.subresource.as_str()))
    });
    let names = rule.resource_names.as_deref().unwrap_or_default();
    // A rule naming objects never matches a request without a name (create, list, watch
    // without a `metadata.name` field selector, deletecollection).
    let name_matches = names.is_empty() || names.contains(&a.name);
    has(&rule.verbs, &a.verb)
        && has(rule.api_groups.as_deref().unwrap_or_default(), &a.api_group)
        && resource_matches
        && name_matches
}

/// Kubernetes RBAC's decision: `Ok` when a rule bound to `user` allows `a`.
pub(crate) fn authorize(p: &dyn Policy, user: &UserInfo, a: &Attributes) -> Result<(), Denied> {
    if !a.resource_request {
        return Ok(());
    }
    let mut errors: Vec<RoleRefError> = Vec::new();
    let mut allowed = |rules: Result<Vec<PolicyRule>, RoleRefError>| match rules {
        Ok(rules) => rules.iter().any(|r| rule_allows(a, r)),
        Err(e) => {
            if !errors.contains(&e) {
                errors.push(e);
            }
            false
        }
    };
    for b in p.cluster_role_bindings() {
        let subjects = b.subjects.as_deref().unwrap_or_default();
        if subjects.iter().any(|s| applies_to(user, s, ""))
            && allowed(referenced_rules(p, &b.role_ref, ""))
        {
            return Ok(());
        }
    }
    if !a.namespace.is_empty() {
        for b in p.role_bindings(&a.namespace) {
            let subjects = b.subjects.as_deref().unwrap_or_default();
            if subjects.iter().any(|s| applies_to(user, s, &a.namespace))
                && allowed(referenced_rules(p, &b.role_ref, &a.namespace))
            {
                return Ok(());
            }
        }
    }
    Err(Denied { unresolved: errors })
}

/// The 403 kube-apiserver writes for a refused request (`responsewriters.Forbidden`).
pub(crate) fn forbidden(user: &str, a: &Attributes, reason: &Denied) -> ApiError {
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let mut msg = if !a.resource_request {
        format!("User {user:?} cannot {} path", a.verb)
    } else if a.namespace.is_empty() {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            a.verb, a.api_group
        )
    } else {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            a.verb, a.api_group, a.namespace
        )
    };
    if !reason.unresolved.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    let qualified = if a.api_group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.api_group)
    };
    let message = if a.name.is_empty() {
        format!("{qualified} is forbidden: {msg}")
    } else {
        format!("{qualified} {:?} is forbidden: {msg}", a.name)
    };
    let mut e = ApiError::new(403, "Forbidden", message);
    e.details = Some(serde_json::json!({
        "name": a.name, "group": a.api_group, "kind": a.resource,
    }));
    e
}

/// The `impersonate` checks an impersonating request needs and the user it then acts as
/// (`buildImpersonationRequests` and `WithImpersonation`).
fn impersonation(headers: &HeaderMap) -> Result<Option<(Vec<Attributes>, UserInfo)>, ApiError> {
    let value = |v: &http::HeaderValue| v.to_str().unwrap_or_default().to_string();
    let user = headers
        .get("impersonate-user")
        .map(value)
        .filter(|u| !u.is_empty());
    let groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .map(value)
        .collect();
    let mut extras: Vec<(String, String)> = Vec::new();
    for (name, v) in headers {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-") {
            extras.push((key.to_string(), value(v)));
        }
    }
    let uid = headers.get("impersonate-uid").map(value);
    let Some(user) = user else {
        if groups.is_empty() && extras.is_empty() && uid.is_none() {
            return Ok(None);
        }
        return Err(ApiError::new(
            500,
            "InternalError",
            "Internal error occurred: requested impersonation of groups, extras or a uid without impersonating a user",
        ));
    };
    let check = |resource: &str, ns: &str, name: &str, sub: &str| Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        api_group: if matches!(resource, "userextras" | "uids") {
            "authentication.k8s.io".into()
        } else {
            String::new()
        },
        api_version: "v1".into(),
        namespace: ns.into(),
        resource: resource.into(),
        subresource: sub.into(),
        name: name.into(),
    };
    let mut checks = vec![match split_sa(&user) {
        Some((ns, name)) => check("serviceaccounts", ns, name, ""),
        None => check("users", "", &user, ""),
    }];
    checks.extend(groups.iter().map(|g| check("groups", "", g, "")));
    checks.extend(extras.iter().map(|(k, v)| check("userextras", "", v, k)));
    checks.extend(uid.iter().map(|u| check("uids", "", u, "")));
    let acting = if groups.is_empty() {
        UserInfo::new(&user)
    } else {
        let mut groups = groups;
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        UserInfo { name: user, groups }
    };
    Ok(Some((checks, acting)))
}

/// Who made a request and whom it acted as: what the audit log records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The authenticated user (a ServiceAccount token's), else whom the server takes an
    /// unauthenticated client for: [`Authorization::impersonator`] when it impersonates under
    /// authorization, the superuser otherwise (`system:anonymous` for a bad credential).
    pub(crate) user: UserInfo,
    /// The user named in `Impersonate-User`, if any.
    pub(crate) impersonated: Option<UserInfo>,
}

/// The user an unauthenticated client is: the server's superuser, as a cluster admin's
/// certificate would be (`system:masters`).
fn superuser() -> UserInfo {
    UserInfo {
        name: "system:admin".into(),
        groups: vec!["system:masters".into(), AUTHENTICATED.into()],
    }
}

/// Authenticates a request (its ServiceAccount token, if any; `authn.rs`), records whom it
/// impersonates and, when [`crate::Config::authorization`] is on, refuses what its user's RBAC
/// (or, impersonating, the caller's `impersonate` rights and the impersonated user's RBAC)
/// does not allow. `Err` is the response to send instead of serving the request.
pub(crate) fn admit(
    app: &App,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> (Identity, Result<(), ApiError>) {
    let impersonated = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .map(UserInfo::new);
    let mut identity = Identity {
        user: superuser(),
        impersonated,
    };
    let now = chrono::Utc::now().timestamp();
    let verified = crate::authn::bearer(headers)
        .map(|token| token.map(|t| app.tokens.verify(&app.store, t, now)));
    let authenticated = match verified {
        Ok(None) => None,
        Ok(Some(Some(account))) => Some(UserInfo::new(&account.username())),
        // A credential that does not verify is refused, never taken as no credential.
        Ok(Some(None)) | Err(_) => {
            identity.user = UserInfo {
                name: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
            };
            return (identity, Err(crate::authn::unauthorized()));
        }
    };
    if let Some(user) = &authenticated {
        identity.user = user.clone();
    }
    if let Some(acting) = &identity.impersonated {
        tracing::debug!(target: "apiserver::audit", user = ?acting.name, method = %method, path = ?path, "impersonated request");
        app.counters
            .impersonated(&acting.name, method.as_str(), path);
    }
    let Some(config) = &app.config.authorization else {
        return (identity, Ok(()));
    };
    let caller = match &authenticated {
        Some(user) => Some(user.clone()),
        None if identity.impersonated.is_some() => {
            let c = UserInfo::new(&config.impersonator);
            identity.user = c.clone();
            Some(c)
        }
        None => None,
    };
    let decision = match caller {
        Some(caller) => judge_as(&*app.store, &caller, method, path, query, headers),
        // Groups, extras or a uid without a user are a client error even unchecked.
        None => impersonation(headers).map(|_| ()),
    };
    let decision = decision.inspect_err(|e| {
        if e.code == 403 {
            app.counters.forbidden(&e.message);
            tracing::debug!(target: "apiserver::audit", message = ?e.message, "forbidden");
        }
    });
    (identity, decision)
}

/// The decision on one impersonating request whose caller is `impersonator`: its
/// impersonation first, then what the impersonated user asks, by the RBAC in `p`. A request
/// that does not impersonate is not judged (an unauthenticated client is the superuser).
#[cfg(test)]
pub(crate) fn judge(
    p: &dyn Policy,
    impersonator: &str,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    if impersonation(headers)?.is_none() {
        return Ok(());
    }
    judge_as(
        p,
        &UserInfo::new(impersonator),
        method,
        path,
        query,
        headers,
    )
}

/// The decision on one request from the authenticated `caller`: without impersonation, what
/// it asks by its own RBAC; impersonating, its `impersonate` rights and then what the
/// impersonated user asks.
pub(crate) fn judge_as(
    p: &dyn Policy,
    caller: &UserInfo,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let a = request_info(method, path, query);
    let Some((checks, acting)) = impersonation(headers)? else {
        return authorize(p, caller, &a).map_err(|r| forbidden(&caller.name, &a, &r));
    };
    for c in &checks {
        authorize(p, caller, c).map_err(|r| forbidden(&caller.name, c, &r))?;
    }
    authorize(p, &acting, &a).map_err(|r| forbidden(&acting.name, &a, &r))
}

#[cfg(test)]
#[path = "authz_tests.rs"]
mod tests;
