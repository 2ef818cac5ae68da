//! [`RegistryError`]: why a push or pull failed, sorted into what an operator can act on, with
//! the cause kept (`#[source]`) and [`RegistryError::is_retriable`], the one answer to "may
//! trying again help?".
//!
//! Whatever a registry sent reaches these types cut and escaped ([`Said`], the transport chain,
//! [`InternalTarget`]): they may be logged as they are.

use std::time::Duration;

use reqwest::StatusCode;

use super::artifact::ArtifactError;
use super::signature::{SignError, SignatureError};
use crate::text;

/// Why a push or pull failed; the message names the reference.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Could not talk to the registry (refused, timed out, 5xx, over the deadline).
    #[error("{reference}: registry unreachable: {cause}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// What failed.
        #[source]
        cause: Unreachable,
    },
    /// The registry refused the credentials, or there were none where it needs some.
    #[error("{reference}: not authorized: {cause}")]
    Unauthorized {
        /// The reference.
        reference: String,
        /// What the registry or its token service said.
        #[source]
        cause: Unauthorized,
    },
    /// No such repository, tag or digest.
    #[error("{reference}: not found in the registry: {said}")]
    NotFound {
        /// The reference.
        reference: String,
        /// What the registry said.
        said: Said,
    },
    /// Bytes that do not hash to the digest that names them.
    #[error("{reference}: digest mismatch: {cause}")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// Which digest.
        #[source]
        cause: DigestMismatch,
    },
    /// A manifest that is not a one-layer wasm artifact within the bounds.
    #[error("{reference}: {cause}")]
    NotAnArtifact {
        /// The reference.
        reference: String,
        /// What is wrong with it.
        #[source]
        cause: ArtifactError,
    },
    /// Refused by this host (plain HTTP with credentials to another machine, an internal
    /// address the registry pointed at, ...) or by the registry for a reason no retry fixes.
    #[error("{reference}: {cause}")]
    Refused {
        /// The reference.
        reference: String,
        /// Why.
        #[source]
        cause: Refusal,
    },
    /// No signature by a required key vouches for this digest: unsigned, signed with another
    /// key, or a signature copied from another artifact.
    #[error("{reference}: signature not verified: {cause}")]
    Unverified {
        /// The reference.
        reference: String,
        /// What was found instead.
        #[source]
        cause: Unverified,
    },
}

impl RegistryError {
    /// Whether the same request may succeed later without anyone changing the host's
    /// configuration, so a caller retries it with backoff:
    /// - unreachable: yes, it may pass by itself;
    /// - not found: yes, a tag or repository that is not there yet may be pushed;
    /// - unsigned: yes, for the same reason (cosign signs after the push: the signature tag
    ///   appears a moment later);
    /// - every other failure: no. A signature that exists but does not verify (another key,
    ///   another artifact's), bytes that do not match their digest, a manifest that is not a
    ///   wasm artifact and refused credentials each need someone to act; retrying them only
    ///   loads the registry.
    pub fn is_retriable(&self) -> bool {
        match self {
            RegistryError::Unreachable { .. } | RegistryError::NotFound { .. } => true,
            RegistryError::Unverified { cause, .. } => matches!(cause, Unverified::Unsigned { .. }),
            RegistryError::Unauthorized { .. }
            | RegistryError::DigestMismatch { .. }
            | RegistryError::NotAnArtifact { .. }
            | RegistryError::Refused { .. } => false,
        }
    }
}

/// What a registry answered or `oci-client` reported: its status and error text, cut and
/// escaped, so it may be logged as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Said(String);

impl Said {
    /// An HTTP answer: `status` and what its body said (at most `max_bytes` of it).
    pub(crate) fn answer(status: StatusCode, body: &str, max_bytes: usize) -> Self {
        Said(format!(
            "{status}: {}",
            text::foreign(body.trim(), max_bytes)
        ))
    }

