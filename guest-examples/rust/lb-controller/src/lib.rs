//! A load-balancer controller as a `kubewasm:handler@0.3.0` handler on the Rust SDK: for every
//! Service of type `LoadBalancer` it keeps a load balancer in an external cloud API (over
//! `wasi:http`), writes its address to `status.loadBalancer.ingress`, holds a finalizer so that no
//! delete is missed, and records Events. See README.md for the why of each part.
//!
//! Level-triggered: every notification, resync replays included, compares the Service with the
//! cloud and repairs whatever differs, so a load balancer deleted behind the controller's back
//! comes back at the next `is-sync` replay, when no event would otherwise arrive.
//!
//! It may run sharded (`shard = "uid"` in the manifest) on several active replicas: the host
//! hands each replica its own Services, and the orphan sweep deletes only load balancers of
//! this replica's range (`shard::owns`).

mod cloud;

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use kubewasm_sdk::api::core::v1::{ConfigMap, LoadBalancerIngress, Service};
use kubewasm_sdk::patch::JsonPatch;
use kubewasm_sdk::serde_json::{Value, json};
use kubewasm_sdk::shard::{self, ShardBy};
use kubewasm_sdk::{
    Describe, Error, FinalStateUnknown, Handler, Init, Lazy, Named, Result, Sync, cache, debug,
    events, info, kube, warn,
};

use cloud::{Cloud, LoadBalancer, valid_id};

/// Where the operator configures the cloud endpoint (namespace, name, `data` key).
const CONFIG_NAMESPACE: &str = "default";
const CONFIG_NAME: &str = "lb-controller";
const CONFIG_KEY: &str = "endpoint";

/// The finalizer that keeps a Service (and so its delete) around until its load balancer is gone.
const FINALIZER: &str = "kubewasm.io/lb-controller";

/// How often every Service is replayed as `on-update(is-sync = true)`, which is how a load
/// balancer deleted behind the controller's back is noticed. Short so that a repair shows within
/// seconds in tests and the demo; an operator sets `resync-period-ms` in the manifest.
const RESYNC: Duration = Duration::from_secs(10);

thread_local! {
    /// The cloud endpoint, read once per instance and forgotten after any failed call, so a
    /// corrected ConfigMap is picked up by the next attempt.
    static CLOUD: RefCell<Option<Cloud>> = const { RefCell::new(None) };
}

struct LbController;

/// The cloud endpoint from ConfigMap `default/lb-controller`, key `endpoint`.
fn cloud() -> Result<Cloud> {
    if let Some(c) = CLOUD.with_borrow(Clone::clone) {
        return Ok(c);
    }
    let config = format!("ConfigMap {CONFIG_NAMESPACE}/{CONFIG_NAME}");
    let cm = kube::get::<ConfigMap>(Some(CONFIG_NAMESPACE), CONFIG_NAME)
        .map_err(|e| Error::retry(format!("reading {config}: {e}")))?;
    let endpoint = cm
        .and_then(|cm| cm.data?.remove(CONFIG_KEY))
        .ok_or_else(|| {
            Error::retry(format!(
                "no cloud endpoint configured: {config} key {CONFIG_KEY}"
            ))
        })?;
    let c = Cloud::parse(endpoint.trim()).map_err(Error::retry)?;
    CLOUD.set(Some(c.clone()));
    Ok(c)
}

/// Forgets the cached endpoint when a call failed, so the next attempt reads it again.
fn guarded(result: Result<()>) -> Result<()> {
    if result.is_err() {
        CLOUD.set(None);
    }
    result
}

/// What this controller decides on, read from a Service.
struct Lb<'a> {
    /// `spec.type == "LoadBalancer"` (the API server defaults an absent type to ClusterIP).
    wants_lb: bool,
    /// `metadata.deletionTimestamp` is set: the Service waits for its finalizers.
    deleting: bool,
    finalizers: &'a [String],
    /// The ports the load balancer forwards: `[{"port", "protocol"}]` (plus `name` when set).
    ports: Value,
    /// `status.loadBalancer.ingress`, empty when absent.
    ingress: &'a [LoadBalancerIngress],
}

