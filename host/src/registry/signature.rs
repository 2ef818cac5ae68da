//! Cosign-compatible signatures of artifacts, checked against the operator's public keys.
//!
//! Cosign's layout, so that `cosign sign --key` signatures verify here and ours verify with
//! `cosign verify --key`: the signature of the artifact `sha256:<hex>` is an OCI manifest
//! tagged `sha256-<hex>.sig` in the same repository; each layer is a simple-signing payload
//! (`application/vnd.dev.cosign.simplesigning.v1+json`) naming the signed manifest digest, with
//! the ECDSA P-256 / SHA-256 signature of the payload's bytes (ASN.1 DER, base64) in the
//! annotation `dev.cosignproject.cosign/signature`. Only that key type is read: it is cosign's
//! default, and `ring` (already built for TLS) does the curve arithmetic, so signing adds no
//! crate to the build. Transparency-log entries are neither written nor required.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _,
    UnparsedPublicKey,
};
use serde::Deserialize;

use super::artifact::{Blob, DigestError, OCI_MANIFEST_MEDIA_TYPE, check_digest, shown};

/// Media type of a signature layer: a simple-signing payload.
pub(crate) const SIGNATURE_LAYER_MEDIA_TYPE: &str =
    "application/vnd.dev.cosign.simplesigning.v1+json";
/// Annotation carrying the base64 signature of a layer's payload.
pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The `critical.type` every cosign payload carries.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Config media type of cosign's signature manifests.
const SIGNATURE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// Most signatures (layers) of one artifact looked at: each costs a blob fetch.
pub(crate) const MAX_SIGNATURES: usize = 16;
/// Largest payload read: a simple-signing payload is a few hundred bytes.
pub(crate) const MAX_PAYLOAD_BYTES: u64 = 16 << 10;
/// Largest key file read.
const MAX_KEY_BYTES: u64 = 64 << 10;
/// DER prefix of a P-256 `SubjectPublicKeyInfo` (id-ecPublicKey, prime256v1, BIT STRING of 66
/// bytes): the only public-key form cosign writes for its default keys. Comparing the fixed
/// prefix reads that one form exactly, without an ASN.1 parser in the build.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Why a text is not a key this host reads. A PEM label in it is cut to 80 bytes and quoted.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Not PEM at all.
    #[error("not a PEM {0} key: {1}")]
    NotPem(&'static str, #[source] pem::PemError),
    /// A PEM block of another kind where a `PUBLIC KEY` belongs.
    #[error("PEM block {0:?} is not a PUBLIC KEY")]
    NotPublic(String),
    /// A public key of another algorithm or curve.
    #[error("only ECDSA P-256 public keys are supported (cosign's default)")]
    NotP256,
    /// An encrypted private key (cosign's own `cosign.key`): its cipher is not read here.
    #[error(
        "{0:?} is an encrypted key; use `kubewasm generate-key-pair`, or an unencrypted PKCS#8 \
         P-256 key (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)"
    )]
    Encrypted(String),
    /// A PEM block of another kind where a `PRIVATE KEY` belongs.
    #[error(
        "PEM block {0:?} is not a PKCS#8 PRIVATE KEY (convert with openssl pkcs8 -topk8 -nocrypt)"
    )]
    NotPkcs8(String),
    /// PKCS#8 that `ring` does not take as an ECDSA P-256 key.
    #[error("not an ECDSA P-256 PKCS#8 key: {0}")]
    // ring is built without `std`: its errors are not `std::error::Error`, so they are kept
    // for their text only.
    Rejected(ring::error::KeyRejected),
    /// Generating a key needed randomness the system did not give.
    #[error("the system's random source failed")]
    Random(ring::error::Unspecified),
    /// The key file could not be read.
    #[error("{0}")]
    Read(#[source] std::io::Error),
    /// The key file is larger than any key.
    #[error("over {MAX_KEY_BYTES} bytes")]
    TooBig,
}

/// A [`KeyError`] naming the key file it is about.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct KeyFileError {
    /// The key file.
    pub path: PathBuf,
    /// What is wrong with it.
    #[source]
    pub source: KeyError,
}

