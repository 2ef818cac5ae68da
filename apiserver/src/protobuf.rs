//! kubectl's protobuf request bodies. kubectl's typed clients (`kubectl create configmap|secret|
//! deployment|service|namespace`, `kubectl scale`) send built-in kinds as
//! `application/vnd.kubernetes.protobuf` and client-go has no fallback to JSON on a 415, so the
//! server must read them. k8s-pb decodes the envelope and the typed message; this module turns the
//! kinds those commands send into the JSON the server stores. A message that carries a field the
//! conversion does not know is refused (415, saying to send JSON) instead of being stored without it.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::autoscaling::v1 as autoscaling;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::status::{ApiError, ApiResult};

/// The prefix of every Kubernetes protobuf body ("k8s" and a zero byte) before the `Unknown` envelope.
const MAGIC: &[u8] = b"k8s\0";

/// Whether a request Content-Type is Kubernetes protobuf.
pub fn is_protobuf(base_content_type: &str) -> bool {
    base_content_type == "application/vnd.kubernetes.protobuf"
}

/// Decode a protobuf request body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let raw = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request("protobuf body does not start with the Kubernetes magic number")
    })?;
    let envelope = Unknown::decode(raw).map_err(malformed)?;
    let tm = envelope.type_meta.unwrap_or_default();
    let api_version = tm.api_version.unwrap_or_default();
    let kind = tm.kind.unwrap_or_default();
    let raw = envelope.raw.unwrap_or_default();
    let mut v = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(core::ConfigMap::decode(&raw[..]).map_err(malformed)?)?,
        ("v1", "Secret") => secret(core::Secret::decode(&raw[..]).map_err(malformed)?)?,
        ("v1", "Namespace") => namespace(core::Namespace::decode(&raw[..]).map_err(malformed)?)?,
        ("v1", "Service") => service(core::Service::decode(&raw[..]).map_err(malformed)?)?,
        ("apps/v1", "Deployment") => {
            deployment(apps::Deployment::decode(&raw[..]).map_err(malformed)?)?
        }
        ("authentication.k8s.io/v1", "TokenRequest") => token_request(
            k8s_pb::api::authentication::v1::TokenRequest::decode(&raw[..]).map_err(malformed)?,
        ),
        ("autoscaling/v1", "Scale") => {
            scale(autoscaling::Scale::decode(&raw[..]).map_err(malformed)?)?
        }
        _ => return Err(unsupported(&format!("{api_version} {kind}"))),
    };
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    Ok(v)
}

/// What `kubectl create token` sends: the lifetime and audiences are all the server reads
/// (`authn.rs`); a bound object is not modelled.
fn token_request(t: k8s_pb::api::authentication::v1::TokenRequest) -> Value {
    let spec = t.spec.unwrap_or_default();
    json!({"spec": {"audiences": spec.audiences, "expirationSeconds": spec.expiration_seconds}})
}

fn malformed(e: prost::DecodeError) -> ApiError {
    ApiError::bad_request(format!("error decoding protobuf body: {e}"))
}

fn unsupported(what: &str) -> ApiError {
    let mut e = ApiError::unsupported_media_type();
    e.message = format!(
        "kubewasm's embedded API server reads protobuf bodies only for what kubectl's generator commands send, not {what}: send JSON or YAML instead (e.g. `kubectl create … --dry-run=client -o yaml | kubectl apply -f -`)"
    );
    e
}

/// Refuse a message with fields left after conversion took the ones it knows.
fn done<M: Default + PartialEq>(rest: M, what: &str) -> ApiResult<()> {
    if rest == M::default() {
        Ok(())
    } else {
        Err(unsupported(&format!("a {what} with these fields")))
    }
}

/// Insert `value` unless it is what Go's `omitempty` leaves out (protobuf always carries Go's
/// non-pointer fields, JSON does not).
fn put<T: Serialize>(o: &mut Map<String, Value>, key: &str, value: T) {
    let v = serde_json::to_value(value).unwrap_or(Value::Null);
    let empty = match &v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    };
    if !empty {
        o.insert(key.into(), v);
    }
}

/// `put` for Go's non-pointer numbers and booleans, whose zero value means "unset".
fn put_nz<T: Serialize + Default + PartialEq>(o: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v.filter(|v| *v != T::default()) {
        put(o, key, v);
    }
}

fn base64_map(m: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, String> {
    m.into_iter()
        .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v)))
        .collect()
}

