//! [`Fetcher`]: the reads of a pull, with a registry treated as hostile.
//!
//! `oci-client` 0.18 reads a manifest or token body whole before looking at its size, follows
//! up to ten redirects anywhere and fetches whatever `realm` a `WWW-Authenticate` names; its
//! `reqwest` client is private, so none of that can be bounded from outside. Pulls therefore
//! drive the same `reqwest` and `http-auth` (its challenge parser) and `oci-client`'s token and
//! error types directly, with these rules (pushes, which the operator runs, stay on
//! `oci-client`):
//! - every body is capped before it is read (`Content-Length`) and while it streams, whatever
//!   the header said: manifests at [`MAX_MANIFEST_BYTES`], a blob at its descriptor's size,
//!   tokens and error bodies at a few KiB;
//! - a redirect or an auth realm goes only to the registry's own host (any port) or to public
//!   addresses, judged by the classifier guest HTTP uses (`crate::address`): an IP literal
//!   before any connection, a DNS name by the addresses it resolves to (internal ones dropped,
//!   none left refused), so a name cannot lead there either;
//! - what a registry sends back in an error reaches messages cut to [`SHOWN_BYTES`] and with
//!   control characters escaped (`crate::text::foreign`).
//!
//! The total time of a pull is bounded by the caller ([`super::Registry`]), not here.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::RwLock;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, WWW_AUTHENTICATE};
use reqwest::{Response, StatusCode, Url};

use super::artifact::ArtifactError;
use super::credentials::Credentials;
use super::error::{
    DigestMismatch, InternalTarget, Refusal, RegistryError, Said, Unauthorized, Unreachable,
};
use super::reference::ArtifactRef;
use crate::address::{AddressClass, classify};
use crate::text;

/// Largest token answer read: a JWT of a few hundred bytes, with room for long claims.
const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// Largest error body read, to show a part of it.
const MAX_ERROR_BYTES: u64 = 4 << 10;
/// How much of anything a registry sends is shown in an error (bytes of the original text).
pub(crate) const SHOWN_BYTES: usize = 256;
/// Redirects followed for one request (a blob store's CDN needs one or two).
const MAX_REDIRECTS: usize = 5;

/// Checks a URL the registry chose (redirect, realm) against the registry's `origin`: same
/// host, or an IP literal that is public, or a DNS name (judged when it resolves). A redirect
/// from HTTPS to plain HTTP is refused too.
fn check_target(url: &Url, origin: &Url) -> Result<(), InternalTarget> {
    let host = url.host_str().unwrap_or_default();
    if !matches!(url.scheme(), "http" | "https")
        || (origin.scheme() == "https" && url.scheme() != "https")
    {
        return Err(InternalTarget::new(
            &format!("{}://{host}", url.scheme()),
            "a scheme other than the registry's",
            SHOWN_BYTES,
        ));
    }
    if url.host_str() == origin.host_str() {
        return Ok(());
    }
    if host.is_empty() {
        return Err(InternalTarget::new(host, "no host", SHOWN_BYTES));
    }
    // `Url` writes IPv6 literals in brackets and IPv4 ones in dotted form whatever the spelling.
    match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
    {
        Ok(ip) => public(host, ip),
        Err(_) => Ok(()),
    }
}

fn public(host: &str, ip: std::net::IpAddr) -> Result<(), InternalTarget> {
    match classify(ip, &[]) {
        AddressClass::Public => Ok(()),
        class => Err(InternalTarget::new(host, class, SHOWN_BYTES)),
    }
}

