//! Sharded informers against the embedded API server: server- and host-filtered lists, foreign
//! watch events, rescopes and what listeners see of them, 410 relists, an empty scope.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kubewasm_apimachinery::fnv1a64;
use tokio::sync::watch;

use super::*;

const HALF: u128 = 1 << 63;
const ALL: u128 = 1 << 64;

/// Records what the reflector asked for and what the server echoed; `old` makes lists behave
/// as an old server's (no selector sent, no echo).
struct Rec {
    inner: Arc<dyn ListerWatcher>,
    lists: Mutex<Vec<(Option<String>, Option<String>)>>,
    watches: Mutex<Vec<Option<String>>>,
    old: std::sync::atomic::AtomicBool,
    notify: Notify,
}

#[async_trait::async_trait]
impl ListerWatcher for Rec {
    async fn list(&self, opts: &ListOptions) -> Result<ListPage, SourceError> {
        self.inner.list(opts).await
    }
    async fn watch(&self, opts: &WatchOptions) -> Result<WatchStream, SourceError> {
        self.inner.watch(opts).await
    }
    async fn list_objects(
        &self,
        opts: &ListOptions,
    ) -> Result<ListPage<SourceObject>, SourceError> {
        let old = self.old.load(std::sync::atomic::Ordering::SeqCst);
        let mut o = opts.clone();
        if old {
            o.shard_selector = None;
        }
        let page = self.inner.list_objects(&o).await?;
        self.lists
            .lock()
            .push((opts.shard_selector.clone(), page.shard_selector.clone()));
        self.notify.notify_waiters();
        Ok(page)
    }
    async fn watch_objects(
        &self,
        opts: &WatchOptions,
    ) -> Result<WatchStream<SourceObject>, SourceError> {
        self.watches.lock().push(opts.shard_selector.clone());
        self.inner.watch_objects(opts).await
    }
}

struct RecFactory {
    source: KubeSourceFactory,
    rec: Mutex<Option<Arc<Rec>>>,
}

#[async_trait::async_trait]
impl SourceFactory for RecFactory {
    async fn lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Arc<dyn ListerWatcher>, InformerError> {
        let rec = Arc::new(Rec {
            inner: self.source.lister_watcher(key).await?,
            lists: Mutex::new(Vec::new()),
            watches: Mutex::new(Vec::new()),
            old: Default::default(),
            notify: Notify::new(),
        });
        *self.rec.lock() = Some(rec.clone());
        Ok(rec)
    }
}

struct Env {
    server: apiserver::ApiServer,
    api: Api<ConfigMap>,
    factory: InformerFactory,
    source: Arc<RecFactory>,
    metrics: InformerMetrics,
    scope: watch::Sender<ShardRanges>,
}

fn key() -> InformerKey {
    InformerKey::new("v1", "ConfigMap").sharded(ShardField::Uid)
}

