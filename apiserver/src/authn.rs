//! ServiceAccount tokens, issued and verified as kube-apiserver does for its clients.
//!
//! `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token` (an `authentication.k8s.io/v1`
//! TokenRequest, what `kubectl create token` and kube-rs's `create_token_request` send) answers
//! a token for an existing ServiceAccount; a request carrying it as `Authorization: Bearer` is
//! authenticated as `system:serviceaccount:NS:NAME` with that account's groups. A token is
//! JWT-shaped (`header.claims.signature`, base64url) and signed with HMAC-SHA256 (`ring`, which
//! the workspace already builds) under a key drawn at random when the server starts, so only
//! the server that issued a token accepts it, and none survives a restart. Like a bound token,
//! it names the account's uid: deleting the account (or recreating it) revokes it.
//!
//! A token that does not verify, has expired or names a gone account is answered 401 with the
//! `Status` kube-apiserver writes; a request without one is unauthenticated, as it always was
//! (the server's superuser: see `authz.rs`). Not modelled: audiences are echoed but not
//! checked, `boundObjectRef` (tokens bound to a Pod or Secret), and other credentials
//! (client certificates, basic auth).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;
use ring::hmac;
use serde_json::{Value, json};

use crate::status::{ApiError, ApiResult};
use crate::store::Store;

/// `expirationSeconds` when a TokenRequest names none (kube-apiserver's default).
pub(crate) const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime kube-apiserver accepts.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest lifetime issued; longer requests are cut to it, as kube-apiserver's
/// `--service-account-max-token-expiration` does.
const MAX_EXPIRATION_SECONDS: i64 = 48 * 3600;
/// Who signs the tokens (the `iss` claim).
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Longest `Authorization` header looked at: longer is no token this server issued.
const MAX_TOKEN_LEN: usize = 8 * 1024;

/// Signs and verifies the tokens of one server run.
pub(crate) struct Tokens {
    key: hmac::Key,
}

/// A ServiceAccount a verified token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl Account {
    /// The username kube-apiserver gives the account.
    pub(crate) fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// The 401 kube-apiserver answers a credential it cannot verify (no reason given, by design).
pub(crate) fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn uid_of(sa: &Value) -> &str {
    sa.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl Tokens {
    /// A signer with a fresh random key.
    pub(crate) fn generate() -> anyhow::Result<Tokens> {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow::anyhow!("no randomness for the token signing key"))?;
        Ok(Tokens { key })
    }

    /// A token for `account` (whose stored object is `sa`) valid until `expires` (Unix
    /// seconds), issued at `now`.
    pub(crate) fn issue(
        &self,
        account: &Account,
        sa: &Value,
        now: i64,
        expires: i64,
        audiences: &[String],
    ) -> String {
        let header = json!({"alg": "HS256", "typ": "JWT"});
        let claims = json!({
            "iss": ISSUER,
            "sub": account.username(),
            "aud": audiences,
            "iat": now,
            "nbf": now,
            "exp": expires,
            "kubernetes.io": {
                "namespace": account.namespace,
                "serviceaccount": {"name": account.name, "uid": uid_of(sa)},
            },
        });
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let tag = hmac::sign(&self.key, signed.as_bytes());
        format!("{signed}.{}", b64(tag.as_ref()))
    }

    /// The account `token` names if this server signed it, it has not expired at `now` and its
    /// account still exists with the uid it was issued for.
    pub(crate) fn verify(&self, store: &Store, token: &str, now: i64) -> Option<Account> {
        if token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let (signed, tag) = token.rsplit_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        hmac::verify(&self.key, signed.as_bytes(), &tag).ok()?;
        let (_, claims) = signed.split_once('.')?;
        let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
        if claims["exp"].as_i64()? <= now || claims["nbf"].as_i64()? > now {
            return None;
        }
        let k = &claims["kubernetes.io"];
        let account = Account {
            namespace: k["namespace"].as_str()?.to_string(),
            name: k["serviceaccount"]["name"].as_str()?.to_string(),
        };
        let sa = store.get("/serviceaccounts", &account.namespace, &account.name)?;
        (uid_of(&sa.value) == k["serviceaccount"]["uid"].as_str()?).then_some(account)
    }
}

/// The bearer token of a request: `Ok(None)` without an `Authorization` header, `Err` for one
/// that is no bearer token (kube-apiserver answers those 401 too).
pub(crate) fn bearer(headers: &HeaderMap) -> ApiResult<Option<&str>> {
    let Some(v) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let v = v.to_str().map_err(|_| unauthorized())?;
    let (scheme, token) = v.split_once(' ').ok_or_else(unauthorized)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(unauthorized());
    }
    Ok(Some(token.trim()))
}

