//! How a controller's events become keys of its primary kind (client-go's `syncHandler(key)`,
//! controller-runtime's `For`/`Owns`/`Watches`, kube-runtime's `owns`/`watches`).
//!
//! - The primary's own event names its own key; a resync and a deletion too (a reconcile is
//!   level-triggered: it finds the object gone).
//! - An owned object's event names the owner its controller `ownerReference` points at, but
//!   only when the reference's kind and API group are the primary's and its uid is the cached
//!   owner's: a reference to a deleted and re-created owner of the same name names nothing.
//! - A watched object's event names primaries through the declared mapping; a name that no
//!   cached primary has names nothing, so an unrelated object costs no reconcile and a guest
//!   cannot make the host hold keys of objects that do not exist.
//!
//! An update names the keys of both its old and its new state (a reference or label that moved
//! concerns both owners). A resync of an owned or watched kind names nothing: the primary's own
//! resync reconciles every key already. Pure: the cache is reached through [`PrimaryLookup`].

use std::sync::Arc;

use serde::Deserialize;

use crate::informer::{KubeObject, Notification};
use crate::runtime::{KeyMapping, Role};

/// The primary kind's cache, as the mapping needs it: the uid of the primary at a key.
pub(crate) trait PrimaryLookup {
    /// The uid of the cached primary at `key` (`namespace/name` or `name`), if cached.
    fn uid_at(&self, key: &str) -> Option<String>;
}

/// The primary kind a controller reconciles, as its owned objects' references name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PrimaryKind {
    /// API group (empty for the core group), without the version: a reference written under
    /// another served version of the kind names the same owner.
    pub group: String,
    /// The kind.
    pub kind: String,
}

impl PrimaryKind {
    /// The kind of `api_version` (`group/version` or `version`) and `kind`.
    pub(crate) fn new(api_version: &str, kind: &str) -> PrimaryKind {
        PrimaryKind {
            group: group_of(api_version).to_string(),
            kind: kind.to_string(),
        }
    }
}

/// What an event of one subscription asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Routed {
    /// Reconcile these keys (deduplicated, possibly none).
    Keys(Vec<Arc<str>>),
    /// Ask the guest's `keys-for` (the `guest` mapping), through the queue.
    AskGuest,
}

/// The keys an event of a subscription with `role` names.
pub(crate) fn route(
    role: &Role,
    n: &Notification,
    primary: &PrimaryKind,
    cache: &dyn PrimaryLookup,
) -> Routed {
    if let Role::Primary = role {
        return Routed::Keys(vec![n.object().shared_key().clone()]);
    }
    if matches!(n, Notification::Update { is_sync: true, .. }) {
        return Routed::Keys(Vec::new());
    }
    if let Role::Watched(KeyMapping::Guest) = role {
        return Routed::AskGuest;
    }
    let states: Vec<&KubeObject> = match n {
        Notification::Update { old, new, .. } => vec![&**old, &**new],
        Notification::Add { obj, .. } | Notification::Delete { obj, .. } => vec![&**obj],
    };
    let mut keys: Vec<Arc<str>> = Vec::new();
    for obj in states {
        let found = match role {
            Role::Owned => owner_key(obj, primary, cache),
            Role::Watched(mapping) => mapped_name(obj, mapping)
                .and_then(|name| existing(obj.meta().namespace.as_deref(), &name, cache)),
            Role::Primary => None,
        };
        if let Some(k) = found
            && !keys.contains(&k)
        {
            keys.push(k);
        }
    }
    Routed::Keys(keys)
}

/// The key of a cached primary named `name` from an object in `namespace`: the primary in that
/// namespace, or a cluster-scoped one of that name.
pub(crate) fn existing(
    namespace: Option<&str>,
    name: &str,
    cache: &dyn PrimaryLookup,
) -> Option<Arc<str>> {
    if name.is_empty() || name.contains('/') {
        return None;
    }
    if let Some(ns) = namespace {
        let key = format!("{ns}/{name}");
        if cache.uid_at(&key).is_some() {
            return Some(key.into());
        }
    }
    cache.uid_at(name).is_some().then(|| name.into())
}

/// The owner an object's controller reference names, if it is a cached primary with that uid.
fn owner_key(
    obj: &KubeObject,
    primary: &PrimaryKind,
    cache: &dyn PrimaryLookup,
) -> Option<Arc<str>> {
    let refs: Refs = serde_json::from_str(obj.json()).ok()?;
    let owner = refs
        .metadata
        .owner_references
        .into_iter()
        .find(|r| r.controller == Some(true))?;
    if owner.kind != primary.kind || group_of(&owner.api_version) != primary.group {
        return None;
    }
    let key = existing(obj.meta().namespace.as_deref(), &owner.name, cache)?;
    (cache.uid_at(&key)? == owner.uid).then_some(key)
}

/// The primary's name a watched object gives through `mapping` (not `guest`).
fn mapped_name(obj: &KubeObject, mapping: &KeyMapping) -> Option<String> {
    match mapping {
        KeyMapping::SameName => Some(obj.meta().name.clone()),
        KeyMapping::Label(label) => obj
            .meta()
            .labels
            .iter()
            .find(|(k, _)| k == label)
            .map(|(_, v)| v.clone()),
        KeyMapping::Field(pointer) => obj
            .to_value()
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .map(str::to_string),
        KeyMapping::Guest => None,
    }
}

