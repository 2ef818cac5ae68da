//! Owner references, as a controller sets them on what it owns (controller-runtime's
//! `SetControllerReference`), so the garbage collector deletes the owned objects with their
//! owner, a [`Controller`](crate::Controller)'s `owns::<K>()` maps their events back to the
//! owner, and a handler can tell its own objects from others'.
//!
//! - [`controller_ref`]: the reference itself; [`set_controller`] puts it on an object.
//! - [`kube::apply_owned`]: [`set_controller`] then [`kube::apply`];
//!   [`kube::apply_owned_if_changed`] skips the write when [`is_up_to_date`] finds the cached
//!   object already as wanted.
//! - [`is_controlled_by`] ("is this mine") and [`controller_of`] (whose is it), on typed or
//!   [`Lazy`] objects ([`HasOwners`]).
//!
//! Scope is read from the objects themselves: one with a non-empty `metadata.namespace` is
//! namespaced, one without is cluster-scoped (so set the namespace of a namespaced object
//! before calling [`set_controller`]).
//!
//! [`kube::apply_owned`]: crate::kube::apply_owned
//! [`kube::apply`]: crate::kube::apply
//! [`kube::apply_owned_if_changed`]: crate::kube::apply_owned_if_changed

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::lazy::Lazy;
use crate::object::{Named, Object, key};

/// `Kind namespace/name`, how the errors name an object.
fn what(obj: &(impl Named + ?Sized)) -> String {
    let kind = match obj.kind() {
        "" => "object",
        k => k,
    };
    format!("{kind} {}", key(obj))
}

fn namespace(obj: &(impl Named + ?Sized)) -> Option<&str> {
    obj.namespace().filter(|ns| !ns.is_empty())
}

