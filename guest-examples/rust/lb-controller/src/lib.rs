//! A load-balancer controller as a `kubewasm:handler@0.2.0` component: for every Service of type
//! `LoadBalancer` it keeps a load balancer in an external cloud API (over `wasi:http`), writes its
//! address to `status.loadBalancer.ingress`, holds a finalizer so that no delete is missed, and
//! records Events. See README.md for the why of each part.
//!
//! Level-triggered: every notification, resync replays included, compares the Service with the
//! cloud and repairs whatever differs, so a load balancer deleted behind the controller's back
//! comes back at the next `is-sync` replay, when no event would otherwise arrive.

wit_bindgen::generate!({
    path: "../../../wit/0.2.0",
    world: "handler",
    generate_all,
});

mod cloud;
mod service;

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::{Value, json};

use cloud::{Cloud, valid_id};
use kubewasm::handler::cache;
use kubewasm::handler::events::{self, EventType};
use kubewasm::handler::kube::{self, PatchType, WriteOptions};
use kubewasm::handler::log::{Level, log};
use kubewasm::handler::types::{ApiError, ObjectMeta, Permission, Subscription};
use service::{Service, ingress_for};

/// Where the operator configures the cloud endpoint (namespace, name, `data` key).
const CONFIG_NAMESPACE: &str = "default";
const CONFIG_NAME: &str = "lb-controller";
const CONFIG_KEY: &str = "endpoint";

/// How often every Service is replayed as `on-update(is-sync = true)`, which is how a load
/// balancer deleted behind the controller's back is noticed. Short so that a repair shows within
/// seconds in tests and the demo; an operator sets `resync-period-ms` in the manifest.
const RESYNC_PERIOD_MS: u64 = 10_000;

thread_local! {
    /// The cloud endpoint, read once per instance and forgotten after any failed call, so a
    /// corrected ConfigMap is picked up by the next attempt.
    static CLOUD: RefCell<Option<Cloud>> = const { RefCell::new(None) };
}

struct LbController;

fn retry(msg: impl Into<String>) -> HandlerError {
    HandlerError::Retry(msg.into())
}

/// `namespace/name`.
fn key(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name),
        None => meta.name.clone(),
    }
}

fn api_error(e: &ApiError) -> String {
    format!("{} {}: {}", e.code, e.reason, e.message)
}

/// The cloud endpoint from ConfigMap `default/lb-controller`, key `endpoint`.
fn cloud() -> Result<Cloud, HandlerError> {
    if let Some(c) = CLOUD.with_borrow(Clone::clone) {
        return Ok(c);
    }
    let missing = || {
        retry(format!(
            "no cloud endpoint configured: ConfigMap {CONFIG_NAMESPACE}/{CONFIG_NAME} key {CONFIG_KEY}"
        ))
    };
    let cm = kube::get("v1", "ConfigMap", Some(CONFIG_NAMESPACE), CONFIG_NAME)
        .map_err(|e| {
            retry(format!(
                "reading ConfigMap {CONFIG_NAMESPACE}/{CONFIG_NAME}: {}",
                api_error(&e)
            ))
        })?
        .ok_or_else(missing)?;
    let v: Value = serde_json::from_str(&cm.json)
        .map_err(|e| retry(format!("ConfigMap {CONFIG_NAMESPACE}/{CONFIG_NAME}: {e}")))?;
    let endpoint = v
        .get("data")
        .and_then(|d| d.get(CONFIG_KEY))
        .and_then(Value::as_str)
        .ok_or_else(missing)?;
    let c = Cloud::parse(endpoint.trim()).map_err(retry)?;
    CLOUD.set(Some(c.clone()));
    Ok(c)
}

/// Forgets the cached endpoint when a call failed, so the next attempt reads it again.
fn guarded(result: Result<(), HandlerError>) -> Result<(), HandlerError> {
    if result.is_err() {
        CLOUD.set(None);
    }
    result
}

