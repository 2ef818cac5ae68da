//! One call's way through the host, in the order the module doc gives: the cheap checks on the
//! plugin's thread first, so a refused call costs the host nothing, and only the exchange with
//! the API server on the host's runtime; then the call's log line and metrics.

use std::time::Instant;

use kube::api::ApiResource;

use crate::informer::resource_path;
use crate::plugins::grants::NEVER_GRANTED_SUBRESOURCES;
use crate::plugins::metrics::{KubeRequestLabels, RateLimitLabels, VerbLabels};
use crate::runtime::{ApiError, CallMemory, KubeCall, KubeResult, ObjectRef};

use super::answer::{Raw, answer, send};
use super::request::{Op, Prepared, build_request, prepare};
use super::{Inner, KUBE_CALL_TIMEOUT, TARGET, api_error, bad_request};

/// Aborts a host-side task whose call was abandoned.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// The task's output; a task that panicked or was aborted is a 500.
    async fn join(mut self) -> Result<T, ApiError> {
        (&mut self.0)
            .await
            .map_err(|e| api_error(500, "InternalError", format!("request task failed: {e}")))
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a call's log line names, once known (a body refused before it was read names nothing).
struct Named {
    target: ObjectRef,
    subresource: Option<String>,
    guest_dry_run: bool,
}

impl Inner {
    pub(super) async fn call(&self, call: KubeCall, memory: &CallMemory) -> KubeResult {
        let started = Instant::now();
        let verb = call.verb();
        let mut named = None;
        let result = self.steps(call, &mut named, memory).await;
        let code = match &result {
            Ok(a) => a.code,
            Err(e) => e.code,
        };
        self.count(verb, code, started);
        // A successful write paid a write token; anything else a guest may repeat at will.
        let logged = if verb != "get" && code < 400 {
            true
        } else {
            (verb != "get" || code == 403) && self.lines.admit()
        };
        if logged {
            self.log(verb, code, named.as_ref());
        }
        result
    }

    /// The call, cheapest check first: nothing costly happens for a call the checks refuse,
    /// and nothing but the exchange with the API server runs on the host's runtime.
    async fn steps(
        &self,
        call: KubeCall,
        named: &mut Option<Named>,
        memory: &CallMemory,
    ) -> KubeResult {
        self.acting.usable().map_err(unusable)?;
        let check_grants = !grant_checks_skipped();
        if check_grants {
            self.holds_verb(&call)?;
        }
        let mut p = prepare(call)?;
        *named = Some(Named {
            target: p.target.clone(),
            subresource: p.subresource.clone(),
            guest_dry_run: p.guest_dry_run,
        });
        if check_grants {
            self.refuse_never_granted(&p)?;
            self.refuse_not_granted(&p)?;
        }
        self.refuse_own_object(&p)?;
        let deadline = tokio::time::Instant::now() + KUBE_CALL_TIMEOUT;
        self.take_token(p.verb).await?;
        let (ar, namespaced) = self.resolve(&p.target, deadline).await?;
        check_scope(namespaced, &p.target)?;
        let request = self.request(&mut p, &ar, memory)?;
        let raw = self.exchange(request, deadline, memory).await?;
        answer(&p, raw, memory)
    }

    /// A body names the object it is about, so its grant cannot be checked before the body is
    /// read; but a plugin holding no grant for the verb at all is refused without reading it.
    fn holds_verb(&self, call: &KubeCall) -> Result<(), ApiError> {
        let body_named = matches!(
            call,
            KubeCall::Create { .. } | KubeCall::Apply { .. } | KubeCall::Replace { .. }
        );
        if body_named && !self.grants.grants_verb(call.verb()) {
            return Err(ApiError::not_granted(
                &self.plugin,
                &format!("{} any object", call.verb()),
            ));
        }
        Ok(())
    }

    /// `exec`, `attach`, `portforward` and `proxy` are never granted.
    fn refuse_never_granted(&self, p: &Prepared) -> Result<(), ApiError> {
        match p.subresource.as_deref() {
            Some(s) if NEVER_GRANTED_SUBRESOURCES.contains(&s) => Err(api_error(
                403,
                "Forbidden",
                format!(
                    "refused: plugin {} may never {} subresource {s} of {}: exec, attach, \
                     portforward and proxy are never granted",
                    self.plugin, p.verb, p.target.kind
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The grant for the verb, kind, namespace and subresource.
    fn refuse_not_granted(&self, p: &Prepared) -> Result<(), ApiError> {
        let t = &p.target;
        let ns = t.namespace.as_deref();
        let sub = p.subresource.as_deref();
        let granted = if p.verb == "get" {
            self.grants.allows_read(&t.api_version, &t.kind, ns)
        } else {
            self.grants
                .allows_write_at(&t.api_version, &t.kind, ns, p.verb, sub)
        };
        if granted {
            return Ok(());
        }
        let place = ns.map_or("cluster-wide".to_string(), |n| format!("in namespace {n}"));
        let sub = sub.map_or(String::new(), |s| format!(" (subresource {s})"));
        Err(ApiError::not_granted(
            &self.plugin,
            &format!("{} {} of {} {place}{sub}", p.verb, t.kind, t.api_version),
        ))
    }

    /// A write to one of the host's own objects, or a read of one of its Secrets, whatever the
    /// grants.
    fn refuse_own_object(&self, p: &Prepared) -> Result<(), ApiError> {
        let t = &p.target;
        // The body's name for a create too (`p.name` is `None` there): empty only for
        // `generateName`, which cannot pick an existing object.
        let ns = t.namespace.as_deref();
        match self
            .ctx
            .own_objects
            .refuses(p.verb, &t.api_version, &t.kind, ns, &t.name)
        {
            Some(own) => Err(api_error(
                403,
                "Forbidden",
                format!(
                    "refused: plugin {} may not {} {own}: it is one of the host's own objects, \
                     which no grant covers",
                    self.plugin, p.verb
                ),
            )),
            None => Ok(()),
        }
    }

    /// A token of the read or write bucket, waiting for one if that fits in half the call's
    /// timeout (the wait is the host's, not the guest's time); 429 otherwise.
    async fn take_token(&self, verb: &str) -> Result<(), ApiError> {
        let g = &self.grants;
        let (bucket, class, what, qps, burst) = if verb == "get" {
            (&self.reads, "read", "reads", g.read_qps(), g.read_burst())
        } else {
            let writes = (g.write_qps(), g.write_burst());
            (&self.writes, "write", "writes", writes.0, writes.1)
        };
        let Some(wait) = bucket.reserve_within(KUBE_CALL_TIMEOUT / 2) else {
            self.rate_limited(class, "refused");
            return Err(api_error(
                429,
                "TooManyRequests",
                format!(
                    "client-side rate limit: plugin {} {what} more than {qps} per second (burst {burst})",
                    self.plugin,
                ),
            ));
        };
        // A zero sleep would still wait for the timer wheel's next millisecond tick.
        if !wait.is_zero() {
            self.rate_limited(class, "delayed");
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }

    /// The resource serving the target's kind and whether it is namespaced: from the cache, or
    /// through discovery on the host's runtime (only ever for a granted kind).
    async fn resolve(
        &self,
        t: &ObjectRef,
        deadline: tokio::time::Instant,
    ) -> Result<(ApiResource, bool), ApiError> {
        let key = (t.api_version.clone(), t.kind.clone());
        if let Some(found) = self.ctx.kinds.lock().get(&key) {
            return Ok(found.clone());
        }
        let ctx = self.ctx.clone();
        let task = AbortOnDrop(self.ctx.host.spawn(async move {
            tokio::time::timeout_at(deadline, ctx.resolve(&key.0, &key.1)).await
        }));
        task.join().await?.unwrap_or_else(|_| Err(timed_out()))
    }

    /// Sends `request` on the host's runtime and reads the answer's status and bytes there;
    /// parsing them is left to the caller's thread.
    async fn exchange(
        &self,
        request: http::Request<Vec<u8>>,
        deadline: tokio::time::Instant,
        memory: &CallMemory,
    ) -> Result<Raw, ApiError> {
        let client = self.ctx.client.clone();
        let memory = memory.clone();
        let task = AbortOnDrop(self.ctx.host.spawn(async move {
            tokio::time::timeout_at(deadline, send(&client, request, &memory)).await
        }));
        match task.join().await? {
            Ok(Ok(Ok(raw))) => Ok(raw),
            Ok(Ok(Err(refused))) => Err(refused),
            Ok(Err(e)) => Err(api_error(
                503,
                "ServiceUnavailable",
                format!("API server unreachable: {e}"),
            )),
            Err(_) => Err(timed_out()),
        }
    }

    /// The call's one line: plugin, verb, object (once known), subresource and code.
    fn log(&self, verb: &'static str, code: u16, named: Option<&Named>) {
        let dry = if self.dry_run || named.is_some_and(|n| n.guest_dry_run) {
            " (dry run)"
        } else {
            ""
        };
        let object = named.map_or_else(
            || "(body not read)".to_string(),
            |n| {
                let t = &n.target;
                format!("{} {} {}", t.api_version, t.kind, object_key(t))
            },
        );
        let subresource = named.and_then(|n| n.subresource.as_deref()).unwrap_or("");
        tracing::info!(target: TARGET, plugin = &*self.plugin, verb, object = %object, subresource,
            code, "plugin {verb}{dry}");
    }

    /// The HTTP request for a prepared call against resource `ar`.
    fn request(
        &self,
        p: &mut Prepared,
        ar: &ApiResource,
        memory: &CallMemory,
    ) -> Result<http::Request<Vec<u8>>, ApiError> {
        let collection = resource_path(ar, p.target.namespace.as_deref(), None, None);
        // kube serialises an apply's or a patch's body into a new buffer, a second copy of
        // the text until the guest's is dropped with the built request's source.
        let copied = match &p.op {
            Op::Apply { body, .. } | Op::Patch(_, body) => body.len() as u64,
            _ => 0,
        };
        memory.charge(copied).map_err(|e| e.api_error())?;
        let built = build_request(p, &collection, &self.plugin, self.dry_run);
        memory.give_back(copied);
        let mut request = built?;
        // On the request rather than in a client of its own: the plugins share the host's
        // connection pool, and impersonation is one header.
        self.acting.mark(&mut request).map_err(unusable)?;
        Ok(request)
    }

    /// Counts a call its bucket delayed or refused; `class` is `read` or `write`.
    fn rate_limited(&self, class: &'static str, outcome: &'static str) {
        self.ctx
            .metrics()
            .kube_rate_limited
            .get_or_create(&RateLimitLabels {
                plugin: self.plugin.to_string(),
                class,
                outcome,
            })
            .inc();
    }

    fn count(&self, verb: &'static str, code: u16, started: Instant) {
        let m = self.ctx.metrics();
        m.kube_requests
            .get_or_create(&KubeRequestLabels {
                plugin: self.plugin.to_string(),
                verb: verb.to_string(),
                code: code.to_string(),
            })
            .inc();
        m.kube_request_seconds
            .get_or_create(&VerbLabels {
                plugin: self.plugin.to_string(),
                verb: verb.to_string(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// Whether this test-only build was told to skip the host's own grant checks
/// (`KUBEWASM_UNCHECKED_GRANTS_FOR_TESTS=1`), so the API server's RBAC alone judges a call.
#[cfg(feature = "unchecked-grants-for-tests")]
fn grant_checks_skipped() -> bool {
    static SKIPPED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SKIPPED.get_or_init(|| {
        let skipped = std::env::var("KUBEWASM_UNCHECKED_GRANTS_FOR_TESTS").as_deref() == Ok("1");
        if skipped {
            tracing::warn!(target: TARGET,
                "test-only build: the host's grant checks on plugins' kube calls are switched off");
        }
        skipped
    })
}

/// Every build but the test-only one checks the grants, always.
#[cfg(not(feature = "unchecked-grants-for-tests"))]
const fn grant_checks_skipped() -> bool {
    false
}

/// A call that cannot carry the plugin's identity: the host's fault, refused before sending.
fn unusable(e: super::super::acting_as::UnusableIdentity) -> ApiError {
    api_error(500, "InternalError", e.to_string())
}

fn timed_out() -> ApiError {
    api_error(
        504,
        "Timeout",
        format!("no answer within {} s", KUBE_CALL_TIMEOUT.as_secs_f64()),
    )
}

/// A namespaced kind needs a namespace, a cluster-scoped one must have none.
fn check_scope(namespaced: bool, t: &ObjectRef) -> Result<(), ApiError> {
    match (namespaced, &t.namespace) {
        (true, None) => Err(bad_request(format!(
            "{} is namespaced: the call must name a namespace",
            t.kind
        ))),
        (false, Some(_)) => Err(bad_request(format!(
            "{} is cluster-scoped: the call must not name a namespace",
            t.kind
        ))),
        _ => Ok(()),
    }
}

/// `namespace/name` or `name`.
fn object_key(t: &ObjectRef) -> String {
    match &t.namespace {
        Some(ns) => format!("{ns}/{}", t.name),
        None => t.name.clone(),
    }
}
