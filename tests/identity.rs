//! How the host names itself to the API server, which a real cluster's `managedFields`, audit log
//! and Lease show: the User-Agent on every request, the field manager of the host's own writes,
//! and `leaseTransitions` counted as client-go counts it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use kubewasm::election::{ElectionConfig, ElectionMetrics, LeaderElector};
use kubewasm::identity::{FIELD_MANAGER, USER_AGENT};
use kubewasm_e2e::*;

/// `(manager, operation)` of every `managedFields` entry.
fn managers(meta: &ObjectMeta) -> Vec<(String, String)> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn fast(name: &str, identity: &str) -> ElectionConfig {
    ElectionConfig {
        identity: identity.into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
        ..ElectionConfig::new(name, "default")
    }
}

async fn until_leader(e: &LeaderElector) {
    let mut rx = e.leadership();
    tokio::time::timeout(PATIENCE, rx.wait_for(|l| *l))
        .await
        .expect("becomes the leader")
        .expect("the elector runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_names_itself_and_counts_every_change_of_hands() {
    let server = start_server().await;
    let host_client = client(&server);
    assert!(USER_AGENT.starts_with("kubewasm/"), "{USER_AGENT}");

    // A write that names no manager is named after the User-Agent, as a real server does: the
    // header reaches the server on the host's client.
    let cms: Api<ConfigMap> = Api::namespaced(host_client.clone(), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("ua".into());
    // A field to own: an entry with no fields is dropped, as on a real server.
    cm.data = Some([("a".to_string(), "1".to_string())].into());
    let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(
        managers(&cm.metadata),
        [("kubewasm".to_string(), "Update".to_string())]
    );

    // A released Lease, as another tool leaves it: no holder, no transitions yet.
    let other = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let leases: Api<Lease> = Api::namespaced(other, "default");
    let released = Lease {
        metadata: ObjectMeta {
            name: Some("handover".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            lease_duration_seconds: Some(1),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    };
    let pp = PostParams {
        field_manager: Some("setup".into()),
        ..PostParams::default()
    };
    leases.create(&pp, &released).await.unwrap();

    let a = LeaderElector::start(
        host_client.clone(),
        fast("handover", "a"),
        ElectionMetrics::unregistered(),
    )
    .unwrap();
    until_leader(&a).await;
    let lease = leases.get("handover").await.unwrap();
    let spec = lease.spec.as_ref().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(
        spec.lease_transitions,
        Some(1),
        "taking a released Lease is a transition, as in client-go"
    );
    assert!(
        managers(&lease.metadata).contains(&(FIELD_MANAGER.to_string(), "Update".to_string())),
        "{:?}",
        managers(&lease.metadata)
    );

    // Released on shutdown, taken by the next replica: one more.
    a.release().await;
    let b = LeaderElector::start(
        host_client,
        fast("handover", "b"),
        ElectionMetrics::unregistered(),
    )
    .unwrap();
    until_leader(&b).await;
    let spec = leases.get("handover").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(2));
    b.release().await;
    server.shutdown().await;
}
