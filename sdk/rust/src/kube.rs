//! The typed `kube` client: reads and writes objects of an [`Object`] kind through the host,
//! within the plugin's grants, answering typed objects and [`Error`]s.
//!
//! Writes answer the object as the server stored it as a [`Lazy`]: its metadata (name, uid,
//! resourceVersion …) is free to read, the typed object is decoded only by
//! [`get`](Lazy::get)/[`into_inner`](Lazy::into_inner). A controller that never reads the answer
//! never compiles in the kind's decoder (a Deployment's is hundreds of KB of wasm).

use serde_json::Value;

use crate::bindings::kubewasm::handler0_2_0::kube as raw;
use crate::bindings::kubewasm::handler0_2_0::types::Object as RawObject;
use crate::error::{Error, Result};
use crate::lazy::Lazy;
use crate::object::{DynamicObject, Named, Object};
use crate::patch::JsonPatch;

pub use raw::PatchType;

/// The write options of 0.2.0, defaulting to a real (not dry-run), non-forcing write.
pub use raw::WriteOptions;

const PLAIN: WriteOptions = WriteOptions {
    dry_run: false,
    force: false,
};

fn decode<K: Object>(o: RawObject) -> Result<K> {
    Ok(serde_json::from_str(&o.json)?)
}

fn type_of<K: Object>() -> (&'static str, &'static str) {
    K::TYPE.expect("this call needs a typed kind; use its `_kind` variant for DynamicObject")
}

/// What `apply` did: the object as stored, and whether the apply created it.
#[derive(Clone, Debug)]
pub struct Applied<K> {
    /// The object as the server stored it, decoded into `K` only by
    /// [`get`](Lazy::get)/[`into_inner`](Lazy::into_inner) (metadata reads need no decode).
    pub object: Lazy<K>,
    /// True when the server answered 201 (the object did not exist before).
    pub created: bool,
}

/// Reads `name` (in `namespace`, `None` for cluster-scoped kinds) from the API server;
/// `Ok(None)` when it does not exist.
pub fn get<K: Object>(namespace: Option<&str>, name: &str) -> Result<Option<K>> {
    let (api_version, kind) = type_of::<K>();
    get_as(api_version, kind, namespace, name)
}

