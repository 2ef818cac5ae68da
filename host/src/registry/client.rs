//! [`Registry`]: push a component as a wasm artifact, pull one back with every digest checked.

use futures::StreamExt;
use http::HeaderValue;
use oci_client::client::{ClientConfig, ClientProtocol};
use sha2::{Digest, Sha256};

use super::artifact::{
    self, MAX_ARTIFACT_BYTES, MAX_MANIFEST_BYTES, OCI_MANIFEST_MEDIA_TYPE, sha256_digest,
};
use super::credentials::CredentialStore;
use super::reference::ArtifactRef;

/// Why a push or pull failed; the message names the reference.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Could not talk to the registry (refused, timed out, 5xx): may pass by itself.
    #[error("{reference}: registry unreachable: {message}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// Why.
        message: String,
    },
    /// The registry refused the credentials, or there were none where it needs some.
    #[error("{reference}: not authorized: {message}")]
    Unauthorized {
        /// The reference.
        reference: String,
        /// Why.
        message: String,
    },
    /// No such repository, tag or digest.
    #[error("{reference}: not found in the registry: {message}")]
    NotFound {
        /// The reference.
        reference: String,
        /// What the registry said.
        message: String,
    },
    /// Bytes that do not hash to the digest that names them.
    #[error("{reference}: digest mismatch: {message}")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// Which digest.
        message: String,
    },
    /// A manifest that is not a one-layer wasm artifact within the bounds.
    #[error("{reference}: {message}")]
    NotAnArtifact {
        /// The reference.
        reference: String,
        /// Why.
        message: String,
    },
    /// Refused before any request (plain HTTP with credentials to another machine, ...).
    #[error("{reference}: {message}")]
    Refused {
        /// The reference.
        reference: String,
        /// Why.
        message: String,
    },
}

impl RegistryError {
    /// Whether retrying later may succeed without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Unreachable { .. })
    }
}

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

