//! The API server's answer: read off the wire under the call's memory budget and a size bound,
//! then turned into what the guest gets, so no answer can make the host hold more than the
//! plugin was allowed.

use std::sync::Arc;

use crate::informer::KubeObject;
use crate::runtime::{ApiError, BudgetExceeded, CallMemory, GuestObject, KubeAnswer, KubeResult};

use super::request::Prepared;
use super::{MAX_ANSWER_BYTES, api_error};

/// The API server's answer, as read off the wire on the host's runtime.
pub(super) struct Raw {
    code: u16,
    body: Vec<u8>,
    /// What `body` is charged to the call's [`CallMemory`] (its capacity) until it is dropped.
    charged: u64,
}

/// Sends `request` and keeps the response status, which kube's `request_text` drops: a guest
/// (`apply-outcome`), the logs, metrics and transcripts tell a create (201) from an update by it.
/// The body is read frame by frame into a buffer whose growth is charged to `memory` before it
/// is made (its whole declared length up front when the answer declares one), at most
/// [`MAX_ANSWER_BYTES`]; a refused charge or an answer over the bound ends the read with the
/// guest's error (the inner `Err`).
pub(super) async fn send(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    memory: &CallMemory,
) -> kube::Result<Result<Raw, ApiError>> {
    use http_body_util::BodyExt;
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let code = response.status().as_u16();
    let declared = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let mut buffer = AnswerBuffer::new(memory);
    if let Some(n) = declared
        && let Err(e) = buffer.reserve(n)
    {
        return Ok(Err(e));
    }
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data()
            && let Err(e) = buffer.push(&data)
        {
            return Ok(Err(e));
        }
    }
    let (body, charged) = buffer.into_inner();
    Ok(Ok(Raw {
        code,
        body,
        charged,
    }))
}

/// An answer's bytes as they arrive, every growth charged before it is made.
pub(super) struct AnswerBuffer<'a> {
    memory: &'a CallMemory,
    bytes: Vec<u8>,
    /// The capacity charged so far (what `bytes` was asked to reserve).
    charged: usize,
}

impl<'a> AnswerBuffer<'a> {
    pub(super) fn new(memory: &'a CallMemory) -> Self {
        Self {
            memory,
            bytes: Vec::new(),
            charged: 0,
        }
    }

    /// Makes room for `n` bytes in all, charging the growth (doubling, as `Vec` would).
    pub(super) fn reserve(&mut self, n: usize) -> Result<(), ApiError> {
        if n > MAX_ANSWER_BYTES {
            return Err(api_error(
                500,
                "InternalError",
                format!("the API server's answer is over the limit of {MAX_ANSWER_BYTES} bytes"),
            ));
        }
        if n <= self.charged {
            return Ok(());
        }
        let grown = n.max(self.charged * 2).min(MAX_ANSWER_BYTES);
        self.memory
            .charge((grown - self.charged) as u64)
            .map_err(|e: BudgetExceeded| e.api_error())?;
        self.charged = grown;
        self.bytes.reserve_exact(grown - self.bytes.len());
        Ok(())
    }

    pub(super) fn push(&mut self, data: &[u8]) -> Result<(), ApiError> {
        self.reserve(self.bytes.len() + data.len())?;
        self.bytes.extend_from_slice(data);
        Ok(())
    }

    /// The bytes and what they are charged: the caller gives that back when it drops them.
    pub(super) fn into_inner(self) -> (Vec<u8>, u64) {
        (self.bytes, self.charged as u64)
    }
}

/// What the guest gets for the API server's answer `raw` to `p`: the object as served, or the
/// failure its `Status` names (the bare status when the body is not one).
pub(super) fn answer(p: &Prepared, raw: Raw, memory: &CallMemory) -> KubeResult {
    let Raw {
        code,
        body,
        charged,
    } = raw;
    let result = answer_body(p, code, &body, memory);
    drop(body);
    memory.give_back(charged);
    result
}

/// [`answer`] for the bytes `body`, charging the text kept of them to `memory` before copying.
fn answer_body(p: &Prepared, code: u16, body: &[u8], memory: &CallMemory) -> KubeResult {
    if code >= 400 {
        if p.verb == "get" && code == 404 {
            return Ok(KubeAnswer { object: None, code });
        }
        return Err(match serde_json::from_slice::<kube::core::Status>(body) {
            // A `Status` without a code (some proxies) keeps the response's.
            Ok(s) => api_error(
                if s.code == 0 { code } else { s.code },
                &s.reason,
                s.message,
            ),
            Err(_) => api_error(
                code,
                "Unknown",
                format!("the API server answered {code} without a Status"),
            ),
        });
    }
    if p.verb == "delete" {
        return Ok(KubeAnswer { object: None, code });
    }
    let malformed = |e: &dyn std::fmt::Display| {
        api_error(
            500,
            "InternalError",
            format!("the API server answered with a malformed object: {e}"),
        )
    };
    let text = std::str::from_utf8(body).map_err(|e| malformed(&e))?;
    // The object keeps its own copy of the text (and a few hundred bytes of metadata).
    memory
        .charge(text.len() as u64)
        .map_err(|e| e.api_error())?;
    let t = &p.target;
    let obj = KubeObject::from_json_for(text.into(), &t.api_version, &t.kind, true)
        .map_err(|e| malformed(&e))?;
    Ok(KubeAnswer {
        object: Some(Arc::new(obj) as Arc<dyn GuestObject>),
        code,
    })
}
