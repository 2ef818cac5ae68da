//! Leader election against the embedded API server: several electors in one process competing
//! for one Lease over real HTTP. Every wait is on a leadership channel; the durations are short
//! (configured, not slept) so takeovers happen within the test's patience.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubewasm::election::{ElectionConfig, ElectionMetrics, LeaderElector};
use tokio::sync::watch;
use tokio::time::Instant;

/// A failure guard for awaited conditions, never a synchronisation device.
const PATIENCE: Duration = Duration::from_secs(30);

async fn server() -> apiserver::ApiServer {
    apiserver::ApiServer::start(apiserver::Config::default())
        .await
        .expect("embedded API server starts")
}

fn client_for(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client")
}

/// Short durations: a lease that states 2 s, a leader that gives up after 1 s without renewal.
fn config(identity: &str, lease_duration: Duration) -> ElectionConfig {
    ElectionConfig {
        identity: identity.into(),
        lease_duration,
        renew_deadline: lease_duration / 2,
        retry_period: Duration::from_millis(100),
        ..ElectionConfig::new("kubewasm", "default")
    }
}

struct Replica {
    elector: Option<LeaderElector>,
    rx: watch::Receiver<bool>,
    metrics: ElectionMetrics,
    /// Only for `cut`: the proxy this replica talks through.
    proxy: Option<apiserver::PartitionProxy>,
}

impl Replica {
    fn start(
        client: kube::Client,
        cfg: ElectionConfig,
        proxy: Option<apiserver::PartitionProxy>,
    ) -> Replica {
        let metrics = ElectionMetrics::unregistered();
        let elector = LeaderElector::start(client, cfg, metrics.clone()).expect("valid config");
        Replica {
            rx: elector.leadership(),
            elector: Some(elector),
            metrics,
            proxy,
        }
    }

    fn id(&self) -> String {
        self.elector
            .as_ref()
            .expect("running")
            .identity()
            .to_string()
    }
}

fn leaders(replicas: &[Replica]) -> Vec<usize> {
    (0..replicas.len())
        .filter(|&i| *replicas[i].rx.borrow())
        .collect()
}

/// Waits until one of `candidates` leads, and checks at that moment that no other replica does.
/// (A replica's leadership only ever turns false while another's turns true, so reading the
/// others right after the winner's change can miss an overlap but never invent one.)
async fn next_leader(replicas: &[Replica], candidates: &[usize]) -> usize {
    let winner = tokio::time::timeout(PATIENCE, async {
        let mut rxs: Vec<_> = candidates
            .iter()
            .map(|&i| (i, replicas[i].rx.clone()))
            .collect();
        loop {
            if let Some(&(i, _)) = rxs.iter().find(|(_, rx)| *rx.borrow()) {
                return i;
            }
            let changes = rxs.iter_mut().map(|(_, rx)| Box::pin(rx.changed()));
            let _ = futures::future::select_all(changes).await;
        }
    })
    .await
    .expect("a replica becomes the leader");
    assert_eq!(
        leaders(replicas),
        vec![winner],
        "exactly one replica leads when a new leader is elected"
    );
    winner
}

