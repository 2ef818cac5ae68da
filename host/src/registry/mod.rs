//! Handlers as OCI artifacts: the CNCF wasm artifact layout (a `application/vnd.wasm.config.v0+json`
//! config and one `application/wasm` layer), pushed to and pulled from any OCI registry.
//!
//! [`ArtifactRef`] checks what an operator or author names; [`CredentialStore`] reads docker's
//! `config.json` (also the shape of a `kubernetes.io/dockerconfigjson` Secret);
//! [`build_artifact`] builds manifests (and `artifact` checks them); [`SigningKey`] and
//! [`PublicKey`] sign and verify them as cosign does; [`Registry`] pushes and pulls (failing
//! with a [`RegistryError`] that says whether a retry may help), checking every digest, bound
//! and signature; `fetch` does a
//! pull's reads with the registry treated as hostile (bounded bodies, no internal redirects).
//!
//! Knows nothing of compiling or running components, nor of plugins: it moves bytes whose
//! digests match, and the layers above decide what runs.

mod artifact;
mod client;
mod credentials;
mod error;
mod fetch;
mod reference;
mod signature;

pub use artifact::{
    Artifact, ArtifactError, Blob, DigestError, MAX_ARTIFACT_BYTES, MAX_MANIFEST_BYTES,
    WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, build as build_artifact,
};
pub use client::{PULL_DEADLINE, Pulled, Registry};
pub use credentials::{CredentialStore, Credentials, CredentialsError, CredentialsFileError};
pub use error::{
    DigestMismatch, InternalTarget, Refusal, RegistryError, Said, Unauthorized, Unreachable,
    Unverified,
};
pub use reference::{ArtifactRef, ReferenceError};
pub use signature::{KeyError, KeyFileError, PublicKey, SignError, SignatureError, SigningKey};
