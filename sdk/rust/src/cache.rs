//! Reads of the host's informer caches (only kinds the handler subscribes to), as [`Lazy`]
//! objects: a scan that looks at names and labels decodes nothing.

use crate::error::{Error, Result};
use crate::lazy::Lazy;
use crate::object::Object;
use crate::world::imports;

fn kind<K: Object>() -> (&'static str, &'static str) {
    K::TYPE.expect("cache reads need a typed kind")
}

/// One cached object; `Ok(None)` when the cache does not hold it.
pub fn get<K: Object>(namespace: Option<&str>, name: &str) -> Result<Option<Lazy<K>>> {
    let (api_version, kind) = kind::<K>();
    let found = (imports().cache_get)(api_version, kind, namespace, name).map_err(Error::Fatal)?;
    Ok(found.map(Lazy::new))
}

/// Every cached object of the kind, optionally in one namespace and matching a label selector.
pub fn list<K: Object>(namespace: Option<&str>, labels: Option<&str>) -> Result<Vec<Lazy<K>>> {
    let (api_version, kind) = kind::<K>();
    let found =
        (imports().cache_list)(api_version, kind, namespace, labels).map_err(Error::Fatal)?;
    Ok(found.into_iter().map(Lazy::new).collect())
}