/// Patches the Service (or its `status`); `Ok(false)` when the Service is gone. A 409 or 422
/// means it changed meanwhile (a `test` failed): retry, by which time the newer version has
/// usually arrived and replaces the retry.
fn patch_service(
    m: &ObjectMeta,
    kind: PatchType,
    patch: &str,
    subresource: Option<&str>,
    what: &str,
) -> Result<bool, HandlerError> {
    let opts = WriteOptions {
        dry_run: false,
        force: false,
    };
    let r = kube::patch(
        "v1",
        "Service",
        m.namespace.as_deref(),
        &m.name,
        kind,
        patch,
        subresource,
        opts,
    );
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.code == 404 => Ok(false),
        Err(e) if e.code == 409 || e.code == 422 => Err(retry(format!(
            "{}: {what}: the Service changed meanwhile ({} {})",
            key(m),
            e.code,
            e.reason
        ))),
        Err(e) => Err(retry(format!("{}: {what}: {}", key(m), api_error(&e)))),
    }
}

/// A cloud address is written to the Service's status and to logs: accept an IP address or a
/// DNS name, nothing else.
fn valid_address(a: &str) -> bool {
    a.parse::<std::net::IpAddr>().is_ok()
        || (!a.is_empty()
            && a.len() <= 253
            && a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'))
}

/// A string from the cloud, fit for a log line: as it is when it looks like `namespace/name`,
/// otherwise quoted and cut.
fn shown(s: &str) -> String {
    let plain = s.len() <= 317
        && !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-./".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("{:?}", s.chars().take(64).collect::<String>())
    }
}

/// What ensuring a load balancer did in the cloud.
enum Outcome {
    /// It was there with the right ports.
    InPlace,
    /// It was there with other ports and was updated.
    Updated,
    /// It was made for the first time.
    Created,
    /// It had existed (the Service shows an address, or held the finalizer at a resync) but
    /// was missing: made again.
    Recreated,
}

/// Brings one Service and its load balancer in line, whatever the notification was.
/// `resync` is true for an `is-sync` replay: a load balancer missing then, for a Service that
/// already held the finalizer, was deleted behind the controller's back (without the finalizer,
/// the first attempt failed, e.g. before the endpoint was configured, and this is a creation).
fn reconcile(obj: &Object, resync: bool) -> Result<(), HandlerError> {
    let m = &obj.meta;
    let svc =
        Service::parse(&obj.json).map_err(|e| HandlerError::Fatal(format!("{}: {e}", key(m))))?;
    if !valid_id(&m.uid) {
        return Err(HandlerError::Fatal(format!(
            "{}: uid {:?} is not a uid",
            key(m),
            m.uid
        )));
    }
    if svc.wants_lb && !svc.deleting {
        ensure(m, &svc, resync)
    } else if let Some(index) = svc.finalizer_index() {
        release(m, &svc, index)
    } else {
        Ok(())
    }
}

/// Whether the server holds a newer version of the Service than `m` (or none at all): then a
/// notification about that version (or the delete) follows, and acting on `m` is redundant.
fn superseded(m: &ObjectMeta) -> Result<bool, HandlerError> {
    match kube::get("v1", "Service", m.namespace.as_deref(), &m.name) {
        Ok(Some(live)) => Ok(live.meta.resource_version != m.resource_version),
        Ok(None) => Ok(true),
        Err(e) => Err(retry(format!("{}: reading the Service: {}", key(m), api_error(&e)))),
    }
}