/// The reference a controller puts on what it owns: `owner`'s `apiVersion`, `kind`, `name` and
/// `uid`, with `controller` and `blockOwnerDeletion` true. `owner` is a typed object or a
/// [`Lazy`] (no decode). An owner without a uid (not created yet, or built rather
/// than read back) is [`Error::Fatal`]: read it from the cache or the API server first.
pub fn controller_ref(owner: &(impl Named + ?Sized)) -> Result<OwnerReference> {
    let missing = [
        ("apiVersion", owner.api_version()),
        ("kind", owner.kind()),
        ("name", owner.name()),
    ]
    .into_iter()
    .find(|(_, v)| v.is_empty());
    if let Some((field, _)) = missing {
        return Err(Error::fatal(format!(
            "cannot make {} an owner: it has no {field}",
            what(owner)
        )));
    }
    if owner.uid().is_empty() {
        return Err(Error::fatal(format!(
            "cannot make {} an owner: it has no uid (not created yet, or not read back); \
             read the owner from the cache or the API server first",
            what(owner)
        )));
    }
    Ok(OwnerReference {
        api_version: owner.api_version().to_string(),
        kind: owner.kind().to_string(),
        name: owner.name().to_string(),
        uid: owner.uid().to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// What carries `metadata.ownerReferences`: typed objects (read in place) and [`Lazy`] ones,
/// which the host's metadata does not cover, so a `Lazy` not yet decoded reads only that list
/// from its JSON (a fraction of a full decode; a projected or unreadable object has none).
pub trait HasOwners {
    /// The object's owner references, in order.
    fn owner_references(&self) -> Cow<'_, [OwnerReference]>;
}

impl<K: Object> HasOwners for K {
    fn owner_references(&self) -> Cow<'_, [OwnerReference]> {
        Cow::Borrowed(self.meta().owner_references.as_deref().unwrap_or_default())
    }
}

impl<K: Object> HasOwners for Lazy<K> {
    fn owner_references(&self) -> Cow<'_, [OwnerReference]> {
        if let Some(k) = self.decoded() {
            return k.owner_references();
        }
        #[derive(Deserialize)]
        struct Only {
            #[serde(default)]
            metadata: Meta,
        }
        #[derive(Default, Deserialize)]
        struct Meta {
            #[serde(default, rename = "ownerReferences")]
            owner_references: Vec<OwnerReference>,
        }
        let refs = serde_json::from_str::<Only>(self.json())
            .map(|o| o.metadata.owner_references)
            .unwrap_or_default();
        Cow::Owned(refs)
    }
}

/// The controller reference of `obj` (the owner reference with `controller: true`; there is at
/// most one), if any: who owns it, e.g. to find the primary an owned object belongs to.
pub fn controller_of(obj: &(impl HasOwners + ?Sized)) -> Option<OwnerReference> {
    obj.owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .cloned()
}

/// Whether `obj` (typed or [`Lazy`]) has a controller reference (`controller: true`) to
/// `owner`'s uid: "is this mine", before a controller updates or deletes what it finds. False
/// when `owner` has no uid.
pub fn is_controlled_by(obj: &(impl HasOwners + ?Sized), owner: &(impl Named + ?Sized)) -> bool {
    let uid = owner.uid();
    !uid.is_empty() && controller_of(obj).is_some_and(|r| r.uid == uid)
}

/// Makes `owner` the controller of `obj`, as controller-runtime's `SetControllerReference`:
/// [`Error::Fatal`] when `owner` is namespaced and `obj` is cluster-scoped or in another
/// namespace (cross-namespace owner references are not allowed), or when `obj` is already
/// controlled by another object; a reference with `owner`'s uid is replaced, other
/// (non-controller) references are kept, and the new one is appended.
pub fn set_controller(obj: &mut impl Object, owner: &(impl Named + ?Sized)) -> Result<()> {
    let reference = controller_ref(owner)?;
    if let Some(owner_ns) = namespace(owner) {
        let refused = match namespace(obj) {
            None => Some("a cluster-scoped object cannot have a namespaced owner"),
            Some(ns) if ns != owner_ns => Some("cross-namespace owner references are not allowed"),
            Some(_) => None,
        };
        if let Some(why) = refused {
            return Err(Error::fatal(format!(
                "cannot set {} as the controller of {}: {why}",
                what(owner),
                what(obj)
            )));
        }
    }
    let mut refs = obj.meta().owner_references.clone().unwrap_or_default();
    if let Some(other) = refs
        .iter()
        .find(|r| r.controller == Some(true) && r.uid != reference.uid)
    {
        let other = format!("{}/{}", other.kind, other.name);
        return Err(Error::fatal(format!(
            "cannot set {} as the controller of {}: it is already controlled by {other}",
            what(owner),
            what(obj)
        )));
    }
    match refs.iter_mut().find(|r| r.uid == reference.uid) {
        Some(r) => *r = reference,
        None => refs.push(reference),
    }
    write_references(obj, refs)
}

/// Puts `refs` into `obj`'s `metadata.ownerReferences`: in place when the kind has writable
/// metadata ([`Object::meta_mut`]), else through its JSON (a hand-written [`Object`] impl needs
/// only what it reads).
fn write_references<K: Object>(obj: &mut K, refs: Vec<OwnerReference>) -> Result<()> {
    if let Some(meta) = obj.meta_mut() {
        meta.owner_references = Some(refs);
        return Ok(());
    }
    let mut json = serde_json::to_value(&*obj)?;
    json["metadata"]["ownerReferences"] = serde_json::to_value(refs)?;
    *obj = serde_json::from_value(json)?;
    Ok(())
}

/// Whether `have` (what the cache holds) already is as `want` (what the handler would apply)
/// says, so the write can be skipped: every field `want` sets has the same value in `have`,
/// fields only `have` has (status, defaults, others' labels) do not count. Lists must match
/// element by element, except `metadata.ownerReferences`, where each wanted reference must be
/// among `have`'s (others may own it too). A field the server normalises (a quantity `1000m`
/// stored as `1`) or a projected cache (`metadata_only`, `project`) reads as not up to date: one
/// more apply, never a missed one.
pub fn is_up_to_date<K: Object>(have: &Lazy<K>, want: &K) -> Result<bool> {
    let have: Value = serde_json::from_str(have.json())?;
    // Through the text `kube::apply` sends, not `to_value`: `K`'s serializer into a `Value`
    // would be one more copy of a big kind's serialization code in the component.
    let want: Value = serde_json::from_str(&serde_json::to_string(want)?)?;
    Ok(covers(&have, &want, false))
}

/// Whether `have` holds everything `want` sets (the pure part of [`is_up_to_date`]);
/// `references` says `want` is an `ownerReferences` list.
fn covers(have: &Value, want: &Value, references: bool) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, w)| {
            let references = k == "ownerReferences";
            match h.get(k) {
                Some(h) => covers(h, w, references),
                // An absent field is as good as an empty one: a typed object sends `[]` or `{}`
                // for what the server leaves out.
                None => is_empty(w),
            }
        }),
        (Value::Array(h), Value::Array(w)) if references => w.iter().all(|w| {
            h.iter()
                .any(|h| h.get("uid") == w.get("uid") && covers(h, w, false))
        }),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(h, w)| covers(h, w, false))
        }
        // `1` and `1.0` are the same number to the server.
        (Value::Number(h), Value::Number(w)) => h == w || h.as_f64() == w.as_f64(),
        (h, w) => h == w,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// [`set_controller`] then `write` (the `kube` call), which a refusal never reaches.
