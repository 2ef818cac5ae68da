//! DELETE semantics: DeleteOptions (preconditions, `dryRun`, `propagationPolicy` and the
//! deprecated `orphanDependents`), finalizers, and the garbage collector's own finalizers.
//!
//! As in kube-apiserver, the server itself never touches dependents: a `Foreground` delete only
//! marks the owner (`deletionTimestamp` + the `foregroundDeletion` finalizer), an `Orphan` one
//! adds the `orphan` finalizer, and `Background` (the default) removes the owner at once. The
//! garbage collector (`gc.rs`) then sees those writes and does the rest, asynchronously.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::App;
use crate::ops::{finalizers, meta, meta_mut, meta_str, now_rfc3339, write};
use crate::registry::{ResourceType, types_from_crd};
use crate::status::{ApiError, ApiResult};
use crate::store::{Change, Obj};

/// The finalizer of an owner whose dependents lose their references to it before it goes.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer of an owner waiting for its blocking dependents to be deleted first.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// What happens to the dependents of a deleted object (`DeleteOptions.propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents lose their reference to the owner and stay.
    Orphan,
    /// The owner goes now, the garbage collector deletes the dependents afterwards.
    Background,
    /// Dependents that block their owner's deletion go first, then the owner.
    Foreground,
}

impl Propagation {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Orphan => "Orphan",
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
        }
    }

    fn parse(s: &str) -> ApiResult<Propagation> {
        match s {
            "Orphan" => Ok(Propagation::Orphan),
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            other => Err(ApiError::invalid_options(
                "DeleteOptions",
                "propagationPolicy",
                &format!(
                    "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )),
        }
    }
}

/// DeleteOptions that matter here.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun: ["All"]`.
    pub dry_run: bool,
    /// `propagationPolicy`.
    pub propagation: Option<Propagation>,
    /// The deprecated `orphanDependents` (`true` is `Orphan`, `false` is `Background`).
    pub orphan_dependents: Option<bool>,
}

impl DeleteOpts {
    /// The options of a DELETE: from its body when it has one (a `DeleteOptions`), else from
    /// its query (`query` looks a parameter up); `query_dry_run` is the query's `dryRun=All`.
    pub fn parse(
        body: &[u8],
        query: &dyn Fn(&str) -> Option<String>,
        query_dry_run: bool,
    ) -> ApiResult<DeleteOpts> {
        let opts = if !body.iter().all(u8::is_ascii_whitespace) {
            let v: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
            let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
            DeleteOpts {
                uid: s("/preconditions/uid"),
                resource_version: s("/preconditions/resourceVersion"),
                dry_run: query_dry_run || body_dry_run(&v)?,
                propagation: s("/propagationPolicy")
                    .as_deref()
                    .map(Propagation::parse)
                    .transpose()?,
                orphan_dependents: v.get("orphanDependents").and_then(Value::as_bool),
            }
        } else {
            DeleteOpts {
                uid: query("preconditions.uid"),
                resource_version: query("preconditions.resourceVersion"),
                dry_run: query_dry_run,
                propagation: query("propagationPolicy")
                    .filter(|p| !p.is_empty())
                    .as_deref()
                    .map(Propagation::parse)
                    .transpose()?,
                orphan_dependents: query("orphanDependents").map(|o| o == "true" || o == "1"),
            }
        };
        if let (Some(p), Some(_)) = (opts.propagation, opts.orphan_dependents) {
            return Err(ApiError::invalid_options(
                "DeleteOptions",
                "propagationPolicy",
                &format!(
                    "Invalid value: \"{}\": orphanDependents and deletionPropagation cannot be both set",
                    p.as_str()
                ),
            ));
        }
        Ok(opts)
    }

    /// Options the garbage collector and namespace controller delete with.
    pub fn controller(uid: &str, propagation: Propagation) -> DeleteOpts {
        DeleteOpts {
            uid: Some(uid.to_string()),
            propagation: Some(propagation),
            ..DeleteOpts::default()
        }
    }
}

/// `dryRun: ["All"]` in a DeleteOptions body; other values are refused like the query form.
fn body_dry_run(options: &Value) -> ApiResult<bool> {
    match options.get("dryRun") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Array(a)) if a.iter().all(|x| x == "All") => Ok(!a.is_empty()),
        Some(other) => Err(ApiError::invalid_options(
            "DeleteOptions",
            "dryRun",
            &format!("Unsupported value: {other}: supported values: \"All\""),
        )),
    }
}

