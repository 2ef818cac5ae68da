//! The built-in kinds, derived from k8s-openapi's `latest` Kubernetes version.
//!
//! Group, version, kind, plural, list kind and scope come from k8s-openapi's `Resource` traits and
//! whether a kind has `spec`/`status` from its serde shape, so a k8s-openapi upgrade updates what the
//! server serves. Only what the generated types do not carry is written here: short names,
//! categories, which kinds have a `/scale` subresource and the few per-kind server behaviours.

use std::any::TypeId;

use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use k8s_openapi::{ListableResource, NamespaceResourceScope};
use serde_json::{Value, json};

use crate::registry::ResourceType;

/// The Kubernetes version whose kinds are served (k8s-openapi's `latest` feature).
pub const KUBERNETES_VERSION: &str = "1.37";

/// One served kind derived from k8s-openapi's traits for `T`.
fn derive<T>() -> ResourceType
where
    T: ListableResource + Serialize + DeserializeOwned + Default + 'static,
{
    let (group, plural, kind) = (T::GROUP, T::URL_PATH_SEGMENT, T::KIND);
    let status = has_field::<T>("status");
    // The real registry strategies bump `generation` on spec changes of the controller-driven
    // kinds (status subresource plus spec) in the named groups; core kinds keep the behaviour
    // clients were tested against (ReplicationController is the exception the real server makes).
    let generation =
        status && has_field::<T>("spec") && (!group.is_empty() || kind == "ReplicationController");
    ResourceType {
        group: group.into(),
        version: T::VERSION.into(),
        plural: plural.into(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.into(),
        list_kind: T::LIST_KIND.into(),
        namespaced: TypeId::of::<T::Scope>() == TypeId::of::<NamespaceResourceScope>(),
        short_names: short_names(group, plural)
            .iter()
            .map(|s| s.to_string())
            .collect(),
        categories: categories(group, plural)
            .iter()
            .map(|s| s.to_string())
            .collect(),
        status_subresource: status,
        scale_subresource: SCALABLE.contains(&(group, plural)),
        has_generation: generation,
        return_deleted_object: group.is_empty() && ["pods", "serviceaccounts"].contains(&plural),
        strategic_merge: true,
        custom: false,
        printer_columns: Vec::new(),
        shape: Some(shape::<T>),
    }
}

/// Whether `v` decodes as `T`. A missing required field is validation's to report (the real
/// server's decoder does not require fields either), so only wrong types fail here.
fn shape<T: DeserializeOwned>(v: &Value) -> Result<(), serde_json::Error> {
    match T::deserialize(v) {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().starts_with("missing field") => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `T` has a top-level `field`. k8s-openapi types ignore unknown fields, so a field that
/// survives a round trip (or whose empty value is refused for missing required fields) exists.
fn has_field<T>(field: &str) -> bool
where
    T: Serialize + DeserializeOwned + Default,
{
    let Ok(mut v) = serde_json::to_value(T::default()) else {
        return false;
    };
    if v.get(field).is_some() {
        return true;
    }
    v[field] = json!({});
    // `&Value` as the deserializer, as in `shape`, so each type's decoder is compiled once.
    match T::deserialize(&v) {
        Ok(t) => serde_json::to_value(t)
            .ok()
            .is_some_and(|v: Value| v.get(field).is_some()),
        Err(_) => true,
    }
}

/// Kinds with a `/scale` subresource (autoscaling/v1 `Scale`), as in Kubernetes.
const SCALABLE: [(&str, &str); 4] = [
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("", "replicationcontrollers"),
];

/// Short names as the real server advertises them (not in the OpenAPI document k8s-openapi reads).
fn short_names(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "componentstatuses") => &["cs"],
        ("", "configmaps") => &["cm"],
        ("", "endpoints") => &["ep"],
        ("", "events") | ("events.k8s.io", "events") => &["ev"],
        ("", "limitranges") => &["limits"],
        ("", "namespaces") => &["ns"],
        ("", "nodes") => &["no"],
        ("", "persistentvolumeclaims") => &["pvc"],
        ("", "persistentvolumes") => &["pv"],
        ("", "pods") => &["po"],
        ("", "replicationcontrollers") => &["rc"],
        ("", "resourcequotas") => &["quota"],
        ("", "serviceaccounts") => &["sa"],
        ("", "services") => &["svc"],
        ("apps", "daemonsets") => &["ds"],
        ("apps", "deployments") => &["deploy"],
        ("apps", "replicasets") => &["rs"],
        ("apps", "statefulsets") => &["sts"],
        ("autoscaling", "horizontalpodautoscalers") => &["hpa"],
        ("batch", "cronjobs") => &["cj"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["csr"],
        ("networking.k8s.io", "ingresses") => &["ing"],
        ("networking.k8s.io", "networkpolicies") => &["netpol"],
        ("networking.k8s.io", "ipaddresses") => &["ip"],
        ("policy", "poddisruptionbudgets") => &["pdb"],
        ("scheduling.k8s.io", "priorityclasses") => &["pc"],
        ("storage.k8s.io", "storageclasses") => &["sc"],
        ("apiextensions.k8s.io", "customresourcedefinitions") => &["crd", "crds"],
        _ => &[],
    }
}

/// Categories as the real server advertises them: `kubectl get all` covers workloads and services
/// only, never config, RBAC or leases.
fn categories(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods" | "replicationcontrollers" | "services")
        | ("apps", "daemonsets" | "deployments" | "replicasets" | "statefulsets")
        | ("autoscaling", "horizontalpodautoscalers")
        | ("batch", "cronjobs" | "jobs") => &["all"],
        ("admissionregistration.k8s.io", _)
        | ("apiextensions.k8s.io", _)
        | ("apiregistration.k8s.io", _) => &["api-extensions"],
        _ => &[],
    }
}

macro_rules! kinds {
    ($($t:ty,)*) => {
        /// Every listable kind k8s-openapi defines for the version, core group first.
        pub fn all() -> Vec<ResourceType> {
            vec![$(derive::<$t>(),)*]
        }
    };
}

kinds! {
    k8s_openapi::api::core::v1::ComponentStatus,
    k8s_openapi::api::core::v1::ConfigMap,
    k8s_openapi::api::core::v1::Endpoints,
    k8s_openapi::api::core::v1::Event,
    k8s_openapi::api::core::v1::LimitRange,
    k8s_openapi::api::core::v1::Namespace,
    k8s_openapi::api::core::v1::Node,
    k8s_openapi::api::core::v1::PersistentVolume,
    k8s_openapi::api::core::v1::PersistentVolumeClaim,
    k8s_openapi::api::core::v1::Pod,
    k8s_openapi::api::core::v1::PodTemplate,
    k8s_openapi::api::core::v1::ReplicationController,
    k8s_openapi::api::core::v1::ResourceQuota,
    k8s_openapi::api::core::v1::Secret,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::core::v1::ServiceAccount,
    k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
    k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    k8s_openapi::api::admissionregistration::v1alpha1::MutatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1alpha1::MutatingAdmissionPolicyBinding,
    k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicyBinding,
    k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion,
    k8s_openapi::api::apps::v1::ControllerRevision,
    k8s_openapi::api::apps::v1::DaemonSet,
    k8s_openapi::api::apps::v1::Deployment,
    k8s_openapi::api::apps::v1::ReplicaSet,
    k8s_openapi::api::apps::v1::StatefulSet,
    k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler,
    k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
    k8s_openapi::api::batch::v1::CronJob,
    k8s_openapi::api::batch::v1::Job,
    k8s_openapi::api::certificates::v1::CertificateSigningRequest,
    k8s_openapi::api::certificates::v1::ClusterTrustBundle,
    k8s_openapi::api::certificates::v1::PodCertificateRequest,
    k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle,
    k8s_openapi::api::certificates::v1beta1::PodCertificateRequest,
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::coordination::v1alpha2::LeaseCandidate,
    k8s_openapi::api::coordination::v1beta1::LeaseCandidate,
    k8s_openapi::api::discovery::v1::EndpointSlice,
    k8s_openapi::api::events::v1::Event,
    k8s_openapi::api::flowcontrol::v1::FlowSchema,
    k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration,
    k8s_openapi::api::lifecycle::v1alpha1::Eviction,
    k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest,
    k8s_openapi::api::networking::v1::IPAddress,
    k8s_openapi::api::networking::v1::Ingress,
    k8s_openapi::api::networking::v1::IngressClass,
    k8s_openapi::api::networking::v1::NetworkPolicy,
    k8s_openapi::api::networking::v1::ServiceCIDR,
    k8s_openapi::api::node::v1::RuntimeClass,
    k8s_openapi::api::policy::v1::PodDisruptionBudget,
    k8s_openapi::api::rbac::v1::ClusterRole,
    k8s_openapi::api::rbac::v1::ClusterRoleBinding,
    k8s_openapi::api::rbac::v1::Role,
    k8s_openapi::api::rbac::v1::RoleBinding,
    k8s_openapi::api::resource::v1::DeviceClass,
    k8s_openapi::api::resource::v1::DeviceTaintRule,
    k8s_openapi::api::resource::v1::ResourceClaim,
    k8s_openapi::api::resource::v1::ResourceClaimTemplate,
    k8s_openapi::api::resource::v1::ResourceSlice,
    k8s_openapi::api::resource::v1alpha3::DeviceTaintRule,
    k8s_openapi::api::resource::v1alpha3::ResourcePoolStatusRequest,
    k8s_openapi::api::resource::v1beta1::DeviceClass,
    k8s_openapi::api::resource::v1beta1::ResourceClaim,
    k8s_openapi::api::resource::v1beta1::ResourceClaimTemplate,
    k8s_openapi::api::resource::v1beta1::ResourceSlice,
    k8s_openapi::api::resource::v1beta2::DeviceClass,
    k8s_openapi::api::resource::v1beta2::DeviceTaintRule,
    k8s_openapi::api::resource::v1beta2::ResourceClaim,
    k8s_openapi::api::resource::v1beta2::ResourceClaimTemplate,
    k8s_openapi::api::resource::v1beta2::ResourceSlice,
    k8s_openapi::api::scheduling::v1::PriorityClass,
    k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup,
    k8s_openapi::api::scheduling::v1alpha3::PodGroup,
    k8s_openapi::api::scheduling::v1alpha3::Workload,
    k8s_openapi::api::scheduling::v1beta1::PodGroup,
    k8s_openapi::api::scheduling::v1beta1::Workload,
    k8s_openapi::api::storage::v1::CSIDriver,
    k8s_openapi::api::storage::v1::CSINode,
    k8s_openapi::api::storage::v1::CSIStorageCapacity,
    k8s_openapi::api::storage::v1::StorageClass,
    k8s_openapi::api::storage::v1::VolumeAttachment,
    k8s_openapi::api::storage::v1::VolumeAttributesClass,
    k8s_openapi::api::storagemigration::v1::StorageVersionMigration,
    k8s_openapi::api::storagemigration::v1beta1::StorageVersionMigration,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
}