async fn env(shard_selector: bool, ranges: ShardRanges) -> Env {
    let server = apiserver::ApiServer::start(apiserver::Config {
        shard_selector,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let source = Arc::new(RecFactory {
        source: KubeSourceFactory::new(client.clone()),
        rec: Mutex::new(None),
    });
    let metrics = InformerMetrics::unregistered();
    let factory = InformerFactory::with_source(source.clone(), metrics.clone());
    let (scope, rx) = watch::channel(ranges);
    factory.set_shard_scope(rx);
    Env {
        server,
        api: Api::namespaced(client, "default"),
        factory,
        source,
        metrics,
        scope,
    }
}

impl Env {
    fn rec(&self) -> Arc<Rec> {
        self.source.rec.lock().clone().unwrap()
    }

    /// Creates `name`; returns (uid hash, resourceVersion).
    async fn create(&self, name: &str) -> (u64, String) {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let c = self.api.create(&PostParams::default(), &cm).await.unwrap();
        let uid = c.metadata.uid.unwrap();
        (
            fnv1a64(uid.as_bytes()),
            c.metadata.resource_version.unwrap(),
        )
    }

    /// Creates objects until each half of the hash space has at least `n`; returns
    /// (name, hash, rv) of all.
    async fn populate(&self, n: usize) -> Vec<(String, u64, String)> {
        let mut out = Vec::new();
        let mut i = 0;
        while out
            .iter()
            .filter(|o: &&(String, u64, String)| u128::from(o.1) < HALF)
            .count()
            < n
            || out.iter().filter(|o| u128::from(o.1) >= HALF).count() < n
        {
            let name = format!("cm-{i}");
            let (h, rv) = self.create(&name).await;
            out.push((name, h, rv));
            i += 1;
        }
        out
    }

    /// A recorder on the sharded key, once the informer has synced (keep the registration).
    async fn subscribe(&self) -> (Arc<Recorder>, HandlerRegistration) {
        let rec = Recorder::new();
        let reg = self
            .factory
            .add_handler(&key(), rec.clone(), None)
            .await
            .unwrap();
        reg.wait_synced().await;
        (rec, reg)
    }

    /// A new object in the wanted half (by trial); returns its name and rv.
    async fn create_in(&self, prefix: &str, low: bool) -> (String, String) {
        for i in 0.. {
            let name = format!("{prefix}-{i}");
            let (h, rv) = self.create(&name).await;
            if (u128::from(h) < HALF) == low {
                return (name, rv);
            }
            self.api
                .delete(&name, &DeleteParams::default())
                .await
                .unwrap();
        }
        unreachable!()
    }

    fn cached(&self) -> Vec<String> {
        let mut k = self.factory.indexer(&key()).unwrap().list_keys();
        k.sort();
        k
    }

    async fn wait_lists(&self, n: usize) {
        let rec = self.rec();
        loop {
            let notified = rec.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if rec.lists.lock().len() >= n {
                return;
            }
            notified.await;
        }
    }
}

fn keys_where(objs: &[(String, u64, String)], f: impl Fn(u64) -> bool) -> Vec<String> {
    let mut k: Vec<String> = objs
        .iter()
        .filter(|o| f(o.1))
        .map(|o| format!("default/{}", o.0))
        .collect();
    k.sort();
    k
}

fn low(h: u64) -> bool {
    u128::from(h) < HALF
}

fn selector(ranges: &[(u64, u128)]) -> String {
    kubewasm_apimachinery::ShardSelector::new(ShardField::Uid, ranges.iter().copied())
        .unwrap()
        .to_string()
}

fn key_str() -> String {
    key().to_string()
}

#[tokio::test]
async fn server_filtered_list_carries_the_selector_and_caches_only_the_shard() {
    let e = env(true, vec![(0, HALF)]).await;
    let objs = e.populate(5).await;
    let (rec, _reg) = e.subscribe().await;
    let want = keys_where(&objs, low);
    assert_eq!(e.cached(), want);
    let sel = selector(&[(0, HALF)]);
    assert_eq!(
        e.rec().lists.lock()[0],
        (Some(sel.clone()), Some(sel.clone()))
    );
    assert_eq!(e.metrics.shard_lists(&key_str(), "server_filtered"), 1);
    assert_eq!(e.metrics.shard_ranges(&key_str()), 1);
    assert!(rec.evs().iter().all(|ev| matches!(ev, Ev::Add(_, true))));
    // The watch carries it too; a foreign object is never seen, an own one is.
    let (_, _) = e.create_in("foreign", false).await;
    let (own, rv) = e.create_in("own", true).await;
    let evs = rec.wait_len(want.len() + 1).await;
    assert_eq!(evs.last().unwrap(), &add(&format!("default/{own}"), &rv));
    assert_eq!(e.rec().watches.lock()[0], Some(sel));
    assert!(e.cached().iter().all(|k| !k.contains("foreign")));
    // An unsharded key is a different informer holding everything.
    assert!(
        e.factory
            .indexer(&InformerKey::new("v1", "ConfigMap"))
            .is_none()
    );
    e.factory.shutdown().await;
    e.server.shutdown().await;
}

#[tokio::test]
async fn old_server_is_filtered_in_the_host_with_the_same_cache() {
    let e = env(false, vec![(0, HALF)]).await;
    let objs = e.populate(5).await;
    let (rec, _reg) = e.subscribe().await;
    let want = keys_where(&objs, low);
    assert_eq!(e.cached(), want);
    assert_eq!(rec.len(), want.len());
    let sel = selector(&[(0, HALF)]);
    assert_eq!(e.rec().lists.lock()[0], (Some(sel), None));
    assert_eq!(e.metrics.shard_lists(&key_str(), "host_filtered"), 1);
    // The server sends foreign watch events; the host drops them.
    let (foreign, _) = e.create_in("foreign", false).await;
    let (own, rv) = e.create_in("own", true).await;
    let evs = rec.wait_len(want.len() + 1).await;
    assert_eq!(evs.last().unwrap(), &add(&format!("default/{own}"), &rv));
    assert!(e.metrics.shard_foreign_events(&key_str()) >= 1);
    assert!(!e.cached().contains(&format!("default/{foreign}")));
    e.factory.shutdown().await;
    e.server.shutdown().await;
}

#[tokio::test]
async fn a_watch_that_ignores_the_selector_has_its_foreign_events_dropped() {
    let e = env(true, vec![(0, HALF)]).await;
    let objs = e.populate(3).await;
    e.server.faults().ignore_shard_selector(1);
    let (rec, _reg) = e.subscribe().await;
    let want = keys_where(&objs, low);
    let (foreign, _) = e.create_in("foreign", false).await;
    // A bookmark passes the filter: it advances the resume point.
    let bookmarks = e.metrics.bookmarks(&key_str());
    e.server.faults().bookmark_now();
    let (own, rv) = e.create_in("own", true).await;
    let evs = rec.wait_len(want.len() + 1).await;
    assert_eq!(evs.last().unwrap(), &add(&format!("default/{own}"), &rv));
    assert!(e.metrics.shard_foreign_events(&key_str()) >= 1);
    assert!(e.metrics.bookmarks(&key_str()) > bookmarks);
    let mut cached = want.clone();
    cached.push(format!("default/{own}"));
    cached.sort();
    assert_eq!(e.cached(), cached);
    assert!(!e.cached().contains(&format!("default/{foreign}")));
    assert_eq!(e.metrics.shard_lists(&key_str(), "server_filtered"), 1);
    e.factory.shutdown().await;
    e.server.shutdown().await;
}

#[tokio::test]
async fn rescope_adds_gained_drops_lost_silently_and_reports_rescoped() {
    let e = env(true, vec![(0, HALF)]).await;
    let objs = e.populate(4).await;
    let (rec, _reg) = e.subscribe().await;
    let before = keys_where(&objs, low);
    rec.wait_len(before.len()).await;
    // Changes the watch must not show: one kept object changes, another is deleted.
    let kept: Vec<_> = objs.iter().filter(|o| low(o.1)).collect();
    e.server.faults().pause_watches();
    let changed = &kept[0].0;
    let mut cm = e.api.get(changed).await.unwrap();
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    let new_rv = e
        .api
        .replace(changed, &PostParams::default(), &cm)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let deleted = &kept[1].0;
    e.api
        .delete(deleted, &DeleteParams::default())
        .await
        .unwrap();
    // Now hold [0, 2^62) lost... the whole upper half gained, the lower half dropped except
    // its top quarter.
    let q = 1u64 << 62;
    let kept_range = |h: u64| h >= q && low(h);
    let n0 = rec.len();
    e.scope.send_replace(vec![(q, ALL)]);
    e.server.faults().resume_watches();
    let evs = loop {
        let evs = rec.wait_len(rec.len() + 1).await;
        if evs.last() == Some(&Ev::Rescoped) {
            break evs[n0..].to_vec();
        }
    };
    let mut want: Vec<Ev> = objs
        .iter()
        .filter(|o| !low(o.1))
        .map(|o| init_add(&format!("default/{}", o.0), &o.2))
        .collect();
    let find = |n: &str| objs.iter().find(|o| o.0 == n).unwrap();
    if kept_range(find(changed).1) {
        want.push(upd(
            &format!("default/{changed}"),
            &find(changed).2,
            &new_rv,
            false,
        ));
    }
    if kept_range(find(deleted).1) {
        want.push(del(&format!("default/{deleted}"), &find(deleted).2, true));
    }
    assert_eq!(rec.gained.lock().last(), Some(&true));
    let mut got = evs[..evs.len() - 1].to_vec();
    let sort = |v: &mut Vec<Ev>| v.sort_by_key(|e| format!("{e:?}"));
    sort(&mut got);
    sort(&mut want);
    assert_eq!(got, want);
    let mut cache = keys_where(&objs, |h| h >= q);
    cache.retain(|k| k != &format!("default/{deleted}"));
    assert_eq!(e.cached(), cache);
    let last = e.rec().lists.lock().last().cloned().unwrap();
    let sel = selector(&[(q, ALL)]);
    assert_eq!(last, (Some(sel.clone()), Some(sel)));
    assert_eq!(e.metrics.relists(&key_str(), "rescope"), 1);

    // Nothing held: the cache empties silently and nothing is listed.
    let lists = e.server.stats().lists_of("configmaps");
    let n1 = rec.len();
    e.scope.send_replace(vec![]);
    let evs = rec.wait_len(n1 + 1).await;
    assert_eq!(evs[n1..], [Ev::Rescoped]);
    assert_eq!(
        rec.gained.lock().last(),
        Some(&false),
        "a rescope that only gave ranges up replayed nothing"
    );
    assert!(e.cached().is_empty());
    assert_eq!(e.server.stats().lists_of("configmaps"), lists);
    assert_eq!(e.metrics.shard_ranges(&key_str()), 0);
    e.factory.shutdown().await;
    e.server.shutdown().await;
}

#[tokio::test]
async fn empty_scope_lists_nothing_until_a_range_is_held() {
    let e = env(true, vec![]).await;
    let objs = e.populate(2).await;
    let (rec, _reg) = e.subscribe().await;
    assert!(e.cached().is_empty());
    assert_eq!(e.server.stats().lists_of("configmaps"), 0);
    e.scope.send_replace(vec![(0, ALL)]);
    let evs = rec.wait_len(objs.len() + 1).await;
    assert_eq!(evs.last(), Some(&Ev::Rescoped));
    assert_eq!(*rec.gained.lock(), [true]);
    assert!(
        evs[..objs.len()]
            .iter()
            .all(|e| matches!(e, Ev::Add(_, true)))
    );
    assert_eq!(e.cached(), keys_where(&objs, |_| true));
    e.factory.shutdown().await;
    e.server.shutdown().await;
}

#[tokio::test]
async fn a_relist_after_410_checks_the_echo_again() {
    let e = env(true, vec![(0, HALF)]).await;
    let objs = e.populate(3).await;
    let (rec, _reg) = e.subscribe().await;
    let want = keys_where(&objs, low);
    rec.wait_len(want.len()).await;
    assert_eq!(e.metrics.shard_lists(&key_str(), "server_filtered"), 1);
    // From now on lists reach an "old server": no echo, everything sent.
    e.rec().old.store(true, std::sync::atomic::Ordering::SeqCst);
    let f = e.server.faults();
    f.pause_watches();
    let own = objs.iter().find(|o| low(o.1)).unwrap();
    let mut cm = e.api.get(&own.0).await.unwrap();
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    let rv = e
        .api
        .replace(&own.0, &PostParams::default(), &cm)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    f.compact();
    f.end_watches();
    f.resume_watches();
    e.wait_lists(2).await;
    // The relist is an ordinary one: unchanged objects come as sync updates (client-go), the
    // changed one as an update; foreign objects never reach the cache or the handler.
    let target = upd(&format!("default/{}", own.0), &own.2, &rv, false);
    // The update may be in already: look before waiting for more.
    let evs = loop {
        let evs = rec.evs();
        if evs.contains(&target) {
            break evs;
        }
        rec.wait_len(evs.len() + 1).await;
    };
    assert_eq!(e.metrics.shard_lists(&key_str(), "host_filtered"), 1);
    assert_eq!(e.cached(), want);
    for ev in &evs[want.len()..] {
        let Ev::Update(_, new, _) = ev else {
            panic!("{ev:?}")
        };
        assert!(
            want.iter().any(|k| new.starts_with(&format!("{k}@"))),
            "{ev:?}"
        );
    }
    e.factory.shutdown().await;
    e.server.shutdown().await;
}
