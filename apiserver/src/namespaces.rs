//! The namespace lifecycle, as kube-apiserver and kube-controller-manager's namespace
//! controller give it: a deleted Namespace turns `Terminating` and stays while its contents
//! are deleted; creating in it is refused; it goes once it is empty.
//!
//! * Create: every Namespace gets the `kubernetes` finalizer in `spec.finalizers` (kept on
//!   updates: only the finalizing controller removes it).
//! * DELETE marks it (`deletionTimestamp`, `status.phase: Terminating`; 200 with the object)
//!   and queues [`Work::Finalize`]; a create in it is 403 with the lifecycle admission's
//!   message and `NamespaceTerminating` cause ([`admit_create`]).
//! * The controller (on the `controllers.rs` task) deletes every object in it (`Background`,
//!   so finalizers and the garbage collector are honoured), writes the five `NamespaceDeletion…`
//!   / `…Remaining` status conditions, and, once nothing is left, removes `kubernetes`: with no
//!   other finalizer the namespace is DELETED. What finalizers hold keeps it `Terminating`; each
//!   change in the namespace runs the controller again.
//! * With `Config::namespace_defaults`, every namespace gets the ServiceAccount `default` and
//!   the ConfigMap `kube-root-ca.crt` (created again when deleted), as the service account
//!   and root CA publisher controllers make them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::App;
use crate::controllers::Failed;
use crate::deletion::{self, DeleteOpts, Marking, Propagation, finalizer_names};
use crate::gc::MANAGER;
use crate::ops::{self, WriteOpts, now_rfc3339};
use crate::patch::{Patch, PatchKind};
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::store::{Change, Obj, ObjKey};

/// The finalizer the namespace controller removes once the namespace is empty.
pub const KUBERNETES_FINALIZER: &str = "kubernetes";
/// The ConfigMap of the cluster's CA bundle in every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// The ServiceAccount every namespace has.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// A self-signed CA certificate (its key was thrown away): the server speaks plain HTTP and
/// has no CA, but clients that read `kube-root-ca.crt` expect a parseable certificate.
const ROOT_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBpjCCAUugAwIBAgIUf7dtIzKPJeEIh/yJQnH4IgtNITowCgYIKoZIzj0EAwIw
HzEdMBsGA1UEAwwUa3ViZXdhc20tZW1iZWRkZWQtY2EwIBcNMjYxMjAyMDEwMzAw
WhgPMjEyNjExMDgwMTAzMDBaMB8xHTAbBgNVBAMMFGt1YmV3YXNtLWVtYmVkZGVk
LWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE5yYu2Vt3ggFR49ylZslLuPES
XkCNoK2i3JonsEkNf7cL29Elmo3oqFXGVyaYMER2fFSsylX4cTrnvsM9jYHNfqNj
MGEwHQYDVR0OBBYEFBZ/QE/n9D8GPHlh5j//eTZ6D6Q2MB8GA1UdIwQYMBaAFBZ/
QE/n9D8GPHlh5j//eTZ6D6Q2MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQD
AgEGMAoGCCqGSM49BAMCA0kAMEYCIQCMpIhllqAnOOepdxRoLP4OlrgR7wU0l0ar
vXwWuUCYswIhAI8ZhB3W9QGe7asHXO4qUFg7F6H/RiTOCzix2KQYAEmE
-----END CERTIFICATE-----
";

/// The namespace controller's work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Work {
    /// Delete a terminating namespace's contents and let it go when empty.
    Finalize(String),
    /// Make the namespace's `default` ServiceAccount and `kube-root-ca.crt` ConfigMap.
    Defaults(String),
}

/// Whether `rt` is core v1 Namespaces.
pub fn is_namespace(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "namespaces"
}