/// `ring` could not sign (its only failure is the system's random source).
#[derive(Debug, thiserror::Error)]
#[error("signing failed")]
pub struct SignError(ring::error::Unspecified);

/// Why a signature manifest or a signed payload is not cosign's. Registry-provided values are
/// cut to 80 bytes and quoted.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// The signature manifest is not JSON of an OCI manifest.
    #[error("the signature manifest is not an OCI manifest: {0}")]
    NotAManifest(#[source] serde_json::Error),
    /// The signed payload is not a simple-signing payload.
    #[error("the signed payload is not a cosign simple-signing payload: {0}")]
    NotAPayload(#[source] serde_json::Error),
    /// The payload's `critical.type` is not cosign's.
    #[error("the signed payload's type is {0:?}, not {PAYLOAD_TYPE:?}")]
    PayloadType(String),
    /// The digest the payload names is malformed.
    #[error(transparent)]
    Digest(#[from] DigestError),
}

/// The tag cosign stores the signatures of manifest `digest` under.
pub(crate) fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// A public key an artifact must be signed with (ECDSA P-256, as `cosign.pub`).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The uncompressed curve point (65 bytes).
    point: Vec<u8>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", &self.fingerprint())
    }
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (what `cosign generate-key-pair` writes as `cosign.pub`).
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let pem = pem::parse(text).map_err(|e| KeyError::NotPem("public", e))?;
        if pem.tag() != "PUBLIC KEY" {
            return Err(KeyError::NotPublic(shown(pem.tag())));
        }
        let der = pem.contents();
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 4 => Ok(PublicKey {
                point: point.to_vec(),
            }),
            _ => Err(KeyError::NotP256),
        }
    }

    /// Reads a key file; the error names it.
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        read_key(path)
            .and_then(|text| Self::from_pem(&text))
            .map_err(|source| KeyFileError {
                path: path.to_path_buf(),
                source,
            })
    }

    /// The PEM form, as cosign writes `cosign.pub`.
    pub fn to_pem(&self) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.point);
        pem::encode(&pem::Pem::new("PUBLIC KEY", der))
    }

    /// A short name of the key for log lines: the start of the SHA-256 of its point.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest as _;
        hex::encode(&sha2::Sha256::digest(&self.point)[..8])
    }

    /// Whether `signature` (ASN.1 DER) signs `payload` under this key.
    pub fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, signature)
            .is_ok()
    }
}

/// A private key that signs pushes (ECDSA P-256, an unencrypted PKCS#8 PEM `PRIVATE KEY`).
pub struct SigningKey {
    pair: EcdsaKeyPair,
}

impl SigningKey {
    /// Reads a PEM `PRIVATE KEY` (PKCS#8). Cosign's own encrypted `cosign.key` is refused with
    /// the way to an unencrypted key, since reading it would need its password-based cipher.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let pem = pem::parse(text).map_err(|e| KeyError::NotPem("private", e))?;
        match pem.tag() {
            "PRIVATE KEY" => {}
            t if t.starts_with("ENCRYPTED") => return Err(KeyError::Encrypted(shown(t))),
            t => return Err(KeyError::NotPkcs8(shown(t))),
        }
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            pem.contents(),
            &SystemRandom::new(),
        )
        .map_err(KeyError::Rejected)?;
        Ok(SigningKey { pair })
    }

    /// Reads a key file; the error names it.
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        read_key(path)
            .and_then(|text| Self::from_pem(&text))
            .map_err(|source| KeyFileError {
                path: path.to_path_buf(),
                source,
            })
    }

    /// A new random key pair, as PEM texts (private PKCS#8, public SPKI).
    pub fn generate() -> Result<(String, PublicKey), KeyError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(KeyError::Random)?;
        let private = pem::encode(&pem::Pem::new("PRIVATE KEY", doc.as_ref()));
        let public = SigningKey::from_pem(&private)?.public_key();
        Ok((private, public))
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            point: self.pair.public_key().as_ref().to_vec(),
        }
    }

    /// The ASN.1 DER signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> Result<Vec<u8>, SignError> {
        self.pair
            .sign(&SystemRandom::new(), payload)
            .map(|s| s.as_ref().to_vec())
            .map_err(SignError)
    }
}

