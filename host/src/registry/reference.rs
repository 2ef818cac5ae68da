//! [`ArtifactRef`]: `REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`, checked before anything is
//! asked of a registry, so a typo is refused with a reason instead of becoming a request.

use std::fmt;

use super::artifact::{DigestError, check_digest};

/// Longest reference accepted (the distribution spec bounds repository names at 255).
const MAX_REFERENCE_BYTES: usize = 512;

/// Why a text is not an artifact reference. Values are quoted (escaped) and at most
/// 512 bytes, the longest reference read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// Longer than the longest reference read.
    #[error("reference is {0} bytes; at most {MAX_REFERENCE_BYTES}")]
    TooLong(usize),
    /// Whitespace or control characters anywhere.
    #[error("reference contains whitespace or control characters")]
    Unprintable,
    /// The digest after `@` is malformed.
    #[error(transparent)]
    Digest(#[from] DigestError),
    /// No `/`: no registry (Docker Hub is never implied).
    #[error("{0:?} names no registry: write REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]")]
    NoRegistry(String),
    /// Not a host name or address with an optional port.
    #[error(
        "registry {0:?} is not a host name or address with an optional port (e.g. ghcr.io, 127.0.0.1:5000)"
    )]
    Registry(String),
    /// Not lowercase path components.
    #[error(
        "repository {0:?} must be lowercase letters, digits and . _ - between slashes (at most 255 bytes)"
    )]
    Repository(String),
    /// Not a tag's characters or length.
    #[error("tag {0:?} must be 1 to 128 letters, digits, . _ - (not starting with . or -)")]
    Tag(String),
    /// Neither `:TAG` nor `@DIGEST`.
    #[error("{0:?} names neither a tag nor a digest")]
    Unnamed(String),
}

/// A parsed artifact reference; the registry is always explicit (no implicit Docker Hub).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArtifactRef {
    /// `host[:port]`.
    pub registry: String,
    /// Lowercase path components, e.g. `handlers/logger`.
    pub repository: String,
    /// The tag, if named.
    pub tag: Option<String>,
    /// `sha256:<hex>` of the manifest, if pinned.
    pub digest: Option<String>,
}

impl ArtifactRef {
    /// Parses and validates `s`; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Self, ReferenceError> {
        if s.len() > MAX_REFERENCE_BYTES {
            return Err(ReferenceError::TooLong(s.len()));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ReferenceError::Unprintable);
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                check_digest(d)?;
                (r, Some(d.to_string()))
            }
            None => (s, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(ReferenceError::NoRegistry(s.to_string()));
        };
        check_registry(registry)?;
        // A colon after the last slash starts the tag (one before it is the registry's port).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => (r, Some(t.to_string())),
            _ => (path, None),
        };
        check_repository(repository)?;
        if let Some(t) = &tag {
            check_tag(t)?;
        }
        if tag.is_none() && digest.is_none() {
            return Err(ReferenceError::Unnamed(s.to_string()));
        }
        Ok(ArtifactRef {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }

    /// The same artifact pinned to `digest` (the tag kept, for people reading it).
    pub fn pinned(&self, digest: &str) -> ArtifactRef {
        ArtifactRef {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }

    /// `REGISTRY/REPOSITORY`, without tag or digest: the identity a signature names.
    pub fn repository_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// Where cosign keeps the signatures of this pinned artifact: the tag `sha256-<hex>.sig`
    /// in the same repository (the digest-less tag `sha256-.sig` if unpinned, which never
    /// exists).
    pub fn signature_ref(&self) -> ArtifactRef {
        ArtifactRef {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: Some(super::signature::signature_tag(
                self.digest.as_deref().unwrap_or("sha256:"),
            )),
            digest: None,
        }
    }

    /// Whether the registry is this machine (`localhost`, `127.0.0.0/8`, `[::1]`): the only
    /// place credentials may travel over plain HTTP.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => &self.registry,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// The reference as `oci-client` takes it: the digest when pinned, else the tag.
    pub(crate) fn to_oci(&self) -> oci_client::Reference {
        match &self.digest {
            Some(d) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                d.clone(),
            ),
            None => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                self.tag.clone().unwrap_or_default(),
            ),
        }
    }
}

impl fmt::Display for ArtifactRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn check_registry(r: &str) -> Result<(), ReferenceError> {
    let ok_chars = r
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
    // Without a dot, a port or `localhost` the first component is a repository path, as
    // docker reads it: an implicit Docker Hub is never assumed.
    let explicit = r.contains('.') || r.contains(':') || r == "localhost";
    if r.is_empty() || !ok_chars || !explicit {
        return Err(ReferenceError::Registry(r.to_string()));
    }
    Ok(())
}

fn check_repository(r: &str) -> Result<(), ReferenceError> {
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && c.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
    };
    if r.is_empty() || r.len() > 255 || !r.split('/').all(component_ok) {
        return Err(ReferenceError::Repository(r.to_string()));
    }
    Ok(())
}

fn check_tag(t: &str) -> Result<(), ReferenceError> {
    let ok = !t.is_empty()
        && t.len() <= 128
        && t.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        return Err(ReferenceError::Tag(t.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print_back() {
        let d = format!("sha256:{}", "0".repeat(64));
        for s in [
            "127.0.0.1:5000/handlers/logger:v1".to_string(),
            format!("ghcr.io/acme/logger:1.2@{d}"),
            format!("localhost/logger@{d}"),
        ] {
            assert_eq!(ArtifactRef::parse(&s).unwrap().to_string(), s);
        }
        let r = ArtifactRef::parse("127.0.0.1:5000/a/b:v1").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "a/b", Some("v1"))
        );
        assert!(r.is_loopback());
        assert!(!ArtifactRef::parse("ghcr.io/a:v1").unwrap().is_loopback());
        assert_eq!(r.pinned(&d).digest.as_deref(), Some(d.as_str()));
    }

    #[test]
    fn bad_references_say_why() {
        for (s, expect) in [
            ("logger:v1", "names no registry"),
            ("acme/logger:v1", "is not a host name"),
            ("ghcr.io/Acme/logger:v1", "lowercase"),
            ("ghcr.io/acme/logger", "neither a tag nor a digest"),
            ("ghcr.io/acme/logger@sha256:abc", "64 lowercase hex"),
            ("ghcr.io/acme/logger:-x", "tag"),
            ("ghcr.io/acme/logger:v 1", "whitespace"),
            ("ghcr.io/acme//logger:v1", "lowercase"),
        ] {
            let e = ArtifactRef::parse(s).unwrap_err().to_string();
            assert!(e.contains(expect), "{s}: {e}");
        }
    }
}