/// Resolves DNS names for registry requests: a registry's own name (one a reference names)
/// to whatever it resolves to, any other name only to its public addresses.
struct GuardedResolver {
    own: Arc<RwLock<HashSet<String>>>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let own = self.own.read().contains(&host);
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if own {
                return Ok(Box::new(all.into_iter()) as reqwest::dns::Addrs);
            }
            let mut class = None;
            let public: Vec<SocketAddr> = all
                .into_iter()
                .filter(|a| match classify(a.ip(), &[]) {
                    AddressClass::Public => true,
                    c => {
                        class.get_or_insert(c);
                        false
                    }
                })
                .collect();
            if public.is_empty() {
                let why = class.map_or("unresolved".to_string(), |c| c.to_string());
                return Err(Box::new(InternalTarget::new(&host, why, SHOWN_BYTES)) as _);
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The `reqwest` client pulls use, with the redirect and address rules above.
#[derive(Clone)]
pub(crate) struct Fetcher {
    client: reqwest::Client,
    own: Arc<RwLock<HashSet<String>>>,
}

impl Fetcher {
    /// A client with the host's timeouts (the total per pull is the caller's).
    pub(crate) fn new() -> Self {
        let own = Arc::new(RwLock::new(HashSet::new()));
        let policy = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            let Some(origin) = attempt.previous().first().cloned() else {
                return attempt.follow();
            };
            match check_target(attempt.url(), &origin) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        });
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(60))
            .redirect(policy)
            .dns_resolver(Arc::new(GuardedResolver { own: own.clone() }))
            .user_agent(concat!("kubewasm/", env!("CARGO_PKG_VERSION")))
            .build()
            // Only a TLS back-end that cannot start fails here: the process could not pull at all.
            .expect("the registry HTTP client builds");
        Fetcher { client, own }
    }

    /// A session of reads from `reference`'s repository with `credentials`.
    pub(crate) fn session<'a>(
        &'a self,
        reference: &'a ArtifactRef,
        credentials: Credentials,
        plain_http: bool,
    ) -> Result<Session<'a>, RegistryError> {
        let oci = reference.to_oci();
        let registry = oci.resolve_registry();
        let scheme = if plain_http { "http" } else { "https" };
        let base =
            Url::parse(&format!("{scheme}://{registry}/")).map_err(|e| RegistryError::Refused {
                reference: reference.to_string(),
                cause: Refusal::Address(e),
            })?;
        if let Some(host) = base.host_str() {
            self.own.write().insert(host.to_ascii_lowercase());
        }
        Ok(Session {
            fetcher: self,
            reference,
            base,
            repository: oci.repository().to_string(),
            credentials,
            token: None,
        })
    }
}

/// Reads from one repository; keeps the bearer token once the registry asked for one.
pub(crate) struct Session<'a> {
    fetcher: &'a Fetcher,
    reference: &'a ArtifactRef,
    base: Url,
    repository: String,
    credentials: Credentials,
    token: Option<String>,
}

