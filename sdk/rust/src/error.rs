//! [`Error`]: every failure a handler meets, and whether the host should try again.

use std::fmt;

use crate::bindings::kubewasm::handler0_2_0::types::{ApiError, HandlerError};

/// What a handler returns; `?` on any SDK call (and on JSON errors) works inside it.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failure, classified so the host knows whether redelivering the notification can help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The API server (or the host on its behalf, e.g. 403 for what is not granted) refused a
    /// `kube` call.
    Api {
        /// HTTP status, e.g. 404, 409, 422.
        code: u16,
        /// The `Status` reason, e.g. `Conflict`.
        reason: String,
        /// Human-readable detail.
        message: String,
    },
    /// An object or body could not be turned into (or from) JSON: redelivery gives the same.
    Json(String),
    /// An outbound HTTP request failed before an answer (denied, timeout, DNS, body over the
    /// cap); denials are fatal, the rest transient.
    Http {
        /// Whether trying again may succeed.
        transient: bool,
        /// The `wasi:http` error-code case as the WIT names it, lower-case, e.g.
        /// `http-request-denied` (the Python and JavaScript SDKs' `HttpError.code`), or
        /// `status-503` from [`Response::error_for_status`](crate::http::Response::error_for_status);
        /// `None` when the SDK failed on its own (a body over the cap, a stream taken twice).
        code: Option<String>,
        /// What went wrong.
        message: String,
    },
    /// Try again later (with the host's per-key backoff).
    Retry(String),
    /// Give up on this notification.
    Fatal(String),
}

impl Error {
    /// A transient failure of the handler's own.
    pub fn retry(message: impl Into<String>) -> Self {
        Error::Retry(message.into())
    }

    /// A permanent failure of the handler's own.
    pub fn fatal(message: impl Into<String>) -> Self {
        Error::Fatal(message.into())
    }

    /// The API status code, if the API server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The HTTP failure's code, spelt as in the WIT (lower-case): `http-request-denied`,
    /// `connection-timeout`, `status-503`…; `None` for other errors and the SDK's own HTTP ones.
    pub fn http_code(&self) -> Option<&str> {
        match self {
            Error::Http { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Whether the object named was not there (404): often a success for deletes.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// Whether a later attempt may succeed: conflicts (409), rate limits (429), server errors
    /// (5xx) and transient HTTP failures; every other 4xx is the request's own fault.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api { code, .. } => *code == 409 || *code == 429 || *code >= 500,
            Error::Http { transient, .. } => *transient,
            Error::Retry(_) => true,
            Error::Json(_) | Error::Fatal(_) => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api {
                code,
                reason,
                message,
            } => write!(f, "{code} {reason}: {message}"),
            Error::Json(m) => write!(f, "JSON: {m}"),
            Error::Http { message, .. } => write!(f, "HTTP: {message}"),
            Error::Retry(m) | Error::Fatal(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api {
            code: e.code,
            reason: e.reason,
            message: e.message,
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(e.to_string())
    }
}

impl From<Error> for HandlerError {
    fn from(e: Error) -> Self {
        if e.is_retryable() {
            HandlerError::Retry(e.to_string())
        } else {
            HandlerError::Fatal(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        Error::from(ApiError {
            code,
            reason: "R".into(),
            message: "m".into(),
        })
    }

    #[test]
    fn conflicts_rate_limits_and_server_errors_retry_other_client_errors_are_fatal() {
        for code in [409, 429, 500, 503, 504] {
            assert!(
                matches!(HandlerError::from(api(code)), HandlerError::Retry(_)),
                "{code}"
            );
        }
        for code in [400, 403, 404, 410, 413, 422] {
            assert!(
                matches!(HandlerError::from(api(code)), HandlerError::Fatal(_)),
                "{code}"
            );
        }
        let HandlerError::Retry(m) = HandlerError::from(api(409)) else {
            unreachable!()
        };
        assert_eq!(m, "409 R: m");
    }

    #[test]
    fn own_json_and_http_errors_map_by_their_nature() {
        let json = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(!Error::from(json).is_retryable());
        assert!(Error::retry("later").is_retryable());
        assert!(!Error::fatal("never").is_retryable());
        let timeout = Error::Http {
            transient: true,
            code: Some("connection-timeout".into()),
            message: "timeout".into(),
        };
        assert!(timeout.is_retryable());
        assert_eq!(timeout.http_code(), Some("connection-timeout"));
        assert_eq!(api(503).http_code(), None);
        assert!(api(404).is_not_found() && !api(409).is_not_found());
    }

    #[test]
    fn question_mark_converts_json_errors() {
        fn parse() -> Result<u8> {
            Ok(serde_json::from_str("300")?)
        }
        assert!(matches!(parse(), Err(Error::Json(_))));
    }
}