    /// Text someone else wrote (an `oci-client` error, a transport error chain), at most
    /// `max_bytes` of it.
    pub(crate) fn text(s: &str, max_bytes: usize) -> Self {
        Said(text::foreign(s, max_bytes))
    }
}

/// Why the registry could not be talked to.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// The connection failed (refused, reset, timed out); the transport's error chain.
    #[error("{0}")]
    Transport(Said),
    /// A 5xx or 429 answer.
    #[error("{0}")]
    Answer(Said),
    /// The pull as a whole took longer than its deadline.
    #[error("the registry did not finish within the pull deadline ({0:?})")]
    Deadline(Duration),
}

/// Why the registry did not let the host in.
#[derive(Debug, thiserror::Error)]
pub enum Unauthorized {
    /// The registry's answer (401, 403, or an `UNAUTHORIZED`/`DENIED` code).
    #[error("{0}")]
    Answer(Said),
    /// The token service refused the credentials.
    #[error("token refused: {0}")]
    TokenRefused(Said),
    /// The token service's answer is not a token.
    #[error("the token answer does not parse: {0}")]
    TokenUnparsable(#[source] serde_json::Error),
}

/// Which bytes did not match their digest.
#[derive(Debug, thiserror::Error)]
pub enum DigestMismatch {
    /// The manifest of a pinned reference hashes to another digest.
    #[error("the registry sent a manifest whose digest is {0}")]
    Manifest(String),
    /// A blob's bytes hash to another digest, or are not as many as its descriptor says.
    #[error("blob {digest} ({size} bytes) arrived as {got} ({got_size} bytes)")]
    Blob {
        /// The descriptor's digest.
        digest: String,
        /// The descriptor's size.
        size: u64,
        /// The digest of what arrived.
        got: String,
        /// How many bytes arrived.
        got_size: u64,
    },
    /// More bytes arrive for a blob than its descriptor says (stopped while it streams).
    #[error(
        "the registry sends {len} bytes or more for {digest}, over the {size} the manifest says"
    )]
    BlobTooLong {
        /// The descriptor's digest.
        digest: String,
        /// The descriptor's size.
        size: u64,
        /// The length seen (announced or read so far).
        len: u64,
    },
    /// `oci-client` found a digest that does not match during a push.
    #[error("{0}")]
    Push(Said),
}

