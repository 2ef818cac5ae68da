//! Reads of the host's informer caches (only kinds the handler subscribes to), as [`Lazy`]
//! objects: a scan that looks at names and labels decodes nothing.

use crate::error::{Error, Result};
use crate::lazy::Lazy;
use crate::object::Object;
use crate::world::imports;

fn kind<K: Object>() -> (&'static str, &'static str) {
    K::TYPE.expect("cache reads need a typed kind")
}

/// The host's words for the one cache refusal that heals by itself (an informer starting or
/// stopping); every other refusal (a kind the handler does not subscribe to, a bad selector, a
/// list over the per-call bound) gives the same answer on every redelivery.
const TRANSIENT: &str = "is not available";

/// [`Error::Retry`] for a cache that is not available yet, [`Error::Fatal`] for the rest.
fn refused(message: String) -> Error {
    if message.contains(TRANSIENT) {
        Error::Retry(message)
    } else {
        Error::Fatal(message)
    }
}

/// One cached object; `Ok(None)` when the cache does not hold it.
pub fn get<K: Object>(namespace: Option<&str>, name: &str) -> Result<Option<Lazy<K>>> {
    let (api_version, kind) = kind::<K>();
    let found = (imports().cache_get)(api_version, kind, namespace, name).map_err(refused)?;
    Ok(found.map(Lazy::new))
}

/// Every cached object of the kind, optionally in one namespace and matching a label selector.
pub fn list<K: Object>(namespace: Option<&str>, labels: Option<&str>) -> Result<Vec<Lazy<K>>> {
    let (api_version, kind) = kind::<K>();
    let found = (imports().cache_list)(api_version, kind, namespace, labels).map_err(refused)?;
    Ok(found.into_iter().map(Lazy::new).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a cache that is not available yet heals on redelivery; the host's other refusals
    /// (here in its own words) would back off forever as `Retry`.
    #[test]
    fn cache_refusals_retry_only_while_the_cache_is_not_available() {
        let unavailable = "the cache of v1/ConfigMap is not available: its informer is stopping \
                           or not started yet";
        assert!(matches!(refused(unavailable.into()), Error::Retry(_)));
        for permanent in [
            "plugin p does not subscribe to v1 Secret; only subscribed resources can be read \
             from the cache",
            "invalid label selector \"a==\": bad",
            "cache.list of v1 ConfigMap refused: it matches more than 2000 objects",
        ] {
            assert!(
                matches!(refused(permanent.into()), Error::Fatal(_)),
                "{permanent}"
            );
        }
    }
}
