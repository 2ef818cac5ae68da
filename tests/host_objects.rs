//! The objects of a host running as a Pod of a Deployment, as `deploy/` makes them, on a test's
//! API server: what the host derives its own objects from at start (`POD_NAME`,
//! `POD_NAMESPACE`), so the identity attacks have something real to aim at.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::PostParams;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Names of a host's Deployment and what it owns and mounts, all in `namespace`.
#[derive(Clone, Copy, Debug)]
pub struct HostObjects<'a> {
    /// The host's namespace.
    pub namespace: &'a str,
    /// The Deployment, its label `app`, its ServiceAccount and PodDisruptionBudget.
    pub deployment: &'a str,
    /// The ReplicaSet: `<deployment>-<pod-template-hash>`.
    pub replica_set: &'a str,
    /// The host's Pod.
    pub pod: &'a str,
    /// The ConfigMap the Pod mounts (the registry sources).
    pub sources: &'a str,
    /// The Secret the Pod mounts (registry credentials).
    pub secret: &'a str,
}

/// Creates `json` as a `K` in `api`; panics when the server refuses.
pub async fn create_json<K>(api: Api<K>, json: Value) -> K
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(json).expect("a valid object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create")
}

impl HostObjects<'_> {
    fn api<K>(&self, c: &kube::Client) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(c.clone(), self.namespace)
    }

    /// A replica `name` of the host's Pod template under the ReplicaSet of uid `rs_uid`.
    pub fn pod_json(&self, name: &str, rs_uid: &str) -> Value {
        let hash = self
            .replica_set
            .rsplit_once('-')
            .map_or(self.replica_set, |(_, h)| h);
        json!({
            "metadata": {"name": name,
                "labels": {"app": self.deployment, "pod-template-hash": hash},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": self.replica_set, "uid": rs_uid, "controller": true}]},
            "spec": {
                "serviceAccountName": self.deployment,
                "containers": [{"name": "kubewasm", "image": "kubewasm:0.1.0",
                    "envFrom": [{"configMapRef": {"name": format!("{}-env", self.deployment)}}]}],
                "volumes": [
                    {"name": "sources", "configMap": {"name": self.sources}},
                    {"name": "registry", "secret": {"secretName": self.secret}},
                ],
            },
        })
    }

    /// Creates the namespace, the Deployment, ReplicaSet, Pod, ServiceAccount, mounted
    /// ConfigMap and Secret and the PodDisruptionBudget; the ReplicaSet's uid (for siblings).
    pub async fn create(&self, c: &kube::Client) -> String {
        if Api::<Namespace>::all(c.clone())
            .get_opt(self.namespace)
            .await
            .unwrap()
            .is_none()
        {
            create_json(
                Api::<Namespace>::all(c.clone()),
                json!({"metadata": {"name": self.namespace}}),
            )
            .await;
        }
        let app = json!({"app": self.deployment});
        let template = json!({"metadata": {"labels": app},
            "spec": {"containers": [{"name": "kubewasm", "image": "kubewasm:0.1.0"}]}});
        let d: Deployment = create_json(
            self.api(c),
            json!({"metadata": {"name": self.deployment},
                "spec": {"selector": {"matchLabels": app}, "template": template}}),
        )
        .await;
        let rs: ReplicaSet = create_json(
            self.api(c),
            json!({"metadata": {"name": self.replica_set, "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": self.deployment,
                    "uid": d.metadata.uid.unwrap(), "controller": true}]},
                "spec": {"selector": {"matchLabels": app}, "template": template}}),
        )
        .await;
        let rs_uid = rs.metadata.uid.unwrap();
        create_json(self.api::<Pod>(c), self.pod_json(self.pod, &rs_uid)).await;
        create_json(
            self.api::<ServiceAccount>(c),
            json!({"metadata": {"name": self.deployment}}),
        )
        .await;
        create_json(
            self.api::<ConfigMap>(c),
            json!({"metadata": {"name": self.sources}, "data": {"sources.toml": ""}}),
        )
        .await;
        create_json(
            self.api::<Secret>(c),
            json!({"metadata": {"name": self.secret},
                "stringData": {"token": "registry-credential"}}),
        )
        .await;
        create_json(
            self.api::<PodDisruptionBudget>(c),
            json!({"metadata": {"name": self.deployment}, "spec": {"maxUnavailable": 1,
                "selector": {"matchLabels": app}}}),
        )
        .await;
        rs_uid
    }
}
