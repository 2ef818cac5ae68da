//! The CNCF wasm OCI artifact: what a manifest of one handler component looks like, built for a
//! push and checked after a pull.

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Config media type of a wasm artifact (CNCF TAG Runtime, wasm OCI artifact layout v0).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the one layer: the component's bytes.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Media type of the manifest the host pushes and accepts.
pub(crate) const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Largest component pulled, as large as a plugin file may be: the host refuses a bigger
/// layer before downloading it, and stops reading a registry that sends more than it said.
pub const MAX_ARTIFACT_BYTES: u64 = 256 << 20;
/// Largest manifest or config read: 4 MiB, the least OCI distribution says a registry must
/// accept, so no manifest a conforming registry stores is refused (a one-layer manifest is
/// under 1 KiB). Checked from the header first and while it streams, never read whole first.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// `sha256:<hex>` of `bytes`, the form OCI descriptors use.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A blob to upload: its bytes and their descriptor's digest.
pub struct Blob {
    /// The bytes.
    pub data: Vec<u8>,
    /// `sha256:<hex>` of `data`.
    pub digest: String,
}

impl Blob {
    /// The blob of `data`, its digest computed.
    pub fn new(data: Vec<u8>) -> Self {
        let digest = sha256_digest(&data);
        Blob { data, digest }
    }
}

/// What a push uploads: the layer, the config and the manifest naming both.
pub struct Artifact {
    /// The component.
    pub layer: Blob,
    /// The wasm config.
    pub config: Blob,
    /// The manifest JSON; its digest is what a sources file pins.
    pub manifest: Blob,
}

/// The artifact of one component. The config carries no `created` time, so pushing the same
/// bytes twice gives the same digest.
pub fn build(wasm: Vec<u8>) -> Artifact {
    let layer = Blob::new(wasm);
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer.digest],
    });
    let config = Blob::new(serde_json::to_vec(&config).expect("JSON of literals"));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": config.digest, "size": config.data.len()},
        "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": layer.digest, "size": layer.data.len()}],
    });
    let manifest = Blob::new(serde_json::to_vec(&manifest).expect("JSON of literals"));
    Artifact {
        layer,
        config,
        manifest,
    }
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: i64,
}

/// The one layer of a pulled manifest that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layer {
    /// `sha256:<hex>` the layer's bytes must hash to.
    pub(crate) digest: String,
    /// Bytes the manifest says it has (at most [`MAX_ARTIFACT_BYTES`]).
    pub(crate) size: u64,
}

/// Why a manifest is not a wasm artifact this host runs. Registry-provided text in it is cut
/// to 80 bytes (and printed quoted, so escaped).
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// Not JSON of an OCI image manifest.
    #[error("the manifest is not an OCI image manifest: {0}")]
    NotAManifest(#[source] serde_json::Error),
    /// A `schemaVersion` other than 2.
    #[error("manifest schemaVersion {0} is not 2")]
    SchemaVersion(u32),
    /// An image (or anything else) rather than a wasm artifact.
    #[error("not a wasm artifact: config media type {0:?}, expected {WASM_CONFIG_MEDIA_TYPE}")]
    ConfigMediaType(String),
    /// Zero or several layers.
    #[error("a wasm artifact has exactly one layer; this one has {0}")]
    LayerCount(usize),
    /// The one layer is not `application/wasm`.
    #[error("layer media type {0:?} is not {WASM_LAYER_MEDIA_TYPE}")]
    LayerMediaType(String),
    /// The layer's digest is malformed.
    #[error(transparent)]
    Digest(#[from] DigestError),
    /// A negative layer size.
    #[error("negative layer size")]
    NegativeSize,
    /// A component over [`MAX_ARTIFACT_BYTES`], refused before it is read or sent.
    #[error("the component is {0} bytes, over the {MAX_ARTIFACT_BYTES}-byte limit")]
    TooBig(u64),
    /// A manifest over [`MAX_MANIFEST_BYTES`], refused while it streams.
    #[error("manifest of {0} bytes or more, over the {MAX_MANIFEST_BYTES}-byte limit")]
    ManifestTooBig(u64),
}

/// The component layer of a manifest, or why it is not a wasm artifact this host runs.
pub(crate) fn component_layer(manifest: &[u8]) -> Result<Layer, ArtifactError> {
    let m: Manifest = serde_json::from_slice(manifest).map_err(ArtifactError::NotAManifest)?;
    if m.schema_version != 2 {
        return Err(ArtifactError::SchemaVersion(m.schema_version));
    }
    if m.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(ArtifactError::ConfigMediaType(shown(&m.config.media_type)));
    }
    let [layer] = m.layers.as_slice() else {
        return Err(ArtifactError::LayerCount(m.layers.len()));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(ArtifactError::LayerMediaType(shown(&layer.media_type)));
    }
    check_digest(&layer.digest)?;
    let size = u64::try_from(layer.size).map_err(|_| ArtifactError::NegativeSize)?;
    if size > MAX_ARTIFACT_BYTES {
        return Err(ArtifactError::TooBig(size));
    }
    Ok(Layer {
        digest: layer.digest.clone(),
        size,
    })
}

