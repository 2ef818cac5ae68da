//! Scenario tests (spec section 4, groups A–J) over a scripted source. Time is tokio's paused
//! clock; tests await notifications instead of sleeping.

mod fifo;
mod handlers;
mod kube_source;
mod logs;
mod reflector;
mod shard;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::*;

/// A Pod-like object tree (cluster-scoped key `name` to keep keys short).
pub(super) fn v(name: &str, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "resourceVersion": rv, "uid": format!("uid-{name}")}})
}

pub(super) fn o(name: &str, rv: &str) -> SharedObject {
    Arc::new(KubeObject::from_value(v(name, rv)).unwrap())
}

pub(super) fn pod_key() -> InformerKey {
    InformerKey::new("v1", "Pod")
}

/// `name@rv` of an object.
pub(super) fn at(obj: &SharedObject) -> String {
    format!("{}@{}", obj.key(), obj.resource_version())
}

/// What a handler saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Ev {
    Add(String, bool),
    Update(String, String, bool),
    Delete(String, bool),
    /// `rescoped()`.
    Rescoped,
}

/// Records notifications with their (paused-clock) time.
#[derive(Default)]
pub(super) struct Recorder {
    pub events: Mutex<Vec<(Instant, Ev)>>,
    /// Each `rescoped` call's `gained`, in order.
    pub gained: Mutex<Vec<bool>>,
    notify: Notify,
}

impl Recorder {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn push(&self, e: Ev) {
        self.events.lock().push((Instant::now(), e));
        self.notify.notify_waiters();
    }

    pub(super) fn evs(&self) -> Vec<Ev> {
        self.events.lock().iter().map(|(_, e)| e.clone()).collect()
    }

    pub(super) fn len(&self) -> usize {
        self.events.lock().len()
    }

    /// Waits (on the paused clock, so instantly in wall time) until `n` events arrived.
    pub(super) async fn wait_len(&self, n: usize) -> Vec<Ev> {
        let fut = async {
            loop {
                let notified = self.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.len() >= n {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(3600), fut)
            .await
            .is_err()
        {
            panic!("timed out waiting for {n} events; got {:?}", self.evs());
        }
        self.evs()
    }
}

impl ResourceEventHandler for Recorder {
    fn on_add(&self, obj: &SharedObject, init: bool) {
        self.push(Ev::Add(at(obj), init));
    }
    fn on_update(&self, old: &SharedObject, new: &SharedObject, is_sync: bool) {
        self.push(Ev::Update(at(old), at(new), is_sync));
    }
    fn on_delete(&self, obj: &SharedObject, fsu: bool) {
        self.push(Ev::Delete(at(obj), fsu));
    }
    fn rescoped(&self, gained: bool) {
        self.gained.lock().push(gained);
        self.push(Ev::Rescoped);
    }
}

/// A recorded source call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Call {
    List(ListOptions),
    Watch(WatchOptions),
}

/// How the next watch call is answered.
pub(super) enum WatchScript {
    Err(SourceError),
    /// A stream yielding these items (each after its delay), then closing.
    Events(Vec<(Duration, Result<WatchEvent, SourceError>)>),
}

type Tx = mpsc::UnboundedSender<Result<WatchEvent, SourceError>>;

#[derive(Default)]
struct FakeState {
    calls: Vec<(Instant, Call)>,
    lists: VecDeque<Result<ListPage, SourceError>>,
    default_list: Option<(Vec<Value>, String)>,
    list_blocks: bool,
    watches: VecDeque<WatchScript>,
    live: Option<Tx>,
}

/// A scripted API server for one resource. Unscripted lists return the default list; unscripted
/// watches return a live stream the test feeds with [`send`](Self::send).
#[derive(Default)]
pub(super) struct Fake {
    st: Mutex<FakeState>,
    notify: Notify,
}

impl Fake {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(super) fn set_list(&self, items: Vec<Value>, rv: &str) {
        self.st.lock().default_list = Some((items, rv.to_string()));
    }

