//! [`Registry`]: push a component as a wasm artifact, pull one back with every digest checked.
//!
//! Pushes go through `oci-client`; pulls through `super::fetch`, which bounds every body and
//! refuses redirects and auth realms to internal addresses, and each pull as a whole has a
//! deadline ([`PULL_DEADLINE`] unless [`Registry::with_pull_deadline`] says otherwise).

use std::time::Duration;

use http::HeaderValue;
use oci_client::client::{ClientConfig, ClientProtocol};

use super::artifact::{
    self, ArtifactError, MAX_ARTIFACT_BYTES, OCI_MANIFEST_MEDIA_TYPE, sha256_digest,
};
use super::credentials::{CredentialStore, Credentials};
use super::error::{
    DigestMismatch, Refusal, RegistryError, Said, Unauthorized, Unreachable, Unverified,
};
use super::fetch::{Fetcher, Session};
use super::reference::ArtifactRef;
use super::signature::{self, PublicKey, SigningKey};

/// Manifest media types a signature manifest may have: cosign writes OCI or Docker v2.
const SIGNATURE_MANIFEST_MEDIA_TYPES: [&str; 2] = [
    OCI_MANIFEST_MEDIA_TYPE,
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// A pulled component whose bytes matched every digest.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The reference pinned to the manifest digest it resolved to.
    pub reference: ArtifactRef,
    /// `sha256:<hex>` of the manifest.
    pub digest: String,
    /// The component's bytes.
    pub wasm: Vec<u8>,
}

/// Longest a pull (or a tag's resolution) may take as a whole, however the registry paces
/// its bytes: a 256 MiB component at 2.2 MB/s. Each read also times out after 60 s.
pub const PULL_DEADLINE: Duration = Duration::from_secs(120);

/// Pushes and pulls wasm artifacts, authenticating from a docker credentials file.
#[derive(Clone)]
pub struct Registry {
    credentials: CredentialStore,
    https: oci_client::Client,
    http: oci_client::Client,
    fetch: Fetcher,
    deadline: Duration,
}

