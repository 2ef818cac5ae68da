//! Reads the host's own Pod at start and what it names, and adds the objects derived from them
//! (see `plugins::grants::host_pod`) to the host's own objects.
//!
//! Every read is the host's own (its ServiceAccount's RBAC, `deploy/rbac.yaml`). A read the
//! host may not make is skipped: one warning names what could not be read, and the list keeps
//! the static names (`deploy/`'s), so a host out of a cluster or without those rights still
//! runs, protected as before.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::Api;
use kube::api::ListParams;

use crate::plugins::{HostPod, OwnObjects, host_pod_objects as derive};

/// How long the reads at start may take together before the host goes on with what it has.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `base` plus what the host's Pod `pod` names.
pub(crate) async fn with_host_pod(
    client: &kube::Client,
    pod: &HostPod,
    mut base: OwnObjects,
) -> OwnObjects {
    let mut unread = Vec::new();
    let read = tokio::time::timeout(READ_TIMEOUT, read_all(client, pod, &mut base, &mut unread));
    if read.await.is_err() {
        unread.push(format!("(timed out after {} s)", READ_TIMEOUT.as_secs()));
    }
    if !unread.is_empty() {
        tracing::warn!(
            pod = %format_args!("{}/{}", pod.namespace, pod.name),
            unread = %unread.join(", "),
            "cannot read everything the host's Pod names: those objects are protected by deploy/'s names only"
        );
    }
    tracing::info!(
        pod = %format_args!("{}/{}", pod.namespace, pod.name),
        objects = base.all().len(),
        "the host's own objects, which no plugin may write: {}",
        base.all()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    base
}

async fn read_all(
    client: &kube::Client,
    pod: &HostPod,
    own: &mut OwnObjects,
    unread: &mut Vec<String>,
) {
    let ns = pod.namespace.as_str();
    let the_pod = match Api::<Pod>::namespaced(client.clone(), ns)
        .get(&pod.name)
        .await
    {
        Ok(p) => p,
        Err(e) => {
            unread.push(format!("Pod {ns}/{}: {e}", pod.name));
            return;
        }
    };
    own.add(derive::from_pod(&the_pod));
    if let Some(owner) = derive::controller(the_pod.metadata.owner_references.as_ref())
        .filter(|o| o.kind == "ReplicaSet")
    {
        match Api::<ReplicaSet>::namespaced(client.clone(), ns)
            .get(&owner.name)
            .await
        {
            Ok(rs) => own.add(derive::from_replica_set(&rs)),
            Err(e) => unread.push(format!("ReplicaSet {ns}/{}: {e}", owner.name)),
        }
    }
    let sa = derive::service_account(&the_pod);
    match Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .get(&sa)
        .await
    {
        Ok(account) => own.add(derive::from_service_account(&account)),
        Err(e) => unread.push(format!("ServiceAccount {ns}/{sa}: {e}")),
    }
    // Bindings anywhere name the account; the host's own namespace is what it can always
    // be granted to read.
    let role_bindings = match Api::<RoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(_) => match Api::<RoleBinding>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                unread.push(format!("RoleBindings: {e}"));
                Vec::new()
            }
        },
    };
    let cluster_role_bindings = match Api::<ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            unread.push(format!("ClusterRoleBindings: {e}"));
            Vec::new()
        }
    };
    own.add(derive::from_bindings(
        ns,
        &sa,
        &role_bindings,
        &cluster_role_bindings,
    ));
    match Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        Ok(l) => own.add(derive::from_pdbs(&the_pod, &l.items)),
        Err(e) => unread.push(format!("PodDisruptionBudgets: {e}")),
    }
}