/// [`get`] of `kind` of `api_version`, for a kind without a Rust type.
pub fn get_kind(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<DynamicObject>> {
    get_as(api_version, kind, namespace, name)
}

fn get_as<K: Object>(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<K>> {
    raw::get(api_version, kind, namespace, name)?
        .map(decode)
        .transpose()
}

/// Server-side applies `obj` (field manager `kubewasm:<plugin>`), taking over conflicting
/// fields (`force`), as a controller owning the object does.
pub fn apply<K: Object>(obj: &K) -> Result<Applied<K>> {
    apply_with(
        obj,
        WriteOptions {
            dry_run: false,
            force: true,
        },
    )
}

/// [`apply`] with explicit options (e.g. `force: false` to fail on conflicts with 409).
pub fn apply_with<K: Object>(obj: &K, opts: WriteOptions) -> Result<Applied<K>> {
    let outcome = raw::apply_outcome(&serde_json::to_string(obj)?, opts)?;
    Ok(Applied {
        created: outcome.code == 201,
        object: Lazy::new(outcome.object),
    })
}

/// Makes `owner` the controller of `obj` ([`owner::set_controller`](crate::owner::set_controller),
/// whose refusals are [`Error::Fatal`] and reach no server), then [`apply`]s it.
pub fn apply_owned<K: Object>(owner: &(impl Named + ?Sized), obj: &mut K) -> Result<Applied<K>> {
    crate::owner::owned(owner, obj, apply)
}

/// [`apply_owned`], unless `have` (the object as the cache holds it) is already as wanted
/// ([`owner::is_up_to_date`](crate::owner::is_up_to_date), owner reference included): `None`
/// when nothing was written. The check saves a write per event for a controller that re-applies
/// on every resync or every change of its owner.
pub fn apply_owned_if_changed<K: Object>(
    owner: &(impl Named + ?Sized),
    obj: &mut K,
    have: Option<&Lazy<K>>,
) -> Result<Option<Applied<K>>> {
    crate::owner::owned(owner, obj, |obj| match have {
        Some(have) if crate::owner::is_up_to_date(have, obj)? => Ok(None),
        _ => apply(obj).map(Some),
    })
}

/// Creates `obj`; 409 `AlreadyExists` when it does.
pub fn create<K: Object>(obj: &K) -> Result<Lazy<K>> {
    Ok(Lazy::new(raw::create(&serde_json::to_string(obj)?, PLAIN)?))
}

/// Replaces `obj` as a whole (409 when its `resourceVersion` is stale).
pub fn replace<K: Object>(obj: &K) -> Result<Lazy<K>> {
    Ok(Lazy::new(raw::replace(
        &serde_json::to_string(obj)?,
        None,
        PLAIN,
    )?))
}

/// Where a patch goes: the kind and the object.
struct Target<'a> {
    api_version: &'a str,
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
}

impl<'a> Target<'a> {
    fn of<K: Object>(namespace: Option<&'a str>, name: &'a str) -> Self {
        let (api_version, kind) = type_of::<K>();
        Target {
            api_version,
            kind,
            namespace,
            name,
        }
    }
}

fn patch<K: Object>(
    to: Target<'_>,
    kind: PatchType,
    body: &str,
    subresource: Option<&str>,
) -> Result<Lazy<K>> {
    Ok(Lazy::new(raw::patch(
        to.api_version,
        to.kind,
        to.namespace,
        to.name,
        kind,
        body,
        subresource,
        PLAIN,
    )?))
}

/// Merge-patches (RFC 7386) object `name` with `patch` (see [`crate::patch`] for builders).
pub fn patch_merge<K: Object>(
    namespace: Option<&str>,
    name: &str,
    patch: &Value,
) -> Result<Lazy<K>> {
    let to = Target::of::<K>(namespace, name);
    self::patch(to, PatchType::Merge, &patch.to_string(), None)
}

/// [`patch_merge`] of `kind` of `api_version`, for a kind without a Rust type.
pub fn patch_merge_kind(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    patch: &Value,
) -> Result<Lazy<DynamicObject>> {
    let to = Target {
        api_version,
        kind,
        namespace,
        name,
    };
    self::patch(to, PatchType::Merge, &patch.to_string(), None)
}

/// Applies JSON Patch operations to object `name`; a failed `test` is 422.
pub fn patch_json<K: Object>(
    namespace: Option<&str>,
    name: &str,
    ops: &JsonPatch,
) -> Result<Lazy<K>> {
    let to = Target::of::<K>(namespace, name);
    self::patch(to, PatchType::Json, &ops.to_json(), None)
}

/// Merge-patches the `status` subresource of `name`: `status` is the new `.status` fields.
/// What a controller does to report what it observed (e.g. `availableReplicas`).
pub fn patch_status<K: Object>(
    namespace: Option<&str>,
    name: &str,
    status: impl serde::Serialize,
) -> Result<Lazy<K>> {
    let body = crate::patch::status(status)?.to_string();
    let to = Target::of::<K>(namespace, name);
    self::patch(to, PatchType::Merge, &body, Some("status"))
}

/// [`patch_status`] of `kind` of `api_version`, for a custom kind without a Rust type (a
/// [`DynamicObject`] controller's primary).
pub fn patch_status_kind(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    status: impl serde::Serialize,
) -> Result<Lazy<DynamicObject>> {
    let body = crate::patch::status(status)?.to_string();
    let to = Target {
        api_version,
        kind,
        namespace,
        name,
    };
    self::patch(to, PatchType::Merge, &body, Some("status"))
}

/// Deletes `name`; with `uid`, only if it is still that object (409 otherwise). A missing
/// object is `Ok`: what the caller wanted is true.
pub fn delete<K: Object>(namespace: Option<&str>, name: &str, uid: Option<&str>) -> Result<()> {
    let (api_version, kind) = type_of::<K>();
    delete_kind(api_version, kind, namespace, name, uid)
}

/// [`delete`] of `kind` of `api_version`, for a kind without a Rust type.
pub fn delete_kind(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    uid: Option<&str>,
) -> Result<()> {
    match raw::delete(api_version, kind, namespace, name, uid) {
        Err(e) if e.code == 404 => Ok(()),
        r => r.map_err(Error::from),
    }
}
