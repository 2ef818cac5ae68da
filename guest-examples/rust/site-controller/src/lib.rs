//! site-controller: a Site (custom resource `example.com/v1` `Site`) becomes a Deployment, a
//! Service and a ConfigMap it owns, and its status says how many replicas are available
//! (`kubewasm:handler@0.3.0`, world `controller`, on the Rust SDK).
//!
//! Level-triggered: `reconcile` reads what the cache holds now and writes only what differs, so
//! the same code creates, repairs (an owned object edited or deleted behind its back is an event
//! of its Site's key), reflects the Deployment's status and does nothing when all is as wanted.
//! The same controller exists in Python and JavaScript
//! (`guest-examples/{python,javascript}/site-controller/`), with the same manifest and scenarios.

#![cfg_attr(feature = "bench-noop", allow(dead_code, unused_imports))]

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use kubewasm_sdk::api::apps::v1::{Deployment, DeploymentSpec};
use kubewasm_sdk::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, PodSpec, PodTemplateSpec, Service,
    ServicePort, ServiceSpec, Volume, VolumeMount,
};
use kubewasm_sdk::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kubewasm_sdk::apimachinery::pkg::util::intstr::IntOrString;
use kubewasm_sdk::k8s_openapi::jiff::Timestamp;
use kubewasm_sdk::serde_json::{Map, Value, json};
use kubewasm_sdk::{
    Controller, Controls, Error, Lazy, Named, Object, ObjectKey, ObjectMeta, Outcome, Result,
    SettingsError, cache, debug, info, key, kube, settings,
};
use serde::{Deserialize, Serialize};

const DEFAULT_IMAGE: &str = "nginx:1.27";
const DEFAULT_DOMAIN: &str = "sites.example.com";

/// A Site as the controller reads it. Unknown fields are ignored; a field of the wrong type
/// fails the decode, which is `fatal` (retrying cannot fix it; the next edit of the Site brings
/// the key back). The CRD's schema (crd.yaml) checks the types on a real cluster.
#[derive(Serialize, Deserialize)]
struct Site {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: SiteSpec,
    #[serde(default)]
    status: SiteStatus,
}

#[derive(Serialize, Deserialize, Default)]
struct SiteSpec {
    /// Default 1.
    replicas: Option<i64>,
    /// Default nginx:1.27 (also when empty).
    image: Option<String>,
    /// Default empty.
    message: Option<String>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SiteStatus {
    observed_generation: Option<i64>,
    available_replicas: Option<i64>,
    #[serde(default)]
    conditions: Vec<Condition>,
}

/// One entry of `status.conditions`. Others' conditions are written back as they were, fields
/// this struct does not name included (`rest`).
#[derive(Serialize, Deserialize, Clone, Default)]
#[serde(rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_transition_time: Option<String>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

kubewasm_sdk::custom_resource!(Site, "example.com/v1", "Site");

/// The `domain` setting: the domain the Sites' host names are under (each Site's ConfigMap holds
/// `host = <site>.<domain>`). A value that is not a DNS name is refused, naming the key.
fn domain() -> Result<String, SettingsError> {
    let Some(domain) = settings::get::<String>("domain")? else {
        return Ok(DEFAULT_DOMAIN.to_string());
    };
    if !is_dns_name(&domain) {
        return Err(SettingsError::Invalid {
            key: "domain".into(),
            expected: "a DNS name such as sites.example.com (lowercase letters, digits, '-' and '.')"
                .into(),
            got: format!("{domain:?}"),
        });
    }
    Ok(domain)
}

/// A DNS-1123 subdomain of at most 200 bytes (room for `<site>.` in front): dot-separated labels
/// of lowercase letters, digits and `-`, each starting and ending with a letter or digit.
fn is_dns_name(text: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    text.len() <= 200
        && text.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && alnum(b[0])
                && alnum(b[b.len() - 1])
                && b.iter().all(|&c| alnum(c) || c == b'-')
        })
}

/// What the Site asks for: replicas, image, message.
fn parse_spec(key: &ObjectKey, site: &Site) -> Result<(i32, String, String)> {
    let spec = &site.spec;
    let replicas = spec.replicas.unwrap_or(1);
    let replicas = i32::try_from(replicas)
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| {
            Error::fatal(format!(
                "Site {key}: spec.replicas must be a non-negative integer"
            ))
        })?;
    let image = match spec.image.as_deref() {
        None | Some("") => DEFAULT_IMAGE,
        Some(image) => image,
    };
    let message = spec.message.clone().unwrap_or_default();
    Ok((replicas, image.to_string(), message))
}

fn meta(site: &Lazy<Site>, name: &str, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: site.namespace().map(str::to_string),
        labels: Some(labels.clone()),
        ..Default::default()
    }
}

/// Applies `obj` (a typed `k8s-openapi` object) as owned by `site`, unless the cache already
/// holds it as wanted; whether it wrote. Nothing here decodes a typed object: the apply answers a
/// `Lazy` the controller never reads, `set_controller` edits the metadata in place and the
/// comparison is on JSON, so no Deployment decoder is compiled in (README.md, "Size").
fn ensure<K: Object>(site: &Lazy<Site>, mut obj: K) -> Result<bool> {
    let have = cache::get::<K>(obj.namespace(), obj.name())?;
    let Some(applied) = kube::apply_owned_if_changed(site, &mut obj, have.as_ref())? else {
        return Ok(false);
    };
    let how = if applied.created { "created" } else { "updated" };
    info!("applied {} {} ({how})", obj.kind(), key(&obj));
    Ok(true)
}