/// Why this host refused to go on, or the registry refused for a reason no retry fixes.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Credentials would have travelled over plain HTTP to another machine.
    #[error(
        "credentials are never sent over plain HTTP except to this machine (localhost, 127.0.0.0/8, ::1)"
    )]
    PlainHttpCredentials,
    /// Only a reference pinned by digest can be signed.
    #[error("only a reference pinned by digest is signed")]
    NotPinned,
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] SignError),
    /// The registry's name does not make a URL.
    #[error("not a registry address: {0}")]
    Address(#[source] url::ParseError),
    /// A request path does not make a URL under the registry.
    #[error("{0}")]
    Path(#[source] url::ParseError),
    /// A redirect or auth realm to an internal address, or a request the transport refused
    /// to send there.
    #[error("not followed: {0}")]
    Internal(#[source] InternalTarget),
    /// An auth realm that is not a URL.
    #[error("auth realm {realm} is not a URL: {source}")]
    RealmNotUrl {
        /// The realm (cut, escaped).
        realm: String,
        /// Why.
        #[source]
        source: url::ParseError,
    },
    /// An auth realm at an internal address.
    #[error("auth realm refused: {0}")]
    RealmInternal(#[source] InternalTarget),
    /// An auth realm on another host over plain HTTP, with credentials to send.
    #[error("auth realm {0} is plain HTTP on another host: credentials are not sent there")]
    RealmPlainHttp(String),
    /// A token answer over its bound.
    #[error("token answer of {0} bytes or more")]
    TokenTooBig(u64),
    /// The registry's answer, neither a missing object, an authorization nor an outage.
    #[error("{0}")]
    Said(Said),
}

/// Why a signature did not vouch for a digest.
#[derive(Debug, thiserror::Error)]
pub enum Unverified {
    /// The reference names no digest.
    #[error("only a digest can be verified")]
    NotPinned,
    /// No signature manifest under the signature tag (yet).
    #[error("unsigned: the registry has no signature ({tag})")]
    Unsigned {
        /// The signature tag looked for.
        tag: String,
    },
    /// The signature manifest is not cosign's.
    #[error(transparent)]
    Manifest(#[from] SignatureError),
    /// A signature by a required key, of another artifact (copied).
    #[error("the signature by key {keys} is for another artifact ({other}), not {digest}")]
    OtherArtifact {
        /// Fingerprints of the required keys.
        keys: String,
        /// What the signed payload names instead (a digest, or why it names none).
        other: String,
        /// The digest looked for.
        digest: String,
    },
    /// None of the signatures verifies with a required key.
    #[error("none of its {count} signature(s) verifies with key(s) {keys}")]
    NoKey {
        /// How many signatures were looked at.
        count: usize,
        /// Fingerprints of the required keys.
        keys: String,
    },
}

/// Why a request was not sent: it would go to an internal address the registry chose.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{target} is {class}: only the registry's own host or public addresses are followed")]
pub struct InternalTarget {
    /// Host (escaped, cut) the registry pointed at.
    target: String,
    /// Which kind of internal address.
    class: String,
}

impl InternalTarget {
    pub(crate) fn new(host: &str, class: impl std::fmt::Display, max_bytes: usize) -> Self {
        InternalTarget {
            target: text::foreign(host, max_bytes),
            class: class.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> String {
        "127.0.0.1:5000/a:v1".into()
    }

    #[test]
    fn only_what_may_pass_by_itself_is_retriable() {
        let said = || Said::text("x", 10);
        let retriable = [
            RegistryError::Unreachable {
                reference: reference(),
                cause: Unreachable::Deadline(Duration::from_secs(1)),
            },
            RegistryError::NotFound {
                reference: reference(),
                said: said(),
            },
            RegistryError::Unverified {
                reference: reference(),
                cause: Unverified::Unsigned { tag: "t".into() },
            },
        ];
        for e in &retriable {
            assert!(e.is_retriable(), "{e}");
        }
        let permanent = [
            RegistryError::Unverified {
                reference: reference(),
                cause: Unverified::NoKey {
                    count: 1,
                    keys: "k".into(),
                },
            },
            RegistryError::Unverified {
                reference: reference(),
                cause: Unverified::OtherArtifact {
                    keys: "k".into(),
                    other: "sha256:1".into(),
                    digest: "sha256:2".into(),
                },
            },
            RegistryError::Unauthorized {
                reference: reference(),
                cause: Unauthorized::Answer(said()),
            },
            RegistryError::DigestMismatch {
                reference: reference(),
                cause: DigestMismatch::Manifest("sha256:1".into()),
            },
            RegistryError::NotAnArtifact {
                reference: reference(),
                cause: ArtifactError::LayerCount(2),
            },
            RegistryError::Refused {
                reference: reference(),
                cause: Refusal::PlainHttpCredentials,
            },
        ];
        for e in &permanent {
            assert!(!e.is_retriable(), "{e}");
        }
    }

    #[test]
    fn messages_name_the_reference_and_keep_the_cause() {
        let e = RegistryError::Unverified {
            reference: reference(),
            cause: Unverified::Unsigned {
                tag: "sha256-0.sig".into(),
            },
        };
        assert_eq!(
            e.to_string(),
            "127.0.0.1:5000/a:v1: signature not verified: unsigned: the registry has no \
             signature (sha256-0.sig)"
        );
        let cause = std::error::Error::source(&e).expect("the cause is kept");
        assert!(cause.downcast_ref::<Unverified>().is_some());
        let said = Said::answer(StatusCode::NOT_FOUND, "no\nsuch tag", 100);
        assert_eq!(said.to_string(), "404 Not Found: no\\nsuch tag");
    }
}
