//! Registry credentials as docker and Kubernetes keep them: a `config.json` whose `auths` map
//! a registry to `auth` (base64 `user:password`), `username`/`password`, `identitytoken` or
//! `registrytoken`. A `kubernetes.io/dockerconfigjson` Secret mounted as a file has the same
//! shape, so one reader serves both.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

/// Largest credentials file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How to authenticate to one registry. `Debug` never shows a secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials: anonymous pulls (a bearer token is still fetched if the registry asks).
    Anonymous,
    /// HTTP basic, or the user and password a bearer token is requested with.
    Basic {
        /// User name.
        username: String,
        /// Password or access token.
        password: String,
    },
    /// A bearer token sent as is.
    Bearer(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Credentials::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

impl Credentials {
    pub(crate) fn to_oci(&self) -> oci_client::secrets::RegistryAuth {
        use oci_client::secrets::RegistryAuth;
        match self {
            Credentials::Anonymous => RegistryAuth::Anonymous,
            Credentials::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
            Credentials::Bearer(t) => RegistryAuth::Bearer(t.clone()),
        }
    }

    /// Whether any secret would be sent.
    pub fn is_anonymous(&self) -> bool {
        matches!(self, Credentials::Anonymous)
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
    registrytoken: Option<String>,
}

/// Why a docker `config.json` could not be read. Never carries a secret: serde_json's
/// errors give a position, not the text.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file could not be read.
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// The file is larger than any credentials file.
    #[error("over {MAX_CONFIG_BYTES} bytes")]
    TooBig,
    /// Not JSON of docker's shape.
    #[error("not a docker config.json: {0}")]
    NotDockerConfig(#[source] serde_json::Error),
    /// An `auth` entry that does not decode to `user:password`.
    #[error("auths.{0}.auth is not base64 of user:password")]
    Auth(String),
}

/// A [`CredentialsError`] naming the file it is about.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct CredentialsFileError {
    /// The credentials file.
    pub path: PathBuf,
    /// What is wrong with it.
    #[source]
    pub source: CredentialsError,
}

/// Credentials per registry, from a docker `config.json`.
#[derive(Clone, Debug, Default)]
pub struct CredentialStore {
    by_registry: HashMap<String, Credentials>,
}

impl CredentialStore {
    /// The store in `path`; an error names the file and what is wrong, never a secret.
    pub fn load(path: &Path) -> Result<Self, CredentialsFileError> {
        use std::io::Read;
        let read = || {
            let file = std::fs::File::open(path).map_err(CredentialsError::Read)?;
            let mut text = String::new();
            file.take(MAX_CONFIG_BYTES + 1)
                .read_to_string(&mut text)
                .map_err(CredentialsError::Read)?;
            if text.len() as u64 > MAX_CONFIG_BYTES {
                return Err(CredentialsError::TooBig);
            }
            Self::parse(&text)
        };
        read().map_err(|source| CredentialsFileError {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Parses docker's `config.json` shape.
    pub fn parse(text: &str) -> Result<Self, CredentialsError> {
        // serde_json's errors carry a position, not the text: safe to show.
        let config: DockerConfig =
            serde_json::from_str(text).map_err(CredentialsError::NotDockerConfig)?;
        let mut by_registry = HashMap::new();
        for (key, entry) in config.auths {
            let registry = registry_of(&key);
            let creds = if let Some(t) = entry.registrytoken.filter(|t| !t.is_empty()) {
                Credentials::Bearer(t)
            } else if let (Some(u), Some(p)) = (entry.username, entry.password) {
                Credentials::Basic {
                    username: u,
                    password: p,
                }
            } else if let Some(a) = entry.auth.filter(|a| !a.is_empty()) {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(a.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| CredentialsError::Auth(registry.clone()))?;
                let (u, p) = decoded
                    .split_once(':')
                    .ok_or_else(|| CredentialsError::Auth(registry.clone()))?;
                Credentials::Basic {
                    username: u.to_string(),
                    password: p.to_string(),
                }
            } else if let Some(t) = entry.identitytoken.filter(|t| !t.is_empty()) {
                // docker sends an identity token as the password of the token request.
                Credentials::Basic {
                    username: "<token>".into(),
                    password: t,
                }
            } else {
                continue;
            };
            by_registry.insert(registry, creds);
        }
        Ok(CredentialStore { by_registry })
    }

    /// What to send to `registry` (`host[:port]`); anonymous when the file has nothing for it.
    pub fn for_registry(&self, registry: &str) -> Credentials {
        let key = if registry == "docker.io" {
            "index.docker.io"
        } else {
            registry
        };
        self.by_registry
            .get(key)
            .cloned()
            .unwrap_or(Credentials::Anonymous)
    }

    /// Docker's own file: `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, if present.
    pub fn default_path() -> Option<PathBuf> {
        let dir = std::env::var_os("DOCKER_CONFIG")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")))?;
        let path = dir.join("config.json");
        path.is_file().then_some(path)
    }
}

/// `host[:port]` of an `auths` key, which docker writes as a host or as a URL.
fn registry_of(key: &str) -> String {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = k.split('/').next().unwrap_or(k);
    match host {
        "docker.io" | "registry-1.docker.io" => "index.docker.io".into(),
        h => h.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_docker_entry_form_is_read() {
        let store = CredentialStore::parse(
            r#"{"auths": {
                "127.0.0.1:5000": {"auth": "dXNlcjpzM2NyZXQ="},
                "https://index.docker.io/v1/": {"username": "u", "password": "p"},
                "ghcr.io": {"registrytoken": "tok"},
                "quay.io": {"identitytoken": "id"},
                "empty.io": {}
            }}"#,
        )
        .unwrap();
        assert_eq!(
            store.for_registry("127.0.0.1:5000"),
            Credentials::Basic {
                username: "user".into(),
                password: "s3cret".into()
            }
        );
        assert!(matches!(
            store.for_registry("docker.io"),
            Credentials::Basic { .. }
        ));
        assert_eq!(
            store.for_registry("ghcr.io"),
            Credentials::Bearer("tok".into())
        );
        assert!(matches!(
            store.for_registry("quay.io"),
            Credentials::Basic { .. }
        ));
        assert!(store.for_registry("empty.io").is_anonymous());
        assert!(store.for_registry("other.io").is_anonymous());
        assert!(!format!("{:?}", store.for_registry("127.0.0.1:5000")).contains("s3cret"));
    }

    #[test]
    fn a_bad_file_says_what_is_wrong_without_secrets() {
        let e = CredentialStore::parse(r#"{"auths": {"r.io": {"auth": "bm9jb2xvbg=="}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("r.io") && e.contains("user:password"), "{e}");
        assert!(!e.contains("nocolon"));
        assert!(CredentialStore::parse("[").is_err());
    }
}