impl<'a> Lb<'a> {
    fn of(svc: &'a Service) -> Self {
        let spec = svc.spec.as_ref();
        let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
        let ports = ports.iter().map(|p| {
            let mut entry =
                json!({"port": p.port, "protocol": p.protocol.as_deref().unwrap_or("TCP")});
            if let Some(name) = &p.name {
                entry["name"] = json!(name);
            }
            entry
        });
        let lb = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref());
        Lb {
            wants_lb: spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer"),
            deleting: svc.metadata.deletion_timestamp.is_some(),
            finalizers: svc.metadata.finalizers.as_deref().unwrap_or_default(),
            ports: ports.collect(),
            ingress: lb.and_then(|l| l.ingress.as_deref()).unwrap_or_default(),
        }
    }

    /// Where this controller's finalizer sits in `metadata.finalizers`.
    fn finalizer_index(&self) -> Option<usize> {
        self.finalizers.iter().position(|f| f == FINALIZER)
    }

    /// A JSON patch adding the finalizer, valid only against the finalizers this Service shows:
    /// a concurrent change of the list makes the `test` fail (422) instead of being overwritten.
    fn add_finalizer(&self) -> JsonPatch {
        match self.finalizers {
            // A `test` of null passes on an absent list, as on the real API server.
            [] => JsonPatch::new()
                .test("/metadata/finalizers", Value::Null)
                .add("/metadata/finalizers", json!([FINALIZER])),
            list => JsonPatch::new()
                .test("/metadata/finalizers", list.to_vec())
                .add("/metadata/finalizers/-", FINALIZER),
        }
    }
}

/// A JSON patch removing the finalizer at `index`, which fails (422) if the entry there is no
/// longer ours because the list changed meanwhile.
fn remove_finalizer(index: usize) -> JsonPatch {
    let path = format!("/metadata/finalizers/{index}");
    JsonPatch::new().test(&path, FINALIZER).remove(&path)
}

/// `status.loadBalancer.ingress` for `address`: `ip` for an IP address, `hostname` otherwise.
fn ingress_for(address: &str) -> LoadBalancerIngress {
    let ip = address.parse::<std::net::IpAddr>().is_ok();
    LoadBalancerIngress {
        ip: ip.then(|| address.to_string()),
        hostname: (!ip).then(|| address.to_string()),
        ..Default::default()
    }
}

