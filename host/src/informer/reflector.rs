//! The reflector: keeps the DeltaFIFO in step with the API server through LIST and WATCH,
//! deciding when to relist, at which resourceVersion, and when to merely re-watch.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::backoff::{Backoff, BackoffConfig};
use super::delta_fifo::{DeltaFifo, DeltaObject};
use super::list_watch::{
    ListOptions, ListerWatcher, SourceError, SourceErrorKind, SourceObject, WatchEvent,
    WatchOptions, WatchStream,
};
use super::metrics::InformerCounters;
use super::object::{KubeObject, SharedObject};
use super::processor::Processor;
use super::shard::{Cycle, Held, ShardRanges, ShardScope};
use kubewasm_apimachinery::ShardField;
use tokio::sync::watch;

/// Pager default page size (client-go `tools/pager`).
pub(super) const DEFAULT_PAGE_SIZE: u32 = 500;
/// A watch that closes sooner than this with no events is treated as a failure.
pub(super) const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);
/// Lower bound of the random watch timeout (client-go `defaultMinWatchTimeout`).
pub(super) const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// Rewrites every incoming object before it is stored (client-go `TransformFunc`), e.g. to drop
/// `managedFields` and save cache memory. Must be idempotent.
pub(crate) type TransformFunc = Arc<dyn Fn(serde_json::Value) -> serde_json::Value + Send + Sync>;

/// Reflector knobs (client-go defaults; exposed for tests and tuning).
#[derive(Clone, Debug)]
pub struct ReflectorConfig {
    /// `WatchListPageSize`: fixed page size for every list. `None` = client-go's policy
    /// (500 for RV ""/"0", unlimited for relists at a known RV unless the server paginated).
    pub page_size: Option<u32>,
    /// Watch timeouts are drawn from `[m, 2m)`; values below 5 min are raised to 5 min.
    pub min_watch_timeout: Duration,
    /// Backoff between failed list/watch cycles.
    pub backoff: BackoffConfig,
    /// Streaming initial list (sendInitialEvents), falling back to LIST on failure.
    pub use_watch_list: bool,
    /// `MaxInternalErrorRetryDuration`: re-watch on 500s for this long (0 = never).
    pub max_internal_error_retry: Duration,
    /// Keep `metadata.managedFields` in cached objects (stripped by default, as
    /// kube-controller-manager does: handlers rarely need it and it is often half an object).
    pub keep_managed_fields: bool,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            page_size: None,
            min_watch_timeout: DEFAULT_MIN_WATCH_TIMEOUT,
            backoff: BackoffConfig::default(),
            use_watch_list: false,
            max_internal_error_retry: Duration::ZERO,
            keep_managed_fields: false,
        }
    }
}

