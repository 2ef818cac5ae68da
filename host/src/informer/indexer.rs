//! Thread-safe store keyed `namespace/name` with named secondary indexes (client-go ThreadSafeStore).

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use parking_lot::RwLock;

use super::object::{KubeObject, SharedObject};

/// Name of the built-in index mapping a namespace (empty for cluster-scoped) to its objects.
pub(crate) const NAMESPACE_INDEX: &str = "namespace";

/// Computes the index values of an object; shared so indexes can be added at run time.
pub(crate) type IndexFunc = Arc<dyn Fn(&KubeObject) -> Vec<String> + Send + Sync>;

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

/// A stored object, hashed and compared by its key: the store holds one pointer per object and
/// no copy of the key (the object has it).
#[derive(Clone)]
struct ByKey(SharedObject);

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for ByKey {}

impl Hash for ByKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.key().hash(h)
    }
}

impl Borrow<str> for ByKey {
    fn borrow(&self) -> &str {
        self.0.key()
    }
}

#[derive(Default)]
struct Inner {
    items: HashSet<ByKey>,
    indexers: HashMap<String, IndexFunc>,
    /// index name -> indexed value -> keys (shared with the objects); empty sets are removed
    /// (k/k#84959).
    indices: HashMap<String, HashMap<String, HashSet<Arc<str>>>>,
}

impl Inner {
    fn get(&self, key: &str) -> Option<&SharedObject> {
        self.items.get(key).map(|e| &e.0)
    }

    fn update_indices(
        &mut self,
        old: Option<&KubeObject>,
        new: Option<&KubeObject>,
        key: &Arc<str>,
    ) {
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
                        set.remove(&**key);
                        if set.is_empty() {
                            index.remove(&v);
                        }
                    }
                }
                if let Some(n) = new {
                    index.entry(ns(n)).or_default().insert(key.clone());
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
                    set.remove(&**key);
                    if set.is_empty() {
                        index.remove(v);
                    }
                }
            }
            for v in new_vals {
                index.entry(v).or_default().insert(key.clone());
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
        self.inner.read().get(key).cloned()
    }

    /// Every stored object, in unspecified order.
    pub fn list(&self) -> Vec<SharedObject> {
        self.inner
            .read()
            .items
            .iter()
            .map(|e| e.0.clone())
            .collect()
    }

    /// Every stored key, in unspecified order.
    pub fn list_keys(&self) -> Vec<String> {
        self.inner
            .read()
            .items
            .iter()
            .map(|e| e.0.key().to_string())
            .collect()
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
            .map(|keys| keys.iter().filter_map(|k| g.get(k).cloned()).collect())
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
            .map(|keys| keys.iter().map(|k| k.to_string()).collect())
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
            let mut index: HashMap<String, HashSet<Arc<str>>> = HashMap::new();
            for ByKey(o) in &g.items {
                for v in f(o) {
                    index.entry(v).or_default().insert(o.shared_key().clone());
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
        let old = g.items.replace(ByKey(obj.clone())).map(|e| e.0);
        g.update_indices(old.as_deref(), Some(&obj), obj.shared_key());
        old
    }

    /// Removes the object stored under `key`.
    pub(crate) fn delete(&self, key: &str) -> Option<SharedObject> {
        let mut g = self.inner.write();
        let old = g.items.take(key).map(|e| e.0);
        if let Some(o) = &old {
            g.update_indices(Some(o), None, o.shared_key());
        }
        old
    }

    /// Rebuilds the whole store and every index from `objs`.
    // `ByKey` hashes the object's key, which never changes; the lazily serialised JSON inside a
    // tree-built object is the only interior mutability and takes no part in hashing.
    #[allow(clippy::mutable_key_type)]
    pub fn replace(&self, objs: Vec<SharedObject>) {
        let mut g = self.inner.write();
        let mut items = HashSet::with_capacity(objs.len());
        for o in &objs {
            items.replace(ByKey(o.clone()));
        }
        g.items = items;
        g.indices.clear();
        // A key listed twice keeps its last version, as the map did; index only what is stored.
        for o in objs {
            if g.get(o.key()).is_some_and(|s| Arc::ptr_eq(s, &o)) {
                g.update_indices(None, Some(&o), o.shared_key());
            }
        }
    }

    /// Test and tooling entry point to insert an object as the informer would.
    pub fn add(&self, obj: SharedObject) {
        self.upsert(obj);
    }
}
