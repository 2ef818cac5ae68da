//! From a guest's call to the HTTP request: the guest's strings are validated before anything
//! else looks at them, so nothing a guest writes can escape the request path, the query or a log.

use kube::core::Request;
use kube::core::params::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kubewasm_apimachinery::validation::{
    ValidationError, validate_api_version, validate_dns1123_label, validate_dns1123_subdomain,
    validate_kind,
};
use serde_json::value::RawValue;

use crate::runtime::{ApiError, KubeCall, ObjectRef, PatchType};

use super::bad_request;

/// A call after validation: everything needed to check grants and build the request.
pub(super) struct Prepared {
    pub(super) verb: &'static str,
    pub(super) target: ObjectRef,
    /// `None` for a create without a name (`generateName`).
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
    pub(super) op: Op,
    pub(super) guest_dry_run: bool,
}

/// What a prepared call does, with the body it sends. A create's, apply's or replace's body was
/// parsed for its target (so it is JSON); a patch is checked only when the request is built,
/// after the grant and rate checks.
pub(super) enum Op {
    Get,
    Create(Vec<u8>),
    /// Server-side apply of a whole object; `force` takes over fields other managers own.
    Apply {
        body: String,
        force: bool,
    },
    Patch(PatchType, String),
    Replace(Vec<u8>),
    /// Delete, only if the object still has this uid when one is given.
    Delete(Option<String>),
}

/// The HTTP request for `p` on the collection at `collection` (as
/// [`resource_path`](crate::informer::resource_path) gives it),
/// built by kube's [`Request`]: it writes the path, the query (`fieldManager`, `force`,
/// `dryRun`) and `DeleteOptions` as kube-rs does for its own calls. Writes carry the field manager
/// `kubewasm:<plugin>`; `host_dry_run` (or the guest's own option) makes them `dryRun=All`.
/// Takes the body out of `p` rather than copying up to `MAX_WRITE_BYTES`.
pub(super) fn build_request(
    p: &mut Prepared,
    collection: &str,
    plugin: &str,
    host_dry_run: bool,
) -> Result<http::Request<Vec<u8>>, ApiError> {
    let r = Request::new(collection);
    let dry_run = host_dry_run || p.guest_dry_run;
    let field_manager = Some(format!("kubewasm:{plugin}"));
    let post = PostParams {
        dry_run,
        field_manager: field_manager.clone(),
    };
    let patch_params = |force| PatchParams {
        dry_run,
        force,
        field_manager: field_manager.clone(),
        field_validation: None,
    };
    // Every name reaching here passed `validate_name`; only a create may have none.
    let name = p.name.as_deref().unwrap_or_default();
    let sub = p.subresource.as_deref();
    let built = match std::mem::replace(&mut p.op, Op::Get) {
        Op::Get => r.get(name, &GetParams::default()),
        Op::Create(body) => r.create(&post, body),
        Op::Apply { body, force } => {
            let body = raw_json(body, "object")?;
            r.patch(name, &patch_params(force), &Patch::Apply(&*body))
        }
        Op::Patch(patch_type, body) => {
            let body = raw_json(body, "patch")?;
            // kube's `Patch::Json` wants the operations parsed into json-patch's types; the
            // guest's text goes to the server as written (the server judges the operations),
            // so it is built as a merge patch and relabelled.
            let patch = match patch_type {
                PatchType::Merge | PatchType::Json => Patch::Merge(&*body),
                PatchType::Strategic => Patch::Strategic(&*body),
            };
            let params = patch_params(false);
            let request = match sub {
                Some(sub) => r.patch_subresource(sub, name, &params, &patch),
                None => r.patch(name, &params, &patch),
            };
            request.map(|mut request| {
                if patch_type == PatchType::Json {
                    request.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json-patch+json"),
                    );
                }
                request
            })
        }
        Op::Replace(body) => match sub {
            Some(sub) => r.replace_subresource(sub, name, &post, body),
            None => r.replace(name, &post, body),
        },
        Op::Delete(uid) => {
            let params = DeleteParams {
                dry_run,
                preconditions: uid.map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            r.delete(name, &params)
        }
    };
    built.map_err(|e| bad_request(format!("cannot build the request: {e}")))
}

/// `json` as the server will get it, checked to be JSON (a patch's first check, after the grant
/// and rate checks; an object was parsed for its target already).
fn raw_json(json: String, what: &str) -> Result<Box<RawValue>, ApiError> {
    RawValue::from_string(json).map_err(|e| bad_request(format!("invalid JSON in {what}: {e}")))
}

/// Longest uid precondition accepted (a uid is 36 characters; room for other formats).
const MAX_UID_LEN: usize = 253;

/// Kubernetes' name syntax for the objects a guest names: a DNS-1123 subdomain, the rule of
/// nearly every kind. It keeps out everything that could escape a path or a log (`/`, `%`,
/// `..`, spaces) and `:`, which the API server reads as proxy syntax (`http:web:80`).
pub(super) fn validate_name(name: &str) -> Result<(), ValidationError> {
    validate_dns1123_subdomain(name)
}