fn spec_finalizers(v: &Value) -> Vec<String> {
    v.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A new Namespace's `spec.finalizers` gain `kubernetes` (PrepareForCreate).
pub fn require_finalizer(body: &mut Value) {
    let mut fins = spec_finalizers(body);
    if !fins.iter().any(|f| f == KUBERNETES_FINALIZER) {
        fins.push(KUBERNETES_FINALIZER.into());
    }
    if !body.get("spec").is_some_and(Value::is_object) {
        body["spec"] = json!({});
    }
    body["spec"]["finalizers"] = json!(fins);
}

/// An update keeps the stored `spec.finalizers` (PrepareForUpdate: only finalizing may change them).
pub fn keep_finalizers(old: &Value, new: &mut Value) {
    let old_fins = old.pointer("/spec/finalizers").cloned();
    if !new.get("spec").is_some_and(Value::is_object) {
        if old_fins.is_none() && old.get("spec").is_none() {
            return;
        }
        new["spec"] = json!({});
    }
    match old_fins {
        Some(f) => new["spec"]["finalizers"] = f,
        None => {
            if let Some(spec) = new["spec"].as_object_mut() {
                spec.remove("finalizers");
            }
        }
    }
}

/// Whether `spec.finalizers` still hold the namespace.
pub fn held(v: &Value) -> bool {
    !spec_finalizers(v).is_empty()
}

/// What a DELETE does to a Namespace: the first marks it `Terminating` (whatever its
/// finalizers), later ones delete it only once `spec.finalizers` are empty.
pub(crate) fn on_delete(cur: &Value, marking: Marking) -> Change {
    if !marking.marked {
        let mut new = marking.apply(cur, false);
        if !new.get("status").is_some_and(Value::is_object) {
            new["status"] = json!({});
        }
        new["status"]["phase"] = json!("Terminating");
        return Change::Put(new);
    }
    if held(cur) || (marking.same && !marking.finalizers.is_empty()) {
        Change::Keep
    } else if marking.finalizers.is_empty() {
        Change::Delete
    } else {
        Change::Put(marking.apply(cur, false))
    }
}

/// A create of a namespaced kind needs its namespace, and not a terminating one (404 and the
/// NamespaceLifecycle admission's 403).
pub fn admit_create(app: &App, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<()> {
    if !rt.namespaced {
        return Ok(());
    }
    let Some(namespace) = app.store.get("/namespaces", "", ns) else {
        return Err(ApiError::namespace_not_found(ns));
    };
    if namespace
        .value
        .pointer("/status/phase")
        .and_then(Value::as_str)
        != Some("Terminating")
    {
        return Ok(());
    }
    Err(terminating(rt, ns, name))
}

/// The NamespaceLifecycle admission's refusal of a create of `name` (empty for a generated
/// name) into the terminating namespace `ns`: 403, the created resource's qualified name, a
/// `NamespaceTerminating` cause.
fn terminating(rt: &ResourceType, ns: &str, name: &str) -> ApiError {
    let why =
        format!("unable to create new content in namespace {ns} because it is being terminated");
    let message = if name.is_empty() {
        format!("{} is forbidden: {why}", rt.qualified())
    } else {
        format!("{} \"{name}\" is forbidden: {why}", rt.qualified())
    };
    let mut e = ApiError::new(403, "Forbidden", message);
    let mut details = json!({"kind": rt.plural, "causes": [{"reason": "NamespaceTerminating",
        "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]});
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    e.details = Some(details);
    e
}

/// Which namespaces are terminating, to run the controller when something in them changes.
#[derive(Debug, Default)]
pub struct Tracker {
    terminating: HashSet<String>,
    /// `Config::namespace_defaults`.
    defaults: bool,
}

impl Tracker {
    /// A tracker; `defaults` makes every namespace get its default objects.
    pub fn new(defaults: bool) -> Tracker {
        Tracker {
            terminating: HashSet::new(),
            defaults,
        }
    }

    /// Take in one committed change and push the work it causes onto `out`.
    pub fn observe(
        &mut self,
        res: &str,
        key: &ObjKey,
        prev: Option<&Obj>,
        next: Option<&Obj>,
        out: &mut Vec<Work>,
    ) {
        let name = &key.1;
        if res == "/namespaces" {
            match next {
                None => {
                    self.terminating.remove(name);
                }
                Some(o) if o.value.pointer("/metadata/deletionTimestamp").is_some() => {
                    if self.terminating.insert(name.clone()) {
                        out.push(Work::Finalize(name.clone()));
                    }
                }
                Some(_) => {
                    self.terminating.remove(name);
                    if self.defaults && prev.is_none() {
                        out.push(Work::Defaults(name.clone()));
                    }
                }
            }
            return;
        }
        let ns = &key.0;
        if ns.is_empty() {
            return;
        }
        if self.terminating.contains(ns) {
            out.push(Work::Finalize(ns.clone()));
        } else if self.defaults
            && next.is_none()
            && ((res == "/serviceaccounts" && name == DEFAULT_SERVICE_ACCOUNT)
                || (res == "/configmaps" && name == ROOT_CA_CONFIGMAP))
        {
            out.push(Work::Defaults(ns.clone()));
        }
    }
}

/// Do one piece of work.
pub fn process(app: &App, work: &Work) -> Result<(), Failed> {
    match work {
        Work::Finalize(ns) => finalize(app, ns),
        Work::Defaults(ns) => defaults(app, ns),
    }
}

fn failed(what: String, error: ApiError) -> Failed {
    Failed::Write {
        controller: "namespace controller",
        what,
        error: Box::new(error),
    }
}

/// The namespaced collections, one resource type each (versions share storage).
fn namespaced_kinds(app: &App) -> Vec<Arc<ResourceType>> {
    let reg = app.registry.read();
    let mut seen = HashSet::new();
    reg.all()
        .iter()
        .filter(|t| t.namespaced && seen.insert(t.storage_key()))
        .cloned()
        .collect()
}

fn finalize(app: &App, ns: &str) -> Result<(), Failed> {
    let Some(namespace) = app.store.get("/namespaces", "", ns) else {
        return Ok(());
    };
    let v = &namespace.value;
    if v.pointer("/metadata/deletionTimestamp").is_none() {
        return Ok(());
    }
    let spec = spec_finalizers(v);
    if spec.is_empty() {
        // Finalized already (or stored before namespaces had one): it goes with its own finalizers.
        if finalizer_names(v).is_empty() {
            let _ = app.store.mutate("/namespaces", "", ns, |cur| {
                Ok(match cur {
                    Some(c) if !held(&c.value) && finalizer_names(&c.value).is_empty() => {
                        Change::Delete
                    }
                    _ => Change::Keep,
                })
            });
        }
        return Ok(());
    }
    if !spec.iter().any(|f| f == KUBERNETES_FINALIZER) {
        return Ok(());
    }
    let kinds = namespaced_kinds(app);
    for rt in &kinds {
        for item in app.store.list(&rt.storage_key(), Some(ns)).1 {
            if item.value.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let s = |p: &str| item.value.pointer(p).and_then(Value::as_str).unwrap_or("");
            let opts = DeleteOpts::controller(s("/metadata/uid"), Propagation::Background);
            match deletion::delete(app, rt, ns, s("/metadata/name"), &opts) {
                Ok(_) => {}
                Err(e) if e.code == 404 || e.code == 409 => {}
                Err(e) => {
                    return Err(failed(
                        format!("{} {ns}/{}", rt.plural, s("/metadata/name")),
                        e,
                    ));
                }
            }
        }
    }
    let mut remaining: BTreeMap<String, usize> = BTreeMap::new();
    let mut holding: BTreeMap<String, usize> = BTreeMap::new();
    for rt in &kinds {
        let items = app.store.list(&rt.storage_key(), Some(ns)).1;
        if items.is_empty() {
            continue;
        }
        remaining.insert(format!("{}.{}", rt.plural, rt.group), items.len());
        for item in &items {
            for f in finalizer_names(&item.value) {
                *holding.entry(f).or_default() += 1;
            }
        }
    }
    let conditions = conditions(v, &remaining, &holding);
    if v.pointer("/status/conditions") != Some(&conditions) {
        let rt = app
            .registry
            .read()
            .find("", "v1", "namespaces")
            .expect("built-in namespaces");
        let change = Patch {
            kind: PatchKind::Merge,
            body: json!({"metadata": {"resourceVersion": namespace.rv.to_string()},
                "status": {"conditions": conditions}}),
        };
        let opts = WriteOpts {
            default_manager: MANAGER.into(),
            ..WriteOpts::default()
        };
        ops::patch(app, &rt, "", ns, change, true, &opts)
            .map_err(|e| failed(format!("namespace {ns} status"), e))?;
    }
    if !remaining.is_empty() {
        return Ok(());
    }
    // Empty: `kubernetes` goes; with no other finalizer, so does the namespace (as the
    // finalize subresource's update deletes it).
    app.store
        .mutate("/namespaces", "", ns, |cur| {
            let Some(cur) = cur else {
                return Ok(Change::Keep);
            };
            let rest: Vec<String> = spec_finalizers(&cur.value)
                .into_iter()
                .filter(|f| f != KUBERNETES_FINALIZER)
                .collect();
            if rest.is_empty() && finalizer_names(&cur.value).is_empty() {
                return Ok(Change::Delete);
            }
            let mut new = cur.value.clone();
            match (rest.is_empty(), new["spec"].as_object_mut()) {
                (true, Some(spec)) => {
                    spec.remove("finalizers");
                }
                _ => new["spec"]["finalizers"] = json!(rest),
            }
            Ok(Change::Put(new))
        })
        .map_err(|e| failed(format!("namespace {ns} finalizers"), e))?;
    Ok(())
}

/// The namespace controller's status conditions for what is left, keeping the transition
/// time of a condition whose status did not change.
fn conditions(
    namespace: &Value,
    remaining: &BTreeMap<String, usize>,
    holding: &BTreeMap<String, usize>,
) -> Value {
    let listed = |m: &BTreeMap<String, usize>, sep: &str| {
        m.iter()
            .map(|(k, n)| format!("{k}{sep}{n} resource instances"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let content = if remaining.is_empty() {
        (
            "False",
            "ContentRemoved",
            "All content successfully removed".to_string(),
        )
    } else {
        (
            "True",
            "SomeResourcesRemain",
            format!(
                "Some resources are remaining: {}",
                listed(remaining, " has ")
            ),
        )
    };
    let finalizers = if holding.is_empty() {
        (
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".to_string(),
        )
    } else {
        (
            "True",
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                listed(holding, " in ")
            ),
        )
    };
    let wanted = [
        (
            "NamespaceDeletionDiscoveryFailure",
            (
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered".to_string(),
            ),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            (
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed".to_string(),
            ),
        ),
        (
            "NamespaceDeletionContentFailure",
            (
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".to_string(),
            ),
        ),
        ("NamespaceContentRemaining", content),
        ("NamespaceFinalizersRemaining", finalizers),
    ];
    let old: Vec<Value> = namespace
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = now_rfc3339();
    Value::Array(
        wanted
            .into_iter()
            .map(|(ty, (status, reason, message))| {
                let since = old
                    .iter()
                    .find(|c| c["type"] == ty && c["status"] == status)
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now));
                json!({"type": ty, "status": status, "lastTransitionTime": since,
                    "reason": reason, "message": message})
            })
            .collect(),
    )
}

fn defaults(app: &App, ns: &str) -> Result<(), Failed> {
    let Some(namespace) = app.store.get("/namespaces", "", ns) else {
        return Ok(());
    };
    if namespace
        .value
        .pointer("/metadata/deletionTimestamp")
        .is_some()
    {
        return Ok(());
    }
    let objects = [
        (
            "serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": DEFAULT_SERVICE_ACCOUNT}}),
        ),
        (
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": ROOT_CA_CONFIGMAP, "annotations": {"kubernetes.io/description":
                    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                "data": {"ca.crt": ROOT_CA_PEM}}),
        ),
    ];
    let opts = WriteOpts {
        default_manager: MANAGER.into(),
        ..WriteOpts::default()
    };
    for (plural, body) in objects {
        let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        if app.store.get(&format!("/{plural}"), ns, &name).is_some() {
            continue;
        }
        let Some(rt) = app.registry.read().find("", "v1", plural) else {
            continue;
        };
        match ops::create(app, &rt, ns, body, &opts) {
            Ok(_) => {}
            Err(e) if e.code == 409 || e.code == 403 || e.code == 404 => {}
            Err(e) => return Err(failed(format!("{plural} {ns}/{name}"), e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_finalizers_are_required_on_create_and_kept_on_update() {
        let mut ns = json!({"metadata": {"name": "a"}});
        require_finalizer(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        let mut put = json!({"metadata": {"name": "a"}, "spec": {"finalizers": []}});
        keep_finalizers(&ns, &mut put);
        assert_eq!(put["spec"]["finalizers"], json!(["kubernetes"]));
        assert!(held(&put));
    }

    #[test]
    fn creates_in_a_terminating_namespace_get_the_admission_refusal() {
        let rt = crate::registry::Registry::with_builtins()
            .find("apps", "v1", "deployments")
            .unwrap();
        let e = terminating(&rt, "team", "web");
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "deployments.apps \"web\" is forbidden: unable to create new content in namespace team because it is being terminated"
        );
        assert_eq!(
            e.details,
            Some(
                json!({"name": "web", "group": "apps", "kind": "deployments", "causes": [
                {"reason": "NamespaceTerminating", "message": "namespace team is being terminated",
                 "field": "metadata.namespace"}]})
            )
        );
        let generated = terminating(&rt, "team", "");
        assert!(
            generated
                .message
                .starts_with("deployments.apps is forbidden: ")
        );
    }

    #[test]
    fn conditions_name_what_remains() {
        let mut remaining = BTreeMap::new();
        remaining.insert("configmaps.".to_string(), 2);
        let mut holding = BTreeMap::new();
        holding.insert("example.com/hold".to_string(), 1);
        let c = conditions(&json!({}), &remaining, &holding);
        assert_eq!(
            c[3]["message"],
            "Some resources are remaining: configmaps. has 2 resource instances"
        );
        assert_eq!(
            c[4]["message"],
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        );
        let again = conditions(
            &json!({"status": {"conditions": c.clone()}}),
            &remaining,
            &holding,
        );
        assert_eq!(again, c, "unchanged conditions keep their transition times");
    }
}
