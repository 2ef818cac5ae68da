//! The `cache` host import: read access to the informer caches a plugin subscribes to.
//!
//! `cache.list` is bounded: one call returns at most [`MAX_LIST_OBJECTS`] objects and at most
//! [`MAX_LIST_BYTES`] of object data (JSON plus metadata strings), because the host copies the
//! whole answer before wasmtime lowers it into guest memory, and the guest must hold it under
//! its own memory cap. A list beyond either bound is refused as a whole with an error string
//! telling the guest to narrow it (a namespace, a label selector, or `cache.get` by name) and
//! counted in `kubewasm_plugin_cache_list_refused_total{plugin,reason}`: a silently truncated
//! answer would look complete to an audit. Counting stops at the bound, so a refused call costs
//! no more than an accepted one. The WIT signature cannot carry a continuation token, so there
//! is no paging beyond narrowing.
//!
//! A plugin whose subscription to a kind has a projection (`metadata-only`, `fields`) reads that
//! kind cut to the same projection, from the same shared copies its notifications carry, and the
//! bound counts the projected bytes.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::projected::ProjectionCache;
use crate::informer::{InformerFactory, InformerKey, KubeObject, LabelSelector, SharedObject};
use crate::plugins::metrics::{CacheRefusalLabels, PluginMetrics};
use crate::runtime::{CacheError, CacheReader, GuestObject, ObjectView};

/// Most objects one `cache.list` call returns.
pub(crate) const MAX_LIST_OBJECTS: usize = 2000;
/// Most bytes of object data (JSON plus metadata strings) one `cache.list` call returns.
pub(crate) const MAX_LIST_BYTES: usize = 8 << 20;

impl GuestObject for KubeObject {
    fn view(&self) -> ObjectView<'_> {
        let m = self.meta();
        ObjectView {
            api_version: &m.api_version,
            kind: &m.kind,
            namespace: m.namespace.as_deref(),
            name: &m.name,
            uid: &m.uid,
            resource_version: &m.resource_version,
            generation: m.generation,
            labels: &m.labels,
            json: self.json(),
        }
    }
}

/// One subscription as the cache reader sees it: its informer, and its projection if any.
pub(crate) type Subscribed = (InformerKey, Option<Arc<ProjectionCache>>);

/// Answers a plugin's cache reads from the indexers of its own subscriptions only, so that a
/// plugin cannot read resources (Secrets, say) it never declared.
pub(crate) struct SubscribedCache {
    plugin: String,
    factory: InformerFactory,
    /// Each subscription's informer and projection (one projection per kind).
    subscriptions: Vec<Subscribed>,
    bound: ListBound,
    refused: Family<CacheRefusalLabels, Counter>,
}

/// The size limits of one `cache.list` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListBound {
    /// Most objects per answer.
    pub objects: usize,
    /// Most bytes of object data per answer (see `answer_bytes`).
    pub bytes: usize,
}

impl Default for ListBound {
    fn default() -> Self {
        Self {
            objects: MAX_LIST_OBJECTS,
            bytes: MAX_LIST_BYTES,
        }
    }
}

impl SubscribedCache {
    /// A reader limited to `subscriptions` (informer and projection of each), counting refused
    /// lists in `metrics`.
    pub(crate) fn new(
        plugin: &str,
        factory: InformerFactory,
        subscriptions: Vec<Subscribed>,
        metrics: &PluginMetrics,
    ) -> Self {
        SubscribedCache {
            plugin: plugin.to_string(),
            factory,
            subscriptions,
            bound: ListBound::default(),
            refused: metrics.cache_list_refused.clone(),
        }
    }

    /// The same reader with other list bounds (tests exercise the refusal with small ones).
    #[cfg(test)]
    pub(crate) fn with_list_bound(mut self, bound: ListBound) -> Self {
        self.bound = bound;
        self
    }

    fn matching(&self, api_version: &str, kind: &str) -> Result<Vec<&Subscribed>, CacheError> {
        let keys: Vec<_> = self
            .subscriptions
            .iter()
            .filter(|(k, _)| k.api_version == api_version && k.kind == kind)
            .collect();
        if keys.is_empty() {
            return Err(CacheError::NotSubscribed {
                plugin: self.plugin.clone(),
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            });
        }
        Ok(keys)
    }