fn object_meta(m: Option<meta::ObjectMeta>) -> ApiResult<Value> {
    let mut m = m.unwrap_or_default();
    let mut o = Map::new();
    put(&mut o, "name", m.name.take());
    put(&mut o, "generateName", m.generate_name.take());
    put(&mut o, "namespace", m.namespace.take());
    put(&mut o, "labels", std::mem::take(&mut m.labels));
    put(&mut o, "annotations", std::mem::take(&mut m.annotations));
    put(&mut o, "finalizers", std::mem::take(&mut m.finalizers));
    let owners: Vec<Value> = std::mem::take(&mut m.owner_references)
        .into_iter()
        .map(|r| {
            let mut o = Map::new();
            put(&mut o, "apiVersion", r.api_version);
            put(&mut o, "kind", r.kind);
            put(&mut o, "name", r.name);
            put(&mut o, "uid", r.uid);
            put(&mut o, "controller", r.controller);
            put(&mut o, "blockOwnerDeletion", r.block_owner_deletion);
            Value::Object(o)
        })
        .collect();
    put(&mut o, "ownerReferences", owners);
    // Server-owned metadata: the server sets these itself whatever a create says.
    m.self_link = None;
    m.uid = None;
    // An update's optimistic-concurrency precondition.
    put(&mut o, "resourceVersion", m.resource_version.take());
    m.generation = None;
    m.creation_timestamp = None;
    m.deletion_timestamp = None;
    m.deletion_grace_period_seconds = None;
    m.managed_fields.clear();
    done(m, "ObjectMeta")?;
    Ok(Value::Object(o))
}

fn label_selector(s: Option<meta::LabelSelector>) -> ApiResult<Value> {
    let Some(mut s) = s else {
        return Ok(Value::Null);
    };
    let mut o = Map::new();
    put(&mut o, "matchLabels", std::mem::take(&mut s.match_labels));
    let exprs: Vec<Value> = std::mem::take(&mut s.match_expressions)
        .into_iter()
        .map(|e| json!({"key": e.key, "operator": e.operator, "values": e.values}))
        .collect();
    put(&mut o, "matchExpressions", exprs);
    done(s, "LabelSelector")?;
    Ok(Value::Object(o))
}

fn int_or_string(v: Option<IntOrString>) -> Value {
    match v {
        None => Value::Null,
        Some(v) if v.r#type == Some(1) => json!(v.str_val.unwrap_or_default()),
        Some(v) => json!(v.int_val.unwrap_or(0)),
    }
}

fn config_map(mut m: core::ConfigMap) -> ApiResult<Value> {
    let mut o = Map::new();
    o.insert("metadata".into(), object_meta(m.metadata.take())?);
    put(&mut o, "immutable", m.immutable.take());
    put(&mut o, "data", std::mem::take(&mut m.data));
    put(
        &mut o,
        "binaryData",
        base64_map(std::mem::take(&mut m.binary_data)),
    );
    done(m, "ConfigMap")?;
    Ok(Value::Object(o))
}