fn read_key(path: &Path) -> Result<String, KeyError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(KeyError::Read)?;
    let mut text = String::new();
    file.take(MAX_KEY_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(KeyError::Read)?;
    if text.len() as u64 > MAX_KEY_BYTES {
        return Err(KeyError::TooBig);
    }
    Ok(text)
}

/// The simple-signing payload cosign signs for manifest `digest` of `repository`
/// (`REGISTRY/REPO`, no tag).
pub(crate) fn payload(repository: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    }))
    .expect("JSON of strings")
}

/// What a signature manifest uploads: its config, its one payload layer and itself.
pub(crate) struct SignatureManifest {
    /// The signed payload.
    pub(crate) payload: Blob,
    /// The image config cosign writes beside it.
    pub(crate) config: Blob,
    /// The manifest, pushed under [`signature_tag`].
    pub(crate) manifest: Blob,
}

/// The manifest holding `payload` and its DER `signature`, as cosign writes it.
pub(crate) fn signature_manifest(payload: Vec<u8>, signature: &[u8]) -> SignatureManifest {
    let payload = Blob::new(payload);
    let config = serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [payload.digest]},
    });
    let config = Blob::new(serde_json::to_vec(&config).expect("JSON of literals"));
    let signature = base64::engine::general_purpose::STANDARD.encode(signature);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": SIGNATURE_CONFIG_MEDIA_TYPE, "digest": config.digest, "size": config.data.len()},
        "layers": [{
            "mediaType": SIGNATURE_LAYER_MEDIA_TYPE,
            "digest": payload.digest,
            "size": payload.data.len(),
            "annotations": {SIGNATURE_ANNOTATION: signature},
        }],
    });
    let manifest = Blob::new(serde_json::to_vec(&manifest).expect("JSON of literals"));
    SignatureManifest {
        payload,
        config,
        manifest,
    }
}

/// One signature a signature manifest carries: its payload's digest and size, and the
/// signature bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SignatureLayer {
    /// `sha256:<hex>` of the payload blob.
    pub(crate) digest: String,
    /// Payload size (at most [`MAX_PAYLOAD_BYTES`]).
    pub(crate) size: u64,
    /// The decoded DER signature.
    pub(crate) signature: Vec<u8>,
}

#[derive(Deserialize)]
struct SigManifest {
    #[serde(default)]
    layers: Vec<SigDescriptor>,
}

#[derive(Deserialize)]
struct SigDescriptor {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    annotations: std::collections::HashMap<String, String>,
}