/// What a patch of the Service answered: `Ok(false)` when the Service is gone. A 409 or 422
/// means it changed meanwhile (a `test` failed): retry, by which time the newer version has
/// usually arrived and replaces the retry. Every other failure is retried too.
fn patched(obj: &Lazy<Service>, what: &str, r: Result<Lazy<Service>>) -> Result<bool> {
    let key = obj.key();
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(Error::Api {
            code: code @ (409 | 422),
            reason,
            ..
        }) => Err(Error::retry(format!(
            "{key}: {what}: the Service changed meanwhile ({code} {reason})"
        ))),
        Err(e) => Err(Error::retry(format!("{key}: {what}: {e}"))),
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

/// A uid goes into the cloud's URLs: anything else is a bad object, never redelivered better.
fn checked_uid(obj: &Lazy<Service>) -> Result<&str> {
    match obj.uid() {
        uid if valid_id(uid) => Ok(uid),
        uid => Err(Error::fatal(format!(
            "{}: uid {uid:?} is not a uid",
            obj.key()
        ))),
    }
}

/// Brings one Service and its load balancer in line, whatever the notification was.
/// `resync` is true for an `is-sync` replay: a load balancer missing then, for a Service that
/// already held the finalizer, was deleted behind the controller's back (without the finalizer,
/// the first attempt failed, e.g. before the endpoint was configured, and this is a creation).
fn reconcile(obj: &Lazy<Service>, resync: bool) -> Result<()> {
    let svc = Lb::of(obj.get()?);
    checked_uid(obj)?;
    if svc.wants_lb && !svc.deleting {
        ensure(obj, &svc, resync)
    } else if let Some(index) = svc.finalizer_index() {
        release(obj, &svc, index)
    } else {
        Ok(())
    }
}

/// Whether the server holds a newer version of the Service than `obj` (or none at all): then a
/// notification about that version (or the delete) follows, and acting on `obj` is redundant.
fn superseded(obj: &Lazy<Service>) -> Result<bool> {
    match kube::get::<Service>(obj.namespace(), obj.name()) {
        Ok(Some(live)) => Ok(live.resource_version() != obj.resource_version()),
        Ok(None) => Ok(true),
        Err(e) => Err(Error::retry(format!(
            "{}: reading the Service: {e}",
            obj.key()
        ))),
    }
}

/// Finalizer first (so the delete cannot be missed once the load balancer exists), then the
/// load balancer, then the status.
fn ensure(obj: &Lazy<Service>, svc: &Lb, resync: bool) -> Result<()> {
    let (key, uid, ns, name) = (obj.key(), obj.uid(), obj.namespace(), obj.name());
    // Before the finalizer: without an endpoint the finalizer could not be honoured.
    let cloud = cloud()?;
    let held = svc.finalizer_index().is_some();
    // The finalizer but no address yet is how our own finalizer patch looks when its update
    // arrives after the same call wrote the status: a stale version, whose status write would
    // repeat ours. When the server already holds a newer version, its update follows and does
    // whatever is left; an attempt that failed after the finalizer still finds itself current.
    if !resync && held && svc.ingress.is_empty() && superseded(obj)? {
        debug!("skipped {key}: a newer version is on its way");
        return Ok(());
    }
    let add = || kube::patch_json(ns, name, &svc.add_finalizer());
    if !held && !patched(obj, "adding the finalizer", add())? {
        return Ok(()); // gone; on-delete follows
    }
    let put = || cloud.put(uid, &key, &svc.ports).map_err(Error::retry);
    let (lb, how) = match cloud.get(uid).map_err(Error::retry)? {
        Some(lb) if lb.ports == svc.ports => (lb, None),
        Some(_) => (put()?, Some("updated")),
        None if !svc.ingress.is_empty() || (resync && held) => {
            warn!("repaired {key}: load balancer was missing");
            (put()?, Some("recreated"))
        }
        None => (put()?, Some("created")),
    };
    let address = &lb.address;
    if !valid_address(address) {
        return Err(Error::retry(format!(
            "{key}: the cloud gave load balancer {uid} the invalid address {}",
            shown(address)
        )));
    }
    // The Event records what happened in the cloud even if the status write below fails.
    match how {
        Some("updated") => events::normal(
            obj,
            "Updated",
            "UpdateLoadBalancer",
            &format!("updated the ports of load balancer {uid}"),
        ),
        Some("created") => events::normal(
            obj,
            "Created",
            "CreateLoadBalancer",
            &format!("created load balancer {uid} with address {address}"),
        ),
        Some(_) => events::warning(
            obj,
            "Recreated",
            "CreateLoadBalancer",
            &format!("load balancer {uid} was missing; created it again with address {address}"),
        ),
        None => {}
    }
    let want = [ingress_for(address)];
    let status_differs = svc.ingress != want;
    if status_differs {
        let status = json!({"loadBalancer": {"ingress": want}});
        let write = kube::patch_status(ns, name, status);
        if !patched(obj, "writing the status", write)? {
            return Ok(());
        }
    }
    match (how, status_differs) {
        (Some(how), _) => info!("ensured {key} lb={uid} address={address} ({how})"),
        (None, true) => info!("ensured {key} lb={uid} address={address} (status updated)"),
        (None, false) => debug!("ensured {key} lb={uid} address={address} (unchanged)"),
    }
    Ok(())
}

/// The Service is being deleted or no longer wants a load balancer but still holds the
/// finalizer: delete the load balancer, clear the status, then let the Service go.
fn release(obj: &Lazy<Service>, svc: &Lb, index: usize) -> Result<()> {
    let (key, uid, ns, name) = (obj.key(), obj.uid(), obj.namespace(), obj.name());
    let existed = cloud()?.delete(uid).map_err(Error::retry)?;
    let note = if existed {
        format!("deleted load balancer {uid}")
    } else {
        format!("load balancer {uid} was already gone")
    };
    events::normal(obj, "Deleted", "DeleteLoadBalancer", &note);
    if !svc.deleting && !svc.ingress.is_empty() {
        let clear = kube::patch_status(ns, name, json!({"loadBalancer": {"ingress": null}}));
        if !patched(obj, "clearing the status", clear)? {
            return Ok(());
        }
    }
    let remove = kube::patch_json(ns, name, &remove_finalizer(index));
    patched(obj, "removing the finalizer", remove)?;
    let why = match (svc.deleting, existed) {
        (true, true) => "",
        (true, false) => " (was already gone)",
        (false, _) => " (service is no longer a LoadBalancer)",
    };
    info!("deleted {key} lb={uid}{why}");
    Ok(())
}

/// A Service is gone. The finalizer normally made the controller delete its load balancer
/// before; this covers deletes it could not hold (the finalizer removed by hand, a relist).
fn forget(obj: &Lazy<Service>, unknown: FinalStateUnknown) -> Result<()> {
    let svc = Lb::of(obj.get()?);
    if !svc.wants_lb && svc.finalizer_index().is_none() && svc.ingress.is_empty() {
        return Ok(());
    }
    let uid = checked_uid(obj)?;
    if cloud()?.delete(uid).map_err(Error::retry)? {
        let how = if unknown.0 {
            " (delete seen in a relist)"
        } else {
            ""
        };
        info!("deleted {} lb={uid}{how}", obj.key());
    }
    Ok(())
}

/// After the replay every Service is in the cache: a load balancer that no cached
/// LoadBalancer Service (or Service still holding the finalizer) accounts for lost its Service
/// while nobody was watching, and is deleted, if it is this replica's (see [`is_mine`]).
fn remove_orphans() -> Result<()> {
    let cloud = cloud()?;
    let lbs = cloud.list().map_err(Error::retry)?;
    let services = cache::list::<Service>(None, None)
        .map_err(|e| Error::retry(format!("listing the cached Services: {e}")))?;
    // uid -> (namespace/name, namespace, whether it accounts for a load balancer)
    let mut known: HashMap<String, (String, String, bool)> = HashMap::new();
    for s in &services {
        let accounts = match s.get() {
            Ok(svc) => {
                let svc = Lb::of(svc);
                svc.wants_lb || svc.finalizer_index().is_some()
            }
            // Cannot tell: keep its load balancer rather than delete a live one.
            Err(_) => true,
        };
        let namespace = s.namespace().unwrap_or_default().to_string();
        known.insert(s.uid().to_string(), (s.key(), namespace, accounts));
    }
    let by = shard::by();
    let (mut removed, mut others) = (0, 0);
    for lb in &lbs {
        let cached = known.get(&lb.id);
        let why = match cached {
            Some((_, _, true)) => continue,
            Some((name, _, false)) => format!("service {name} is no longer a LoadBalancer"),
            None => format!("service {} gone", shown(&lb.service)),
        };
        if !valid_id(&lb.id) {
            warn!("skipping load balancer {}: not a uid", shown(&lb.id));
            continue;
        }
        match is_mine(by, lb, cached.map(|c| c.1.as_str()), shard::owns) {
            Ok(true) => {}
            Ok(false) => {
                others += 1;
                continue;
            }
            Err(why) => {
                warn!("skipping load balancer {}: {why}", lb.id);
                continue;
            }
        }
        cloud.delete(&lb.id).map_err(Error::retry)?;
        info!("removed orphan lb={} ({why})", lb.id);
        removed += 1;
    }
    // Unsharded, `others` is always 0 and the line reads as it always has.
    let others = match others {
        0 => String::new(),
        n => format!(", {n} of other replicas left alone"),
    };
    info!(
        "synced: {} load balancers, {removed} orphans removed{others}",
        lbs.len()
    );
    Ok(())
}

/// Whether load balancer `lb` is this replica's to delete (`owns` is the `shard` import). With
/// several active replicas (`shard = "uid"` or `"namespace"` in the manifest) each lists every
/// load balancer in the cloud but is handed only its own Services, so without this check one
/// whose cache lacks another replica's Service would delete that Service's load balancer. The
/// id is the Service's uid, so under `uid` it is the key; under `namespace` the key is the
/// cached Service's namespace, or the one the cloud recorded (`namespace/name`, written at every
/// `PUT`) when the Service is gone. `Err` when that record names no namespace: kept, rather
/// than deleted on a guess.
fn is_mine(
    by: ShardBy,
    lb: &LoadBalancer,
    cached_namespace: Option<&str>,
    owns: impl FnOnce(&str) -> bool,
) -> std::result::Result<bool, String> {
    match by {
        ShardBy::None => Ok(true),
        ShardBy::Uid => Ok(owns(&lb.id)),
        ShardBy::Namespace => match cached_namespace.or_else(|| recorded_namespace(&lb.service)) {
            Some(ns) => Ok(owns(ns)),
            None => Err(format!(
                "its service {} names no namespace",
                shown(&lb.service)
            )),
        },
    }
}

/// The namespace of the cloud's `namespace/name` record of a Service.
fn recorded_namespace(service: &str) -> Option<&str> {
    match service.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Some(ns),
        _ => None,
    }
}

