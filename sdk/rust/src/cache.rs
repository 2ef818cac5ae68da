//! Typed reads of the host's informer caches (only kinds the handler subscribes to).

use crate::bindings::kubewasm::handler::cache as raw;
use crate::error::{Error, Result};
use crate::object::Object;

fn kind<K: Object>() -> (&'static str, &'static str) {
    K::TYPE.expect("cache reads need a typed kind")
}

/// One cached object; `Ok(None)` when the cache does not hold it.
pub fn get<K: Object>(namespace: Option<&str>, name: &str) -> Result<Option<K>> {
    let (api_version, kind) = kind::<K>();
    let found = raw::get(api_version, kind, namespace, name).map_err(Error::Fatal)?;
    found
        .map(|o| Ok(serde_json::from_str(&o.json)?))
        .transpose()
}

/// Every cached object of the kind, optionally in one namespace and matching a label selector.
pub fn list<K: Object>(namespace: Option<&str>, labels: Option<&str>) -> Result<Vec<K>> {
    let (api_version, kind) = kind::<K>();
    let found = raw::list(api_version, kind, namespace, labels).map_err(Error::Fatal)?;
    found
        .iter()
        .map(|o| Ok(serde_json::from_str(&o.json)?))
        .collect()
}