/// Pushes and pulls wasm artifacts, authenticating from a docker credentials file.
#[derive(Clone)]
pub struct Registry {
    credentials: CredentialStore,
    https: oci_client::Client,
    http: oci_client::Client,
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
        }
    }

    fn client_for(
        &self,
        r: &ArtifactRef,
        plain_http: bool,
    ) -> Result<(&oci_client::Client, oci_client::secrets::RegistryAuth), RegistryError> {
        let creds = self.credentials.for_registry(&r.registry);
        if !plain_http {
            return Ok((&self.https, creds.to_oci()));
        }
        if !creds.is_anonymous() && !r.is_loopback() {
            return Err(RegistryError::Refused {
                reference: r.to_string(),
                message: "credentials are never sent over plain HTTP except to this machine \
                          (localhost, 127.0.0.0/8, ::1)"
                    .into(),
            });
        }
        Ok((&self.http, creds.to_oci()))
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
        let oci = reference.to_oci();
        let err = |e| classify(reference, e);
        if wasm.len() as u64 > MAX_ARTIFACT_BYTES {
            return Err(RegistryError::NotAnArtifact {
                reference: reference.to_string(),
                message: format!("the component is over the {MAX_ARTIFACT_BYTES}-byte limit"),
            });
        }
        let a = artifact::build(wasm);
        client
            .auth(&oci, &auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(err)?;
        client
            .push_blob(&oci, a.layer.data, &a.layer.digest)
            .await
            .map_err(err)?;
        client
            .push_blob(&oci, a.config.data, &a.config.digest)
            .await
            .map_err(err)?;
        client
            .push_manifest_raw(
                &oci,
                a.manifest.data,
                HeaderValue::from_static(OCI_MANIFEST_MEDIA_TYPE),
            )
            .await
            .map_err(err)?;
        Ok(reference.pinned(&a.manifest.digest))
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
        Ok(self.manifest(reference, plain_http).await?.1)
    }

    async fn manifest(
        &self,
        reference: &ArtifactRef,
        plain_http: bool,
    ) -> Result<(bytes::Bytes, String), RegistryError> {
        let (client, auth) = self.client_for(reference, plain_http)?;
        let (raw, _) = client
            .pull_manifest_raw(&reference.to_oci(), &auth, &[OCI_MANIFEST_MEDIA_TYPE])
            .await
            .map_err(|e| classify(reference, e))?;
        if raw.len() > MAX_MANIFEST_BYTES {
            return Err(RegistryError::NotAnArtifact {
                reference: reference.to_string(),
                message: format!("manifest of {} bytes, over {MAX_MANIFEST_BYTES}", raw.len()),
            });
        }
        // The digest of the bytes received, never the one the registry says.
        let digest = sha256_digest(&raw);
        if let Some(pinned) = &reference.digest
            && *pinned != digest
        {
            return Err(RegistryError::DigestMismatch {
                reference: reference.to_string(),
                message: format!("the registry sent a manifest whose digest is {digest}"),
            });
        }
        Ok((raw, digest))
    }

    /// Pulls the component `reference` names: the manifest (its digest checked when pinned),
    /// then its one layer (size bounded, digest checked).
    pub async fn pull(
        &self,
        reference: &ArtifactRef,
        plain_http: bool,
    ) -> Result<Pulled, RegistryError> {
        let (raw, digest) = self.manifest(reference, plain_http).await?;
        let layer =
            artifact::component_layer(&raw).map_err(|message| RegistryError::NotAnArtifact {
                reference: reference.to_string(),
                message,
            })?;
        let (client, _) = self.client_for(reference, plain_http)?;
        let pinned = reference.pinned(&digest);
        let mut stream = client
            .pull_blob_stream(&pinned.to_oci(), layer.digest.as_str())
            .await
            .map_err(|e| classify(reference, e))?
            .stream;
        let mut wasm = Vec::with_capacity(layer.size as usize);
        let mut hasher = Sha256::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| RegistryError::Unreachable {
                reference: reference.to_string(),
                message: format!("reading the component: {e}"),
            })?;
            if (wasm.len() + chunk.len()) as u64 > layer.size {
                return Err(RegistryError::DigestMismatch {
                    reference: reference.to_string(),
                    message: format!(
                        "the registry sent more than the {} bytes the manifest says",
                        layer.size
                    ),
                });
            }
            hasher.update(&chunk);
            wasm.extend_from_slice(&chunk);
        }
        let got = format!("sha256:{}", hex::encode(hasher.finalize()));
        if got != layer.digest || wasm.len() as u64 != layer.size {
            return Err(RegistryError::DigestMismatch {
                reference: reference.to_string(),
                message: format!(
                    "the component layer hashes to {got} ({} bytes), not {} ({} bytes)",
                    wasm.len(),
                    layer.digest,
                    layer.size
                ),
            });
        }
        Ok(Pulled {
            reference: pinned,
            digest,
            wasm,
        })
    }
}

/// Sorts an `oci-client` error into what an operator can act on.
fn classify(reference: &ArtifactRef, e: oci_client::errors::OciDistributionError) -> RegistryError {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode};
    let reference = reference.to_string();
    let message = e.to_string();
    match &e {
        E::AuthenticationFailure(_) | E::UnauthorizedError { .. } => {
            RegistryError::Unauthorized { reference, message }
        }
        E::ImageManifestNotFoundError(_) => RegistryError::NotFound { reference, message },
        E::RegistryError { envelope, .. } => {
            let codes: Vec<_> = envelope.errors.iter().map(|x| &x.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                RegistryError::Unauthorized { reference, message }
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                RegistryError::NotFound { reference, message }
            } else {
                RegistryError::Refused { reference, message }
            }
        }
        E::ServerError { code, .. } if *code == 401 || *code == 403 => {
            RegistryError::Unauthorized { reference, message }
        }
        E::ServerError { code, .. } if *code == 404 => {
            RegistryError::NotFound { reference, message }
        }
        E::ServerError { code, .. } if *code >= 500 || *code == 429 => {
            RegistryError::Unreachable { reference, message }
        }
        E::RequestError(r) if r.is_connect() || r.is_timeout() || r.is_request() => {
            RegistryError::Unreachable {
                reference,
                message: format!("{e:#}"),
            }
        }
        E::IoError(_) => RegistryError::Unreachable { reference, message },
        E::DigestError(_) => RegistryError::DigestMismatch { reference, message },
        _ => RegistryError::Refused { reference, message },
    }
}
