//! Object semantics shared by all resources: server-owned metadata, preconditions, generation, finalizers,
//! status subresources and the CRD side effects. HTTP parsing lives in `routes.rs`.

use std::sync::Arc;

use kubewasm_apimachinery::validation::validate_dns1123_subdomain;
use rand::Rng;
use serde_json::{Map, Value, json};

use crate::App;
use crate::managed::{self, Lists, Scope, Writer};
use crate::patch::{self, Patch, PatchError, PatchKind};
use crate::registry::{ResourceType, types_from_crd};
use crate::status::{ApiError, ApiResult};
use crate::store::{Change, Obj, Outcome};

/// Options common to writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `dryRun=All`: compute and answer, store nothing.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `force=true` (apply only).
    pub force: bool,
    /// Manager of non-apply writes that name none: the request's User-Agent up to its first `/`.
    pub default_manager: String,
}

pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(crate) fn meta(v: &Value) -> &Value {
    v.get("metadata").unwrap_or(&Value::Null)
}

pub(crate) fn meta_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    meta(v).get(key).and_then(Value::as_str)
}

pub(crate) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    v["metadata"].as_object_mut().expect("metadata object")
}

pub(crate) fn finalizers(v: &Value) -> Vec<Value> {
    meta(v)
        .get("finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The part of an object whose change bumps `metadata.generation`.
fn spec_part(rt: &ResourceType, v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("metadata");
        if rt.status_subresource {
            o.remove("status");
        }
    }
    c
}

fn check_type_meta(rt: &ResourceType, v: &Value) -> ApiResult<()> {
    if let Some(av) = v.get("apiVersion").and_then(Value::as_str)
        && av != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if let Some(k) = v.get("kind").and_then(Value::as_str)
        && k != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

fn check_namespace(rt: &ResourceType, v: &Value, ns: &str) -> ApiResult<()> {
    if !rt.namespaced {
        return Ok(());
    }
    match meta_str(v, "namespace") {
        Some(n) if !n.is_empty() && n != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => Ok(()),
    }
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Run a write through the store (or, for dry runs, only compute it).
pub(crate) fn write<F>(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    dry_run: bool,
    f: F,
) -> ApiResult<Outcome>
where
    F: FnOnce(Option<&Arc<Obj>>) -> ApiResult<Change>,
{
    let res = rt.storage_key();
    // What the closure sees and decides is in `rt`'s form; the store keeps the stored form.
    let f = |cur: Option<&Arc<Obj>>| -> ApiResult<Change> {
        let shown = cur.map(|c| crate::events::view(rt, c));
        Ok(match f(shown.as_ref())? {
            Change::Put(v) => Change::Put(crate::events::stored(rt, v)),
            other => other,
        })
    };
    if dry_run {
        let cur = app.store.get(&res, ns, name);
        return Ok(match f(cur.as_ref())? {
            // Answered as if written, but at the current resourceVersion (none for a create):
            // nothing was stored, so no version was used up.
            Change::Put(mut v) => {
                let rv = cur.as_ref().map(|c| c.rv).unwrap_or(0);
                match cur {
                    Some(_) => crate::store::set_rv(&mut v, rv),
                    None => {
                        meta_mut(&mut v).remove("resourceVersion");
                    }
                }
                Outcome {
                    obj: Some(crate::events::view(rt, &Obj::new(v, rv))),
                    event: None,
                }
            }
            Change::Delete | Change::Keep => Outcome {
                obj: cur.map(|c| crate::events::view(rt, &c)),
                event: None,
            },
        });
    }
    app.counters.write();
    let mut out = app.store.mutate(&res, ns, name, f)?;
    out.obj = out.obj.map(|o| crate::events::view(rt, &o));
    if rt.group == "apiextensions.k8s.io"
        && rt.plural == "customresourcedefinitions"
        && out.event.is_some()
    {
        crd_changed(app, &out);
    }
    Ok(out)
}

/// The checks every full-object write (create, update) makes on the request body.
fn check_body(rt: &ResourceType, body: &Value, ns: &str) -> ApiResult<()> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the object provided is not a JSON object",
        ));
    }
    check_type_meta(rt, body)?;
    check_namespace(rt, body, ns)
}

/// The real server's limit on `fieldManager`.
const MAX_FIELD_MANAGER: usize = 128;

/// The manager of a non-apply write: `fieldManager` if given (validated), else the User-Agent prefix.
fn update_manager(opts: &WriteOpts, options_kind: &str) -> ApiResult<String> {
    match opts.field_manager.as_deref() {
        Some(m) if !m.is_empty() => {
            check_field_manager(m, options_kind)?;
            Ok(m.to_string())
        }
        _ => {
            let printable: String = opts
                .default_manager
                .chars()
                .filter(|c| !c.is_control())
                .collect();
            Ok(kubewasm_apimachinery::text::truncate(&printable, MAX_FIELD_MANAGER).to_string())
        }
    }
}

