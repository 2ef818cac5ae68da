//! Prometheus metrics for informers, labelled by the informer key string.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

struct Families {
    lists: Family<Labels, Counter>,
    list_pages: Family<Labels, Counter>,
    bookmarks: Family<Labels, Counter>,
    relists: Family<Labels, Counter>,
    watch_restarts: Family<Labels, Counter>,
    resyncs: Family<Labels, Counter>,
    undecodable: Family<Labels, Counter>,
    objects: Family<Labels, Gauge>,
    listener_queue_depth: Family<Labels, Gauge>,
    shard_lists: Family<Labels, Counter>,
    shard_foreign_events: Family<Labels, Counter>,
    shard_ranges: Family<Labels, Gauge>,
}

/// Metric families shared by every informer; cheap to clone. Per-event paths only touch cached
/// counter handles (one atomic op), never the family maps.
#[derive(Clone)]
pub struct InformerMetrics {
    f: Arc<Families>,
}

impl std::fmt::Debug for InformerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InformerMetrics")
    }
}

impl InformerMetrics {
    /// Registers the families in the registry the binary serves.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        let f = &m.f;
        registry.register(
            "kubewasm_informer_lists",
            "Lists made by informers (initial and relists; a paged list counts once)",
            f.lists.clone(),
        );
        registry.register(
            "kubewasm_informer_list_pages",
            "LIST requests made by informers (every page of a paged list counts)",
            f.list_pages.clone(),
        );
        registry.register(
            "kubewasm_informer_bookmarks",
            "BOOKMARK watch events received (each advances the resume resourceVersion)",
            f.bookmarks.clone(),
        );
        registry.register(
            "kubewasm_informer_relists",
            "Full relists after the initial list, by cause",
            f.relists.clone(),
        );
        registry.register(
            "kubewasm_informer_watch_restarts",
            "Watches (re)opened after the first one",
            f.watch_restarts.clone(),
        );
        registry.register(
            "kubewasm_informer_resyncs",
            "Resyncs (cache replays) performed",
            f.resyncs.clone(),
        );
        registry.register(
            "kubewasm_informer_undecodable_events",
            "Watch events that could not be decoded (each ends its watch and causes a relist)",
            f.undecodable.clone(),
        );
        registry.register(
            "kubewasm_informer_objects",
            "Objects in the informer's cache",
            f.objects.clone(),
        );
        registry.register(
            "kubewasm_informer_listener_queue_depth",
            "Notifications buffered for a handler and not yet delivered",
            f.listener_queue_depth.clone(),
        );
        registry.register(
            "kubewasm_informer_shard_lists",
            "Lists of sharded informers by who narrowed them: outcome=server_filtered (every page \
             echoed the shardSelector) or host_filtered (the host dropped foreign items)",
            f.shard_lists.clone(),
        );
        registry.register(
            "kubewasm_informer_shard_foreign_events",
            "Watch events of sharded informers dropped because the object hashes outside the held ranges",
            f.shard_foreign_events.clone(),
        );
        registry.register(
            "kubewasm_informer_shard_ranges",
            "Disjoint hash ranges a sharded informer currently lists and watches (0 = nothing held)",
            f.shard_ranges.clone(),
        );
        m
    }

    /// Metrics that are counted but exported nowhere (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self {
            f: Arc::new(Families {
                lists: Family::default(),
                list_pages: Family::default(),
                bookmarks: Family::default(),
                relists: Family::default(),
                watch_restarts: Family::default(),
                resyncs: Family::default(),
                undecodable: Family::default(),
                objects: Family::default(),
                listener_queue_depth: Family::default(),
                shard_lists: Family::default(),
                shard_foreign_events: Family::default(),
                shard_ranges: Family::default(),
            }),
        }
    }

    /// Handles for one informer.
    pub(crate) fn informer(&self, informer: &str) -> InformerCounters {
        let l: Labels = vec![("informer".into(), informer.to_string())];
        InformerCounters {
            lists: self.f.lists.get_or_create_owned(&l),
            list_pages: self.f.list_pages.get_or_create_owned(&l),
            bookmarks: self.f.bookmarks.get_or_create_owned(&l),
            watch_restarts: self.f.watch_restarts.get_or_create_owned(&l),
            resyncs: self.f.resyncs.get_or_create_owned(&l),
            undecodable: self.f.undecodable.get_or_create_owned(&l),
            objects: self.f.objects.get_or_create_owned(&l),
            shard_foreign_events: self.f.shard_foreign_events.get_or_create_owned(&l),
            shard_ranges: self.f.shard_ranges.get_or_create_owned(&l),
            informer: informer.to_string(),
            metrics: self.clone(),
        }
    }

    /// Queue-depth gauge of one listener.
    pub(crate) fn listener_depth(&self, informer: &str, handler: u64) -> Gauge {
        self.f
            .listener_queue_depth
            .get_or_create_owned(&listener_labels(informer, handler))
    }

    /// Drops a removed listener's series.
    pub(crate) fn remove_listener(&self, informer: &str, handler: u64) {
        self.f
            .listener_queue_depth
            .remove(&listener_labels(informer, handler));
    }

    /// Current value of the relist counter for `informer` and `cause` (tests, diagnostics).
    pub fn relists(&self, informer: &str, cause: &str) -> u64 {
        self.f
            .relists
            .get_or_create(&relist_labels(informer, cause))
            .get()
    }

    /// Current value of the list counter for `informer`.
    pub fn lists(&self, informer: &str) -> u64 {
        self.informer(informer).lists.get()
    }

    /// Current value of the list-page counter for `informer`.
    pub fn list_pages(&self, informer: &str) -> u64 {
        self.informer(informer).list_pages.get()
    }

    /// Current value of the bookmark counter for `informer`.
    pub fn bookmarks(&self, informer: &str) -> u64 {
        self.informer(informer).bookmarks.get()
    }

    /// Current value of the resync counter for `informer`.
    pub fn resyncs(&self, informer: &str) -> u64 {
        self.informer(informer).resyncs.get()
    }

    /// Current value of the undecodable-event counter for `informer`.
    pub fn undecodable_events(&self, informer: &str) -> u64 {
        self.informer(informer).undecodable.get()
    }

    /// Current value of the watch-restart counter for `informer`.
    pub fn watch_restarts(&self, informer: &str) -> u64 {
        self.informer(informer).watch_restarts.get()
    }

    /// Current object gauge of `informer`.
    pub fn objects(&self, informer: &str) -> i64 {
        self.informer(informer).objects.get()
    }

    /// Lists of a sharded `informer` with `outcome` `server_filtered` or `host_filtered`.
    pub fn shard_lists(&self, informer: &str, outcome: &str) -> u64 {
        self.f
            .shard_lists
            .get_or_create(&outcome_labels(informer, outcome))
            .get()
    }

    /// Watch events of a sharded `informer` dropped as foreign.
    pub fn shard_foreign_events(&self, informer: &str) -> u64 {
        self.informer(informer).shard_foreign_events.get()
    }

    /// Disjoint ranges a sharded `informer` currently holds.
    pub fn shard_ranges(&self, informer: &str) -> i64 {
        self.informer(informer).shard_ranges.get()
    }
}