    pub(super) fn block_lists(&self) {
        self.st.lock().list_blocks = true;
    }

    pub(super) fn script_list(&self, r: Result<ListPage, SourceError>) {
        self.st.lock().lists.push_back(r);
    }

    pub(super) fn script_watch(&self, w: WatchScript) {
        self.st.lock().watches.push_back(w);
    }

    /// Sends an event on the live watch (panics if none is open).
    pub(super) fn send(&self, ev: Result<WatchEvent, SourceError>) {
        let st = self.st.lock();
        st.live
            .as_ref()
            .expect("no live watch")
            .send(ev)
            .expect("watch receiver dropped");
    }

    /// Ends the live watch normally.
    pub(super) fn close_watch(&self) {
        self.st.lock().live.take();
    }

    /// True if the live watch's receiver is gone (the informer closed it).
    pub(super) fn watch_closed(&self) -> bool {
        self.st.lock().live.as_ref().is_none_or(|t| t.is_closed())
    }

    pub(super) fn calls(&self) -> Vec<Call> {
        self.st
            .lock()
            .calls
            .iter()
            .map(|(_, c)| c.clone())
            .collect()
    }

    pub(super) fn timed_calls(&self) -> Vec<(Instant, Call)> {
        self.st.lock().calls.clone()
    }

    pub(super) fn list_rvs(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::List(o) if o.continue_token.is_none() => Some(o.resource_version),
                _ => None,
            })
            .collect()
    }

    pub(super) fn watch_count(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| matches!(c, Call::Watch(_)))
            .count()
    }

    /// Waits until `n` calls were made; returns them.
    pub(super) async fn wait_calls(&self, n: usize) -> Vec<Call> {
        let fut = async {
            loop {
                let notified = self.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.st.lock().calls.len() >= n {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(3600), fut)
            .await
            .is_err()
        {
            panic!("timed out waiting for {n} calls; got {:?}", self.calls());
        }
        self.calls()
    }

    /// Waits until a live watch is open (the `n`th call overall is a watch).
    pub(super) async fn wait_live_watch(&self, n: usize) {
        let calls = self.wait_calls(n).await;
        assert!(
            matches!(calls[n - 1], Call::Watch(_)),
            "call {n} is not a watch: {calls:?}"
        );
    }

    fn record(&self, c: Call) {
        self.st.lock().calls.push((Instant::now(), c));
        self.notify.notify_waiters();
    }
}

#[async_trait::async_trait]
impl ListerWatcher for Fake {
    async fn list(&self, opts: &ListOptions) -> Result<ListPage, SourceError> {
        self.record(Call::List(opts.clone()));
        let r = {
            let mut st = self.st.lock();
            if st.list_blocks {
                None
            } else {
                Some(match st.lists.pop_front() {
                    Some(r) => r,
                    None => match &st.default_list {
                        Some((items, rv)) => Ok(ListPage {
                            items: items.clone(),
                            resource_version: rv.clone(),
                            continue_token: None,
                            shard_selector: None,
                        }),
                        None => Err(SourceError::new(SourceErrorKind::Other, "no list scripted")),
                    },
                })
            }
        };
        match r {
            Some(r) => r,
            None => futures::future::pending().await,
        }
    }

    async fn watch(&self, opts: &WatchOptions) -> Result<WatchStream, SourceError> {
        let script = self.st.lock().watches.pop_front();
        // The live sender is installed before the call is recorded, so a test that saw the
        // call can send at once.
        let res = match script {
            Some(WatchScript::Err(e)) => Err(e),
            Some(WatchScript::Events(evs)) => Ok(futures::stream::iter(evs)
                .then(|(d, e)| async move {
                    tokio::time::sleep(d).await;
                    e
                })
                .boxed()),
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                self.st.lock().live = Some(tx);
                Ok(tokio_stream_from(rx))
            }
        };
        self.record(Call::Watch(opts.clone()));
        res
    }
}