/// Finalizer first (so the delete cannot be missed once the load balancer exists), then the
/// load balancer, then the status.
fn ensure(m: &ObjectMeta, svc: &Service, resync: bool) -> Result<(), HandlerError> {
    let key = key(m);
    let uid = &m.uid;
    // Before the finalizer: without an endpoint the finalizer could not be honoured.
    let cloud = cloud()?;
    // The finalizer but no address yet is how our own finalizer patch looks when its update
    // arrives after the same call wrote the status: a stale version, whose status write would
    // repeat ours. When the server already holds a newer version, its update follows and does
    // whatever is left; an attempt that failed after the finalizer still finds itself current.
    if !resync && svc.finalizer_index().is_some() && !svc.has_ingress() && superseded(m)? {
        log(
            Level::Debug,
            &format!("skipped {key}: a newer version is on its way"),
        );
        return Ok(());
    }
    if svc.finalizer_index().is_none()
        && !patch_service(
            m,
            PatchType::Json,
            &svc.add_finalizer_patch(),
            None,
            "adding the finalizer",
        )?
    {
        return Ok(()); // gone; on-delete follows
    }
    let (lb, outcome) = match cloud.get(uid).map_err(retry)? {
        Some(lb) if lb.ports == svc.ports => (lb, Outcome::InPlace),
        Some(_) => (
            cloud.put(uid, &key, &svc.ports).map_err(retry)?,
            Outcome::Updated,
        ),
        None if svc.has_ingress() || (resync && svc.finalizer_index().is_some()) => {
            log(
                Level::Warn,
                &format!("repaired {key}: load balancer was missing"),
            );
            (
                cloud.put(uid, &key, &svc.ports).map_err(retry)?,
                Outcome::Recreated,
            )
        }
        None => (
            cloud.put(uid, &key, &svc.ports).map_err(retry)?,
            Outcome::Created,
        ),
    };
    if !valid_address(&lb.address) {
        return Err(retry(format!(
            "{key}: the cloud gave load balancer {uid} the invalid address {}",
            shown(&lb.address)
        )));
    }
    let address = &lb.address;
    let (event, how) = match outcome {
        Outcome::InPlace => (None, None),
        Outcome::Updated => (
            Some((
                EventType::Normal,
                "Updated",
                "UpdateLoadBalancer",
                format!("updated the ports of load balancer {uid}"),
            )),
            Some("updated"),
        ),
        Outcome::Created => (
            Some((
                EventType::Normal,
                "Created",
                "CreateLoadBalancer",
                format!("created load balancer {uid} with address {address}"),
            )),
            Some("created"),
        ),
        Outcome::Recreated => (
            Some((
                EventType::Warning,
                "Recreated",
                "CreateLoadBalancer",
                format!("load balancer {uid} was missing; created it again with address {address}"),
            )),
            Some("recreated"),
        ),
    };
    // The Event records what happened in the cloud even if the status write below fails.
    if let Some((kind, reason, action, note)) = event {
        events::emit(m, kind, reason, action, &note);
    }
    let want = ingress_for(address);
    let status_differs = svc.ingress != want;
    if status_differs {
        let patch = json!({"status": {"loadBalancer": {"ingress": want}}}).to_string();
        if !patch_service(
            m,
            PatchType::Merge,
            &patch,
            Some("status"),
            "writing the status",
        )? {
            return Ok(());
        }
    }
    match (how, status_differs) {
        (Some(how), _) => log(
            Level::Info,
            &format!("ensured {key} lb={uid} address={address} ({how})"),
        ),
        (None, true) => log(
            Level::Info,
            &format!("ensured {key} lb={uid} address={address} (status updated)"),
        ),
        (None, false) => log(
            Level::Debug,
            &format!("ensured {key} lb={uid} address={address} (unchanged)"),
        ),
    }
    Ok(())
}

/// The Service is being deleted or no longer wants a load balancer but still holds the
/// finalizer: delete the load balancer, clear the status, then let the Service go.
fn release(m: &ObjectMeta, svc: &Service, index: usize) -> Result<(), HandlerError> {
    let key = key(m);
    let uid = &m.uid;
    let cloud = cloud()?;
    let existed = cloud.delete(uid).map_err(retry)?;
    let note = if existed {
        format!("deleted load balancer {uid}")
    } else {
        format!("load balancer {uid} was already gone")
    };
    events::emit(m, EventType::Normal, "Deleted", "DeleteLoadBalancer", &note);
    if !svc.deleting
        && svc.has_ingress()
        && !patch_service(
            m,
            PatchType::Merge,
            r#"{"status":{"loadBalancer":{"ingress":null}}}"#,
            Some("status"),
            "clearing the status",
        )?
    {
        return Ok(());
    }
    patch_service(
        m,
        PatchType::Json,
        &Service::remove_finalizer_patch(index),
        None,
        "removing the finalizer",
    )?;
    let why = match (svc.deleting, existed) {
        (true, true) => "",
        (true, false) => " (was already gone)",
        (false, _) => " (service is no longer a LoadBalancer)",
    };
    log(Level::Info, &format!("deleted {key} lb={uid}{why}"));
    Ok(())
}

