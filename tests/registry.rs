//! Plugins from an OCI registry: Debian's `docker-registry` (CNCF distribution) started on
//! 127.0.0.1 by each test, `kubewasm push`'s library side, cosign-style signatures, and hosts
//! following a sources file.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kubewasm::host::{Host, HostBuilder};
use kubewasm::registry::{ArtifactRef, CredentialStore, Registry, RegistryError, SigningKey};
use kubewasm::runtime::RuntimeConfig;
use kubewasm_e2e::*;

use super::{LOGGER, create};

const MANIFEST: &str = "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_sources_file_stops_the_start_naming_the_file_and_entry() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sources.toml");
    std::fs::write(
        &path,
        "[[plugin]]\nname = \"ok\"\nreference = \"ghcr.io/a/b:v1\"\n",
    )
    .unwrap();
    let e = HostBuilder::new(client(&server))
        .plugin_sources(&path, anonymous())
        .start()
        .await
        .err()
        .expect("an unpinned reference without follow stops the start");
    let e = format!("{e:#}");
    assert!(
        e.contains(&path.display().to_string()) && e.contains("ok") && e.contains("not pinned"),
        "{e}"
    );
}

fn anonymous() -> Registry {
    Registry::new(CredentialStore::default())
}

fn tester(registry: &TestRegistry, password: &str) -> Registry {
    let auth = base64_user_password("tester", password);
    Registry::new(
        CredentialStore::parse(&format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            registry.addr
        ))
        .unwrap(),
    )
}