/// The policy a DELETE without one gets, as each kind's `DefaultGarbageCollectionPolicy` in
/// kube-apiserver: `Orphan` for batch/v1 Jobs and v1 ReplicationControllers (kept so for
/// compatibility: a raw client's delete of a Job leaves its Pods), `Background` for the rest.
fn default_propagation(rt: &ResourceType) -> Propagation {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("batch", "jobs") | ("", "replicationcontrollers") => Propagation::Orphan,
        _ => Propagation::Background,
    }
}

/// The finalizers an object is deleted with, as kube-apiserver's
/// `deletionFinalizersForGarbageCollection` decides: the options' policy, else the GC finalizer
/// the object already has, else the kind's `default`; `orphan` or `foregroundDeletion` added to
/// the object's other finalizers accordingly.
fn deletion_finalizers(opts: &DeleteOpts, current: &[String], default: Propagation) -> Vec<String> {
    let policy = match (opts.orphan_dependents, opts.propagation) {
        (Some(true), _) => Propagation::Orphan,
        (Some(false), _) => Propagation::Background,
        (None, Some(p)) => p,
        (None, None) => current
            .iter()
            .find_map(|f| match f.as_str() {
                ORPHAN_FINALIZER => Some(Propagation::Orphan),
                FOREGROUND_FINALIZER => Some(Propagation::Foreground),
                _ => None,
            })
            .unwrap_or(default),
    };
    let mut out: Vec<String> = current
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    match policy {
        Propagation::Orphan => out.push(ORPHAN_FINALIZER.into()),
        Propagation::Foreground => out.push(FOREGROUND_FINALIZER.into()),
        Propagation::Background => {}
    }
    out
}

/// What DELETE did.
pub enum Deleted {
    /// Removed now; the last state (stamped with the deletion RV).
    Gone(Arc<Obj>),
    /// Finalizers pending: marked with deletionTimestamp.
    Terminating(Arc<Obj>),
}