/// The reflector's state machine; [`Reflector::step`] performs one transition.
///
/// `List` → `Watch` → `Watching` → (`Watch` | `Backoff` → `Watch` | `Backoff` → `List`) until
/// `Stopped`. The states from a successful list up to the decision to relist form the *watch
/// phase* ([`State::in_watch_phase`]): the resync timer runs alongside them, re-watches and
/// their backoffs included, as client-go's resync goroutine lives for one whole `ListAndWatch`.
enum State {
    /// Needs a snapshot (initial sync or relist); `cause` labels the relist metric.
    List { cause: &'static str },
    /// The store is in sync up to `last_sync_rv`: open a watch from there, without listing.
    Watch,
    /// A watch is open; `events` counts accepted events for very-short-watch detection.
    Watching {
        stream: WatchStream<SourceObject>,
        started: Instant,
        events: u64,
    },
    /// Sleep one backoff interval, then go on with `then`.
    Backoff { then: Box<State> },
    /// A sharded informer that holds no range: nothing to list or watch until the scope changes.
    Parked,
    /// Cancelled.
    Stopped,
}

impl State {
    /// True from the end of a successful list until a relist is decided.
    fn in_watch_phase(&self) -> bool {
        match self {
            State::Watch | State::Watching { .. } => true,
            State::Backoff { then } => matches!(**then, State::Watch),
            State::List { .. } | State::Parked | State::Stopped => false,
        }
    }
}

/// Replays the cache into the FIFO when a handler's resync falls due. Each handler keeps its
/// own schedule (relists do not reset it); a resync that fell due while the timer was not
/// running (during a list) happens as soon as it runs again.
struct ResyncTimer {
    processor: Arc<Processor>,
    fifo: Arc<DeltaFifo>,
    counters: InformerCounters,
}

impl ResyncTimer {
    /// Never returns: the reflector polls it alongside each watch-phase step and drops it
    /// when the step ends (it holds no state between wake-ups, so nothing is lost).
    async fn run(&self) -> Infallible {
        loop {
            // Registered before the plan is read, so a handler added in between still wakes
            // the timer (`notify_waiters` only reaches futures that already wait).
            let changed = self.processor.plan_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let due = self.processor.next_resync();
            let timer = async move {
                match due {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = changed => {}
                _ = timer => {
                    if self.processor.should_resync(Instant::now()) {
                        self.counters.resyncs.inc();
                        self.fifo.resync();
                    }
                }
            }
        }
    }
}

/// client-go `retryWithDeadline` for internal errors during a watch.
struct InternalErrorRetry {
    max: Duration,
    first: Option<Instant>,
}

impl InternalErrorRetry {
    fn after(&mut self, err: Option<&SourceError>) {
        match err {
            Some(e) if e.kind == SourceErrorKind::InternalError => {
                self.first.get_or_insert_with(Instant::now);
            }
            _ => self.first = None,
        }
    }

    fn should_retry(&mut self) -> bool {
        if self.max.is_zero() {
            return false;
        }
        match self.first {
            Some(f) if Instant::now().duration_since(f) <= self.max => true,
            _ => {
                self.first = None;
                false
            }
        }
    }
}

/// Drives one informer's list/watch cycle until cancelled.
pub(crate) struct Reflector {
    pub name: String,
    pub api_version: String,
    pub kind: String,
    pub lw: Arc<dyn ListerWatcher>,
    pub fifo: Arc<DeltaFifo>,
    pub processor: Arc<Processor>,
    pub counters: InformerCounters,
    pub config: ReflectorConfig,
    pub cancel: CancellationToken,
    /// Shared so the informer can report it.
    pub last_sync_rv: Arc<Mutex<String>>,
    /// Applied to list items and watch objects before they become [`KubeObject`]s.
    pub transform: Option<TransformFunc>,
    rv_unavailable: bool,
    paginated_result: bool,
    backoff: Backoff,
    internal_retry: InternalErrorRetry,
    watches_opened: u64,
    /// Sharded informers: the scope, until `run` takes its receiver.
    shard: Option<ShardScope>,
    /// The hashed field of a sharded informer.
    field: Option<ShardField>,
    /// The held ranges the next list asks for.
    target: Held,
    /// The ranges the cache currently reflects (set by each successful list).
    cycle: Option<Cycle>,
    /// The scope changed since the last successful list: the next one is a rescope.
    rescope_pending: bool,
}

/// What one (possibly paged) LIST brought.
struct Listed {
    items: Vec<SharedObject>,
    resource_version: String,
    paginated: bool,
    /// Every page echoed the `shardSelector` sent (the server filtered all of it).
    server_filtered: bool,
}

/// Resolves with the new held ranges once the scope differs from `current`; never for an
/// unsharded informer (or once the scope's sender is gone: the last ranges stay).
async fn scope_change(rx: &mut Option<watch::Receiver<ShardRanges>>, current: &Held) -> Held {
    let Some(rx) = rx else {
        return std::future::pending().await;
    };
    loop {
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
        let new = Held::normalize(&rx.borrow_and_update());
        if &new != current {
            return new;
        }
    }
}

/// What the owning informer hands a [`Reflector`]: its identity, the shared
/// queue/processor handles and its settings, bundled so construction is by name.
pub(super) struct ReflectorParts {
    /// Informer name, used in logs.
    pub name: String,
    /// `apiVersion` of the watched resource.
    pub api_version: String,
    /// `kind` of the watched resource.
    pub kind: String,
    /// Source of list and watch calls.
    pub lw: Arc<dyn ListerWatcher>,
    /// Queue the reflector feeds deltas into.
    pub fifo: Arc<DeltaFifo>,
    /// Listener fan-out, used for resyncs.
    pub processor: Arc<Processor>,
    /// The informer's metrics.
    pub counters: InformerCounters,
    /// Backoff, paging and timeout settings.
    pub config: ReflectorConfig,
    /// Stops the reflector when fired.
    pub cancel: CancellationToken,
    /// Last synced resourceVersion, shared with the informer.
    pub last_sync_rv: Arc<Mutex<String>>,
    /// The held ranges to follow, for a sharded informer.
    pub shard: Option<ShardScope>,
}

impl Reflector {
    pub(super) fn new(parts: ReflectorParts) -> Self {
        let ReflectorParts {
            name,
            api_version,
            kind,
            lw,
            fifo,
            processor,
            counters,
            config,
            cancel,
            last_sync_rv,
            shard,
        } = parts;
        Self {
            backoff: Backoff::new(config.backoff.clone()),
            internal_retry: InternalErrorRetry {
                max: config.max_internal_error_retry,
                first: None,
            },
            name,
            api_version,
            kind,
            lw,
            fifo,
            processor,
            counters,
            config,
            cancel,
            last_sync_rv,
            transform: None,
            rv_unavailable: false,
            paginated_result: false,
            watches_opened: 0,
            shard,
            field: None,
            target: Held::default(),
            cycle: None,
            rescope_pending: false,
        }
    }