    /// Counts a refused `cache.list` under its reason and hands the error on.
    fn refuse(&self, e: CacheError) -> CacheError {
        let reason = match &e {
            CacheError::NotSubscribed { .. } => "not_subscribed",
            CacheError::InvalidSelector { .. } => "invalid_selector",
            CacheError::TooManyObjects { .. } => "too_many_objects",
            CacheError::TooManyBytes { .. } => "too_many_bytes",
            // Not the guest's doing: a cache that comes back is not a refusal.
            CacheError::Unavailable { .. } | CacheError::NotAttached => return e,
        };
        self.refused
            .get_or_create(&CacheRefusalLabels {
                plugin: self.plugin.clone(),
                reason,
            })
            .inc();
        e
    }
}

/// What an object costs in a `cache.list` answer: the strings copied for the guest.
fn answer_bytes(v: &ObjectView<'_>) -> usize {
    let labels: usize = v.labels.iter().map(|(k, val)| k.len() + val.len()).sum();
    v.json.len()
        + v.api_version.len()
        + v.kind.len()
        + v.namespace.map_or(0, str::len)
        + v.name.len()
        + v.uid.len()
        + v.resource_version.len()
        + labels
}

/// How a list was described in a refusal, so the guest sees which call to narrow.
fn list_scope(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> String {
    let mut scope = format!("{api_version} {kind}");
    match namespace {
        Some(ns) => scope.push_str(&format!(" in namespace {ns:?}")),
        None => scope.push_str(" in all namespaces"),
    }
    if let Some(sel) = selector {
        scope.push_str(&format!(" with label selector {sel:?}"));
    }
    scope
}

/// What the guest reads of `o`: the cached version itself, or its shared projection.
fn to_guest(o: SharedObject, projection: &Option<Arc<ProjectionCache>>) -> Arc<dyn GuestObject> {
    match projection {
        Some(p) => p.project(&o),
        None => o,
    }
}

/// The error a guest gets for a cache that is not there (any more): an error, never an empty
/// answer.
fn unavailable_cache(key: &InformerKey) -> CacheError {
    CacheError::Unavailable {
        informer: key.to_string(),
    }
}

impl CacheReader for SubscribedCache {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<dyn GuestObject>>, CacheError> {
        let key = match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        let mut unavailable = None;
        for (k, projection) in self.matching(api_version, kind)? {
            match self.factory.indexer(k) {
                Some(indexer) => {
                    if let Some(obj) = indexer.get(&key) {
                        return Ok(Some(to_guest(obj, projection)));
                    }
                }
                None => unavailable = Some(k),
            }
        }
        // "Not found" only when every cache that could hold it was asked: a cache that is gone
        // (the plugin is being stopped and its informer with it) knows nothing, and a handler
        // acting on a false "absent" would delete what still exists.
        match unavailable {
            Some(k) => Err(unavailable_cache(k)),
            None => Ok(None),
        }
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<dyn GuestObject>>, CacheError> {
        let label_selector = label_selector.filter(|s| !s.trim().is_empty());
        let keys = self
            .matching(api_version, kind)
            .map_err(|e| self.refuse(e))?;
        let selector = label_selector
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|source| {
                self.refuse(CacheError::InvalidSelector {
                    selector: label_selector.unwrap_or_default().to_string(),
                    source,
                })
            })?;
        let scope = || list_scope(api_version, kind, namespace, label_selector);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for (k, projection) in keys {
            let Some(indexer) = self.factory.indexer(k) else {
                return Err(unavailable_cache(k));
            };
            let objects = match namespace {
                Some(ns) => indexer.by_index("namespace", ns),
                None => indexer.list(),
            };
            for obj in objects {
                if selector
                    .as_ref()
                    .is_some_and(|s| !s.matches(&obj.meta().labels))
                {
                    continue;
                }
                if !seen.insert(obj.key().to_string()) {
                    continue;
                }
                if out.len() == self.bound.objects {
                    return Err(self.refuse(CacheError::TooManyObjects {
                        scope: scope(),
                        max_objects: self.bound.objects,
                        max_bytes: self.bound.bytes,
                    }));
                }
                let obj = to_guest(obj, projection);
                bytes += answer_bytes(&obj.view());
                if bytes > self.bound.bytes {
                    return Err(self.refuse(CacheError::TooManyBytes {
                        scope: scope(),
                        max_objects: self.bound.objects,
                        max_bytes: self.bound.bytes,
                    }));
                }
                out.push(obj);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::informer::{HandlerRegistration, InformerMetrics, ResourceEventHandler};

    struct Ignore;

    impl ResourceEventHandler for Ignore {
        fn on_add(&self, _: &SharedObject, _: bool) {}
        fn on_update(&self, _: &SharedObject, _: &SharedObject, _: bool) {}
        fn on_delete(&self, _: &SharedObject, _: bool) {}
    }

    /// A real API server holding three web ConfigMaps in `default` and two db ones in
    /// `kube-public`, and a synced informer over all of them.
    async fn synced_configmaps() -> (apiserver::ApiServer, InformerFactory, HandlerRegistration) {
        let server = apiserver::ApiServer::start(apiserver::Config::default())
            .await
            .unwrap();
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        for (ns, name, tier) in [
            ("default", "w1", "web"),
            ("default", "w2", "web"),
            ("default", "w3", "web"),
            ("kube-public", "d1", "db"),
            ("kube-public", "d2", "db"),
        ] {
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {"tier": tier}},
                "data": {"payload": "x".repeat(100)},
            }))
            .unwrap();
            Api::<ConfigMap>::namespaced(client.clone(), ns)
                .create(&PostParams::default(), &cm)
                .await
                .unwrap();
        }
        let factory = InformerFactory::new(client, InformerMetrics::unregistered());
        let reg = factory
            .add_handler(&InformerKey::new("v1", "ConfigMap"), Arc::new(Ignore), None)
            .await
            .unwrap();
        reg.wait_synced().await;
        (server, factory, reg)
    }

    fn names(list: &[Arc<dyn GuestObject>]) -> Vec<&str> {
        let mut names: Vec<&str> = list.iter().map(|o| o.view().name).collect();
        names.sort();
        names
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lists_over_the_bound_are_refused_with_advice_and_counted() {
        let (_server, factory, reg) = synced_configmaps().await;
        let mut registry = Registry::default();
        let metrics = PluginMetrics::new(&mut registry);
        let all = reg.indexer().list();
        let bytes_of = |ns: &str| -> usize {
            all.iter()
                .filter(|o| o.view().namespace == Some(ns))
                .map(|o| answer_bytes(&o.view()))
                .sum()
        };
        let db_bytes = bytes_of("kube-public");
        let reader = |bound| {
            SubscribedCache::new(
                "lister",
                factory.clone(),
                vec![(reg.key().clone(), None)],
                &metrics,
            )
            .with_list_bound(bound)
        };

        // Three objects per call: five are refused as a whole, narrowed lists pass.
        let three = reader(ListBound {
            objects: 3,
            bytes: MAX_LIST_BYTES,
        });
        let err = three.list("v1", "ConfigMap", None, None).err().unwrap();
        assert_eq!(
            err.to_string(),
            "cache.list of v1 ConfigMap in all namespaces refused: it matches more than 3 \
             objects, over the per-call bound of 3 objects and 8 MiB; narrow it with a namespace \
             or a label selector, or read single objects with cache.get"
        );
        let web = three
            .list("v1", "ConfigMap", Some("default"), None)
            .unwrap();
        assert_eq!(names(&web), ["w1", "w2", "w3"], "exactly the bound passes");
        let db = three
            .list("v1", "ConfigMap", None, Some("tier=db"))
            .unwrap();
        assert_eq!(names(&db), ["d1", "d2"]);

        // Bytes: the two db objects fit exactly; one byte less refuses them.
        let exact = reader(ListBound {
            objects: 100,
            bytes: db_bytes,
        });
        assert_eq!(
            exact
                .list("v1", "ConfigMap", Some("kube-public"), None)
                .unwrap()
                .len(),
            2
        );
        let short = reader(ListBound {
            objects: 100,
            bytes: db_bytes - 1,
        });
        let err = short
            .list("v1", "ConfigMap", Some("kube-public"), Some("tier=db"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "cache.list of v1 ConfigMap in namespace \"kube-public\" with label selector \
                 \"tier=db\" refused: it matches more than {} bytes of object data",
                db_bytes - 1
            )),
            "{err}"
        );

        // The default bounds let the whole small cache through.
        let default = SubscribedCache::new(
            "lister",
            factory.clone(),
            vec![(reg.key().clone(), None)],
            &metrics,
        );
        assert_eq!(
            default.list("v1", "ConfigMap", None, None).unwrap().len(),
            5
        );

        // Other refusals are counted under their own reason.
        assert!(default.list("v1", "Secret", None, None).is_err());
        assert!(
            default
                .list("v1", "ConfigMap", None, Some("tier in ("))
                .is_err()
        );

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for expected in [
            r#"kubewasm_plugin_cache_list_refused_total{plugin="lister",reason="too_many_objects"} 1"#,
            r#"kubewasm_plugin_cache_list_refused_total{plugin="lister",reason="too_many_bytes"} 1"#,
            r#"kubewasm_plugin_cache_list_refused_total{plugin="lister",reason="not_subscribed"} 1"#,
            r#"kubewasm_plugin_cache_list_refused_total{plugin="lister",reason="invalid_selector"} 1"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
    }
}
