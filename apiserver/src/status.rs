//! Kubernetes `Status` error objects: every failed request is answered with one.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::registry::ResourceType;

/// A request failure, rendered as a `v1 Status` with the matching HTTP code.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code (also `.code` in the body).
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, …).
    pub reason: &'static str,
    /// Human-readable message, printed by kubectl.
    pub message: String,
    /// `details` object, if any.
    pub details: Option<Value>,
    /// `metadata` of the Status (carries a fresh continue token for expired lists).
    pub metadata: Option<Value>,
}

impl ApiError {
    /// A free-form error.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            metadata: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 404 for paths that match no resource.
    pub fn unknown_path() -> ApiError {
        let mut e = ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        e.details = Some(json!({}));
        e
    }

    /// 404 for a resource the server does not serve: names what it serves under that
    /// group-version and what to do, since "not found" alone sends users to the wrong place.
    pub fn unserved_resource(gv: &str, plural: &str, served: &[String]) -> ApiError {
        let here = if served.is_empty() {
            format!("nothing under {gv}")
        } else {
            format!("{} under {gv}", served.join(", "))
        };
        let mut e = ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource: kubewasm's embedded API server does not serve \"{plural}\" in {gv}. It serves every built-in kind of Kubernetes {} ({here}; `kubectl api-resources` lists all) and the kinds of the CustomResourceDefinitions created in it: create a CRD for a custom kind, or use a real cluster for an aggregated API",
                crate::builtins::KUBERNETES_VERSION
            ),
        );
        e.details = Some(json!({"kind": plural}));
        e
    }

    fn with_resource_details(mut self, rt: &ResourceType, name: &str) -> ApiError {
        let mut d = json!({"name": name, "kind": rt.plural});
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        self.details = Some(d);
        self
    }

    /// 404 for a missing object.
    pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", rt.qualified(), name),
        )
        .with_resource_details(rt, name)
    }

    /// 404 for a missing namespace when creating into it.
    pub fn namespace_not_found(ns: &str) -> ApiError {
        let mut e = ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"));
        e.details = Some(json!({"name": ns, "kind": "namespaces"}));
        e
    }

    /// 409 AlreadyExists.
    pub fn already_exists(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", rt.qualified(), name),
        )
        .with_resource_details(rt, name)
    }

    /// 409 Conflict because the client's resourceVersion is stale.
    pub fn conflict(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::conflict_msg(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom explanation.
    pub fn conflict_msg(rt: &ResourceType, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                rt.qualified(),
                name,
                why
            ),
        )
        .with_resource_details(rt, name)
    }

    /// 422 Invalid for a field of an object of `kind`.
    pub fn invalid(kind: &str, name: &str, field: &str, detail: &str) -> ApiError {
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {field}: {detail}"),
        );
        e.details = Some(json!({"name": name, "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}]}));
        e
    }

    /// 422 Invalid for bad query options (`ListOptions.meta.k8s.io "" is invalid: …`).
    pub fn invalid_options(options_kind: &str, field: &str, detail: &str) -> ApiError {
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!("{options_kind}.meta.k8s.io \"\" is invalid: {field}: {detail}"),
        );
        e.details = Some(json!({"group": "meta.k8s.io", "kind": options_kind,
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}]}));
        e
    }

    /// 410 Expired (too old resourceVersion for a list).
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// 415 for patch/content types the resource does not accept.
    pub fn unsupported_media_type() -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    }

    /// 405 for verbs a resource does not serve.
    pub fn method_not_allowed(verb: &str, rt: &ResourceType) -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind \"{}\"",
                rt.plural
            ),
        )
    }

    /// 500 for server-side failures (persistence errors and the like).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    /// The Status object as JSON.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.metadata.clone().unwrap_or_else(|| json!({})),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        let mut resp = Response::new(axum::body::Body::from(body));
        *resp.status_mut() =
            StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

/// Result type of request handlers.
pub type ApiResult<T> = Result<T, ApiError>;
