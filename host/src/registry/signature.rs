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

use std::path::Path;

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _,
    UnparsedPublicKey,
};
use serde::Deserialize;

use super::artifact::{Blob, OCI_MANIFEST_MEDIA_TYPE, check_digest};

/// Media type of a signature layer: a simple-signing payload.
pub const SIGNATURE_LAYER_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Annotation carrying the base64 signature of a layer's payload.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The `critical.type` every cosign payload carries.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Config media type of cosign's signature manifests.
const SIGNATURE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// Most signatures (layers) of one artifact looked at: each costs a blob fetch.
pub const MAX_SIGNATURES: usize = 16;
/// Largest payload read: a simple-signing payload is a few hundred bytes.
pub const MAX_PAYLOAD_BYTES: u64 = 16 << 10;
/// Largest key file read.
const MAX_KEY_BYTES: u64 = 64 << 10;
/// DER prefix of a P-256 `SubjectPublicKeyInfo` (id-ecPublicKey, prime256v1, BIT STRING of 66
/// bytes): the only public-key form cosign writes for its default keys. Comparing the fixed
/// prefix reads that one form exactly, without an ASN.1 parser in the build.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The tag cosign stores the signatures of manifest `digest` under.
pub fn signature_tag(digest: &str) -> String {
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
    pub fn from_pem(text: &str) -> Result<Self, String> {
        let pem = pem::parse(text).map_err(|e| format!("not a PEM public key: {e}"))?;
        if pem.tag() != "PUBLIC KEY" {
            return Err(format!(
                "PEM block {:?} is not a PUBLIC KEY",
                pem.tag().chars().take(40).collect::<String>()
            ));
        }
        let der = pem.contents();
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 4 => Ok(PublicKey {
                point: point.to_vec(),
            }),
            _ => Err("only ECDSA P-256 public keys are supported (cosign's default)".into()),
        }
    }

    /// Reads a key file; the error names it.
    pub fn load(path: &Path) -> Result<Self, String> {
        Self::from_pem(&read_key(path)?).map_err(|e| format!("{}: {e}", path.display()))
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
    pub fn from_pem(text: &str) -> Result<Self, String> {
        let pem = pem::parse(text).map_err(|e| format!("not a PEM private key: {e}"))?;
        match pem.tag() {
            "PRIVATE KEY" => {}
            t if t.starts_with("ENCRYPTED") => {
                return Err(format!(
                    "{t:?} is an encrypted key; use `kubewasm generate-key-pair`, or an \
                     unencrypted PKCS#8 P-256 key (openssl genpkey -algorithm EC -pkeyopt \
                     ec_paramgen_curve:P-256)"
                ));
            }
            t => {
                return Err(format!(
                    "PEM block {:?} is not a PKCS#8 PRIVATE KEY (convert with openssl pkcs8 \
                     -topk8 -nocrypt)",
                    t.chars().take(40).collect::<String>()
                ));
            }
        }
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            pem.contents(),
            &SystemRandom::new(),
        )
        .map_err(|e| format!("not an ECDSA P-256 PKCS#8 key: {e}"))?;
        Ok(SigningKey { pair })
    }

    /// Reads a key file; the error names it.
    pub fn load(path: &Path) -> Result<Self, String> {
        Self::from_pem(&read_key(path)?).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A new random key pair, as PEM texts (private PKCS#8, public SPKI).
    pub fn generate() -> Result<(String, PublicKey), String> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| "the system's random source failed".to_string())?;
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
    pub fn sign(&self, payload: &[u8]) -> Result<Vec<u8>, String> {
        self.pair
            .sign(&SystemRandom::new(), payload)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| "signing failed".to_string())
    }
}

fn read_key(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let at = |e: String| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| at(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_KEY_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| at(e.to_string()))?;
    if text.len() as u64 > MAX_KEY_BYTES {
        return Err(at(format!("over {MAX_KEY_BYTES} bytes")));
    }
    Ok(text)
}

/// The simple-signing payload cosign signs for manifest `digest` of `repository`
/// (`REGISTRY/REPO`, no tag).
pub fn payload(repository: &str, digest: &str) -> Vec<u8> {
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
pub struct SignatureManifest {
    /// The signed payload.
    pub payload: Blob,
    /// The image config cosign writes beside it.
    pub config: Blob,
    /// The manifest, pushed under [`signature_tag`].
    pub manifest: Blob,
}

/// The manifest holding `payload` and its DER `signature`, as cosign writes it.
pub fn signature_manifest(payload: Vec<u8>, signature: &[u8]) -> SignatureManifest {
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
pub struct SignatureLayer {
    /// `sha256:<hex>` of the payload blob.
    pub digest: String,
    /// Payload size (at most [`MAX_PAYLOAD_BYTES`]).
    pub size: u64,
    /// The decoded DER signature.
    pub signature: Vec<u8>,
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
pub fn signature_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, String> {
    let m: SigManifest = serde_json::from_slice(manifest)
        .map_err(|e| format!("the signature manifest is not an OCI manifest: {e}"))?;
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
pub fn signed_digest(payload: &[u8]) -> Result<String, String> {
    let p: Payload = serde_json::from_slice(payload)
        .map_err(|e| format!("the signed payload is not a cosign simple-signing payload: {e}"))?;
    if p.critical.kind != PAYLOAD_TYPE {
        return Err(format!(
            "the signed payload's type is {:?}, not {PAYLOAD_TYPE:?}",
            p.critical.kind.chars().take(80).collect::<String>()
        ));
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
        assert!(e.contains("P-256"), "{e}");
        let e = SigningKey::from_pem(
            "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
        )
        .err()
        .unwrap();
        assert!(e.contains("generate-key-pair"), "{e}");
        assert!(PublicKey::from_pem("nothing").is_err());
        let (private, _) = SigningKey::generate().unwrap();
        assert!(
            PublicKey::from_pem(&private)
                .unwrap_err()
                .contains("PUBLIC KEY")
        );
        assert!(signed_digest(b"{}").is_err());
        let wrong_type = br#"{"critical":{"identity":{"docker-reference":"r"},"image":{"docker-manifest-digest":"sha256:00"},"type":"x"}}"#;
        assert!(signed_digest(wrong_type).unwrap_err().contains("type"));
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