/// Why a guest's subresource name was refused: only lowercase letters pass, so none can escape
/// the request path.
#[derive(Debug, thiserror::Error)]
#[error("must be 1-63 lowercase letters, e.g. status")]
struct BadSubresource;

fn validate_subresource(s: &str) -> Result<(), BadSubresource> {
    if s.is_empty() || s.len() > 63 || !s.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(BadSubresource);
    }
    Ok(())
}

/// Validates a target's strings; the error names the field and why, not the value.
fn validate_ref(t: &ObjectRef) -> Result<(), ApiError> {
    let field = |name: &str, r: Result<(), ValidationError>| {
        r.map_err(|why| bad_request(format!("invalid {name}: {why}")))
    };
    field("apiVersion", validate_api_version(&t.api_version))?;
    field("kind", validate_kind(&t.kind))?;
    if let Some(ns) = &t.namespace {
        field("namespace", validate_dns1123_label(ns))?;
    }
    Ok(())
}

/// The fields of a body that name its target; everything else is skipped unread (serde_json
/// checks its syntax without building it).
#[derive(serde::Deserialize)]
struct BodyHead {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<BodyMeta>,
}

#[derive(serde::Deserialize)]
struct BodyMeta {
    namespace: Option<String>,
    name: Option<String>,
}

/// What a JSON body names: apiVersion, kind, namespace, name (absent for `generateName`).
/// Reads only those four fields and checks the rest is JSON, building nothing else: the one
/// parse of a body, on the plugin's thread.
pub(super) fn body_target(json: &str) -> Result<(ObjectRef, Option<String>), ApiError> {
    let head: BodyHead =
        serde_json::from_str(json).map_err(|e| bad_request(format!("invalid JSON: {e}")))?;
    let api_version = head
        .api_version
        .ok_or_else(|| bad_request("apiVersion is required".into()))?;
    let kind = head
        .kind
        .ok_or_else(|| bad_request("kind is required".into()))?;
    let (namespace, name) = head
        .metadata
        .map_or((None, None), |m| (m.namespace, m.name));
    let target = ObjectRef {
        api_version,
        kind,
        namespace,
        name: name.clone().unwrap_or_default(),
    };
    Ok((target, name))
}

/// Validates a call and turns it into what the request needs.
pub(super) fn prepare(call: KubeCall) -> Result<Prepared, ApiError> {
    let verb = call.verb();
    let check_name =
        |n: &str| validate_name(n).map_err(|why| bad_request(format!("invalid name: {why}")));
    let check_sub = |s: &Option<String>| match s {
        Some(s) => validate_subresource(s)
            .map_err(|why| bad_request(format!("invalid subresource: {why}"))),
        None => Ok(()),
    };
    let base = |target: ObjectRef, name: Option<String>, op: Op| Prepared {
        verb,
        target,
        name,
        subresource: None,
        op,
        guest_dry_run: false,
    };
    let p = match call {
        KubeCall::Get(target) => {
            validate_ref(&target)?;
            check_name(&target.name)?;
            let name = Some(target.name.clone());
            base(target, name, Op::Get)
        }
        KubeCall::Create { json, opts } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            if let Some(n) = &name {
                check_name(n)?;
            }
            Prepared {
                guest_dry_run: opts.dry_run,
                ..base(target, None, Op::Create(json.into_bytes()))
            }
        }
        KubeCall::Apply { json, opts } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            let name = name.ok_or_else(|| bad_request("apply needs metadata.name".into()))?;
            check_name(&name)?;
            let op = Op::Apply {
                body: json,
                force: opts.force,
            };
            Prepared {
                guest_dry_run: opts.dry_run,
                ..base(target, Some(name), op)
            }
        }
        KubeCall::Patch {
            target,
            patch_type,
            patch,
            subresource,
            opts,
        } => {
            validate_ref(&target)?;
            check_name(&target.name)?;
            check_sub(&subresource)?;
            let op = Op::Patch(patch_type, patch);
            let name = Some(target.name.clone());
            Prepared {
                subresource,
                guest_dry_run: opts.dry_run,
                ..base(target, name, op)
            }
        }
        KubeCall::Replace {
            json,
            subresource,
            opts,
        } => {
            let (target, name) = body_target(&json)?;
            validate_ref(&target)?;
            let name = name.ok_or_else(|| bad_request("replace needs metadata.name".into()))?;
            check_name(&name)?;
            check_sub(&subresource)?;
            Prepared {
                subresource,
                guest_dry_run: opts.dry_run,
                ..base(target, Some(name), Op::Replace(json.into_bytes()))
            }
        }
        KubeCall::Delete {
            target,
            uid_precondition,
        } => {
            validate_ref(&target)?;
            check_name(&target.name)?;
            let name = Some(target.name.clone());
            // The uid travels as a JSON string inside DeleteOptions, so any text is safe; it
            // is bounded like a name.
            if uid_precondition
                .as_ref()
                .is_some_and(|uid| uid.len() > MAX_UID_LEN)
            {
                return Err(bad_request("invalid uid precondition: too long".into()));
            }
            base(target, name, Op::Delete(uid_precondition))
        }
    };
    Ok(p)
}