impl Handler for LbController {
    type Kind = Service;

    fn describe() -> Describe {
        Describe::new("lb-controller")
            .resync(RESYNC)
            // The finalizer and the `status` subresource are both written with patches;
            // `get` tells a stale update (our own finalizer patch's) from a current one.
            .can::<Service>(&["get", "patch"])
            // The cloud endpoint, read from the API server (no informer for one object).
            .can_kind("v1", "ConfigMap", Some(CONFIG_NAMESPACE), &["get"])
            // The cloud stand-in listens on loopback on a port chosen at start; a real
            // deployment names its cloud API's origin, e.g. https://lb.example.com.
            .http("http://127.0.0.1:*")
            .events()
    }

    fn on_add(obj: &Lazy<Service>, _: Init) -> Result<()> {
        guarded(reconcile(obj, false))
    }

    fn on_update(_: &Lazy<Service>, new: &Lazy<Service>, sync: Sync) -> Result<()> {
        guarded(reconcile(new, sync.0))
    }

    fn on_delete(obj: &Lazy<Service>, unknown: FinalStateUnknown) -> Result<()> {
        guarded(forget(obj, unknown))
    }

    fn on_synced() -> Result<()> {
        guarded(remove_orphans())
    }
}

kubewasm_sdk::handler!(LbController);

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(json: Value) -> Service {
        kubewasm_sdk::serde_json::from_value(json).unwrap()
    }

    #[test]
    fn reads_a_load_balancer_service() {
        let svc = lb(json!({
            "metadata": {"name": "web", "finalizers": ["a", FINALIZER],
                         "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"type": "LoadBalancer",
                     "ports": [{"port": 80, "name": "http"}, {"port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
        }));
        let s = Lb::of(&svc);
        assert!(s.wants_lb && s.deleting && s.ingress == [ingress_for("203.0.113.7")]);
        assert_eq!(s.finalizer_index(), Some(1));
        let ports =
            json!([{"port":80,"protocol":"TCP","name":"http"},{"port":53,"protocol":"UDP"}]);
        assert_eq!(s.ports, ports);
        let plain = lb(json!({"metadata": {"name": "db"}, "spec": {}}));
        let s = Lb::of(&plain);
        assert!(!s.wants_lb && !s.deleting && s.ingress.is_empty());
        assert_eq!((s.finalizer_index(), s.ports.clone()), (None, json!([])));
    }

    #[test]
    fn finalizer_patches_test_what_they_change() {
        let patch = |s: &Service| -> Value {
            kubewasm_sdk::serde_json::from_str(&Lb::of(s).add_finalizer().to_json()).unwrap()
        };
        let p = patch(&lb(json!({"metadata": {}})));
        assert_eq!(
            p[0],
            json!({"op":"test","path":"/metadata/finalizers","value":null})
        );
        let p = patch(&lb(json!({"metadata": {"finalizers": ["a"]}})));
        assert_eq!(p[0]["value"], json!(["a"]));
        assert_eq!(p[1]["path"], "/metadata/finalizers/-");
        let p: Value = kubewasm_sdk::serde_json::from_str(&remove_finalizer(2).to_json()).unwrap();
        let at = "/metadata/finalizers/2";
        assert_eq!(
            p,
            json!([{"op":"test","path":at,"value":FINALIZER},{"op":"remove","path":at}])
        );
    }

    fn lb_of(id: &str, service: &str) -> LoadBalancer {
        LoadBalancer {
            id: id.into(),
            service: service.into(),
            ports: json!([]),
            address: "203.0.113.1".into(),
        }
    }

    /// `is_mine` with a stand-in host owning the keys in `owned`, and what it was asked.
    fn mine(
        by: ShardBy,
        lb: &LoadBalancer,
        cached: Option<&str>,
        owned: &[&str],
    ) -> (std::result::Result<bool, String>, Option<String>) {
        let mut asked = None;
        let r = is_mine(by, lb, cached, |v| {
            asked = Some(v.to_string());
            owned.contains(&v)
        });
        (r, asked)
    }

    #[test]
    fn the_sweep_deletes_only_load_balancers_of_this_replicas_range() {
        let lb = lb_of("u-1", "team-a/web");
        // Not sharded: every orphan is this replica's, and the host is not asked.
        assert_eq!(mine(ShardBy::None, &lb, None, &[]), (Ok(true), None));
        // By uid: the id is the Service's uid.
        assert_eq!(
            mine(ShardBy::Uid, &lb, None, &["u-1"]),
            (Ok(true), Some("u-1".into()))
        );
        assert_eq!(mine(ShardBy::Uid, &lb, None, &[]).0, Ok(false));
        // By namespace: the cached Service's, else the one the cloud recorded.
        assert_eq!(
            mine(ShardBy::Namespace, &lb, Some("team-b"), &["team-b"]),
            (Ok(true), Some("team-b".into()))
        );
        assert_eq!(
            mine(ShardBy::Namespace, &lb, None, &["team-b"]),
            (Ok(false), Some("team-a".into()))
        );
        // A record without a namespace is kept, and nothing is asked.
        let (r, asked) = mine(ShardBy::Namespace, &lb_of("u-2", "web"), None, &["web"]);
        assert!(r.unwrap_err().contains("names no namespace") && asked.is_none());
        assert_eq!(recorded_namespace("/web"), None);
        assert_eq!(recorded_namespace("a/"), None);
    }

    #[test]
    fn addresses_and_shown_strings() {
        assert!(valid_address("203.0.113.7") && valid_address("2001:db8::1"));
        assert!(valid_address("lb-1.example.com"));
        assert!(!valid_address("a b") && !valid_address("") && !valid_address("x\n"));
        assert_eq!(
            ingress_for("lb-1.example.com").hostname.as_deref(),
            Some("lb-1.example.com")
        );
        assert_eq!(shown("default/web"), "default/web");
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
    }
}