/// A digest that is not `sha256:` and 64 lowercase hex digits (cut to 80 bytes).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("digest {0:?} is not sha256: and 64 lowercase hex digits")]
pub struct DigestError(String);

/// Refuses anything but `sha256:` and 64 lowercase hex digits.
pub(crate) fn check_digest(digest: &str) -> Result<(), DigestError> {
    match digest.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(())
        }
        _ => Err(DigestError(shown(digest))),
    }
}

/// Most bytes of a registry-provided value an error message shows.
pub(crate) const SHOWN_VALUE_BYTES: usize = 80;

/// Registry-provided text as an error message shows it: cut to [`SHOWN_VALUE_BYTES`], marked.
pub(crate) fn shown(s: &str) -> String {
    crate::text::clip(s, SHOWN_VALUE_BYTES).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_manifest_passes_the_pull_checks_and_is_reproducible() {
        let a = build(b"\0asm component".to_vec());
        let layer = component_layer(&a.manifest.data).unwrap();
        assert_eq!(layer.digest, a.layer.digest);
        assert_eq!(layer.size, 14);
        assert_eq!(
            build(b"\0asm component".to_vec()).manifest.digest,
            a.manifest.digest
        );
    }

    #[test]
    fn manifests_that_are_not_one_wasm_layer_are_refused() {
        let d = format!("sha256:{}", "a".repeat(64));
        let m = |config: &str, layers: serde_json::Value| {
            serde_json::to_vec(&serde_json::json!({"schemaVersion": 2,
                "config": {"mediaType": config, "digest": d, "size": 2}, "layers": layers}))
            .unwrap()
        };
        let wasm = |size: u64| serde_json::json!({"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": d, "size": size});
        let image = "application/vnd.oci.image.config.v1+json";
        for (manifest, expect) in [
            (
                m(image, serde_json::json!([wasm(1)])),
                "not a wasm artifact",
            ),
            (
                m(WASM_CONFIG_MEDIA_TYPE, serde_json::json!([])),
                "exactly one layer",
            ),
            (
                m(
                    WASM_CONFIG_MEDIA_TYPE,
                    serde_json::json!([wasm(1), wasm(1)]),
                ),
                "exactly one layer",
            ),
            (
                m(
                    WASM_CONFIG_MEDIA_TYPE,
                    serde_json::json!([wasm(MAX_ARTIFACT_BYTES + 1)]),
                ),
                "limit",
            ),
            (
                m(
                    WASM_CONFIG_MEDIA_TYPE,
                    serde_json::json!([{"mediaType": "application/tar", "digest": d, "size": 1}]),
                ),
                "layer media type",
            ),
            (b"{".to_vec(), "not an OCI image manifest"),
        ] {
            let e = component_layer(&manifest).unwrap_err().to_string();
            assert!(e.contains(expect), "{e}");
        }
        assert!(check_digest("sha256:ABC").is_err());
        assert!(check_digest(&d).is_ok());
    }
}