impl Registry {
    /// A client using `credentials` (anonymous for registries it does not name). TLS uses the
    /// platform's roots.
    pub fn new(credentials: CredentialStore) -> Self {
        // reqwest is built without a crypto provider of its own: it uses the process default,
        // the ring provider kube uses too (an error only means one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = |protocol| {
            oci_client::Client::new(ClientConfig {
                protocol,
                connect_timeout: Some(std::time::Duration::from_secs(10)),
                read_timeout: Some(std::time::Duration::from_secs(60)),
                // A manifest list is never a handler: refuse it instead of picking a platform.
                platform_resolver: None,
                ..ClientConfig::default()
            })
        };
        Registry {
            credentials,
            https: client(ClientProtocol::Https),
            http: client(ClientProtocol::Http),
            fetch: Fetcher::new(),
            deadline: PULL_DEADLINE,
        }
    }

    /// The same client with another total deadline per pull (and per tag resolution).
    pub fn with_pull_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The credentials for `r`'s registry, unless they would travel over plain HTTP to
    /// another machine.
    fn credentials_for(
        &self,
        r: &ArtifactRef,
        plain_http: bool,
    ) -> Result<Credentials, RegistryError> {
        let creds = self.credentials.for_registry(&r.registry);
        if plain_http && !creds.is_anonymous() && !r.is_loopback() {
            return Err(RegistryError::Refused {
                reference: r.to_string(),
                cause: Refusal::PlainHttpCredentials,
            });
        }
        Ok(creds)
    }

    fn client_for(
        &self,
        r: &ArtifactRef,
        plain_http: bool,
    ) -> Result<(&oci_client::Client, oci_client::secrets::RegistryAuth), RegistryError> {
        let creds = self.credentials_for(r, plain_http)?.to_oci();
        Ok((if plain_http { &self.http } else { &self.https }, creds))
    }

    fn session<'a>(
        &'a self,
        r: &'a ArtifactRef,
        plain_http: bool,
    ) -> Result<Session<'a>, RegistryError> {
        let creds = self.credentials_for(r, plain_http)?;
        self.fetch.session(r, creds, plain_http)
    }

    /// `work` within the pull deadline; past it, the registry counts as unreachable.
    async fn within_deadline<T>(
        &self,
        reference: &ArtifactRef,
        work: impl Future<Output = Result<T, RegistryError>>,
    ) -> Result<T, RegistryError> {
        tokio::time::timeout(self.deadline, work)
            .await
            .unwrap_or_else(|_| {
                Err(RegistryError::Unreachable {
                    reference: reference.to_string(),
                    cause: Unreachable::Deadline(self.deadline),
                })
            })
    }

    /// Pushes `wasm` under `reference` (its tag) and returns the reference pinned to the
    /// manifest digest.
    pub async fn push(
        &self,
        reference: &ArtifactRef,
        wasm: Vec<u8>,
        plain_http: bool,
    ) -> Result<ArtifactRef, RegistryError> {
        let (client, auth) = self.client_for(reference, plain_http)?;
        if wasm.len() as u64 > MAX_ARTIFACT_BYTES {
            return Err(RegistryError::NotAnArtifact {
                reference: reference.to_string(),
                cause: ArtifactError::TooBig(wasm.len() as u64),
            });
        }
        let a = artifact::build(wasm);
        let digest = a.manifest.digest.clone();
        push_image(client, &auth, reference, [a.layer, a.config], a.manifest).await?;
        Ok(reference.pinned(&digest))
    }

    /// The manifest digest `reference` names now (its own digest when pinned), without the
    /// component: how a followed tag is polled.
    pub async fn resolve(
        &self,
        reference: &ArtifactRef,
        plain_http: bool,
    ) -> Result<String, RegistryError> {
        if let Some(d) = &reference.digest {
            return Ok(d.clone());
        }
        self.within_deadline(reference, async {
            let mut session = self.session(reference, plain_http)?;
            Ok(manifest(&mut session, reference).await?.1)
        })
        .await
    }

    /// Pulls the component `reference` names: the manifest (its digest checked when pinned),
    /// then its one layer (size bounded, digest checked).
    pub async fn pull(
        &self,
        reference: &ArtifactRef,
        plain_http: bool,
    ) -> Result<Pulled, RegistryError> {
        self.pull_signed(reference, &[], plain_http).await
    }

    /// As [`Registry::pull`], and when `keys` are given the manifest digest must carry a
    /// cosign signature by one of them, checked before the component is downloaded. The
    /// whole pull, signature included, is within the pull deadline.
    pub async fn pull_signed(
        &self,
        reference: &ArtifactRef,
        keys: &[PublicKey],
        plain_http: bool,
    ) -> Result<Pulled, RegistryError> {
        self.within_deadline(reference, async {
            let mut session = self.session(reference, plain_http)?;
            let (raw, digest) = manifest(&mut session, reference).await?;
            let layer =
                artifact::component_layer(&raw).map_err(|cause| RegistryError::NotAnArtifact {
                    reference: reference.to_string(),
                    cause,
                })?;
            let pinned = reference.pinned(&digest);
            if !keys.is_empty() {
                self.verify_now(&pinned, keys, plain_http).await?;
            }
            let wasm = blob(&mut session, &pinned, &layer.digest, layer.size).await?;
            Ok(Pulled {
                reference: pinned,
                digest,
                wasm,
            })
        })
        .await
    }

    /// Signs the artifact `pinned` names (cosign's layout: a simple-signing payload under the
    /// tag `sha256-<hex>.sig`, replacing signatures already there). Returns the signature's
    /// reference.
    pub async fn sign(
        &self,
        pinned: &ArtifactRef,
        key: &SigningKey,
        plain_http: bool,
    ) -> Result<ArtifactRef, RegistryError> {
        let refused = |cause: Refusal| RegistryError::Refused {
            reference: pinned.to_string(),
            cause,
        };
        let digest = pinned
            .digest
            .as_deref()
            .ok_or_else(|| refused(Refusal::NotPinned))?;
        let payload = signature::payload(&pinned.repository_name(), digest);
        let sig = key.sign(&payload).map_err(|e| refused(e.into()))?;
        let m = signature::signature_manifest(payload, &sig);
        let target = pinned.signature_ref();
        let (client, auth) = self.client_for(&target, plain_http)?;
        push_image(client, &auth, &target, [m.payload, m.config], m.manifest).await?;
        Ok(target)
    }

    /// Succeeds when a cosign signature of `pinned`'s digest verifies with one of `keys` and
    /// its payload names that digest; else says what was found. Within the pull deadline.
    pub async fn verify(
        &self,
        pinned: &ArtifactRef,
        keys: &[PublicKey],
        plain_http: bool,
    ) -> Result<(), RegistryError> {
        self.within_deadline(pinned, self.verify_now(pinned, keys, plain_http))
            .await
    }

    async fn verify_now(
        &self,
        pinned: &ArtifactRef,
        keys: &[PublicKey],
        plain_http: bool,
    ) -> Result<(), RegistryError> {
        let unverified = |cause: Unverified| RegistryError::Unverified {
            reference: pinned.to_string(),
            cause,
        };
        let Some(digest) = pinned.digest.as_deref() else {
            return Err(unverified(Unverified::NotPinned));
        };
        let target = pinned.signature_ref();
        let mut session = self.session(&target, plain_http)?;
        let tag = target.tag.as_deref().unwrap_or_default();
        // Bounded like any manifest: an oversized one is refused while it streams.
        let raw = match session.manifest(tag, &SIGNATURE_MANIFEST_MEDIA_TYPES).await {
            Ok(raw) => raw,
            Err(RegistryError::NotFound { .. }) => {
                return Err(unverified(Unverified::Unsigned {
                    tag: tag.to_string(),
                }));
            }
            Err(e) => return Err(e),
        };
        let layers = signature::signature_layers(&raw).map_err(|e| unverified(e.into()))?;
        let mut other_digests = Vec::new();
        for layer in &layers {
            let payload = blob(&mut session, &target, &layer.digest, layer.size).await?;
            if !keys.iter().any(|k| k.verifies(&payload, &layer.signature)) {
                continue;
            }
            match signature::signed_digest(&payload) {
                Ok(d) if d == digest => return Ok(()),
                Ok(d) => other_digests.push(d),
                Err(e) => other_digests.push(e.to_string()),
            }
        }
        let keys = keys
            .iter()
            .map(PublicKey::fingerprint)
            .collect::<Vec<_>>()
            .join(", ");
        Err(unverified(match other_digests.into_iter().next() {
            Some(other) => Unverified::OtherArtifact {
                keys,
                other,
                digest: digest.to_string(),
            },
            None => Unverified::NoKey {
                count: layers.len(),
                keys,
            },
        }))
    }
}

