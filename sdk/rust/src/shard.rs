//! Which objects are this replica's (`kubewasm:handler/shard@0.3.0`), for a plugin whose
//! manifest sets `shard = "uid"` or `"namespace"` on a host running several active replicas.
//! The host already delivers only this replica's objects; this module is for state outside the
//! cluster. A plugin that sweeps orphans in an external system deletes only what [`owns`] (or
//! [`owns_object`]) says is its own, or two replicas would each delete the other's:
//!
//! ```ignore
//! for lb in cloud.list()? {
//!     if !shard::owns(&lb.service_uid) {
//!         continue; // another replica's: its own sweep decides
//!     }
//!     // … an orphan of this replica's: delete it
//! }
//! ```
//!
//! Not sharded (the default), [`by`] is [`ShardBy::None`], [`ranges`] the whole space and
//! [`owns`] always `true`, so the same code runs on one replica or many. The answers come from
//! the replica's current hold and may change between two calls.
//!
//! Both 0.3.0 worlds import `shard`; a component imports it only if it calls this module, so a
//! plugin that does not still loads on hosts that predate the interface. A
//! [`handler_v0_1!`](crate::handler_v0_1) component must not call it (0.1.0 has no `shard`: the
//! host would refuse the component).

use crate::bindings::kubewasm::handler0_3_0::shard as raw;
use crate::object::{Named, ObjectMeta};

/// What the plugin shards by (its manifest's `shard` key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardBy {
    /// Not sharded: one replica (the leader) handles every object; [`owns`] answers `true`.
    None,
    /// `metadata.uid`.
    Uid,
    /// `metadata.namespace` (`""` for a cluster-scoped object).
    Namespace,
}

impl From<raw::ShardBy> for ShardBy {
    fn from(by: raw::ShardBy) -> Self {
        match by {
            raw::ShardBy::None => ShardBy::None,
            raw::ShardBy::Uid => ShardBy::Uid,
            raw::ShardBy::Namespace => ShardBy::Namespace,
        }
    }
}

/// A held range `[start, end)` of the 64-bit hash space; `end` is `None` for 2^64 (the top).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashRange {
    /// The first hash in the range.
    pub start: u64,
    /// The first hash after it; `None` when the range runs to the top of the space.
    pub end: Option<u64>,
}

impl HashRange {
    /// Whether `hash` lies in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && self.end.is_none_or(|end| hash < end)
    }
}

/// What the plugin shards by.
pub fn by() -> ShardBy {
    raw::by().into()
}

/// The ranges this replica holds now, in order: `[0, None)` when not sharded, empty while it
/// holds none (or is fenced because it could not renew its Lease).
pub fn ranges() -> Vec<HashRange> {
    raw::ranges()
        .into_iter()
        .map(|r| HashRange {
            start: r.start,
            end: r.end,
        })
        .collect()
}

/// Whether an object whose shard key (its uid, or its namespace, per [`by`]) is `value` is this
/// replica's now; always `true` when not sharded. For state that records a Service's uid or
/// namespace but not the object itself (an external load balancer).
pub fn owns(value: &str) -> bool {
    raw::owns(value)
}

/// Whether `obj` (a typed object or a [`Lazy`](crate::Lazy) one) is this replica's now: its uid
/// or its namespace, whichever the plugin shards by, asked of [`owns`].
pub fn owns_object(obj: &(impl Named + ?Sized)) -> bool {
    owns_key(by(), obj.uid(), obj.namespace(), raw::owns)
}

/// [`owns_object`] for an object's `metadata` alone.
pub fn owns_meta(meta: &ObjectMeta) -> bool {
    owns_key(
        by(),
        meta.uid.as_deref().unwrap_or_default(),
        meta.namespace.as_deref(),
        raw::owns,
    )
}

/// The shard key of an object with `uid` and `namespace` under `by` (`None`: not sharded).
pub fn key<'a>(by: ShardBy, uid: &'a str, namespace: Option<&'a str>) -> Option<&'a str> {
    match by {
        ShardBy::None => None,
        ShardBy::Uid => Some(uid),
        // The host hashes a cluster-scoped object's namespace as "".
        ShardBy::Namespace => Some(namespace.unwrap_or_default()),
    }
}

/// The pure part of [`owns_object`]: `owns` is the import (natively, a test's stand-in). Not
/// sharded, no second host call is made.
fn owns_key(
    by: ShardBy,
    uid: &str,
    namespace: Option<&str>,
    owns: impl FnOnce(&str) -> bool,
) -> bool {
    key(by, uid, namespace).is_none_or(owns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use std::cell::RefCell;

    fn cm(namespace: Option<&str>, uid: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = namespace.map(str::to_string);
        cm.metadata.uid = Some(uid.to_string());
        cm
    }

    /// `owns_key` over an object, recording what the stand-in host was asked.
    fn asked(by: ShardBy, obj: &impl Named, answer: bool) -> (bool, Vec<String>) {
        let seen = RefCell::new(Vec::new());
        let owned = owns_key(by, obj.uid(), obj.namespace(), |v| {
            seen.borrow_mut().push(v.to_string());
            answer
        });
        (owned, seen.into_inner())
    }

    #[test]
    fn the_key_is_the_uid_or_the_namespace_as_the_plugin_shards() {
        let obj = cm(Some("team-a"), "u-1");
        assert_eq!(asked(ShardBy::Uid, &obj, true), (true, vec!["u-1".into()]));
        assert_eq!(
            asked(ShardBy::Namespace, &obj, false),
            (false, vec!["team-a".into()])
        );
        // Cluster-scoped: the namespace key is "", as the host hashes it.
        let mut ns = Namespace::default();
        ns.metadata.uid = Some("u-2".into());
        assert_eq!(
            asked(ShardBy::Namespace, &ns, true),
            (true, vec![String::new()])
        );
        assert_eq!(key(ShardBy::Uid, "u-2", None), Some("u-2"));
    }

    #[test]
    fn not_sharded_owns_everything_without_asking() {
        assert_eq!(
            asked(ShardBy::None, &cm(Some("a"), "u"), false),
            (true, vec![])
        );
        assert_eq!(key(ShardBy::None, "u", Some("a")), None);
    }

    #[test]
    fn the_host_enum_converts_and_ranges_contain_their_start_not_their_end() {
        assert_eq!(ShardBy::from(raw::ShardBy::None), ShardBy::None);
        assert_eq!(ShardBy::from(raw::ShardBy::Uid), ShardBy::Uid);
        assert_eq!(ShardBy::from(raw::ShardBy::Namespace), ShardBy::Namespace);
        let r = HashRange {
            start: 10,
            end: Some(20),
        };
        assert!(r.contains(10) && r.contains(19) && !r.contains(20) && !r.contains(9));
        let top = HashRange {
            start: 1 << 63,
            end: None,
        };
        assert!(top.contains(u64::MAX) && !top.contains(0));
    }
}
