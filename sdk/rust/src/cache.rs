//! Reads of the host's informer caches (only kinds the handler subscribes to: its own `Kind`
//! and every kind [`Describe::watch`](crate::Describe::watch) adds), as [`Lazy`] objects: a
//! scan that looks at names and labels decodes nothing.

use crate::error::{Error, Result};
use crate::lazy::Lazy;
use crate::object::{DynamicObject, Object};
use crate::world::imports;

fn kind<K: Object>() -> (&'static str, &'static str) {
    K::TYPE.expect("cache::get and list need a typed kind; use get_kind or list_kind")
}

/// The host's words for the one cache refusal that heals by itself (an informer starting or
/// stopping); every other refusal (a kind the handler does not subscribe to, a bad selector, a
/// list over the per-call bound) gives the same answer on every redelivery.
const TRANSIENT: &str = "is not available";

/// The host's words for a read of a kind the plugin does not subscribe to (its message goes on
/// with the manifest line that grants the watch).
const NOT_SUBSCRIBED: &str = "does not subscribe to";

/// [`Error::Retry`] for a cache that is not available yet, [`Error::Fatal`] for the rest, named
/// `cache.get Kind: …` as in the other SDKs. An unsubscribed kind also gets the `Describe`
/// line that subscribes to it, since the host can only speak of `describe()` in general.
fn refused(call: &str, api_version: &str, kind: &str, message: String) -> Error {
    if message.contains(TRANSIENT) {
        return Error::Retry(format!("{call} {kind}: {message}"));
    }
    let mut text = format!("{call} {kind}: {message}");
    if message.contains(NOT_SUBSCRIBED) {
        text.push_str(&format!(
            "; in Rust, add .watch::<{kind}>() (or .watch_kind(\"{api_version}\", \"{kind}\", \
             Watch::new())) to the handler's Describe"
        ));
    }
    Error::Fatal(text)
}

/// One cached object; `Ok(None)` when the cache does not hold it.
pub fn get<K: Object>(namespace: Option<&str>, name: &str) -> Result<Option<Lazy<K>>> {
    let (api_version, kind) = kind::<K>();
    get_as(api_version, kind, namespace, name)
}

/// Every cached object of the kind, optionally in one namespace and matching a label selector.
pub fn list<K: Object>(namespace: Option<&str>, labels: Option<&str>) -> Result<Vec<Lazy<K>>> {
    let (api_version, kind) = kind::<K>();
    list_as(api_version, kind, namespace, labels)
}

/// [`get`] for a kind without a Rust type, e.g. a custom resource watched with
/// [`Describe::watch_kind`](crate::Describe::watch_kind).
pub fn get_kind(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Lazy<DynamicObject>>> {
    get_as(api_version, kind, namespace, name)
}

/// [`list`] for a kind without a Rust type.
pub fn list_kind(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<Lazy<DynamicObject>>> {
    list_as(api_version, kind, namespace, labels)
}

pub(crate) fn get_as<K: Object>(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Lazy<K>>> {
    let found = (imports().cache_get)(api_version, kind, namespace, name)
        .map_err(|m| refused("cache.get", api_version, kind, m))?;
    Ok(found.map(Lazy::new))
}

fn list_as<K: Object>(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<Lazy<K>>> {
    let found = (imports().cache_list)(api_version, kind, namespace, labels)
        .map_err(|m| refused("cache.list", api_version, kind, m))?;
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
        let r = |m: &str| refused("cache.get", "v1", "ConfigMap", m.into());
        assert!(matches!(r(unavailable), Error::Retry(_)));
        for permanent in [
            "plugin p does not subscribe to v1 Secret; only subscribed resources can be read \
             from the cache",
            "invalid label selector \"a==\": bad",
            "cache.list of v1 ConfigMap refused: it matches more than 2000 objects",
        ] {
            assert!(matches!(r(permanent), Error::Fatal(_)), "{permanent}");
        }
    }

    /// The host's message for an unsubscribed kind, word for word (`CacheError::NotSubscribed`),
    /// keeps its manifest line and gains the `Describe` line.
    #[test]
    fn an_unsubscribed_kind_is_fatal_and_says_what_to_declare() {
        let host = "plugin p does not subscribe to v1 Secret; only subscribed resources can be \
                    read from the cache: subscribe to it in describe() and grant it in the \
                    plugin's manifest: [grants] watch = [{ api-version = \"v1\", kind = \"Secret\" }]";
        let Error::Fatal(m) = refused("cache.list", "v1", "Secret", host.into()) else {
            panic!("not fatal")
        };
        assert_eq!(
            m,
            format!(
                "cache.list Secret: {host}; in Rust, add .watch::<Secret>() (or \
                 .watch_kind(\"v1\", \"Secret\", Watch::new())) to the handler's Describe"
            )
        );
        let Error::Fatal(m) = refused("cache.get", "v1", "Secret", "invalid label selector".into())
        else {
            panic!("not fatal")
        };
        assert_eq!(m, "cache.get Secret: invalid label selector");
    }
}