fn outcome_labels(informer: &str, outcome: &str) -> Labels {
    vec![
        ("informer".into(), informer.to_string()),
        ("outcome".into(), outcome.to_string()),
    ]
}

fn listener_labels(informer: &str, handler: u64) -> Labels {
    vec![
        ("informer".into(), informer.to_string()),
        ("handler".into(), handler.to_string()),
    ]
}

fn relist_labels(informer: &str, cause: &str) -> Labels {
    vec![
        ("informer".into(), informer.to_string()),
        ("cause".into(), cause.to_string()),
    ]
}

/// Cached per-informer handles.
#[derive(Clone)]
pub(crate) struct InformerCounters {
    pub lists: Counter,
    pub list_pages: Counter,
    pub bookmarks: Counter,
    pub watch_restarts: Counter,
    pub resyncs: Counter,
    pub undecodable: Counter,
    pub objects: Gauge,
    pub shard_foreign_events: Counter,
    pub shard_ranges: Gauge,
    informer: String,
    metrics: InformerMetrics,
}

impl InformerCounters {
    pub(crate) fn relist(&self, cause: &str) {
        self.metrics
            .f
            .relists
            .get_or_create(&relist_labels(&self.informer, cause))
            .inc();
    }

    /// Counts one list of a sharded informer by who filtered it.
    pub(crate) fn shard_list(&self, server_filtered: bool) {
        let outcome = if server_filtered {
            "server_filtered"
        } else {
            "host_filtered"
        };
        self.metrics
            .f
            .shard_lists
            .get_or_create(&outcome_labels(&self.informer, outcome))
            .inc();
    }
}