impl Session<'_> {
    /// The manifest `tag_or_digest` names, at most [`MAX_MANIFEST_BYTES`], as one of `accept`.
    pub(crate) async fn manifest(
        &mut self,
        tag_or_digest: &str,
        accept: &[&str],
    ) -> Result<Vec<u8>, RegistryError> {
        let path = format!("v2/{}/manifests/{tag_or_digest}", self.repository);
        let resp = self.get(&path, &accept.join(", ")).await?;
        let max = super::artifact::MAX_MANIFEST_BYTES as u64;
        self.body(resp, max, |len| RegistryError::NotAnArtifact {
            reference: self.reference.to_string(),
            cause: ArtifactError::ManifestTooBig(len),
        })
        .await
    }

    /// Blob `digest`, at most `size` bytes (its descriptor's); the caller checks the digest.
    pub(crate) async fn blob(&mut self, digest: &str, size: u64) -> Result<Vec<u8>, RegistryError> {
        let path = format!("v2/{}/blobs/{digest}", self.repository);
        let resp = self.get(&path, "*/*").await?;
        self.body(resp, size, |len| RegistryError::DigestMismatch {
            reference: self.reference.to_string(),
            cause: DigestMismatch::BlobTooLong {
                digest: digest.to_string(),
                size,
                len,
            },
        })
        .await
    }

    /// A GET of `path` under the registry, authenticating as the registry asks (once).
    async fn get(&mut self, path: &str, accept: &str) -> Result<Response, RegistryError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| self.refused(Refusal::Path(e)))?;
        let mut challenged = false;
        loop {
            let mut req = self.fetcher.client.get(url.clone()).header(ACCEPT, accept);
            req = match (&self.token, &self.credentials) {
                (Some(t), _) | (None, Credentials::Bearer(t)) => req.bearer_auth(t),
                (None, Credentials::Basic { username, password }) => {
                    req.basic_auth(username, Some(password))
                }
                (None, Credentials::Anonymous) => req,
            };
            let resp = req.send().await.map_err(|e| self.transport(&e))?;
            if resp.status() == StatusCode::UNAUTHORIZED
                && !challenged
                && !matches!(self.credentials, Credentials::Bearer(_))
                && let Some((realm, service)) = bearer_challenge(&resp)
            {
                challenged = true;
                self.token = Some(self.fetch_token(&realm, service.as_deref()).await?);
                continue;
            }
            if resp.status().is_success() {
                return Ok(resp);
            }
            return Err(self.status_error(resp).await);
        }
    }

    /// The token a Bearer challenge's realm gives for pulling this repository.
    async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
    ) -> Result<String, RegistryError> {
        let shown = || text::foreign(realm, SHOWN_BYTES);
        let url = Url::parse(realm).map_err(|source| {
            self.refused(Refusal::RealmNotUrl {
                realm: shown(),
                source,
            })
        })?;
        check_target(&url, &self.base).map_err(|e| self.refused(Refusal::RealmInternal(e)))?;
        if url.scheme() == "http"
            && url.host_str() != self.base.host_str()
            && !self.credentials.is_anonymous()
        {
            return Err(self.refused(Refusal::RealmPlainHttp(shown())));
        }
        let scope = format!("repository:{}:pull", self.repository);
        let mut query = vec![("scope", scope.as_str())];
        if let Some(s) = service {
            query.push(("service", s));
        }
        let mut req = self.fetcher.client.get(url).query(&query);
        if let Credentials::Basic { username, password } = &self.credentials {
            req = req.basic_auth(username, Some(password));
        }
        let resp = req.send().await.map_err(|e| self.transport(&e))?;
        if !resp.status().is_success() {
            return Err(match self.status_error(resp).await {
                e @ RegistryError::Unreachable { .. } => e,
                e => RegistryError::Unauthorized {
                    reference: self.reference.to_string(),
                    cause: Unauthorized::TokenRefused(said_of(e)),
                },
            });
        }
        let body = self
            .body(resp, MAX_TOKEN_BYTES, |len| {
                self.refused(Refusal::TokenTooBig(len))
            })
            .await?;
        let token: oci_client::token_cache::RegistryToken =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Unauthorized {
                reference: self.reference.to_string(),
                cause: Unauthorized::TokenUnparsable(e),
            })?;
        Ok(token.token().to_string())
    }

    /// Reads `resp`'s body, at most `max` bytes: refused from `Content-Length` before reading,
    /// and stopped as soon as more arrives than that (`too_big` gets the length seen).
    async fn body(
        &self,
        mut resp: Response,
        max: u64,
        too_big: impl Fn(u64) -> RegistryError,
    ) -> Result<Vec<u8>, RegistryError> {
        if let Some(len) = content_length(&resp)
            && len > max
        {
            return Err(too_big(len));
        }
        let mut bytes = Vec::with_capacity(content_length(&resp).unwrap_or(0).min(max) as usize);
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(&e))? {
            let len = (bytes.len() + chunk.len()) as u64;
            if len > max {
                return Err(too_big(len));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// A failed answer as an error naming its status and (cut, escaped) what the registry said.
    async fn status_error(&self, resp: Response) -> RegistryError {
        use oci_client::errors::{OciEnvelope, OciErrorCode};
        let status = resp.status();
        let body = prefix(resp, MAX_ERROR_BYTES as usize).await;
        let envelope: Option<OciEnvelope> = serde_json::from_slice(&body).ok();
        let said = match &envelope {
            Some(e) => e
                .errors
                .iter()
                .map(|x| format!("{:?}: {}", x.code, x.message))
                .collect::<Vec<_>>()
                .join("; "),
            None => String::from_utf8_lossy(&body).into_owned(),
        };
        let reference = self.reference.to_string();
        let said = Said::answer(status, &said, SHOWN_BYTES);
        let codes: Vec<&OciErrorCode> = envelope
            .iter()
            .flat_map(|e| e.errors.iter().map(|x| &x.code))
            .collect();
        let has = |f: fn(&OciErrorCode) -> bool| codes.iter().any(|c| f(c));
        if status == StatusCode::UNAUTHORIZED
            || status == StatusCode::FORBIDDEN
            || has(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
        {
            RegistryError::Unauthorized {
                reference,
                cause: Unauthorized::Answer(said),
            }
        } else if status == StatusCode::NOT_FOUND {
            RegistryError::NotFound { reference, said }
        } else if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            RegistryError::Unreachable {
                reference,
                cause: Unreachable::Answer(said),
            }
        } else {
            RegistryError::Refused {
                reference,
                cause: Refusal::Said(said),
            }
        }
    }

    /// A failed request: refused when it would have gone to an internal address, else the
    /// registry is unreachable (refused, reset, timed out).
    fn transport(&self, e: &reqwest::Error) -> RegistryError {
        let mut chain = Vec::new();
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(s) = source {
            if let Some(internal) = s.downcast_ref::<InternalTarget>() {
                return self.refused(Refusal::Internal(internal.clone()));
            }
            chain.push(s.to_string());
            source = s.source();
        }
        RegistryError::Unreachable {
            reference: self.reference.to_string(),
            cause: Unreachable::Transport(Said::text(&chain.join(": "), 2 * SHOWN_BYTES)),
        }
    }

    fn refused(&self, cause: Refusal) -> RegistryError {
        RegistryError::Refused {
            reference: self.reference.to_string(),
            cause,
        }
    }
}

/// What the registry said in a failed answer, whatever it was sorted as.
fn said_of(e: RegistryError) -> Said {
    match e {
        RegistryError::NotFound { said, .. }
        | RegistryError::Unauthorized {
            cause: Unauthorized::Answer(said),
            ..
        }
        | RegistryError::Unreachable {
            cause: Unreachable::Answer(said),
            ..
        }
        | RegistryError::Refused {
            cause: Refusal::Said(said),
            ..
        } => said,
        e => Said::text(&e.to_string(), 2 * SHOWN_BYTES),
    }
}

/// The first `max` bytes of `resp`'s body (fewer if it ends or fails first): enough of an
/// error body to show, never more.
async fn prefix(mut resp: Response, max: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    while bytes.len() < max
        && let Ok(Some(chunk)) = resp.chunk().await
    {
        let room = max - bytes.len();
        bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    bytes
}

fn content_length(resp: &Response) -> Option<u64> {
    resp.headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The realm and service of a `WWW-Authenticate: Bearer ...` challenge, parsed as
/// `oci-client` does (with `http-auth`).
fn bearer_challenge(resp: &Response) -> Option<(String, Option<String>)> {
    resp.headers()
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(http_auth::ChallengeParser::new)
        .filter_map(Result::ok)
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        .and_then(|c| {
            let param = |name: &str| {
                c.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            Some((param("realm")?, param("service")))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal's message, if refused.
    fn check(url: &str, origin: &str) -> Option<String> {
        check_target(&Url::parse(url).unwrap(), &Url::parse(origin).unwrap())
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn only_the_registry_host_or_public_addresses_are_followed() {
        let local = "http://127.0.0.1:5000/";
        assert_eq!(check("http://127.0.0.1:5000/token", local), None);
        assert_eq!(
            check("http://127.0.0.1:6000/blob", local),
            None,
            "same host, any port"
        );
        assert_eq!(check("https://93.184.215.14/x", local), None);
        assert_eq!(
            check("https://cdn.example.com/x", local),
            None,
            "names are judged when resolved"
        );
        for (url, class) in [
            ("http://169.254.169.254/latest/meta-data", "cloud metadata"),
            ("http://10.1.2.3/", "private (RFC 1918)"),
            ("http://127.0.0.2:5000/", "loopback"),
            ("http://[::ffff:10.0.0.1]/", "private (RFC 1918)"),
            ("http://[fd00:ec2::254]/", "cloud metadata"),
        ] {
            let e = check(url, local).unwrap();
            assert!(e.contains(class), "{url}: {e}");
        }
        let e = check("http://93.184.215.14/x", "https://ghcr.io/").unwrap();
        assert!(e.contains("scheme"), "{e}");
        assert!(check("file:///etc/passwd", local).is_some());
    }
}