fn base64_user_password(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// A sources file of `entries` (TOML `[[plugin]]` bodies) in a temporary directory.
fn sources_file(dir: &Path, entries: &[String]) -> PathBuf {
    let text: String = entries
        .iter()
        .map(|e| {
            format!(
                "[[plugin]]\n{e}\n[plugin.manifest]\n{}\n",
                MANIFEST.replace("[grants]", "[plugin.manifest.grants]")
            )
        })
        .collect();
    let path = dir.join("sources.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A host on `server` following `sources`, with a recorder that sees the first loads.
async fn host_from(
    server: &apiserver::ApiServer,
    sources: &Path,
    registry: Registry,
) -> (Host, Recorder) {
    let recorder = Recorder::default();
    let host = HostBuilder::new(client(server))
        .runtime(RuntimeConfig {
            cache_dir: Some(shared_compile_cache()),
            ..RuntimeConfig::default()
        })
        .observer(recorder.observer())
        .plugin_sources(sources, registry)
        .start()
        .await
        .unwrap();
    (host, recorder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_then_pull_checks_every_digest_and_bad_references_say_why() {
    let mut reg = TestRegistry::start(false).await;
    let wasm = std::fs::read(guest(LOGGER)).unwrap();
    let r = anonymous();
    let pinned = r
        .push(&reg.reference("handlers/logger:v1"), wasm.clone(), true)
        .await
        .unwrap();
    assert!(pinned.to_string().contains(":v1@sha256:"), "{pinned}");
    let again = r
        .push(&reg.reference("handlers/logger:v1"), wasm.clone(), true)
        .await
        .unwrap();
    assert_eq!(again, pinned, "the same bytes push to the same digest");

    let pulled = r.pull(&pinned, true).await.unwrap();
    assert_eq!(pulled.wasm, wasm);
    assert_eq!(pulled.reference, pinned);
    let by_tag = r
        .pull(&reg.reference("handlers/logger:v1"), true)
        .await
        .unwrap();
    assert_eq!(by_tag.digest, pulled.digest);

    // A digest that names nothing, an unknown tag, a tag over HTTPS to a plain registry.
    let other = format!("sha256:{}", "1".repeat(64));
    let e = r.pull(&pinned.pinned(&other), true).await.unwrap_err();
    assert!(matches!(e, RegistryError::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("handlers/logger"), "{e}");
    let e = r
        .pull(&reg.reference("handlers/logger:nope"), true)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::NotFound { .. }), "{e}");
    let e = r.pull(&pinned, false).await.unwrap_err();
    assert!(
        matches!(
            e,
            RegistryError::Unreachable { .. } | RegistryError::Refused { .. }
        ),
        "{e}"
    );

    // Credentials never travel over plain HTTP to another machine.
    let remote = ArtifactRef::parse("registry.example.com/a:v1").unwrap();
    let with_secret = Registry::new(
        CredentialStore::parse(r#"{"auths": {"registry.example.com": {"auth": "dTpw"}}}"#).unwrap(),
    );
    let e = with_secret.pull(&remote, true).await.unwrap_err();
    assert!(e.to_string().contains("plain HTTP"), "{e}");

    // A manifest whose layer claims more than the limit: refused before downloading.
    let built = kubewasm::registry::build_artifact(wasm.clone());
    let layer_digest = built.layer.digest.clone();
    let huge = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": kubewasm::registry::WASM_CONFIG_MEDIA_TYPE,
            "digest": built.config.digest, "size": built.config.data.len()},
        "layers": [{"mediaType": kubewasm::registry::WASM_LAYER_MEDIA_TYPE, "digest": layer_digest,
            "size": kubewasm::registry::MAX_ARTIFACT_BYTES + 1}],
    });
    let huge_ref = reg.reference("handlers/logger:huge");
    raw_client()
        .push_manifest_raw(
            &oci_client::Reference::with_tag(
                huge_ref.registry.clone(),
                huge_ref.repository.clone(),
                "huge".into(),
            ),
            serde_json::to_vec(&huge).unwrap(),
            http::HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json"),
        )
        .await
        .unwrap();
    let e = r.pull(&huge_ref, true).await.unwrap_err();
    assert!(matches!(e, RegistryError::NotAnArtifact { .. }), "{e}");
    assert!(e.to_string().contains("limit"), "{e}");

    // Bytes changed in the registry's storage: the layer no longer hashes to its digest.
    let blob = reg.blob_file(&layer_digest);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    let e = r.pull(&pinned, true).await.unwrap_err();
    assert!(matches!(e, RegistryError::DigestMismatch { .. }), "{e}");
    assert!(e.to_string().contains(&layer_digest), "{e}");

    reg.stop().await;
    let e = r.pull(&pinned, true).await.unwrap_err();
    assert!(
        matches!(e, RegistryError::Unreachable { .. }),
        "a stopped registry is unreachable: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn htpasswd_auth_accepts_the_right_password_only() {
    let reg = TestRegistry::start(true).await;
    let wasm = std::fs::read(guest(LOGGER)).unwrap();
    let reference = reg.reference("handlers/logger:v1");
    let e = anonymous()
        .push(&reference, wasm.clone(), true)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unauthorized { .. }), "{e}");
    let e = tester(&reg, "wrong")
        .push(&reference, wasm.clone(), true)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unauthorized { .. }), "{e}");
    let pinned = tester(&reg, "kubewasm-test")
        .push(&reference, wasm.clone(), true)
        .await
        .unwrap();
    assert_eq!(
        tester(&reg, "kubewasm-test")
            .pull(&pinned, true)
            .await
            .unwrap()
            .wasm,
        wasm
    );
    let e = anonymous().pull(&pinned, true).await.unwrap_err();
    assert!(matches!(e, RegistryError::Unauthorized { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_run_from_a_registry_and_a_followed_tag_swaps_or_keeps_running() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv = create(&api, "hello", &[]).await;
    let mut reg = TestRegistry::start(false).await;
    let r = anonymous();
    let v1 = std::fs::read(guest(LOGGER)).unwrap();
    let v2 = std::fs::read(guest("rust-logger-v2.wasm")).unwrap();
    let pinned = r
        .push(&reg.reference("handlers/logger:v1"), v1.clone(), true)
        .await
        .unwrap();
    r.push(&reg.reference("handlers/moving:stable"), v1.clone(), true)
        .await
        .unwrap();
    let nowhere = pinned.pinned(&format!("sha256:{}", "2".repeat(64)));
    let dir = tempfile::tempdir().unwrap();
    let sources = sources_file(
        dir.path(),
        &[
            format!("name = \"reg-pinned\"\nreference = \"{pinned}\"\nplain-http = true"),
            format!(
                "name = \"reg-followed\"\nreference = \"{}\"\nfollow = \"1s\"\nplain-http = true",
                reg.reference("handlers/moving:stable")
            ),
            format!("name = \"reg-missing\"\nreference = \"{nowhere}\"\nplain-http = true"),
        ],
    );
    let (host, recorder) = host_from(&server, &sources, anonymous()).await;
    for plugin in ["reg-pinned", "reg-followed"] {
        recorder
            .wait_call(plugin, "the initial add", |c| {
                c.flag && c.resource_version == rv
            })
            .await;
    }
    host_lines()
        .wait_for(
            "reg-missing",
            "a pinned digest the registry does not have, named",
            |l| {
                l.iter().any(|x| {
                    x.message.contains("not found") && x.message.contains(&nowhere.to_string())
                })
            },
        )
        .await;
    assert_eq!(host.manager().names().await, ["reg-followed", "reg-pinned"]);

    // The tag moves: the new digest is pulled and swapped in without overlap.
    r.push(&reg.reference("handlers/moving:stable"), v2, true)
        .await
        .unwrap();
    recorder
        .wait("the followed plugin swapped to the new digest", |r| {
            r.events()
                .iter()
                .any(|e| matches!(e, HostEvent::Swapped { plugin, .. } if plugin == "reg-followed"))
        })
        .await;

    // The tag moves to something that is not a component: refused, the running one stays.
    r.push(
        &reg.reference("handlers/moving:stable"),
        b"\0asm\x01\0\0\0".to_vec(),
        true,
    )
    .await
    .unwrap();
    recorder
        .wait("the bad version is refused", |r| {
            r.events().iter().any(
                |e| matches!(e, HostEvent::LoadFailed { plugin, .. } if plugin == "reg-followed"),
            )
        })
        .await;
    assert_eq!(host.manager().names().await, ["reg-followed", "reg-pinned"]);

    // The registry goes away: nothing changes, retries are logged.
    reg.stop().await;
    host_lines()
        .wait_for("reg-followed", "an unreachable registry, retried", |l| {
            l.iter()
                .any(|x| x.message.contains("unreachable") && x.message.contains("keeps running"))
                && l.iter().any(|x| x.message.contains("retrying"))
        })
        .await;
    assert_eq!(host.manager().names().await, ["reg-followed", "reg-pinned"]);
    let rv2 = create(&api, "later", &[]).await;
    recorder
        .wait_call("reg-followed", "events still arrive", |c| {
            c.resource_version == rv2
        })
        .await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_replicator_and_the_javascript_notifier_run_from_a_registry() {
    let server = start_server().await;
    let kube = client(&server);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(kube.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "copies"}})).unwrap();
    namespaces
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .unwrap();
    let reg = TestRegistry::start(false).await;
    let r = anonymous();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-examples");
    let mut entries = Vec::new();
    for (name, file, manifest) in [
        (
            "replicator",
            "python-replicator.wasm",
            "python/replicator/replicator.toml",
        ),
        (
            "notifier",
            "javascript-notifier.wasm",
            "javascript/notifier/notifier.toml",
        ),
    ] {
        let pinned = r
            .push(
                &reg.reference(&format!("handlers/{name}:0.1.0")),
                std::fs::read(guest(file)).unwrap(),
                true,
            )
            .await
            .unwrap();
        entries.push(format!(
            "[[plugin]]\nname = \"{name}\"\nreference = \"{pinned}\"\nplain-http = true\nmanifest-file = \"{}\"\n",
            examples.join(manifest).display()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let sources = dir.path().join("sources.toml");
    std::fs::write(&sources, entries.concat()).unwrap();
    let (host, recorder) = host_from(&server, &sources, anonymous()).await;
    assert_eq!(host.manager().names().await, ["notifier", "replicator"]);

    let api: Api<ConfigMap> = Api::namespaced(kube.clone(), "default");
    let source: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shared", "annotations": {"kubewasm.io/replicate-to": "copies"}},
        "data": {"k": "v"},
    }))
    .unwrap();
    api.create(&kube::api::PostParams::default(), &source)
        .await
        .unwrap();
    let copies: Api<ConfigMap> = Api::namespaced(kube.clone(), "copies");
    tokio::time::timeout(
        PATIENCE,
        kube::runtime::wait::await_condition(copies, "shared", |c: Option<&ConfigMap>| c.is_some()),
    )
    .await
    .expect("the replicator pulled from the registry copies the ConfigMap")
    .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(kube.clone(), "default");
    let pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "from-registry"},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/c:1"}]},
    }))
    .unwrap();
    pods.create(&kube::api::PostParams::default(), &pod)
        .await
        .unwrap();
    recorder
        .wait_call(
            "notifier",
            "the notifier pulled from the registry handles events",
            |c| c.key == "default/from-registry",
        )
        .await;
    host.shutdown().await;
}