fn check_field_manager(m: &str, options_kind: &str) -> ApiResult<()> {
    if m.len() > MAX_FIELD_MANAGER {
        return Err(ApiError::invalid_options(
            options_kind,
            "fieldManager",
            &format!("Too long: may not be more than {MAX_FIELD_MANAGER} bytes"),
        ));
    }
    if let Some((i, c)) = m.char_indices().find(|(_, c)| c.is_control()) {
        return Err(ApiError::invalid_options(
            options_kind,
            "fieldManager",
            &format!("Invalid value: invalid character {c:?} (at position {i})"),
        ));
    }
    Ok(())
}

/// Which part of an object a write through this endpoint owns.
fn scope(rt: &ResourceType, status_only: bool) -> Scope {
    if status_only {
        Scope::StatusOnly
    } else if rt.status_subresource {
        Scope::NoStatus
    } else {
        Scope::Whole
    }
}

/// How a write by `manager` through this endpoint is recorded in `managedFields`.
fn writer(rt: &ResourceType, manager: String, status_only: bool) -> Writer {
    Writer {
        manager,
        api_version: rt.api_version(),
        lists: if rt.custom {
            Lists::Custom
        } else {
            Lists::Builtin
        },
        scope: scope(rt, status_only),
        now: now_rfc3339(),
    }
}

/// A new object's uid: random, or from the creation counter with `deterministic_uids`.
fn new_uid(app: &App) -> String {
    if app.config.deterministic_uids {
        let n = app
            .created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        deterministic_uid(n)
    } else {
        uuid::Uuid::new_v4().to_string()
    }
}

/// The `n`th object's uid in a scripted run: the counter in the last 12 digits (creation order
/// stays readable), the rest from SplitMix64 of it. Uids that differ only at the end would hash
/// into a few narrow bands of KEP-5866's FNV-1a space; these spread as random ones do.
pub(crate) fn deterministic_uid(n: u64) -> String {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let h = z ^ (z >> 31);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{n:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (h >> 40) & 0xfff
    )
}

/// Create an object (POST). Returns the stored object.
pub fn create(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    body: Value,
    opts: &WriteOpts,
) -> ApiResult<Arc<Obj>> {
    let w = writer(rt, update_manager(opts, "CreateOptions")?, false);
    create_owned(app, rt, ns, body, opts, Some(&w))
}