impl Guest for LbController {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "lb-controller".to_string(),
            subscriptions: vec![Subscription {
                api_version: "v1".to_string(),
                kind: "Service".to_string(),
                namespace: None,
                label_selector: None,
                field_selector: None,
                resync_period_ms: RESYNC_PERIOD_MS,
                metadata_only: false,
                fields: Vec::new(),
            }],
            permissions: vec![
                // The finalizer and the `status` subresource are both written with patches;
                // `get` tells a stale update (our own finalizer patch's) from a current one.
                Permission {
                    api_version: "v1".to_string(),
                    kind: "Service".to_string(),
                    namespace: None,
                    verbs: vec!["get".to_string(), "patch".to_string()],
                },
                // The cloud endpoint, read from the API server (no informer for one object).
                Permission {
                    api_version: "v1".to_string(),
                    kind: "ConfigMap".to_string(),
                    namespace: Some(CONFIG_NAMESPACE.to_string()),
                    verbs: vec!["get".to_string()],
                },
            ],
            // The cloud stand-in listens on loopback on a port chosen at start; a real
            // deployment names its cloud API's origin, e.g. https://lb.example.com.
            http_origins: vec!["http://127.0.0.1:*".to_string()],
            events: true,
        }
    }

    fn on_add(obj: Object, _is_in_initial_list: bool) -> Result<(), HandlerError> {
        guarded(reconcile(&obj, false))
    }

    fn on_update(_old: Object, new: Object, is_sync: bool) -> Result<(), HandlerError> {
        guarded(reconcile(&new, is_sync))
    }

    fn on_delete(obj: Object, final_state_unknown: bool) -> Result<(), HandlerError> {
        guarded(forget(&obj, final_state_unknown))
    }

    fn on_synced() -> Result<(), HandlerError> {
        guarded(remove_orphans())
    }
}

/// A Service is gone. The finalizer normally made the controller delete its load balancer
/// before; this covers deletes it could not hold (the finalizer removed by hand, a relist).
fn forget(obj: &Object, final_state_unknown: bool) -> Result<(), HandlerError> {
    let m = &obj.meta;
    let svc =
        Service::parse(&obj.json).map_err(|e| HandlerError::Fatal(format!("{}: {e}", key(m))))?;
    if !svc.wants_lb && svc.finalizer_index().is_none() && !svc.has_ingress() {
        return Ok(());
    }
    if !valid_id(&m.uid) {
        return Err(HandlerError::Fatal(format!(
            "{}: uid {:?} is not a uid",
            key(m),
            m.uid
        )));
    }
    if cloud()?.delete(&m.uid).map_err(retry)? {
        let how = if final_state_unknown {
            " (delete seen in a relist)"
        } else {
            ""
        };
        log(
            Level::Info,
            &format!("deleted {} lb={}{how}", key(m), m.uid),
        );
    }
    Ok(())
}

/// After the replay every Service is in the cache: a load balancer that no cached
/// LoadBalancer Service (or Service still holding the finalizer) accounts for lost its Service
/// while nobody was watching, and is deleted.
fn remove_orphans() -> Result<(), HandlerError> {
    let cloud = cloud()?;
    let lbs = cloud.list().map_err(retry)?;
    let services = cache::list("v1", "Service", None, None)
        .map_err(|e| retry(format!("listing the cached Services: {e}")))?;
    // uid -> (namespace/name, whether it accounts for a load balancer)
    let mut known: HashMap<String, (String, bool)> = HashMap::new();
    for s in services {
        let accounts = match Service::parse(&s.json) {
            Ok(p) => p.wants_lb || p.finalizer_index().is_some(),
            // Cannot tell: keep its load balancer rather than delete a live one.
            Err(_) => true,
        };
        known.insert(s.meta.uid.clone(), (key(&s.meta), accounts));
    }
    let mut removed = 0;
    for lb in &lbs {
        let why = match known.get(&lb.id) {
            Some((_, true)) => continue,
            Some((name, false)) => format!("service {name} is no longer a LoadBalancer"),
            None => format!("service {} gone", shown(&lb.service)),
        };
        if !valid_id(&lb.id) {
            log(
                Level::Warn,
                &format!("skipping load balancer {}: not a uid", shown(&lb.id)),
            );
            continue;
        }
        cloud.delete(&lb.id).map_err(retry)?;
        log(Level::Info, &format!("removed orphan lb={} ({why})", lb.id));
        removed += 1;
    }
    log(
        Level::Info,
        &format!(
            "synced: {} load balancers, {removed} orphans removed",
            lbs.len()
        ),
    );
    Ok(())
}

export!(LbController);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_shown_strings() {
        assert!(valid_address("203.0.113.7") && valid_address("2001:db8::1"));
        assert!(valid_address("lb-1.example.com"));
        assert!(!valid_address("a b") && !valid_address("") && !valid_address("x\n"));
        assert_eq!(shown("default/web"), "default/web");
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
    }
}
