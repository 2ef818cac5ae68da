//! Thread-safe store keyed `namespace/name` with named secondary indexes (client-go ThreadSafeStore).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;

use super::object::{KubeObject, SharedObject};

/// Name of the built-in index mapping a namespace (empty for cluster-scoped) to its objects.
pub const NAMESPACE_INDEX: &str = "namespace";

/// Computes the index values of an object; shared so indexes can be added at run time.
pub type IndexFunc = Arc<dyn Fn(&KubeObject) -> Vec<String> + Send + Sync>;

/// Indexer configuration errors, mirroring client-go's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("Index with name {0} does not exist")]
    /// The named index was never added.
    UnknownIndex(String),
    #[error("indexer conflict: {0}")]
    /// An index with this name already exists.
    Conflict(String),
}

#[derive(Default)]
struct Inner {
    items: HashMap<String, SharedObject>,
    indexers: HashMap<String, IndexFunc>,
    /// index name -> indexed value -> keys; empty sets are removed (k/k#84959).
    indices: HashMap<String, HashMap<String, HashSet<String>>>,
}

impl Inner {
    fn update_indices(&mut self, old: Option<&KubeObject>, new: Option<&KubeObject>, key: &str) {
        for (name, f) in &self.indexers {
            if name == NAMESPACE_INDEX {
                // Built-in index: compare in place instead of allocating value lists.
                let ns = |o: &KubeObject| o.meta().namespace.as_deref().unwrap_or("").to_owned();
                let (o_ns, n_ns) = (
                    old.map(|o| o.meta().namespace.as_deref().unwrap_or("")),
                    new.map(|o| o.meta().namespace.as_deref().unwrap_or("")),
                );
                if o_ns.is_some() && o_ns == n_ns {
                    continue;
                }
                let index = self.indices.entry(name.clone()).or_default();
                if let Some(o) = old {
                    let v = ns(o);
                    if let Some(set) = index.get_mut(&v) {
                        set.remove(key);
                        if set.is_empty() {
                            index.remove(&v);
                        }
                    }
                }
                if let Some(n) = new {
                    index.entry(ns(n)).or_default().insert(key.to_string());
                }
                continue;
            }
            let old_vals = old.map(|o| f(o)).unwrap_or_default();
            let new_vals = new.map(|o| f(o)).unwrap_or_default();
            if old_vals.len() == 1 && new_vals.len() == 1 && old_vals[0] == new_vals[0] {
                continue;
            }
            let index = self.indices.entry(name.clone()).or_default();
            for v in &old_vals {
                if let Some(set) = index.get_mut(v) {
                    set.remove(key);
                    if set.is_empty() {
                        index.remove(v);
                    }
                }
            }
            for v in new_vals {
                index.entry(v).or_default().insert(key.to_string());
            }
        }
    }
}

/// The informer's cache. Cheap to clone; writers are the informer's process loop only, readers
/// are handlers and host imports (they see the cache possibly newer than the event they handle).
#[derive(Clone)]
pub struct Indexer {
    inner: Arc<RwLock<Inner>>,
}

impl Default for Indexer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Indexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indexer").field("len", &self.len()).finish()
    }
}

impl Indexer {
    /// An empty store with the built-in namespace index.
    pub fn new() -> Self {
        let mut inner = Inner::default();
        let ns: IndexFunc =
            Arc::new(|o: &KubeObject| vec![o.meta().namespace.clone().unwrap_or_default()]);
        inner.indexers.insert(NAMESPACE_INDEX.to_string(), ns);
        Self {
            inner: Arc::new(RwLock::new(inner)),
        }
    }

    /// The object stored under `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<SharedObject> {
        self.inner.read().items.get(key).cloned()
    }

    /// Every stored object, in unspecified order.
    pub fn list(&self) -> Vec<SharedObject> {
        self.inner.read().items.values().cloned().collect()
    }

    /// Every stored key, in unspecified order.
    pub fn list_keys(&self) -> Vec<String> {
        self.inner.read().items.keys().cloned().collect()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects whose `index` values include `value`; empty for an unknown index.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<SharedObject> {
        self.try_by_index(index, value).unwrap_or_default()
    }

    /// Like [`by_index`](Self::by_index) but reports an unknown index name.
    pub fn try_by_index(&self, index: &str, value: &str) -> Result<Vec<SharedObject>, IndexError> {
        let g = self.inner.read();
        if !g.indexers.contains_key(index) {
            return Err(IndexError::UnknownIndex(index.to_string()));
        }
        Ok(g.indices
            .get(index)
            .and_then(|i| i.get(value))
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| g.items.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Keys whose `index` values include `value`.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let g = self.inner.read();
        if !g.indexers.contains_key(index) {
            return Err(IndexError::UnknownIndex(index.to_string()));
        }
        Ok(g.indices
            .get(index)
            .and_then(|i| i.get(value))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// Index values that currently select at least one object.
    pub fn list_index_func_values(&self, index: &str) -> Vec<String> {
        self.inner
            .read()
            .indices
            .get(index)
            .map(|i| i.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Adds named indexes, indexing the objects already stored; a duplicate name is an error.
    pub fn add_indexers(
        &self,
        indexers: impl IntoIterator<Item = (String, IndexFunc)>,
    ) -> Result<(), IndexError> {
        let mut g = self.inner.write();
        let new: Vec<(String, IndexFunc)> = indexers.into_iter().collect();
        for (name, _) in &new {
            if g.indexers.contains_key(name) {
                return Err(IndexError::Conflict(name.clone()));
            }
        }
        for (name, f) in new {
            let mut index: HashMap<String, HashSet<String>> = HashMap::new();
            for (k, o) in &g.items {
                for v in f(o) {
                    index.entry(v).or_default().insert(k.clone());
                }
            }
            g.indices.insert(name.clone(), index);
            g.indexers.insert(name, f);
        }
        Ok(())
    }

    /// Inserts or replaces the object under its key, returning the previous version.
    pub(crate) fn upsert(&self, obj: SharedObject) -> Option<SharedObject> {
        let mut g = self.inner.write();
        let key = obj.key().to_string();
        let old = g.items.insert(key.clone(), obj.clone());
        g.update_indices(old.as_deref(), Some(&obj), &key);
        old
    }

    /// Removes the object stored under `key`.
    pub(crate) fn delete(&self, key: &str) -> Option<SharedObject> {
        let mut g = self.inner.write();
        let old = g.items.remove(key);
        if let Some(o) = &old {
            g.update_indices(Some(o), None, key);
        }
        old
    }

    /// Rebuilds the whole store and every index from `objs`.
    pub fn replace(&self, objs: Vec<SharedObject>) {
        let mut g = self.inner.write();
        g.items = objs.into_iter().map(|o| (o.key().to_string(), o)).collect();
        g.indices.clear();
        let entries: Vec<(String, SharedObject)> = g
            .items
            .iter()
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for (k, o) in entries {
            g.update_indices(None, Some(&o), &k);
        }
    }

    /// Test and tooling entry point to insert an object as the informer would.
    pub fn add(&self, obj: SharedObject) {
        self.upsert(obj);
    }
}