/// Create, recording the writer as the owner of every field (an `Update`), or, with `None`, keeping the
/// ownership the caller already recorded (apply).
fn create_owned(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    mut body: Value,
    opts: &WriteOpts,
    owner: Option<&Writer>,
) -> ApiResult<Arc<Obj>> {
    check_body(rt, &body, ns)?;
    let given = meta_str(&body, "name").unwrap_or("").to_string();
    crate::namespaces::admit_create(app, rt, ns, &given)?;
    let generate = meta_str(&body, "generateName").unwrap_or("").to_string();
    if given.is_empty() && generate.is_empty() {
        return Err(ApiError::invalid(
            &rt.kind,
            "",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    if !given.is_empty() && validate_dns1123_subdomain(&given).is_err() {
        return Err(ApiError::invalid(
            &rt.kind,
            &given,
            "metadata.name",
            &format!(
                "Invalid value: \"{given}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ));
    }
    body["apiVersion"] = json!(rt.api_version());
    body["kind"] = json!(rt.kind);
    {
        let m = meta_mut(&mut body);
        for k in [
            "resourceVersion",
            "uid",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "generation",
        ] {
            m.remove(k);
        }
        m.insert("uid".into(), json!(new_uid(app)));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        if rt.namespaced {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        if rt.has_generation {
            m.insert("generation".into(), json!(1));
        }
    }
    crate::prepare::create(rt, &mut body)?;
    crate::defaults::apply(rt, &mut body);
    crate::validation::object(rt, &mut body, None)?;
    if let Some(w) = owner {
        managed::record_update(None, &mut body, w);
    }
    for attempt in 0..8 {
        let name = if given.is_empty() {
            format!("{generate}{}", random_suffix())
        } else {
            given.clone()
        };
        let mut obj = body.clone();
        meta_mut(&mut obj).insert("name".into(), json!(name));
        let result = write(app, rt, ns, &name, opts.dry_run, |cur| match cur {
            Some(_) => Err(ApiError::already_exists(rt, &name)),
            None => Ok(Change::Put(obj)),
        });
        match result {
            Err(e) if e.code == 409 && given.is_empty() && attempt < 7 => continue,
            Err(e) => return Err(e),
            Ok(out) => {
                return out
                    .obj
                    .ok_or_else(|| ApiError::internal("create produced no object"));
            }
        }
    }
    Err(ApiError::internal("could not generate a unique name"))
}

/// Register/unregister the kinds of a CRD after it was written.
pub(crate) fn crd_changed(app: &App, out: &Outcome) {
    let Some(obj) = &out.obj else { return };
    let group = obj
        .value
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let plural = obj
        .value
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let deleted = out.event == Some(crate::store::EventType::Deleted);
    let types = if deleted {
        Vec::new()
    } else {
        types_from_crd(&obj.value).unwrap_or_default()
    };
    app.registry.write().set_custom(&group, &plural, types);
}

/// Re-register the kinds of every stored CRD (start-up after a restore).
pub fn restore_crds(app: &App) {
    let (_, crds) = app
        .store
        .list("apiextensions.k8s.io/customresourcedefinitions", None);
    for crd in crds {
        crd_changed(
            app,
            &Outcome {
                obj: Some(crd),
                event: Some(crate::store::EventType::Added),
            },
        );
    }
}

/// Carry server-owned metadata over from the stored object and decide the resulting change.
fn finish_update(rt: &ResourceType, cur: &Obj, mut new: Value) -> ApiResult<Change> {
    let old = &cur.value;
    new["apiVersion"] = json!(rt.api_version());
    new["kind"] = json!(rt.kind);
    crate::defaults::apply(rt, &mut new);
    let name = meta_str(old, "name").unwrap_or("").to_string();
    let old_meta = meta(old).clone();
    {
        let m = meta_mut(&mut new);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "name",
            "namespace",
            "generation",
        ] {
            match old_meta.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
        m.remove("selfLink");
    }
    if rt.has_generation && spec_part(rt, old) != spec_part(rt, &new) {
        let g = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    let namespace = crate::namespaces::is_namespace(rt);
    if namespace {
        crate::namespaces::keep_finalizers(old, &mut new);
    }
    let terminating = old_meta.get("deletionTimestamp").is_some();
    if terminating {
        let before = finalizers(old);
        let after = finalizers(&new);
        if after.iter().any(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                &rt.kind,
                &name,
                "metadata.finalizers",
                "Forbidden: no new finalizers can be added if the object is being deleted",
            ));
        }
        if after.is_empty() && !(namespace && crate::namespaces::held(&new)) {
            return Ok(Change::Delete);
        }
    }
    if rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io" {
        types_from_crd(&new)
            .map_err(|e| ApiError::invalid(&rt.kind, &name, "spec", &e.to_string()))?;
    }
    crate::validation::object(rt, &mut new, Some(old))?;
    Ok(Change::Put(new))
}

fn check_rv_precondition(rt: &ResourceType, name: &str, cur: &Obj, given: &Value) -> ApiResult<()> {
    if let Some(rv) = meta_str(given, "resourceVersion")
        && !rv.is_empty()
        && rv != cur.rv.to_string()
    {
        return Err(ApiError::conflict(rt, name));
    }
    Ok(())
}

/// Replace an object (PUT), or only its status (`status_only`).
pub fn update(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    body: Value,
    status_only: bool,
    opts: &WriteOpts,
) -> ApiResult<Arc<Obj>> {
    check_body(rt, &body, ns)?;
    if let Some(n) = meta_str(&body, "name")
        && n != name
    {
        return Err(ApiError::bad_request(
            "the name of the object does not match the name on the URL",
        ));
    }
    let w = writer(rt, update_manager(opts, "UpdateOptions")?, status_only);
    let out = write(app, rt, ns, name, opts.dry_run, |cur| {
        let cur = cur.ok_or_else(|| ApiError::not_found(rt, name))?;
        check_rv_precondition(rt, name, cur, &body)?;
        let mut new = merge_subresource(rt, &cur.value, body, status_only);
        managed::record_update(Some(&cur.value), &mut new, &w);
        finish_update(rt, cur, new)
    })?;
    out.obj.ok_or_else(|| ApiError::not_found(rt, name))
}

/// Restrict a new state to what the endpoint may change: `/status` only status, the main resource
/// everything but status (when status is a subresource).
fn merge_subresource(rt: &ResourceType, old: &Value, new: Value, status_only: bool) -> Value {
    if status_only {
        let mut out = old.clone();
        match new.get("status") {
            Some(s) => out["status"] = s.clone(),
            None => {
                if let Some(o) = out.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        out
    } else if rt.status_subresource {
        let mut out = new;
        match old.get("status") {
            Some(s) => out["status"] = s.clone(),
            None => {
                if let Some(o) = out.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        out
    } else {
        new
    }
}

/// PATCH an object (any flavour). Server-side apply creates missing objects (`created == true`).
pub fn patch(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    change: Patch,
    status_only: bool,
    opts: &WriteOpts,
) -> ApiResult<(Arc<Obj>, bool)> {
    let Patch { kind, body } = change;
    if kind == PatchKind::Apply {
        if opts.field_manager.as_deref().is_none_or(str::is_empty) {
            let mut e = ApiError::new(
                422,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            );
            e.details = Some(
                json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{"reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch", "field": "fieldManager"}]}),
            );
            return Err(e);
        }
        if !body.is_object() {
            return Err(ApiError::bad_request("apply patch must be an object"));
        }
        check_type_meta(rt, &body)?;
        if body.get("apiVersion").is_none() || body.get("kind").is_none() {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply patch",
            ));
        }
        if meta_str(&body, "name") != Some(name) {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        check_namespace(rt, &body, ns)?;
        if meta(&body).get("managedFields").is_some() {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
    } else if opts.force {
        return Err(ApiError::invalid_options(
            "PatchOptions",
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    if kind == PatchKind::Strategic && !rt.strategic_merge {
        return Err(ApiError::unsupported_media_type());
    }
    let manager = match kind {
        PatchKind::Apply => {
            let m = opts.field_manager.clone().unwrap_or_default();
            check_field_manager(&m, "PatchOptions")?;
            m
        }
        _ => update_manager(opts, "PatchOptions")?,
    };
    let w = writer(rt, manager, status_only);
    if kind == PatchKind::Apply
        && app.store.get(&rt.storage_key(), ns, name).is_none()
        && !status_only
    {
        let mut initial = json!({});
        patch::apply_merge(&mut initial, &body, !rt.custom);
        let initial = managed::apply(None, initial, &body, &w, opts.force)?;
        match create_owned(app, rt, ns, initial, opts, None) {
            Ok(obj) => return Ok((obj, true)),
            Err(e) if e.code == 409 && e.reason == "AlreadyExists" => {} // raced with another creation: merge
            Err(e) => return Err(e),
        }
    }
    let out = write(app, rt, ns, name, opts.dry_run, |cur| {
        let cur = cur.ok_or_else(|| ApiError::not_found(rt, name))?;
        if body.is_object() {
            check_rv_precondition(rt, name, cur, &body)?;
        }
        let mut new = cur.value.clone();
        match kind {
            PatchKind::Merge => patch::merge_patch(&mut new, &body),
            PatchKind::Strategic => patch::strategic_merge(&mut new, &body).map_err(patch_err)?,
            PatchKind::Json => patch::json_patch(&mut new, &body).map_err(patch_err)?,
            PatchKind::Apply => patch::apply_merge(&mut new, &body, !rt.custom),
        }
        if !new.is_object() {
            return Err(ApiError::invalid(
                &rt.kind,
                name,
                "<root>",
                "Invalid value: the patched object is not a JSON object",
            ));
        }
        let mut new = merge_subresource(rt, &cur.value, new, status_only);
        if kind == PatchKind::Apply {
            new = managed::apply(Some(&cur.value), new, &body, &w, opts.force)?;
        } else {
            managed::record_update(Some(&cur.value), &mut new, &w);
        }
        finish_update(rt, cur, new)
    })?;
    Ok((out.obj.ok_or_else(|| ApiError::not_found(rt, name))?, false))
}

pub(crate) fn patch_err(e: PatchError) -> ApiError {
    match e {
        PatchError::Malformed(m) => ApiError::bad_request(m),
        PatchError::Failed(m) => {
            let mut e = ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            );
            e.details = Some(json!({"causes": [{"message": m}]}));
            e
        }
    }
}

#[cfg(test)]
mod tests {
    use super::deterministic_uid;
    use kubewasm_apimachinery::fnv1a64;

    /// Scripted uids look like version-4 uuids, end in the creation counter, never repeat, and
    /// spread over the FNV-1a space a KEP-5866 shard selector cuts (uids differing only in the
    /// counter digits fell into 3 of its 16 top-nibble bands).
    #[test]
    fn deterministic_uids_spread_over_the_shard_hash_space() {
        let uids: Vec<String> = (1..=1000).map(deterministic_uid).collect();
        assert_eq!(uids[0], "910a2dec-8902-4cc1-8a2d-000000000001");
        for (i, u) in uids.iter().enumerate() {
            let parts: Vec<&str> = u.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12]
            );
            assert!(
                parts[2].starts_with('4') && parts[3].starts_with('8'),
                "{u}"
            );
            assert_eq!(u64::from_str_radix(parts[4], 16).unwrap(), i as u64 + 1);
        }
        let mut bands = [0usize; 16];
        for u in &uids {
            bands[(fnv1a64(u.as_bytes()) >> 60) as usize] += 1;
        }
        // 1,000 uids over 16 bands: about 62 each; random ones stay within 35..95.
        assert!(bands.iter().all(|&n| (35..95).contains(&n)), "{bands:?}");
    }
}
