//! The `cache` host import: read access to the informer caches a plugin subscribes to.

use std::sync::Arc;

use crate::informer::{InformerFactory, InformerKey, KubeObject, LabelSelector, SharedObject};
use crate::runtime::{CacheReader, GuestObject, ObjectView};

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

/// Answers a plugin's cache reads from the indexers of its own subscriptions only, so that a
/// plugin cannot read resources (Secrets, say) it never declared.
pub struct SubscribedCache {
    plugin: String,
    factory: InformerFactory,
    subscriptions: Vec<InformerKey>,
}

impl SubscribedCache {
    /// A reader limited to `subscriptions`.
    pub fn new(plugin: &str, factory: InformerFactory, subscriptions: Vec<InformerKey>) -> Self {
        SubscribedCache {
            plugin: plugin.to_string(),
            factory,
            subscriptions,
        }
    }

    fn matching(&self, api_version: &str, kind: &str) -> Result<Vec<&InformerKey>, String> {
        let keys: Vec<_> = self
            .subscriptions
            .iter()
            .filter(|k| k.api_version == api_version && k.kind == kind)
            .collect();
        if keys.is_empty() {
            return Err(format!(
                "plugin {} does not subscribe to {api_version} {kind}; only subscribed resources can be read from the cache",
                self.plugin
            ));
        }
        Ok(keys)
    }
}

fn to_guest(o: SharedObject) -> Arc<dyn GuestObject> {
    o
}

impl CacheReader for SubscribedCache {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<dyn GuestObject>>, String> {
        let key = match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        for k in self.matching(api_version, kind)? {
            if let Some(indexer) = self.factory.indexer(k)
                && let Some(obj) = indexer.get(&key)
            {
                return Ok(Some(to_guest(obj)));
            }
        }
        Ok(None)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Arc<dyn GuestObject>>, String> {
        let selector = label_selector
            .filter(|s| !s.trim().is_empty())
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|e| {
                format!(
                    "invalid label selector {:?}: {e}",
                    label_selector.unwrap_or_default()
                )
            })?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for k in self.matching(api_version, kind)? {
            let Some(indexer) = self.factory.indexer(k) else {
                continue;
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
                if seen.insert(obj.key().to_string()) {
                    out.push(to_guest(obj));
                }
            }
        }
        Ok(out)
    }
}