/// The object's finalizers as strings (anything else in the list is kept out).
pub(crate) fn finalizer_names(v: &Value) -> Vec<String> {
    finalizers(v)
        .iter()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

fn check_preconditions(
    rt: &ResourceType,
    name: &str,
    cur: &Obj,
    opts: &DeleteOpts,
) -> ApiResult<()> {
    if let Some(uid) = &opts.uid {
        let actual = meta_str(&cur.value, "uid").unwrap_or("");
        if uid != actual {
            return Err(ApiError::conflict_msg(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(rv) = &opts.resource_version
        && *rv != cur.rv.to_string()
    {
        return Err(ApiError::conflict_msg(
            rt,
            name,
            &format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                cur.rv
            ),
        ));
    }
    Ok(())
}

/// DELETE one object.
pub fn delete(
    app: &App,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> ApiResult<Deleted> {
    if rt.group.is_empty()
        && rt.plural == "namespaces"
        && matches!(name, "default" | "kube-system" | "kube-public")
    {
        let mut e = ApiError::new(
            403,
            "Forbidden",
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
        );
        e.details = Some(json!({"name": name, "kind": "namespaces"}));
        return Err(e);
    }
    let mut terminating = false;
    let out = write(app, rt, ns, name, opts.dry_run, |cur| {
        let cur = cur.ok_or_else(|| ApiError::not_found(rt, name))?;
        check_preconditions(rt, name, cur, opts)?;
        let current = finalizer_names(&cur.value);
        let wanted = deletion_finalizers(opts, &current, default_propagation(rt));
        let marking = Marking {
            marked: meta(&cur.value).get("deletionTimestamp").is_some(),
            same: wanted.len() == current.len() && wanted.iter().all(|f| current.contains(f)),
            finalizers: wanted,
        };
        let change = if crate::namespaces::is_namespace(rt) {
            crate::namespaces::on_delete(&cur.value, marking)
        } else if marking.finalizers.is_empty() {
            Change::Delete
        } else if marking.marked && marking.same {
            Change::Keep
        } else {
            Change::Put(marking.apply(&cur.value, true))
        };
        terminating = !matches!(change, Change::Delete);
        Ok(change)
    })?;
    let obj = out.obj.ok_or_else(|| ApiError::not_found(rt, name))?;
    if terminating {
        return Ok(Deleted::Terminating(obj));
    }
    if !opts.dry_run {
        cascade(app, rt, &obj);
    }
    Ok(Deleted::Gone(obj))
}

/// How a DELETE marks an object that finalizers hold.
pub(crate) struct Marking {
    /// Already marked (`deletionTimestamp` set) by an earlier DELETE.
    pub marked: bool,
    /// `finalizers` is the set the object has.
    pub same: bool,
    /// The finalizers the object is to have ([`deletion_finalizers`]).
    pub finalizers: Vec<String>,
}

impl Marking {
    /// The object marked: `deletionTimestamp` (with `deletionGracePeriodSeconds: 0` when
    /// `grace`, a generation bump for kinds that have one) unless marked already, and the
    /// finalizers.
    pub fn apply(&self, cur: &Value, grace: bool) -> Value {
        let mut new = cur.clone();
        let m = meta_mut(&mut new);
        if !self.same {
            if self.finalizers.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), json!(self.finalizers));
            }
        }
        if !self.marked {
            m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            if grace {
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            if let Some(g) = m.get("generation").and_then(Value::as_i64) {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        new
    }
}

/// Deleting a CRD deletes its custom resources (a namespace's contents are the namespace
/// controller's, `namespaces.rs`).
fn cascade(app: &App, rt: &ResourceType, obj: &Obj) {
    if !(rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions") {
        return;
    }
    // The kinds were unregistered already; rebuild a type just to address the storage.
    let Some(t) = types_from_crd(&obj.value)
        .unwrap_or_default()
        .into_iter()
        .next()
    else {
        return;
    };
    let (_, items) = app.store.list(&t.storage_key(), None);
    for item in items {
        let ins = meta_str(&item.value, "namespace").unwrap_or("").to_string();
        let iname = meta_str(&item.value, "name").unwrap_or("").to_string();
        let _ = app
            .store
            .mutate(&t.storage_key(), &ins, &iname, |_| Ok(Change::Delete));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn deletion_finalizers_follow_the_policy_then_the_object() {
        let with = |p: Option<Propagation>, o: Option<bool>| DeleteOpts {
            propagation: p,
            orphan_dependents: o,
            ..DeleteOpts::default()
        };
        let none = with(None, None);
        assert!(deletion_finalizers(&none, &[], Propagation::Background).is_empty());
        assert_eq!(
            deletion_finalizers(
                &with(Some(Propagation::Foreground), None),
                &names(&["a"]),
                Propagation::Background
            ),
            names(&["a", FOREGROUND_FINALIZER])
        );
        assert_eq!(
            deletion_finalizers(
                &with(None, Some(true)),
                &names(&[FOREGROUND_FINALIZER]),
                Propagation::Background
            ),
            names(&[ORPHAN_FINALIZER])
        );
        // No policy: a GC finalizer already there decides.
        assert_eq!(
            deletion_finalizers(
                &none,
                &names(&[ORPHAN_FINALIZER, "b"]),
                Propagation::Background
            ),
            names(&["b", ORPHAN_FINALIZER])
        );
        assert!(
            deletion_finalizers(
                &with(Some(Propagation::Background), None),
                &names(&[ORPHAN_FINALIZER]),
                Propagation::Orphan
            )
            .is_empty()
        );
    }

    #[test]
    fn a_delete_without_a_policy_gets_the_kinds_default() {
        let none = DeleteOpts::default();
        // A Job's default is Orphan (kube-apiserver keeps it for compatibility) ...
        assert_eq!(
            deletion_finalizers(&none, &[], Propagation::Orphan),
            names(&[ORPHAN_FINALIZER])
        );
        // ... but a policy the client gave, or the object's own GC finalizer, wins.
        let background = DeleteOpts {
            propagation: Some(Propagation::Background),
            ..DeleteOpts::default()
        };
        assert!(deletion_finalizers(&background, &[], Propagation::Orphan).is_empty());
        assert_eq!(
            deletion_finalizers(&none, &names(&[FOREGROUND_FINALIZER]), Propagation::Orphan),
            names(&[FOREGROUND_FINALIZER])
        );
    }

    #[test]
    fn delete_options_from_body_or_query() {
        let q = |k: &str| (k == "propagationPolicy").then(|| "Orphan".to_string());
        let o = DeleteOpts::parse(b"", &q, false).unwrap();
        assert_eq!(o.propagation, Some(Propagation::Orphan));
        let o = DeleteOpts::parse(br#"{"propagationPolicy":"Foreground"}"#, &q, false).unwrap();
        assert_eq!(o.propagation, Some(Propagation::Foreground));
        let e = DeleteOpts::parse(br#"{"propagationPolicy":"Sideways"}"#, &q, false).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message.contains("Unsupported value: \"Sideways\""),
            "{}",
            e.message
        );
        let e = DeleteOpts::parse(
            br#"{"propagationPolicy":"Orphan","orphanDependents":true}"#,
            &q,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("cannot be both set"), "{}", e.message);
    }
}