async fn holder(api: &Api<Lease>) -> String {
    api.get("kubewasm")
        .await
        .expect("lease exists")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

/// Waits until the Lease has been renewed `n` more times, checking after each renewal that
/// exactly one replica leads and that it is the holder.
async fn watch_renewals(api: &Api<Lease>, replicas: &[Replica], n: usize) {
    use futures::TryStreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields("metadata.name=kubewasm"),
    )
    .applied_objects();
    futures::pin_mut!(stream);
    let mut seen = 0;
    tokio::time::timeout(PATIENCE, async {
        while seen < n {
            let lease = stream
                .try_next()
                .await
                .expect("watch")
                .expect("stream open");
            let held = lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            let now = leaders(replicas);
            assert_eq!(now.len(), 1, "exactly one leader at every renewal");
            assert_eq!(replicas[now[0]].id(), held, "the leader is the holder");
            seen += 1;
        }
    })
    .await
    .expect("the leader keeps renewing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_elect_exactly_one_and_a_killed_leader_is_replaced_after_expiry() {
    let server = server().await;
    let client = client_for(&server.url());
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = Duration::from_secs(2);
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::start(client.clone(), config(&format!("replica-{i}"), lease), None))
        .collect();
    let first = next_leader(&replicas, &[0, 1, 2]).await;
    assert_eq!(holder(&api).await, replicas[first].id());
    assert!(replicas[first].metrics.is_leader());
    assert_eq!(replicas[first].metrics.transitions(), 1);
    watch_renewals(&api, &replicas, 5).await;

    // Kill the leader without releasing: the Lease stays claimed until it expires.
    let killed_at = Instant::now();
    replicas[first].elector = None;
    assert!(
        !*replicas[first].rx.borrow(),
        "a dropped elector reads not-leader"
    );
    let rest: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let second = next_leader(&replicas, &rest).await;
    let took = killed_at.elapsed();
    // The standby waited for the lease to expire: the leader's last renewal was at most one
    // retry period (plus a request) before the kill, so anything much earlier would be a steal.
    assert!(
        took >= lease - Duration::from_millis(500),
        "took over after {took:?}, before the {lease:?} lease could have expired"
    );
    // Within lease duration + retry period, plus slack for a loaded machine (the exact figure
    // is what `cargo bench --bench election` measures).
    assert!(
        took <= lease + Duration::from_millis(100) + Duration::from_secs(3),
        "takeover took {took:?}"
    );
    let lease_now = api.get("kubewasm").await.unwrap().spec.unwrap();
    assert_eq!(
        lease_now.holder_identity.as_deref(),
        Some(&*replicas[second].id())
    );
    assert_eq!(lease_now.lease_transitions, Some(1));
    watch_renewals(&api, &replicas, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_over_without_waiting_for_expiry() {
    let server = server().await;
    let client = client_for(&server.url());
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    // A long lease: a takeover faster than this can only come from the release.
    let lease = Duration::from_secs(20);
    let mut replicas: Vec<Replica> = (0..2)
        .map(|i| Replica::start(client.clone(), config(&format!("replica-{i}"), lease), None))
        .collect();
    let first = next_leader(&replicas, &[0, 1]).await;
    let other = 1 - first;
    // Let the standby see the claim first, so it has a live lease to wait out.
    watch_renewals(&api, &replicas, 2).await;

    let mut rx = replicas[first].rx.clone();
    let released_at = Instant::now();
    let elector = replicas[first].elector.take().unwrap();
    elector.release().await;
    assert!(
        !*rx.borrow_and_update(),
        "a released elector reads not-leader"
    );
    assert_eq!(replicas[first].metrics.transitions(), 2);
    let second = next_leader(&replicas, &[other]).await;
    let took = released_at.elapsed();
    assert!(
        took < lease / 2,
        "takeover after release took {took:?}; it must not wait for the {lease:?} lease"
    );
    assert_eq!(holder(&api).await, replicas[second].id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_steps_down_before_a_standby_takes_over() {
    let server = server().await;
    let lease = Duration::from_secs(2);
    let mut replicas = Vec::new();
    for i in 0..3 {
        let proxy = apiserver::PartitionProxy::start(&server.url())
            .await
            .unwrap();
        let client = client_for(proxy.url());
        replicas.push(Replica::start(
            client,
            config(&format!("replica-{i}"), lease),
            Some(proxy),
        ));
    }
    let first = next_leader(&replicas, &[0, 1, 2]).await;
    let api: Api<Lease> = Api::namespaced(client_for(&server.url()), "default");
    watch_renewals(&api, &replicas, 3).await;

    // Requests from the leader now hang: it can neither renew nor learn it was replaced.
    replicas[first].proxy.as_ref().unwrap().cut();
    let rest: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    // `next_leader` asserts that the cut-off leader already reads not-leader when the new one
    // is elected.
    let second = next_leader(&replicas, &rest).await;
    assert_ne!(second, first);
    assert!(!replicas[first].metrics.is_leader());
    assert_eq!(replicas[first].metrics.transitions(), 2);

    // Reconnected, the old leader sees the new holder and stays a standby.
    replicas[first].proxy.as_ref().unwrap().restore();
    watch_renewals(&api, &replicas, 5).await;
    assert_eq!(leaders(&replicas), vec![second]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_durations_are_refused_naming_the_flag() {
    let server = server().await;
    let mut cfg = config("x", Duration::from_secs(2));
    cfg.renew_deadline = Duration::from_secs(3);
    let err = LeaderElector::start(
        client_for(&server.url()),
        cfg,
        ElectionMetrics::unregistered(),
    )
    .err()
    .expect("refused");
    assert!(
        err.to_string().contains("--leader-election-renew-deadline"),
        "{err}"
    );
}