/// An `oci-client` of its own, for what `Registry` never does: writing forged manifests.
fn raw_client() -> oci_client::Client {
    use oci_client::client::{ClientConfig, ClientProtocol};
    oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    })
}

/// Copies the signature manifest of `from` (pinned) to the signature tag of `to` (pinned) in
/// the same repository: a signature lifted from one artifact onto another.
async fn copy_signature(from: &ArtifactRef, to: &ArtifactRef) {
    let client = raw_client();
    let oci = |r: &ArtifactRef| {
        oci_client::Reference::with_tag(
            r.registry.clone(),
            r.repository.clone(),
            r.signature_ref().tag.unwrap(),
        )
    };
    let media = "application/vnd.oci.image.manifest.v1+json";
    let (raw, _) = client
        .pull_manifest_raw(
            &oci(from),
            &oci_client::secrets::RegistryAuth::Anonymous,
            &[media],
        )
        .await
        .unwrap();
    client
        .push_manifest_raw(&oci(to), raw, http::HeaderValue::from_static(media))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_artifacts_signed_with_the_operators_key_run() {
    let server = start_server().await;
    let api: Api<ConfigMap> = Api::namespaced(client(&server), "default");
    let rv = create(&api, "signed-hello", &[]).await;
    let reg = TestRegistry::start(false).await;
    let r = anonymous();
    let (private, public) = SigningKey::generate().unwrap();
    let key = SigningKey::from_pem(&private).unwrap();
    let (other, _) = SigningKey::generate().unwrap();
    let other = SigningKey::from_pem(&other).unwrap();
    let logger = std::fs::read(guest(LOGGER)).unwrap();
    let v2 = std::fs::read(guest("rust-logger-v2.wasm")).unwrap();
    let c = std::fs::read(guest("c-configmap-logger.wasm")).unwrap();

    // One repository: signed, unsigned, signed with another key, and a copied signature.
    let push = |tag: &str, wasm: &Vec<u8>| {
        let reference = reg.reference(&format!("handlers/signed:{tag}"));
        let r = r.clone();
        let wasm = wasm.clone();
        async move { r.push(&reference, wasm, true).await.unwrap() }
    };
    let signed = push("signed", &logger).await;
    r.sign(&signed, &key, true).await.unwrap();
    let unsigned = push("unsigned", &v2).await;
    let wrong_key = push("wrong-key", &c).await;
    r.sign(&wrong_key, &other, true).await.unwrap();
    // The same bytes as `unsigned` under another name would share its digest; the copied
    // signature goes onto the C logger's digest in a second repository instead.
    let copied = r
        .push(&reg.reference("handlers/copied:v1"), c.clone(), true)
        .await
        .unwrap();
    let copied_from = r
        .push(&reg.reference("handlers/copied:src"), logger.clone(), true)
        .await
        .unwrap();
    r.sign(&copied_from, &key, true).await.unwrap();
    copy_signature(&copied_from, &copied).await;

    // The library refuses each, naming why, before downloading the component.
    let keys = [public.clone()];
    assert_eq!(
        r.pull_signed(&signed, &keys, true).await.unwrap().wasm,
        logger
    );
    for (pinned, expect) in [
        (&unsigned, "unsigned"),
        (&wrong_key, "verifies with key"),
        (&copied, "another artifact"),
    ] {
        let e = r.pull_signed(pinned, &keys, true).await.unwrap_err();
        assert!(matches!(e, RegistryError::Unverified { .. }), "{e}");
        assert!(e.to_string().contains(expect), "{expect}: {e}");
    }

    // A host: only the signed one runs; a followed tag moves to a new signed digest (swapped
    // in), then to an unsigned one (refused, the old one keeps running).
    // Its own repository: the signatures of the digests above do not count there.
    let followed = reg.reference("handlers/followed:stable");
    let stable_v1 = r.push(&followed, logger.clone(), true).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cosign.pub"), public.to_pem()).unwrap();
    let entry = |name: &str, reference: String, follow: bool| {
        format!(
            "name = \"{name}\"\nreference = \"{reference}\"\nplain-http = true\nkeys = [\"cosign.pub\"]{}",
            if follow { "\nfollow = \"1s\"" } else { "" }
        )
    };
    let sources = sources_file(
        dir.path(),
        &[
            entry("sig-signed", signed.to_string(), false),
            entry("sig-unsigned", unsigned.to_string(), false),
            entry("sig-wrong-key", wrong_key.to_string(), false),
            entry("sig-copied", copied.to_string(), false),
            entry("sig-followed", followed.to_string(), true),
        ],
    );
    let (host, recorder) = host_from(&server, &sources, anonymous()).await;
    recorder
        .wait_call("sig-signed", "the initial add", |c| {
            c.flag && c.resource_version == rv
        })
        .await;
    for (plugin, expect) in [
        ("sig-unsigned", "unsigned"),
        ("sig-wrong-key", "verifies with key"),
        ("sig-copied", "another artifact"),
    ] {
        host_lines()
            .wait_for(plugin, expect, |l| {
                l.iter().any(|x| {
                    x.message.contains("signature not verified") && x.message.contains(expect)
                })
            })
            .await;
    }
    assert_eq!(host.manager().names().await, ["sig-signed"]);
    // The followed tag's first digest is unsigned until signed: then it loads.
    host_lines()
        .wait_for("sig-followed", "unsigned, retried", |l| {
            l.iter().any(|x| x.message.contains("unsigned"))
                && l.iter().any(|x| x.message.contains("retrying"))
        })
        .await;
    r.sign(&stable_v1, &key, true).await.unwrap();
    recorder
        .wait_call("sig-followed", "signed, it loads", |c| c.flag)
        .await;

    let stable_v2 = r.push(&followed, v2.clone(), true).await.unwrap();
    r.sign(&stable_v2, &key, true).await.unwrap();
    recorder
        .wait(
            "the followed plugin swapped to the new signed digest",
            |r| {
                r.events().iter().any(
                    |e| matches!(e, HostEvent::Swapped { plugin, .. } if plugin == "sig-followed"),
                )
            },
        )
        .await;
    let stable_c = r.push(&followed, c.clone(), true).await.unwrap();
    let seen = host_lines().of("sig-followed").len();
    host_lines()
        .wait_for("sig-followed", "the unsigned digest refused", |l| {
            l[seen..].iter().any(|x| {
                x.message.contains("unsigned")
                    && x.message.contains(stable_c.digest.as_deref().unwrap())
                    && x.message.contains("keeps running")
            })
        })
        .await;
    let swaps = |r: &Recorder| {
        r.events()
            .iter()
            .filter(|e| matches!(e, HostEvent::Swapped { plugin, .. } if plugin == "sig-followed"))
            .count()
    };
    assert_eq!(
        swaps(&recorder),
        1,
        "the unsigned digest was never swapped in"
    );
    assert_eq!(host.manager().names().await, ["sig-followed", "sig-signed"]);
    let rv2 = create(&api, "signed-later", &[]).await;
    recorder
        .wait_call("sig-followed", "v2 still handles events", |c| {
            c.resource_version == rv2
        })
        .await;
    host.shutdown().await;
}