pub(crate) fn owned<K: Object, T>(
    owner: &(impl Named + ?Sized),
    obj: &mut K,
    write: impl FnOnce(&K) -> Result<T>,
) -> Result<T> {
    set_controller(obj, owner)?;
    write(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DynamicObject;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use serde_json::json;

    fn from<K: Object>(v: serde_json::Value) -> K {
        serde_json::from_value(v).unwrap()
    }

    fn deploy(ns: &str, uid: &str) -> Deployment {
        from(json!({"metadata": {"namespace": ns, "name": "web", "uid": uid}}))
    }

    fn cm(ns: Option<&str>, refs: serde_json::Value) -> ConfigMap {
        from(json!({"metadata": {"namespace": ns, "name": "cfg", "ownerReferences": refs}}))
    }

    fn fatal<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(Error::Fatal(m)) => m,
            other => panic!("expected Fatal, got {other:?}"),
        }
    }

    fn refs(obj: &impl Object) -> serde_json::Value {
        serde_json::to_value(&obj.meta().owner_references).unwrap()
    }

    #[test]
    fn the_controller_reference_names_the_owner() {
        let r = controller_ref(&deploy("a", "u1")).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1",
                   "controller": true, "blockOwnerDeletion": true})
        );
        let widget: DynamicObject = from(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                                               "metadata": {"name": "w", "uid": "u2"}}));
        let r = controller_ref(&widget).unwrap();
        assert_eq!(
            (r.api_version.as_str(), r.kind.as_str()),
            ("example.com/v1", "Widget")
        );
    }

    #[test]
    fn an_owner_without_a_uid_or_a_name_is_refused_as_fatal() {
        let m = fatal(controller_ref(&deploy("a", "")));
        assert!(
            m.contains("Deployment a/web") && m.contains("no uid"),
            "{m}"
        );
        assert!(
            m.contains("read the owner from the cache or the API server first"),
            "{m}"
        );
        let unnamed: DynamicObject = from(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                                                "metadata": {"uid": "u"}}));
        assert!(fatal(controller_ref(&unnamed)).ends_with("it has no name"));
        let untyped: DynamicObject = from(
            json!({"apiVersion": "", "kind": "Widget", "metadata": {"name": "w", "uid": "u"}}),
        );
        assert!(fatal(controller_ref(&untyped)).ends_with("it has no apiVersion"));
        let mut obj = cm(Some("a"), json!(null));
        assert!(set_controller(&mut obj, &deploy("a", "")).is_err());
        assert_eq!(obj.metadata.owner_references, None);
    }

    #[test]
    fn cross_namespace_and_namespaced_owners_of_cluster_scoped_objects_are_refused() {
        let mut other_ns = cm(Some("b"), json!(null));
        let m = fatal(set_controller(&mut other_ns, &deploy("a", "u1")));
        assert_eq!(
            m,
            "cannot set Deployment a/web as the controller of ConfigMap b/cfg: \
             cross-namespace owner references are not allowed"
        );
        let mut cluster = cm(None, json!(null));
        let m = fatal(set_controller(&mut cluster, &deploy("a", "u1")));
        assert!(
            m.contains("ConfigMap cfg") && m.contains("cluster-scoped"),
            "{m}"
        );
        assert_eq!(cluster.metadata.owner_references, None);
        // A cluster-scoped owner may own objects anywhere.
        let ns: Namespace = from(json!({"metadata": {"name": "a", "uid": "n1"}}));
        set_controller(&mut other_ns, &ns).unwrap();
        set_controller(&mut cluster, &ns).unwrap();
        assert!(is_controlled_by(&other_ns, &ns) && is_controlled_by(&cluster, &ns));
    }

    #[test]
    fn another_controller_is_refused_the_same_is_replaced_others_are_kept() {
        let other = json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u9",
                           "controller": true});
        let mut obj = cm(Some("a"), json!([other]));
        let m = fatal(set_controller(&mut obj, &deploy("a", "u1")));
        assert!(m.ends_with("it is already controlled by Pod/p"), "{m}");
        assert_eq!(refs(&obj), json!([other]));

        let plain = json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u9"});
        let stale =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "old", "uid": "u1"});
        let mut obj = cm(Some("a"), json!([plain, stale]));
        set_controller(&mut obj, &deploy("a", "u1")).unwrap();
        set_controller(&mut obj, &deploy("a", "u1")).unwrap();
        let mine = serde_json::to_value(controller_ref(&deploy("a", "u1")).unwrap()).unwrap();
        assert_eq!(refs(&obj), json!([plain, mine]));

        let mut fresh = cm(Some("a"), json!([plain]));
        set_controller(&mut fresh, &deploy("a", "u1")).unwrap();
        assert_eq!(refs(&fresh), json!([plain, mine]));
    }

    #[test]
    fn the_reference_is_set_in_place_or_through_the_json_of_a_hand_written_kind() {
        let mine = serde_json::to_value(controller_ref(&deploy("a", "u1")).unwrap()).unwrap();
        let mut typed = cm(Some("a"), json!(null));
        assert!(typed.meta_mut().is_some());
        set_controller(&mut typed, &deploy("a", "u1")).unwrap();
        assert_eq!(refs(&typed), json!([mine]));

        // An `Object` impl without `meta_mut`: set through a JSON round trip, the rest kept.
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Own {
            metadata: crate::ObjectMeta,
            spec: serde_json::Value,
        }
        impl Object for Own {
            const TYPE: Option<(&'static str, &'static str)> = Some(("example.com/v1", "Own"));
            fn meta(&self) -> &crate::ObjectMeta {
                &self.metadata
            }
            fn type_of(&self) -> (&str, &str) {
                ("example.com/v1", "Own")
            }
        }
        let mut own: Own = from(json!({"metadata": {"namespace": "a", "name": "o"},
                                      "spec": {"k": 1}}));
        assert!(own.meta_mut().is_none());
        set_controller(&mut own, &deploy("a", "u1")).unwrap();
        assert_eq!((refs(&own), &own.spec), (json!([mine]), &json!({"k": 1})));
    }

    #[test]
    fn controlled_by_needs_a_controller_reference_with_the_owners_uid() {
        let owner = deploy("a", "u1");
        let with = |r: serde_json::Value| cm(Some("a"), json!([r]));
        assert!(is_controlled_by(
            &with(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1", "controller": true})
            ),
            &owner
        ));
        assert!(!is_controlled_by(
            &with(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1"})
            ),
            &owner
        ));
        assert!(!is_controlled_by(
            &with(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u2", "controller": true})
            ),
            &owner
        ));
        assert!(!is_controlled_by(&cm(Some("a"), json!(null)), &owner));
        assert!(!is_controlled_by(
            &with(
                json!({"apiVersion": "v1", "kind": "X", "name": "x", "uid": "", "controller": true})
            ),
            &deploy("a", "")
        ));
    }

    #[test]
    fn lazy_objects_read_their_references_without_a_full_decode() {
        let owner = deploy("a", "u1");
        let mine = serde_json::to_value(controller_ref(&owner).unwrap()).unwrap();
        let plain = json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u9"});
        let obj = lazy::<ConfigMap>(json!({"metadata": {"name": "cfg",
            "ownerReferences": [plain, mine]}, "data": {"k": 1}}));
        // `data.k` is not a string: a full decode would fail, the references are still read.
        assert!(obj.get().is_err());
        assert!(is_controlled_by(&obj, &owner));
        assert!(!is_controlled_by(&obj, &deploy("a", "u9")));
        assert_eq!(controller_of(&obj).map(|r| r.name), Some("web".to_string()));
        assert_eq!(obj.owner_references().len(), 2);
        let none = lazy::<ConfigMap>(json!({"metadata": {"name": "cfg"}}));
        assert_eq!(controller_of(&none), None);
        assert!(!is_controlled_by(
            &lazy::<ConfigMap>(json!("not an object")),
            &owner
        ));
        // A decoded Lazy answers from the decoded object.
        let decoded = lazy::<ConfigMap>(json!({"metadata": {"ownerReferences": [mine]}}));
        decoded.get().unwrap();
        assert!(matches!(decoded.owner_references(), Cow::Borrowed(_)));
        assert!(is_controlled_by(&decoded, &owner));
    }

    fn lazy<K: Object>(v: serde_json::Value) -> Lazy<K> {
        use crate::bindings::kubewasm::handler0_2_0::types::{
            Object as RawObject, ObjectMeta as RawMeta,
        };
        Lazy::new(RawObject {
            meta: RawMeta {
                api_version: String::new(),
                kind: String::new(),
                namespace: None,
                name: String::new(),
                uid: String::new(),
                resource_version: String::new(),
                generation: None,
                labels: Vec::new(),
            },
            json: v.to_string(),
        })
    }

    #[test]
    fn up_to_date_compares_only_what_the_handler_sets() {
        let owner = deploy("a", "u1");
        let mine = serde_json::to_value(controller_ref(&owner).unwrap()).unwrap();
        let mut want = cm(Some("a"), json!(null));
        want.data = Some([("k".to_string(), "v".to_string())].into());
        set_controller(&mut want, &owner).unwrap();
        let plain = json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u9"});
        // The server's own fields, other labels and another owner's reference do not count.
        let have = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "a", "name": "cfg", "uid": "c1", "resourceVersion": "9",
                         "labels": {"other": "x"}, "ownerReferences": [plain, mine]},
            "data": {"k": "v"}});
        assert!(is_up_to_date(&lazy::<ConfigMap>(have.clone()), &want).unwrap());
        let mut edited = have.clone();
        edited["data"]["k"] = json!("changed");
        assert!(!is_up_to_date(&lazy::<ConfigMap>(edited), &want).unwrap());
        let mut disowned = have.clone();
        disowned["metadata"]["ownerReferences"] = json!([plain]);
        assert!(!is_up_to_date(&lazy::<ConfigMap>(disowned), &want).unwrap());
        let mut extra = have;
        extra["data"]["more"] = json!("x");
        assert!(!covers(
            &extra,
            &json!({"data": {"k": "v", "gone": "y"}}),
            false
        ));
        assert!(covers(&extra, &json!({"data": {"k": "v"}}), false));
    }

    #[test]
    fn up_to_date_lists_match_element_by_element_and_numbers_by_value() {
        let have = json!({"spec": {"replicas": 3, "ports": [{"port": 80, "protocol": "TCP"}]}});
        assert!(covers(
            &have,
            &json!({"spec": {"replicas": 3.0, "ports": [{"port": 80}]}}),
            false
        ));
        assert!(!covers(
            &have,
            &json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}}),
            false
        ));
        assert!(!covers(&have, &json!({"spec": {"ports": []}}), false));
        assert!(covers(
            &have,
            &json!({"spec": {"selector": {}, "extra": []}}),
            false
        ));
        assert!(!covers(&have, &json!({"spec": {"replicas": 2}}), false));
    }

    #[test]
    fn apply_owned_writes_the_object_with_its_reference_and_never_a_refused_one() {
        let mut obj = cm(Some("a"), json!(null));
        let body = owned(&deploy("a", "u1"), &mut obj, |k| {
            Ok(serde_json::to_value(k)?)
        })
        .unwrap();
        assert_eq!(
            body["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1",
                    "controller": true, "blockOwnerDeletion": true}])
        );
        let mut elsewhere = cm(Some("b"), json!(null));
        let r = owned(&deploy("a", "u1"), &mut elsewhere, |_| -> Result<()> {
            panic!("a refused object is never written")
        });
        assert!(matches!(r, Err(Error::Fatal(_))));
        // kube::apply_owned refuses before it reaches the host (natively, a host call panics).
        let r = crate::kube::apply_owned(&deploy("a", ""), &mut cm(Some("a"), json!(null)));
        assert!(matches!(r, Err(Error::Fatal(_))));
    }
}