/// The simple-signing layers of a signature manifest (others are skipped), at most
/// [`MAX_SIGNATURES`].
pub(crate) fn signature_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, SignatureError> {
    let m: SigManifest = serde_json::from_slice(manifest).map_err(SignatureError::NotAManifest)?;
    let mut out = Vec::new();
    for l in m
        .layers
        .into_iter()
        .filter(|l| l.media_type == SIGNATURE_LAYER_MEDIA_TYPE)
        .take(MAX_SIGNATURES)
    {
        let (Ok(size), Some(sig)) = (
            u64::try_from(l.size),
            l.annotations.get(SIGNATURE_ANNOTATION),
        ) else {
            continue;
        };
        if size > MAX_PAYLOAD_BYTES || check_digest(&l.digest).is_err() {
            continue;
        }
        let Ok(signature) = base64::engine::general_purpose::STANDARD.decode(sig.trim()) else {
            continue;
        };
        out.push(SignatureLayer {
            digest: l.digest,
            size,
            signature,
        });
    }
    Ok(out)
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// The manifest digest a simple-signing payload vouches for.
pub(crate) fn signed_digest(payload: &[u8]) -> Result<String, SignatureError> {
    let p: Payload = serde_json::from_slice(payload).map_err(SignatureError::NotAPayload)?;
    if p.critical.kind != PAYLOAD_TYPE {
        return Err(SignatureError::PayloadType(shown(&p.critical.kind)));
    }
    check_digest(&p.critical.image.digest)?;
    Ok(p.critical.image.digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_signs_what_its_public_key_verifies_and_nothing_else() {
        let (private, public) = SigningKey::generate().unwrap();
        let key = SigningKey::from_pem(&private).unwrap();
        assert_eq!(key.public_key(), public);
        assert_eq!(PublicKey::from_pem(&public.to_pem()).unwrap(), public);
        let d = format!("sha256:{}", "a".repeat(64));
        let p = payload("127.0.0.1:5000/handlers/logger", &d);
        let sig = key.sign(&p).unwrap();
        assert!(public.verifies(&p, &sig));
        let (_, other) = SigningKey::generate().unwrap();
        assert!(!other.verifies(&p, &sig), "another key");
        let mut swapped = p.clone();
        swapped[10] ^= 1;
        assert!(!public.verifies(&swapped, &sig), "another payload");
        assert_eq!(signed_digest(&p).unwrap(), d);

        let m = signature_manifest(p.clone(), &sig);
        let layers = signature_layers(&m.manifest.data).unwrap();
        assert_eq!(
            layers,
            [SignatureLayer {
                digest: m.payload.digest.clone(),
                size: p.len() as u64,
                signature: sig
            }]
        );
        assert_eq!(signature_tag(&d), format!("sha256-{}.sig", "a".repeat(64)));
    }

    #[test]
    fn keys_and_payloads_of_other_shapes_are_refused_saying_why() {
        let e = PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
            .unwrap_err();
        assert!(matches!(e, KeyError::NotP256), "{e}");
        assert!(e.to_string().contains("P-256"), "{e}");
        let e = SigningKey::from_pem(
            "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("generate-key-pair"), "{e}");
        let e = PublicKey::from_pem("nothing").unwrap_err();
        assert!(
            matches!(e, KeyError::NotPem(..)) && std::error::Error::source(&e).is_some(),
            "the PEM parser's error is kept as the cause: {e:?}"
        );
        let (private, _) = SigningKey::generate().unwrap();
        let e = PublicKey::from_pem(&private).unwrap_err();
        assert!(e.to_string().contains("PUBLIC KEY"), "{e}");
        assert!(signed_digest(b"{}").is_err());
        let wrong_type = br#"{"critical":{"identity":{"docker-reference":"r"},"image":{"docker-manifest-digest":"sha256:00"},"type":"x"}}"#;
        let e = signed_digest(wrong_type).unwrap_err();
        assert!(e.to_string().contains("type"), "{e}");
    }

    /// A signature cosign made with a `cosign generate-key-pair` key, over the payload it
    /// signed (the test vector of sigstore-rs 0.15, `crypto::verification_key` tests): real
    /// cosign signatures verify here, and only over their own payload.
    #[test]
    fn a_signature_made_by_cosign_verifies_with_its_public_key() {
        let public = PublicKey::from_pem(
            "-----BEGIN PUBLIC KEY-----\n\
             MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu\n\
             OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==\n\
             -----END PUBLIC KEY-----\n",
        )
        .unwrap();
        let signature = base64::engine::general_purpose::STANDARD
            .decode("MEUCIQD6q/COgzOyW0YH1Dk+CCYSt4uAhm3FDHUwvPI55zwnlwIgE0ZK58ZOWpZw8YVmBapJhBqCfdPekIknimuO0xH8Jh8=")
            .unwrap();
        let signed = br#"{"critical":{"identity":{"docker-reference":"registry-testing.svc.lan/busybox"},"image":{"docker-manifest-digest":"sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"},"type":"cosign container image signature"},"optional":null}"#;
        assert!(public.verifies(signed, &signature));
        assert!(!public.verifies(b"hello world", &signature));
        assert_eq!(
            signed_digest(signed).unwrap(),
            "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"
        );
        // Ours has the same shape: the payload cosign would have made for that digest.
        assert_eq!(
            payload(
                "registry-testing.svc.lan/busybox",
                "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"
            ),
            signed.to_vec()
        );
    }
}
