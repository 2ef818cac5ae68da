//! Handlers as OCI artifacts: the CNCF wasm artifact layout (a `application/vnd.wasm.config.v0+json`
//! config and one `application/wasm` layer), pushed to and pulled from any OCI registry.
//!
//! [`reference`](mod@reference) checks what an operator or author names; [`credentials`] reads docker's
//! `config.json` (also the shape of a `kubernetes.io/dockerconfigjson` Secret); [`artifact`]
//! builds and checks manifests; [`signature`] signs and verifies them as cosign does;
//! [`client`] pushes and pulls (failing with a [`RegistryError`] that says whether a retry may
//! help), checking every digest, bound and signature; `fetch` does a
//! pull's reads with the registry treated as hostile (bounded bodies, no internal redirects).
//!
//! Knows nothing of compiling or running components, nor of plugins: it moves bytes whose
//! digests match, and the layers above decide what runs.

pub mod artifact;
pub mod client;
pub mod credentials;
mod error;
mod fetch;
pub mod reference;
pub mod signature;

pub use artifact::{MAX_ARTIFACT_BYTES, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
pub use client::{PULL_DEADLINE, Pulled, Registry};
pub use credentials::{CredentialStore, Credentials};
pub use error::{
    DigestMismatch, InternalTarget, Refusal, RegistryError, Said, Unauthorized, Unreachable,
    Unverified,
};
pub use reference::ArtifactRef;
pub use signature::{PublicKey, SigningKey};