fn tokio_stream_from(
    mut rx: mpsc::UnboundedReceiver<Result<WatchEvent, SourceError>>,
) -> WatchStream {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

/// A source factory serving one fake for every key, refusing kind "Unknown".
pub(super) struct FakeFactory(pub Arc<Fake>);

#[async_trait::async_trait]
impl SourceFactory for FakeFactory {
    async fn lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Arc<dyn ListerWatcher>, InformerError> {
        if key.kind == "Unknown" {
            return Err(InformerError::UnknownKind {
                api_version: key.api_version.clone(),
                kind: key.kind.clone(),
                cause: "the server could not find the requested resource".into(),
            });
        }
        Ok(self.0.clone())
    }
}

pub(super) fn expired() -> SourceError {
    SourceError::from_status(410, "Expired", "too old resource version: 1 (2)", &[])
}

pub(super) fn informer_with(fake: &Arc<Fake>, config: ReflectorConfig) -> Arc<SharedIndexInformer> {
    SharedIndexInformer::new(
        pod_key(),
        fake.clone(),
        InformerMetrics::unregistered(),
        config,
    )
}

pub(super) fn informer(fake: &Arc<Fake>) -> Arc<SharedIndexInformer> {
    informer_with(fake, ReflectorConfig::default())
}

/// Informer with one recorder, started, initial list delivered and the watch open.
pub(super) async fn started(
    items: Vec<Value>,
    rv: &str,
) -> (Arc<Fake>, Arc<SharedIndexInformer>, Arc<Recorder>) {
    let fake = Fake::new();
    fake.set_list(items.clone(), rv);
    let inf = informer(&fake);
    let rec = Recorder::new();
    inf.add_event_handler(rec.clone(), None).unwrap();
    inf.run();
    rec.wait_len(items.len()).await;
    fake.wait_live_watch(2).await;
    (fake, inf, rec)
}

pub(super) fn add(name: &str, rv: &str) -> Ev {
    Ev::Add(format!("{name}@{rv}"), false)
}

pub(super) fn init_add(name: &str, rv: &str) -> Ev {
    Ev::Add(format!("{name}@{rv}"), true)
}

pub(super) fn upd(name: &str, old: &str, new: &str, sync: bool) -> Ev {
    Ev::Update(format!("{name}@{old}"), format!("{name}@{new}"), sync)
}

pub(super) fn del(name: &str, rv: &str, fsu: bool) -> Ev {
    Ev::Delete(format!("{name}@{rv}"), fsu)
}

/// Smoke test of the kube source against a live API server (plain-HTTP kubeconfig works):
/// `KUBECONFIG=… cargo test --release -p kubewasm --lib kube_source_smoke -- --ignored`.
/// Optional `SMOKE_API_VERSION` / `SMOKE_KIND` (default `v1` / `ConfigMap`).
#[tokio::test]
#[ignore = "needs a live API server via KUBECONFIG"]
async fn kube_source_smoke() {
    let client = kube::Client::try_default()
        .await
        .expect("kube client from KUBECONFIG");
    let av = std::env::var("SMOKE_API_VERSION").unwrap_or_else(|_| "v1".into());
    let kind = std::env::var("SMOKE_KIND").unwrap_or_else(|_| "ConfigMap".into());
    let f = InformerFactory::new(client, InformerMetrics::unregistered());
    let missing = f
        .add_handler(&InformerKey::new("v1", "NoSuchKind"), Recorder::new(), None)
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("NoSuchKind"), "{missing}");
    let rec = Recorder::new();
    let reg = f
        .add_handler(&InformerKey::new(av, kind), rec.clone(), None)
        .await
        .expect("kind resolves");
    tokio::time::timeout(Duration::from_secs(30), reg.wait_synced())
        .await
        .expect("synced within 30 s");
    let n = reg.indexer().len();
    assert_eq!(rec.len(), n, "one initial add per cached object");
    assert!(rec.evs().iter().all(|e| matches!(e, Ev::Add(_, true))));
    reg.remove().await;
    f.shutdown().await;
}