    fn last_sync(&self) -> String {
        self.last_sync_rv.lock().clone()
    }

    fn set_last_sync(&self, rv: &str) {
        if !rv.is_empty() {
            *self.last_sync_rv.lock() = rv.to_string();
        }
    }

    /// client-go `relistResourceVersion`.
    fn relist_rv(&self) -> String {
        if self.rv_unavailable {
            String::new()
        } else {
            let rv = self.last_sync();
            if rv.is_empty() { "0".into() } else { rv }
        }
    }

    fn watch_timeout(&self) -> u32 {
        let min = self.config.min_watch_timeout.max(DEFAULT_MIN_WATCH_TIMEOUT);
        (min.as_secs_f64() * (rand::random::<f64>() + 1.0)) as u32
    }

    /// Runs until the cancellation token fires.
    pub(super) async fn run(mut self) {
        let resync = ResyncTimer {
            processor: self.processor.clone(),
            fifo: self.fifo.clone(),
            counters: self.counters.clone(),
        };
        let mut scope_rx = None;
        if let Some(scope) = self.shard.take() {
            let mut rx = scope.ranges;
            self.target = Held::normalize(&rx.borrow_and_update());
            self.field = Some(scope.field);
            scope_rx = Some(rx);
        }
        let mut state = State::List { cause: "initial" };
        loop {
            state = match state {
                State::Stopped => return,
                s => {
                    let watch_phase = s.in_watch_phase();
                    let target = self.target.clone();
                    tokio::select! {
                        next = self.step(s) => next,
                        never = resync.run(), if watch_phase => match never {},
                        held = scope_change(&mut scope_rx, &target) => self.rescope(held),
                    }
                }
            };
        }
    }

    /// The held ranges changed: whatever was going on (a watch, a list, a backoff) is dropped
    /// and the informer relists with the new selector.
    fn rescope(&mut self, held: Held) -> State {
        tracing::info!(informer = %self.name, ranges = held.len(), "shard scope changed; relisting");
        self.target = held;
        if self.cycle.is_some() {
            self.rescope_pending = true;
            State::List { cause: "rescope" }
        } else {
            State::List { cause: "initial" }
        }
    }