/// `apps` of `apps/v1`, the empty core group of `v1`.
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Just the owner references of an object; every other field is skipped unparsed.
#[derive(Deserialize)]
struct Refs {
    #[serde(default)]
    metadata: RefsMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefsMeta {
    #[serde(default)]
    owner_references: Vec<OwnerRef>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerRef {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    uid: String,
    controller: Option<bool>,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::{Value, json};

    use super::*;

    struct Cache(HashMap<&'static str, &'static str>);

    impl PrimaryLookup for Cache {
        fn uid_at(&self, key: &str) -> Option<String> {
            self.0.get(key).map(|u| u.to_string())
        }
    }

    fn cache() -> Cache {
        Cache(HashMap::from([
            ("ns/web", "uid-web"),
            ("ns/db", "uid-db"),
            ("global", "uid-g"),
        ]))
    }

    fn primary() -> PrimaryKind {
        PrimaryKind::new("example.com/v1", "App")
    }

    fn obj(v: Value) -> Arc<KubeObject> {
        Arc::new(KubeObject::from_value(v).unwrap())
    }

    fn owned(name: &str, owner: &str, uid: &str, controller: bool) -> Arc<KubeObject> {
        obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": "ns", "name": name, "uid": format!("d-{name}"), "resourceVersion": "1",
                "ownerReferences": [{"apiVersion": "example.com/v1beta1", "kind": "App", "name": owner,
                    "uid": uid, "controller": controller}]},
        }))
    }

    fn add(o: Arc<KubeObject>) -> Notification {
        Notification::Add {
            obj: o,
            initial: false,
        }
    }

    fn keys(r: Routed) -> Vec<String> {
        match r {
            Routed::Keys(k) => k.iter().map(|k| k.to_string()).collect(),
            Routed::AskGuest => panic!("asked the guest"),
        }
    }

    #[test]
    fn an_owned_object_names_its_controller_owner_by_group_kind_and_uid() {
        let n = add(owned("web-1", "web", "uid-web", true));
        assert_eq!(
            keys(route(&Role::Owned, &n, &primary(), &cache())),
            ["ns/web"]
        );
    }

    #[test]
    fn an_owner_reference_with_another_uid_kind_or_no_controller_flag_names_nothing() {
        for o in [
            owned("web-1", "web", "uid-of-an-earlier-web", true),
            owned("web-1", "web", "uid-web", false),
            owned("web-1", "gone", "uid-gone", true),
        ] {
            assert!(keys(route(&Role::Owned, &add(o), &primary(), &cache())).is_empty());
        }
        let other_kind = obj(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": "c", "uid": "c", "resourceVersion": "1",
                "ownerReferences": [{"apiVersion": "other.io/v1", "kind": "App", "name": "web",
                    "uid": "uid-web", "controller": true}]},
        }));
        assert!(keys(route(&Role::Owned, &add(other_kind), &primary(), &cache())).is_empty());
    }

    #[test]
    fn an_update_that_moves_the_reference_names_both_owners() {
        let n = Notification::Update {
            old: owned("x", "web", "uid-web", true),
            new: owned("x", "db", "uid-db", true),
            is_sync: false,
        };
        assert_eq!(
            keys(route(&Role::Owned, &n, &primary(), &cache())),
            ["ns/web", "ns/db"]
        );
    }

    #[test]
    fn a_resync_of_an_owned_kind_names_nothing_but_the_primarys_own_names_its_key() {
        let o = owned("web-1", "web", "uid-web", true);
        let n = Notification::Update {
            old: o.clone(),
            new: o,
            is_sync: true,
        };
        assert!(keys(route(&Role::Owned, &n, &primary(), &cache())).is_empty());
        let app = obj(json!({"apiVersion": "example.com/v1", "kind": "App",
            "metadata": {"namespace": "ns", "name": "web", "uid": "uid-web", "resourceVersion": "1"}}));
        let n = Notification::Update {
            old: app.clone(),
            new: app,
            is_sync: true,
        };
        assert_eq!(
            keys(route(&Role::Primary, &n, &primary(), &cache())),
            ["ns/web"]
        );
    }

    #[test]
    fn watched_mappings_name_existing_primaries_only() {
        let secret = |name: &str, labels: Value, spec: Value| {
            obj(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"namespace": "ns", "name": name, "uid": "s", "resourceVersion": "1", "labels": labels},
                "spec": spec}))
        };
        let same = Role::Watched(KeyMapping::SameName);
        let label = Role::Watched(KeyMapping::Label("app.example.com/name".into()));
        let field = Role::Watched(KeyMapping::Field("/spec/appRef/name".into()));
        let s = secret(
            "db",
            json!({"app.example.com/name": "web"}),
            json!({"appRef": {"name": "web"}}),
        );
        assert_eq!(
            keys(route(&same, &add(s.clone()), &primary(), &cache())),
            ["ns/db"]
        );
        assert_eq!(
            keys(route(&label, &add(s.clone()), &primary(), &cache())),
            ["ns/web"]
        );
        assert_eq!(
            keys(route(&field, &add(s), &primary(), &cache())),
            ["ns/web"]
        );
        let unrelated = secret(
            "tls",
            json!({"app.example.com/name": "nope"}),
            json!({"appRef": {"name": 7}}),
        );
        for role in [&same, &label, &field] {
            assert!(keys(route(role, &add(unrelated.clone()), &primary(), &cache())).is_empty());
        }
        // A cluster-scoped primary is found by name from a namespaced object.
        let g = secret("global", json!({}), json!({}));
        assert_eq!(
            keys(route(&same, &add(g), &primary(), &cache())),
            ["global"]
        );
        let guest = Role::Watched(KeyMapping::Guest);
        assert_eq!(
            route(
                &guest,
                &add(secret("x", json!({}), json!({}))),
                &primary(),
                &cache()
            ),
            Routed::AskGuest
        );
    }
}