/// Now, as Kubernetes writes times (RFC 3339, seconds, UTC). The guest's clock is the host's
/// real one (also under `kubewasm test`).
fn now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Timestamp::from_second(secs)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Patches the Site's status (the status subresource) when what it says has changed; whether it
/// wrote.
fn reflect(key: &ObjectKey, site: &Lazy<Site>, replicas: i32, available: i64) -> Result<bool> {
    let ready = available >= i64::from(replicas);
    let mut want = Condition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        reason: Some(if ready { "ReplicasAvailable" } else { "ReplicasUnavailable" }.into()),
        message: Some(format!("{available}/{replicas} replicas available")),
        ..Default::default()
    };
    let status = &site.get()?.status;
    let generation = site.generation();
    let was = status.conditions.iter().find(|c| c.type_ == "Ready");
    let same = |c: &&Condition| {
        (&c.status, &c.reason, &c.message) == (&want.status, &want.reason, &want.message)
    };
    if status.available_replicas == Some(available)
        && status.observed_generation == generation
        && was.filter(same).is_some()
    {
        return Ok(false);
    }
    // The transition time moves only when the condition's status does.
    want.last_transition_time = was
        .filter(|c| c.status == want.status)
        .and_then(|c| c.last_transition_time.clone())
        .or_else(|| Some(now()));
    // A merge patch replaces the whole list: keep the conditions others set.
    let mut conditions: Vec<Condition> = status
        .conditions
        .iter()
        .filter(|c| c.type_ != "Ready")
        .cloned()
        .collect();
    let message = want.message.clone().unwrap_or_default();
    let shown = want.status.clone();
    conditions.push(want);
    kube::patch_status::<Site>(
        key.namespace(),
        key.name(),
        json!({
            "observedGeneration": generation,
            "availableReplicas": available,
            "conditions": conditions,
        }),
    )?;
    info!("status of Site {key}: {message}, Ready={shown}");
    Ok(true)
}

struct Sites;

impl Controller for Sites {
    type Kind = Site;

    fn describe() -> Controls {
        Controls::new("site-controller")
            .owns::<Deployment>()
            .owns::<Service>()
            .owns::<ConfigMap>()
            .can::<Deployment>(&["apply"])
            .can::<Service>(&["apply"])
            .can::<ConfigMap>(&["apply"])
            // The status subresource only (the grant covers the Site and its status alike).
            .can::<Site>(&["patch"])
    }

    fn validate_settings() -> Result<()> {
        domain()?; // `domain = "Not a domain"` refuses the load, naming the key
        Ok(())
    }

    #[cfg(feature = "bench-noop")]
    fn reconcile(_: &ObjectKey, _: Option<Lazy<Site>>) -> Result<Outcome> {
        Ok(Outcome::Done)
    }

    #[cfg(not(feature = "bench-noop"))]
    fn reconcile(key: &ObjectKey, site: Option<Lazy<Site>>) -> Result<Outcome> {
        let Some(site) = site else {
            // Deleted: the garbage collector deletes what it owned (their owner references).
            info!("Site {key} is gone: nothing to do");
            return Ok(Outcome::Done);
        };
        let (replicas, image, message) = parse_spec(key, site.get()?)?;
        let name = key.name();
        let labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "site".to_string()),
            ("app.kubernetes.io/instance".to_string(), name.to_string()),
        ]);

        let content = format!("{name}-content");
        let host = format!("{name}.{}", domain()?);
        let wrote_content = ensure(
            &site,
            ConfigMap {
                metadata: meta(&site, &content, &labels),
                data: Some(BTreeMap::from([
                    ("message".to_string(), message),
                    ("host".to_string(), host),
                ])),
                ..Default::default()
            },
        )?;

        let container = Container {
            name: "web".into(),
            image: Some(image),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 80,
                ..Default::default()
            }]),
            volume_mounts: Some(vec![VolumeMount {
                name: "content".into(),
                mount_path: "/usr/share/nginx/html".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let volume = Volume {
            name: "content".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: content,
                ..Default::default()
            }),
            ..Default::default()
        };
        let wrote_deploy = ensure(
            &site,
            Deployment {
                metadata: meta(&site, name, &labels),
                spec: DeploymentSpec {
                    replicas: Some(replicas),
                    selector: LabelSelector {
                        match_labels: Some(labels.clone()),
                        ..Default::default()
                    },
                    template: PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels: Some(labels.clone()),
                            ..Default::default()
                        }),
                        spec: Some(PodSpec {
                            containers: vec![container],
                            volumes: Some(vec![volume]),
                            ..Default::default()
                        }),
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;

        let wrote_service = ensure(
            &site,
            Service {
                metadata: meta(&site, name, &labels),
                spec: Some(ServiceSpec {
                    selector: Some(labels.clone()),
                    ports: Some(vec![ServicePort {
                        name: Some("http".into()),
                        port: 80,
                        target_port: Some(IntOrString::String("http".into())),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )?;

        // The owned Deployment's events reconcile its Site, so its status arrives here. Only
        // one field is read: no typed decode of the Deployment.
        let available = match cache::get::<Deployment>(key.namespace(), name)? {
            Some(have) => have
                .pointer("/status/availableReplicas")
                .and_then(|v| v.as_i64())
                .unwrap_or(0),
            None => 0,
        };
        let wrote_status = reflect(key, &site, replicas, available)?;
        if !(wrote_content || wrote_deploy || wrote_service || wrote_status) {
            debug!("Site {key}: up to date");
        }
        Ok(Outcome::Done)
    }
}

kubewasm_sdk::controller!(Sites);