    /// One transition of the state machine.
    async fn step(&mut self, state: State) -> State {
        match state {
            State::Stopped => State::Stopped,
            State::Parked => {
                self.cancel.cancelled().await;
                State::Stopped
            }
            State::List { cause } => self.list(cause).await,
            State::Watch => self.open_watch().await,
            State::Watching {
                stream,
                started,
                events,
            } => self.watch(stream, started, events).await,
            State::Backoff { then } => {
                let d = self.backoff.next();
                tokio::select! {
                    _ = self.cancel.cancelled() => State::Stopped,
                    _ = tokio::time::sleep(d) => *then,
                }
            }
        }
    }

    fn to_object(&self, src: SourceObject, what: &str) -> Option<SharedObject> {
        // Applied once at ingestion: tombstones and Sync deltas carry already-transformed
        // objects, so an idempotent transform sees exactly what client-go's FIFO would give it.
        match KubeObject::from_source(
            src,
            &self.api_version,
            &self.kind,
            self.config.keep_managed_fields,
            self.transform.as_ref(),
        ) {
            Ok(o) => Some(Arc::new(o)),
            Err((e, src)) => {
                let v = src.into_tree();
                // Identity and reason only: the object may be a Secret.
                let meta = |k: &str| {
                    v.get("metadata")
                        .and_then(|m| m.get(k))
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("")
                };
                let kind = v.get("kind").and_then(serde_json::Value::as_str);
                tracing::warn!(informer = %self.name, event = what,
                    kind = kind.unwrap_or(""), namespace = meta("namespace"), name = meta("name"),
                    resource_version = meta("resourceVersion"), reason = %e,
                    "skipping malformed object");
                None
            }
        }
    }

    async fn list(&mut self, cause: &'static str) -> State {
        if cause != "initial" {
            self.counters.relist(cause);
        }
        let cycle = self.field.map(|f| Cycle::new(f, self.target.clone()));
        if let Some(c) = cycle.as_ref().filter(|c| c.held.is_empty()) {
            // Nothing held: the cache empties (silently) and the server is left alone.
            tracing::info!(informer = %self.name, "no shard range held; cache emptied, not listing");
            self.commit(Vec::new(), Some(c.clone()));
            return State::Parked;
        }
        if self.config.use_watch_list {
            match self.watch_list(cycle.as_ref()).await {
                Ok(s) => return s,
                Err(e) => tracing::warn!(informer = %self.name, error = %e,
                    "streaming list failed, falling back to the standard LIST/WATCH semantics"),
            }
        }
        loop {
            let rv = self.relist_rv();
            let limit = match self.config.page_size {
                Some(p) => Some(p),
                None if self.paginated_result => Some(DEFAULT_PAGE_SIZE),
                None if !rv.is_empty() && rv != "0" => None,
                None => Some(DEFAULT_PAGE_SIZE),
            };
            let selector = cycle.as_ref().and_then(|c| c.selector.as_deref());
            let res = tokio::select! {
                _ = self.cancel.cancelled() => return State::Stopped,
                r = self.list_pages(&rv, limit, selector) => r,
            };
            match res {
                Ok(mut listed) => {
                    if rv == "0" && listed.paginated {
                        self.paginated_result = true;
                    }
                    self.rv_unavailable = false;
                    if let Some(c) = &cycle {
                        // Trusted only when the server said it filtered by exactly this selector.
                        let server = c.selector.is_some() && listed.server_filtered;
                        if !server {
                            listed.items.retain(|o| c.owns(o));
                        }
                        self.counters.shard_list(server);
                    }
                    self.commit(listed.items, cycle);
                    self.set_last_sync(&listed.resource_version);
                    return State::Watch;
                }
                Err(e) if e.needs_consistent_relist() && !rv.is_empty() => {
                    tracing::info!(informer = %self.name, rv = %rv, error = %e,
                        "list at resourceVersion failed; relisting with a consistent read");
                    self.rv_unavailable = true;
                }
                Err(e) => {
                    if e.needs_consistent_relist() {
                        self.rv_unavailable = true;
                    }
                    tracing::warn!(informer = %self.name, error = %e, "failed to list; backing off");
                    return State::Backoff {
                        then: Box::new(State::List { cause }),
                    };
                }
            }
        }
    }