/// The manifest `reference` names (at most `MAX_MANIFEST_BYTES`, refused while it streams)
/// and its digest, checked against the pin.
async fn manifest(
    session: &mut Session<'_>,
    reference: &ArtifactRef,
) -> Result<(Vec<u8>, String), RegistryError> {
    let name = reference
        .digest
        .as_deref()
        .or(reference.tag.as_deref())
        .unwrap_or("latest");
    let raw = session.manifest(name, &[OCI_MANIFEST_MEDIA_TYPE]).await?;
    // The digest of the bytes received, never the one the registry says.
    let digest = sha256_digest(&raw);
    if let Some(pinned) = &reference.digest
        && *pinned != digest
    {
        return Err(RegistryError::DigestMismatch {
            reference: reference.to_string(),
            cause: DigestMismatch::Manifest(digest),
        });
    }
    Ok((raw, digest))
}

/// Blob `digest` of `reference`'s repository: at most `size` bytes (refused from the header,
/// else while it streams), which must hash to `digest`.
async fn blob(
    session: &mut Session<'_>,
    reference: &ArtifactRef,
    digest: &str,
    size: u64,
) -> Result<Vec<u8>, RegistryError> {
    let bytes = session.blob(digest, size).await?;
    let got = sha256_digest(&bytes);
    if got != digest || bytes.len() as u64 != size {
        return Err(RegistryError::DigestMismatch {
            reference: reference.to_string(),
            cause: DigestMismatch::Blob {
                digest: digest.to_string(),
                size,
                got,
                got_size: bytes.len() as u64,
            },
        });
    }
    Ok(bytes)
}

/// Pushes one image to `target`: its blobs first, then the manifest naming them, since a registry
/// refuses a manifest whose blobs it does not hold. A component and a signature are both pushed so.
async fn push_image(
    client: &oci_client::Client,
    auth: &oci_client::secrets::RegistryAuth,
    target: &ArtifactRef,
    blobs: [artifact::Blob; 2],
    manifest: artifact::Blob,
) -> Result<(), RegistryError> {
    let oci = target.to_oci();
    let err = |e| classify(target, e);
    client
        .auth(&oci, auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(err)?;
    for blob in blobs {
        client
            .push_blob(&oci, blob.data, &blob.digest)
            .await
            .map_err(err)?;
    }
    client
        .push_manifest_raw(
            &oci,
            manifest.data,
            HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE),
        )
        .await
        .map_err(err)?;
    Ok(())
}

/// Sorts an `oci-client` error into what an operator can act on.
fn classify(reference: &ArtifactRef, e: oci_client::errors::OciDistributionError) -> RegistryError {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode};
    let reference = reference.to_string();
    // oci-client puts the registry's error body in its message: cut and escaped here.
    let said = Said::text(&e.to_string(), 2 * super::fetch::SHOWN_BYTES);
    let unauthorized = |said| RegistryError::Unauthorized {
        reference: reference.clone(),
        cause: Unauthorized::Answer(said),
    };
    let not_found = |said| RegistryError::NotFound {
        reference: reference.clone(),
        said,
    };
    let unreachable = |cause| RegistryError::Unreachable {
        reference: reference.clone(),
        cause,
    };
    let refused = |said| RegistryError::Refused {
        reference: reference.clone(),
        cause: Refusal::Said(said),
    };
    match &e {
        E::AuthenticationFailure(_) | E::UnauthorizedError { .. } => unauthorized(said),
        E::ImageManifestNotFoundError(_) => not_found(said),
        E::RegistryError { envelope, .. } => {
            let codes: Vec<_> = envelope.errors.iter().map(|x| &x.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                unauthorized(said)
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                not_found(said)
            } else {
                refused(said)
            }
        }
        E::ServerError { code, .. } if *code == 401 || *code == 403 => unauthorized(said),
        E::ServerError { code, .. } if *code == 404 => not_found(said),
        E::ServerError { code, .. } if *code >= 500 || *code == 429 => {
            unreachable(Unreachable::Answer(said))
        }
        E::RequestError(r) if r.is_connect() || r.is_timeout() || r.is_request() => unreachable(
            Unreachable::Transport(Said::text(&format!("{e:#}"), 2 * super::fetch::SHOWN_BYTES)),
        ),
        E::IoError(_) => unreachable(Unreachable::Transport(said)),
        E::DigestError(_) => RegistryError::DigestMismatch {
            reference: reference.clone(),
            cause: DigestMismatch::Push(said),
        },
        _ => refused(said),
    }
}