fn secret(mut m: core::Secret) -> ApiResult<Value> {
    let mut o = Map::new();
    o.insert("metadata".into(), object_meta(m.metadata.take())?);
    put(&mut o, "immutable", m.immutable.take());
    put(&mut o, "type", m.r#type.take());
    put(&mut o, "data", base64_map(std::mem::take(&mut m.data)));
    put(&mut o, "stringData", std::mem::take(&mut m.string_data));
    done(m, "Secret")?;
    Ok(Value::Object(o))
}

fn namespace(mut m: core::Namespace) -> ApiResult<Value> {
    let mut o = Map::new();
    o.insert("metadata".into(), object_meta(m.metadata.take())?);
    if let Some(spec) = m.spec.take() {
        put(&mut o, "spec", json!({"finalizers": spec.finalizers}));
    }
    // Status is the server's on create (phase Active).
    m.status = None;
    done(m, "Namespace")?;
    Ok(Value::Object(o))
}

fn service(mut m: core::Service) -> ApiResult<Value> {
    let mut o = Map::new();
    o.insert("metadata".into(), object_meta(m.metadata.take())?);
    if let Some(mut s) = m.spec.take() {
        let mut spec = Map::new();
        let ports: Vec<Value> = std::mem::take(&mut s.ports)
            .into_iter()
            .map(|p| {
                let mut o = Map::new();
                put(&mut o, "name", p.name);
                put(&mut o, "protocol", p.protocol);
                put(&mut o, "appProtocol", p.app_protocol);
                put(&mut o, "port", p.port);
                put(&mut o, "targetPort", int_or_string(p.target_port));
                put_nz(&mut o, "nodePort", p.node_port);
                Value::Object(o)
            })
            .collect();
        put(&mut spec, "ports", ports);
        put(&mut spec, "selector", std::mem::take(&mut s.selector));
        put(&mut spec, "clusterIP", s.cluster_ip.take());
        put(&mut spec, "clusterIPs", std::mem::take(&mut s.cluster_ips));
        put(&mut spec, "type", s.r#type.take());
        put(
            &mut spec,
            "externalIPs",
            std::mem::take(&mut s.external_ips),
        );
        put(&mut spec, "sessionAffinity", s.session_affinity.take());
        put(&mut spec, "loadBalancerIP", s.load_balancer_ip.take());
        put(
            &mut spec,
            "loadBalancerSourceRanges",
            std::mem::take(&mut s.load_balancer_source_ranges),
        );
        put(&mut spec, "externalName", s.external_name.take());
        put(
            &mut spec,
            "externalTrafficPolicy",
            s.external_traffic_policy.take(),
        );
        put_nz(
            &mut spec,
            "healthCheckNodePort",
            s.health_check_node_port.take(),
        );
        put_nz(
            &mut spec,
            "publishNotReadyAddresses",
            s.publish_not_ready_addresses.take(),
        );
        put(&mut spec, "ipFamilies", std::mem::take(&mut s.ip_families));
        put(&mut spec, "ipFamilyPolicy", s.ip_family_policy.take());
        put(
            &mut spec,
            "allocateLoadBalancerNodePorts",
            s.allocate_load_balancer_node_ports.take(),
        );
        put(&mut spec, "loadBalancerClass", s.load_balancer_class.take());
        put(
            &mut spec,
            "internalTrafficPolicy",
            s.internal_traffic_policy.take(),
        );
        put(
            &mut spec,
            "trafficDistribution",
            s.traffic_distribution.take(),
        );
        done(s, "ServiceSpec")?;
        o.insert("spec".into(), Value::Object(spec));
    }
    // Status is the server's on create (no load balancer yet).
    m.status = None;
    done(m, "Service")?;
    Ok(Value::Object(o))
}

fn deployment(mut m: apps::Deployment) -> ApiResult<Value> {
    let mut o = Map::new();
    o.insert("metadata".into(), object_meta(m.metadata.take())?);
    if let Some(mut s) = m.spec.take() {
        let mut spec = Map::new();
        put(&mut spec, "replicas", s.replicas.take());
        put(&mut spec, "selector", label_selector(s.selector.take())?);
        if let Some(t) = s.template.take() {
            spec.insert("template".into(), pod_template(t)?);
        }
        if let Some(mut st) = s.strategy.take() {
            let mut strategy = Map::new();
            put(&mut strategy, "type", st.r#type.take());
            if let Some(ru) = st.rolling_update.take() {
                let mut r = Map::new();
                put(&mut r, "maxUnavailable", int_or_string(ru.max_unavailable));
                put(&mut r, "maxSurge", int_or_string(ru.max_surge));
                strategy.insert("rollingUpdate".into(), Value::Object(r));
            }
            done(st, "DeploymentStrategy")?;
            spec.insert("strategy".into(), Value::Object(strategy));
        }
        put_nz(&mut spec, "minReadySeconds", s.min_ready_seconds.take());
        put(
            &mut spec,
            "revisionHistoryLimit",
            s.revision_history_limit.take(),
        );
        put_nz(&mut spec, "paused", s.paused.take());
        put(
            &mut spec,
            "progressDeadlineSeconds",
            s.progress_deadline_seconds.take(),
        );
        done(s, "DeploymentSpec")?;
        o.insert("spec".into(), Value::Object(spec));
    }
    // The main resource ignores status (it is a subresource).
    m.status = None;
    done(m, "Deployment")?;
    Ok(Value::Object(o))
}

fn pod_template(mut t: core::PodTemplateSpec) -> ApiResult<Value> {
    let mut o = Map::new();
    o.insert("metadata".into(), object_meta(t.metadata.take())?);
    if let Some(mut s) = t.spec.take() {
        let mut spec = Map::new();
        let containers = |v: Vec<core::Container>| -> ApiResult<Vec<Value>> {
            v.into_iter().map(container).collect()
        };
        spec.insert(
            "containers".into(),
            json!(containers(std::mem::take(&mut s.containers))?),
        );
        put(
            &mut spec,
            "initContainers",
            containers(std::mem::take(&mut s.init_containers))?,
        );
        put(&mut spec, "restartPolicy", s.restart_policy.take());
        put(
            &mut spec,
            "terminationGracePeriodSeconds",
            s.termination_grace_period_seconds.take(),
        );
        put(&mut spec, "dnsPolicy", s.dns_policy.take());
        put(
            &mut spec,
            "nodeSelector",
            std::mem::take(&mut s.node_selector),
        );
        put(
            &mut spec,
            "serviceAccountName",
            s.service_account_name.take(),
        );
        put(&mut spec, "serviceAccount", s.service_account.take());
        put(&mut spec, "nodeName", s.node_name.take());
        put_nz(&mut spec, "hostNetwork", s.host_network.take());
        put_nz(&mut spec, "hostPID", s.host_pid.take());
        put_nz(&mut spec, "hostIPC", s.host_ipc.take());
        put(&mut spec, "hostname", s.hostname.take());
        put(&mut spec, "subdomain", s.subdomain.take());
        put(&mut spec, "schedulerName", s.scheduler_name.take());
        put(&mut spec, "priorityClassName", s.priority_class_name.take());
        done(s, "PodSpec")?;
        o.insert("spec".into(), Value::Object(spec));
    }
    done(t, "PodTemplateSpec")?;
    Ok(Value::Object(o))
}

fn container(mut c: core::Container) -> ApiResult<Value> {
    let mut o = Map::new();
    put(&mut o, "name", c.name.take());
    put(&mut o, "image", c.image.take());
    put(&mut o, "command", std::mem::take(&mut c.command));
    put(&mut o, "args", std::mem::take(&mut c.args));
    put(&mut o, "workingDir", c.working_dir.take());
    let ports: Vec<Value> = std::mem::take(&mut c.ports)
        .into_iter()
        .map(|p| {
            let mut o = Map::new();
            put(&mut o, "name", p.name);
            put_nz(&mut o, "hostPort", p.host_port);
            put(&mut o, "containerPort", p.container_port);
            put(&mut o, "protocol", p.protocol);
            put(&mut o, "hostIP", p.host_ip);
            Value::Object(o)
        })
        .collect();
    put(&mut o, "ports", ports);
    let mut env = Vec::new();
    for mut e in std::mem::take(&mut c.env) {
        let mut v = Map::new();
        put(&mut v, "name", e.name.take());
        put(&mut v, "value", e.value.take());
        done(e, "EnvVar")?;
        env.push(Value::Object(v));
    }
    put(&mut o, "env", env);
    if let Some(mut r) = c.resources.take() {
        let quantities =
            |m: BTreeMap<String, k8s_pb::apimachinery::pkg::api::resource::Quantity>| {
                m.into_iter()
                    .map(|(k, q)| (k, q.string.unwrap_or_default()))
                    .collect::<BTreeMap<_, _>>()
            };
        let mut res = Map::new();
        put(
            &mut res,
            "limits",
            quantities(std::mem::take(&mut r.limits)),
        );
        put(
            &mut res,
            "requests",
            quantities(std::mem::take(&mut r.requests)),
        );
        done(r, "ResourceRequirements")?;
        o.insert("resources".into(), Value::Object(res));
    }
    put(&mut o, "imagePullPolicy", c.image_pull_policy.take());
    put(
        &mut o,
        "terminationMessagePath",
        c.termination_message_path.take(),
    );
    put(
        &mut o,
        "terminationMessagePolicy",
        c.termination_message_policy.take(),
    );
    put_nz(&mut o, "stdin", c.stdin.take());
    put_nz(&mut o, "stdinOnce", c.stdin_once.take());
    put_nz(&mut o, "tty", c.tty.take());
    done(c, "Container")?;
    Ok(Value::Object(o))
}

fn scale(mut m: autoscaling::Scale) -> ApiResult<Value> {
    let mut o = Map::new();
    o.insert("metadata".into(), object_meta(m.metadata.take())?);
    let replicas = m.spec.take().and_then(|s| s.replicas).unwrap_or(0);
    o.insert("spec".into(), json!({"replicas": replicas}));
    m.status = None;
    done(m, "Scale")?;
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(u.encode_to_vec());
        out
    }

    #[test]
    fn decodes_a_secret_with_binary_data() {
        let s = core::Secret {
            metadata: Some(meta::ObjectMeta {
                name: Some("s".into()),
                creation_timestamp: Some(meta::Time::default()),
                ..Default::default()
            }),
            data: [("k".to_string(), vec![0u8, 255])].into(),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let v = decode(&envelope("v1", "Secret", s.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                "type": "Opaque", "data": {"k": "AP8="}})
        );
    }

    #[test]
    fn refuses_fields_it_cannot_convert() {
        let spec = core::PodSpec {
            share_process_namespace: Some(true),
            ..Default::default()
        };
        let d = apps::Deployment {
            spec: Some(apps::DeploymentSpec {
                template: Some(core::PodTemplateSpec {
                    spec: Some(spec),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = decode(&envelope("apps/v1", "Deployment", d.encode_to_vec())).unwrap_err();
        assert_eq!(e.code, 415);
        assert!(e.message.contains("PodSpec"), "{}", e.message);
        let e = decode(&envelope("v1", "Pod", vec![])).unwrap_err();
        assert_eq!(e.code, 415);
    }
}