    /// Hands a successful list to the FIFO. A sharded informer's list evicts (silently) what
    /// left its scope; after a rescope a mark follows, so listeners learn when it is delivered.
    fn commit(&mut self, items: Vec<SharedObject>, cycle: Option<Cycle>) {
        let Some(c) = cycle else {
            self.fifo.replace(items);
            return;
        };
        let rescope = std::mem::take(&mut self.rescope_pending);
        self.fifo
            .replace_scoped(items, &|o: &KubeObject| c.owns(o), rescope);
        if rescope {
            let grew = self
                .cycle
                .as_ref()
                .is_none_or(|old| !old.held.covers(&c.held));
            self.fifo.mark_rescoped(grew);
        }
        self.counters.shard_ranges.set(c.held.len() as i64);
        self.cycle = Some(c);
    }

    /// Paged list; a continuation that expired falls back to one full list at the same RV.
    /// Each page becomes cached objects as it arrives, so only one page is ever held twice.
    async fn list_pages(
        &self,
        rv: &str,
        mut limit: Option<u32>,
        selector: Option<&str>,
    ) -> Result<Listed, SourceError> {
        let mut items = Vec::new();
        let mut cont: Option<String> = None;
        let mut paginated = false;
        let mut server_filtered = true;
        // One list however many pages (and a fallback after an expired continuation) it takes.
        self.counters.lists.inc();
        loop {
            let opts = ListOptions {
                resource_version: if cont.is_some() {
                    String::new()
                } else {
                    rv.to_string()
                },
                limit,
                continue_token: cont.clone(),
                shard_selector: selector.map(str::to_string),
            };
            self.counters.list_pages.inc();
            match self.lw.list_objects(&opts).await {
                Ok(page) => {
                    // Each page on its own: a skewed server behind a load balancer may filter
                    // one page and not the next.
                    server_filtered &=
                        selector.is_some() && page.shard_selector.as_deref() == selector;
                    items.extend(
                        page.items
                            .into_iter()
                            .filter_map(|o| self.to_object(o, "LIST item")),
                    );
                    match page.continue_token.filter(|c| !c.is_empty()) {
                        Some(c) => {
                            paginated = true;
                            cont = Some(c);
                        }
                        None => {
                            return Ok(Listed {
                                items,
                                resource_version: page.resource_version,
                                paginated,
                                server_filtered,
                            });
                        }
                    }
                }
                Err(e) if cont.is_some() && e.kind == SourceErrorKind::Expired => {
                    tracing::info!(informer = %self.name, error = %e,
                        "list continuation expired; listing everything in one request");
                    items.clear();
                    cont = None;
                    limit = None;
                    server_filtered = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn open_watch(&mut self) -> State {
        let opts = WatchOptions {
            resource_version: self.last_sync(),
            timeout_seconds: self.watch_timeout(),
            allow_bookmarks: true,
            send_initial_events: false,
            shard_selector: self.cycle.as_ref().and_then(|c| c.selector.clone()),
        };
        let res = tokio::select! {
            _ = self.cancel.cancelled() => return State::Stopped,
            r = self.lw.watch_objects(&opts) => r,
        };
        match res {
            Ok(stream) => {
                self.watches_opened += 1;
                if self.watches_opened > 1 {
                    self.counters.watch_restarts.inc();
                }
                State::Watching {
                    stream,
                    started: Instant::now(),
                    events: 0,
                }
            }
            Err(e) if e.is_watch_retriable() => {
                tracing::warn!(informer = %self.name, error = %e, "watch failed; retrying without relist");
                State::Backoff {
                    then: Box::new(State::Watch),
                }
            }
            Err(e) => {
                tracing::warn!(informer = %self.name, error = %e, "watch failed; relisting after backoff");
                State::Backoff {
                    then: Box::new(State::List {
                        cause: cause_of(&e),
                    }),
                }
            }
        }
    }

    /// Applies one watch event to the FIFO. Returns false if it was skipped.
    fn handle_event(&self, ev: WatchEvent<SourceObject>) -> bool {
        let what = ev.type_name();
        match ev {
            WatchEvent::Bookmark {
                resource_version, ..
            } => {
                self.counters.bookmarks.inc();
                tracing::debug!(informer = %self.name, resource_version = %resource_version,
                    "bookmark");
                self.set_last_sync(&resource_version);
                true
            }
            WatchEvent::Added(v) | WatchEvent::Modified(v) | WatchEvent::Deleted(v) => {
                let is = |t: &str| what == t;
                let Some(obj) = self.to_object(v, what) else {
                    return false;
                };
                // Watch events carry no echo, and a watch may reach a server that ignored the
                // selector: every event is checked against this cycle's ranges.
                if let Some(c) = &self.cycle
                    && !c.owns(&obj)
                {
                    self.counters.shard_foreign_events.inc();
                    return false;
                }
                let rv = obj.resource_version().to_string();
                if is("ADDED") {
                    self.fifo.add(obj);
                } else if is("MODIFIED") {
                    self.fifo.update(obj);
                } else {
                    self.fifo.delete(DeltaObject::Object(obj));
                }
                self.set_last_sync(&rv);
                true
            }
        }
    }

    async fn watch(
        &mut self,
        mut stream: WatchStream<SourceObject>,
        started: Instant,
        mut events: u64,
    ) -> State {
        loop {
            let ev = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return State::Stopped,
                ev = stream.next() => ev,
            };
            let e = match ev {
                Some(Ok(ev)) => {
                    if self.handle_event(ev) {
                        events += 1;
                    }
                    continue;
                }
                Some(Err(e)) => e,
                None => {
                    if events == 0 && started.elapsed() < VERY_SHORT_WATCH {
                        tracing::warn!(informer = %self.name,
                            "very short watch: closed in under 1s with no events; relisting after backoff");
                        return State::Backoff {
                            then: Box::new(State::List {
                                cause: "very_short_watch",
                            }),
                        };
                    }
                    self.internal_retry.after(None);
                    return State::Watch;
                }
            };
            return match e.kind {
                // client-go's stream watcher ends the watch on a decoding error and the
                // reflector relists: skipping the event would lose the change it carried.
                SourceErrorKind::Malformed => {
                    self.counters.undecodable.inc();
                    tracing::warn!(informer = %self.name, error = %e,
                        "undecodable watch event; relisting after backoff");
                    State::Backoff {
                        then: Box::new(State::List {
                            cause: "undecodable",
                        }),
                    }
                }
                SourceErrorKind::Expired => {
                    tracing::info!(informer = %self.name, error = %e, "watch expired; relisting");
                    State::Backoff {
                        then: Box::new(State::List { cause: "expired" }),
                    }
                }
                SourceErrorKind::TooManyRequests => {
                    tracing::warn!(informer = %self.name, error = %e,
                        "watch throttled; re-watching after backoff");
                    State::Backoff {
                        then: Box::new(State::Watch),
                    }
                }
                _ => {
                    self.internal_retry.after(Some(&e));
                    if self.internal_retry.should_retry() {
                        tracing::warn!(informer = %self.name, error = %e,
                            "internal error in watch; re-watching");
                        return State::Watch;
                    }
                    tracing::warn!(informer = %self.name, error = %e,
                        "watch error; relisting after backoff");
                    State::Backoff {
                        then: Box::new(State::List {
                            cause: cause_of(&e),
                        }),
                    }
                }
            };
        }
    }

    /// Streaming initial list: the watch's initial events fill a temporary store that replaces
    /// the FIFO at the `initial-events-end` bookmark; the same stream then continues.
    async fn watch_list(&mut self, cycle: Option<&Cycle>) -> Result<State, SourceError> {
        // A list too, though no LIST request: no pages.
        self.counters.lists.inc();
        loop {
            let rv = if self.rv_unavailable {
                String::new()
            } else {
                self.last_sync()
            };
            let opts = WatchOptions {
                resource_version: rv,
                timeout_seconds: self.watch_timeout(),
                allow_bookmarks: true,
                send_initial_events: true,
                shard_selector: cycle.and_then(|c| c.selector.clone()),
            };
            let res = tokio::select! {
                _ = self.cancel.cancelled() => return Ok(State::Stopped),
                r = self.lw.watch_objects(&opts) => r,
            };
            let mut stream = match res {
                Ok(s) => s,
                Err(e) if e.is_watch_retriable() => {
                    let d = self.backoff.next();
                    tokio::select! {
                        _ = self.cancel.cancelled() => return Ok(State::Stopped),
                        _ = tokio::time::sleep(d) => continue,
                    }
                }
                Err(e) if e.needs_consistent_relist() => {
                    self.rv_unavailable = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.watches_opened += 1;
            let started = Instant::now();
            let mut order: Vec<String> = Vec::new();
            let mut temp: HashMap<String, SharedObject> = HashMap::new();
            loop {
                let ev = tokio::select! {
                    _ = self.cancel.cancelled() => return Ok(State::Stopped),
                    ev = stream.next() => ev,
                };
                match ev {
                    None => {
                        return Err(SourceError::new(
                            SourceErrorKind::Other,
                            "watch closed before the initial-events-end bookmark",
                        ));
                    }
                    Some(Ok(WatchEvent::Bookmark {
                        resource_version,
                        initial_events_end,
                    })) => {
                        self.counters.bookmarks.inc();
                        if initial_events_end {
                            let objs: Vec<SharedObject> =
                                order.iter().filter_map(|k| temp.remove(k)).collect();
                            if cycle.is_some() {
                                // Initial events carry no echo: always filtered here.
                                self.counters.shard_list(false);
                            }
                            self.commit(objs, cycle.cloned());
                            self.set_last_sync(&resource_version);
                            self.rv_unavailable = false;
                            return Ok(State::Watching {
                                stream,
                                started,
                                events: 1,
                            });
                        }
                    }
                    Some(Ok(ev)) => {
                        let what = ev.type_name();
                        let (WatchEvent::Added(v)
                        | WatchEvent::Modified(v)
                        | WatchEvent::Deleted(v)) = ev
                        else {
                            continue;
                        };
                        let Some(obj) = self.to_object(v, what) else {
                            continue;
                        };
                        if let Some(c) = cycle
                            && !c.owns(&obj)
                        {
                            self.counters.shard_foreign_events.inc();
                            continue;
                        }
                        let key = obj.key().to_string();
                        if what == "DELETED" {
                            temp.remove(&key);
                        } else {
                            if !temp.contains_key(&key) {
                                order.push(key.clone());
                            }
                            temp.insert(key, obj);
                        }
                    }
                    // As in a watch, an undecodable event ends the stream (and the streaming
                    // list falls back to LIST).
                    Some(Err(e)) if e.kind == SourceErrorKind::Malformed => {
                        self.counters.undecodable.inc();
                        return Err(e);
                    }
                    Some(Err(e)) if e.needs_consistent_relist() => {
                        self.rv_unavailable = true;
                        break;
                    }
                    Some(Err(e)) => return Err(e),
                }
            }
        }
    }
}

/// Relist-metric label for an error.
fn cause_of(e: &SourceError) -> &'static str {
    match e.kind {
        SourceErrorKind::Expired => "expired",
        SourceErrorKind::TooLarge => "too_large",
        SourceErrorKind::InternalError => "internal_error",
        _ => "watch_error",
    }
}