/// The answer to a TokenRequest for ServiceAccount `ns/name` (`body` as sent): the object
/// kube-apiserver returns, its `status` holding the token and when it expires.
pub(crate) fn token_request(
    tokens: &Tokens,
    store: &Store,
    ns: &str,
    name: &str,
    body: &Value,
    now: chrono::DateTime<chrono::Utc>,
) -> ApiResult<Value> {
    let kind = body["kind"].as_str().unwrap_or("TokenRequest");
    if kind != "TokenRequest" {
        return Err(ApiError::bad_request(format!(
            "the body of a token request is a TokenRequest, not a {kind}"
        )));
    }
    let sa = store.get("/serviceaccounts", ns, name).ok_or_else(|| {
        let mut e = ApiError::new(
            404,
            "NotFound",
            format!("serviceaccounts \"{name}\" not found"),
        );
        e.details = Some(json!({"name": name, "kind": "serviceaccounts"}));
        e
    })?;
    let spec = &body["spec"];
    let seconds = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_EXPIRATION_SECONDS,
        v => v
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
    };
    if seconds < MIN_EXPIRATION_SECONDS {
        return Err(ApiError::invalid(
            "TokenRequest",
            name,
            "spec.expirationSeconds",
            &format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes"),
        ));
    }
    let seconds = seconds.min(MAX_EXPIRATION_SECONDS);
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let audiences = if audiences.is_empty() {
        vec![ISSUER.to_string()]
    } else {
        audiences
    };
    let account = Account {
        namespace: ns.to_string(),
        name: name.to_string(),
    };
    let issued = now.timestamp();
    let expires = issued + seconds;
    let token = tokens.issue(&account, &sa.value, issued, expires, &audiences);
    let at = |t: i64| {
        chrono::DateTime::from_timestamp(t, 0)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": at(issued)},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null},
        "status": {"token": token, "expirationTimestamp": at(expires)},
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn sa(uid: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "robot", "namespace": "ns", "uid": uid}})
    }

    fn store_with(account: Option<Value>) -> Store {
        let objects = account
            .map(|v| {
                (
                    "/serviceaccounts".to_string(),
                    ("ns".to_string(), "robot".to_string()),
                    v,
                )
            })
            .into_iter()
            .collect();
        Store::new(2, objects, 100, Duration::from_secs(60), None)
    }

    fn robot() -> Account {
        Account {
            namespace: "ns".into(),
            name: "robot".into(),
        }
    }

    #[test]
    fn a_token_verifies_until_it_expires_and_only_with_its_servers_key() {
        let tokens = Tokens::generate().unwrap();
        let store = store_with(Some(sa("u-1")));
        let t = tokens.issue(&robot(), &sa("u-1"), NOW, NOW + 600, &[]);
        assert_eq!(t.split('.').count(), 3, "JWT-shaped: {t}");
        assert_eq!(tokens.verify(&store, &t, NOW), Some(robot()));
        assert_eq!(tokens.verify(&store, &t, NOW + 599), Some(robot()));
        assert_eq!(tokens.verify(&store, &t, NOW + 600), None, "expired");
        assert_eq!(tokens.verify(&store, &t, NOW - 1), None, "not yet valid");
        let other = Tokens::generate().unwrap();
        assert_eq!(other.verify(&store, &t, NOW), None, "another server's key");
    }

    #[test]
    fn a_changed_claim_or_a_gone_account_does_not_verify() {
        let tokens = Tokens::generate().unwrap();
        let store = store_with(Some(sa("u-1")));
        let t = tokens.issue(&robot(), &sa("u-1"), NOW, NOW + 600, &[]);
        let parts: Vec<&str> = t.split('.').collect();
        // The same signature over claims naming another account.
        let forged_claims = b64(
            json!({"exp": NOW + 600, "nbf": NOW, "kubernetes.io": {"namespace": "kube-system",
                "serviceaccount": {"name": "admin", "uid": "u-1"}}})
            .to_string()
            .as_bytes(),
        );
        let forged = format!("{}.{forged_claims}.{}", parts[0], parts[2]);
        assert_eq!(tokens.verify(&store, &forged, NOW), None);
        assert_eq!(tokens.verify(&store, "not-a-token", NOW), None);
        assert_eq!(tokens.verify(&store, &"a.b.c".repeat(5000), NOW), None);
        assert_eq!(tokens.verify(&store_with(None), &t, NOW), None, "deleted");
        let recreated = store_with(Some(sa("u-2")));
        assert_eq!(tokens.verify(&recreated, &t, NOW), None, "recreated");
    }

    #[test]
    fn only_a_bearer_credential_is_a_token() {
        let h = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        assert_eq!(bearer(&HeaderMap::new()).unwrap(), None);
        assert_eq!(bearer(&h("Bearer abc")).unwrap(), Some("abc"));
        assert_eq!(bearer(&h("bearer abc")).unwrap(), Some("abc"));
        assert_eq!(bearer(&h("Basic dXNlcjpwdw==")).unwrap_err().code, 401);
        assert_eq!(bearer(&h("Bearer ")).unwrap_err().code, 401);
    }

    #[test]
    fn a_token_request_honours_expiration_seconds_within_kubernetes_bounds() {
        let tokens = Tokens::generate().unwrap();
        let store = store_with(Some(sa("u-1")));
        let now = chrono::DateTime::from_timestamp(NOW, 0).unwrap();
        let ask = |secs: Value| {
            token_request(
                &tokens,
                &store,
                "ns",
                "robot",
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": secs}}),
                now,
            )
        };
        let r = ask(json!(900)).unwrap();
        assert_eq!(r["spec"]["expirationSeconds"], 900);
        assert_eq!(r["status"]["expirationTimestamp"], "2023-11-14T22:28:20Z");
        let t = r["status"]["token"].as_str().unwrap();
        assert_eq!(tokens.verify(&store, t, NOW + 899), Some(robot()));
        assert_eq!(tokens.verify(&store, t, NOW + 900), None);
        let r = ask(Value::Null).unwrap();
        assert_eq!(r["spec"]["expirationSeconds"], DEFAULT_EXPIRATION_SECONDS);
        assert_eq!(ask(json!(599)).unwrap_err().code, 422);
        let r = ask(json!(10 * 24 * 3600)).unwrap();
        assert_eq!(r["spec"]["expirationSeconds"], MAX_EXPIRATION_SECONDS);
        let missing = token_request(&tokens, &store, "ns", "nobody", &json!({}), now);
        assert_eq!(missing.unwrap_err().code, 404);
    }
}
