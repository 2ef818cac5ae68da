//! [`Controller`]: a reconciler of one primary kind over the `kubewasm:handler@0.3.0`
//! `controller` world, which [`controller!`](crate::controller) exports. Instead of events, the
//! host hands it keys: every event of the primary kind, of a kind it [`owns`](Controls::owns)
//! (through the owned object's controller reference) or of a kind it
//! [`watches`](Controls::watches) (through a [`Mapping`]) becomes the [`ObjectKey`] of a primary,
//! queued with client-go's workqueue rules (a key waits once however many events name it, and is
//! never reconciled twice at once). The SDK reads the primary from the cache and calls
//! [`Controller::reconcile`], which makes the world match it and answers an [`Outcome`].

use std::cell::OnceCell;
use std::fmt;
use std::time::Duration;

use crate::bindings::kubewasm::handler0_2_0::types::{Object as RawObject, Subscription};
use crate::bindings::kubewasm::handler0_3_0::controller_types as raw;
use crate::describe::{Describe, Watch};
use crate::error::Result;
use crate::lazy::Lazy;
use crate::object::{DynamicObject, Named, Object};

/// A controller of one primary kind. Only [`describe`](Controller::describe) and
/// [`reconcile`](Controller::reconcile) are required. Like [`Handler`](crate::Handler)'s, the
/// methods take no `self`: an instance of the component is the controller, and state that must
/// outlive a call lives in a `static` or `thread_local!`. A returned error becomes `retry` (the
/// key comes back with per-key backoff) or `fatal` (logged, not retried until the next event of
/// the key) by [`Error::is_retryable`](crate::Error::is_retryable).
pub trait Controller {
    /// The primary kind: a `k8s-openapi` type, a `serde` struct of a custom resource
    /// implementing [`Object`], or [`DynamicObject`] (then [`Controls::kind`] names it).
    type Kind: Object;

    /// What the controller reconciles, owns and watches, and what it asks to be granted.
    fn describe() -> Controls;

    /// Brings the primary `key` names to what it should be. `primary` is the object as the cache
    /// holds it now, or `None` when it is gone (a deletion reconciles its key too; objects it
    /// owns through controller references are deleted by the garbage collector). Read owned and
    /// watched objects with [`cache`](crate::cache); write with [`kube`](crate::kube).
    fn reconcile(key: &ObjectKey, primary: Option<Lazy<Self::Kind>>) -> Result<Outcome>;

    /// For kinds watched with [`Mapping::Guest`] only: the primaries an event of `obj` (its state
    /// after the event, or its last state when deleted) concerns. Tell the kind with
    /// [`Named::kind`]; decode with `serde_json::from_str(obj.json())` or `obj.get()` (as a
    /// [`DynamicObject`]). An error is logged and names no key. Defaults to none.
    fn keys_for(obj: &Lazy<DynamicObject>) -> Result<Vec<ObjectKey>> {
        let _ = obj;
        Ok(Vec::new())
    }

    /// Once after every initial pass (load, hot swap, leadership gain): every primary has been
    /// reconciled since, so external state no primary accounts for is an orphan to clean up.
    fn on_synced() -> Result<()> {
        Ok(())
    }

    /// Called once at load, before `describe`, as [`Handler::validate_settings`]: an error
    /// refuses the operator's [`settings`](crate::settings) and the controller is not loaded.
    ///
    /// [`Handler::validate_settings`]: crate::Handler::validate_settings
    fn validate_settings() -> Result<()> {
        Ok(())
    }
}

/// The key of one primary object: its namespace (`None` for a cluster-scoped kind) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    namespace: Option<String>,
    name: String,
}

impl ObjectKey {
    /// The key of `name` in `namespace` (`None`: cluster-scoped).
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        ObjectKey {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// The key of the object itself (a typed object or a [`Lazy`] one), e.g. a primary found
    /// in a `keys_for` by a cache list.
    pub fn of(obj: &(impl Named + ?Sized)) -> Self {
        ObjectKey::new(obj.namespace(), obj.name())
    }

    /// The namespace; `None` for a cluster-scoped kind. What [`cache::get`](crate::cache::get)
    /// and the [`kube`](crate::kube) calls take.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// `namespace/name`, or `name` for a cluster-scoped kind, as [`key`](crate::key) names objects.
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

impl From<raw::ObjectKey> for ObjectKey {
    fn from(k: raw::ObjectKey) -> Self {
        ObjectKey {
            namespace: k.namespace,
            name: k.name,
        }
    }
}

impl From<ObjectKey> for raw::ObjectKey {
    fn from(k: ObjectKey) -> Self {
        raw::ObjectKey {
            namespace: k.namespace,
            name: k.name,
        }
    }
}

/// What a reconcile that did not fail asks for next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Outcome {
    /// The object is as wanted: nothing until the next event (or resync) of its key.
    #[default]
    Done,
    /// Reconcile the key again after this long (at least one second: shorter delays are raised
    /// to it), unless an event brings it back sooner. For state the cluster does not announce,
    /// such as an external system's progress; an error already retries with backoff.
    RequeueAfter(Duration),
}

/// The shortest delay the WIT allows for `requeue-after`.
const MIN_REQUEUE: Duration = Duration::from_secs(1);

impl From<Outcome> for raw::Outcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Done => raw::Outcome::Done,
            Outcome::RequeueAfter(after) => raw::Outcome::RequeueAfter(
                after
                    .max(MIN_REQUEUE)
                    .as_millis()
                    .try_into()
                    .unwrap_or(u64::MAX),
            ),
        }
    }
}

/// How an event of a watched kind names the primaries to reconcile. All but
/// [`Guest`](Mapping::Guest) are evaluated by the host and cost no call; the names resolve in
/// the watched object's namespace (cluster-wide for a cluster-scoped primary kind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// The primary with the watched object's own name: a Secret or ConfigMap named after it.
    SameName,
    /// The primary named by the value of this label of the watched object (none without it).
    /// [`Mapping::label`] builds it from a `&str`.
    Label(String),
    /// The primary named by the string at this JSON pointer of the watched object, e.g.
    /// `/spec/secretRef/name` (none when absent or not a string). [`Mapping::field`] builds it.
    Field(String),
    /// [`Controller::keys_for`] names them: one guest call per event of the kind, so only where
    /// the other forms cannot say it.
    Guest,
}

impl Mapping {
    /// [`Mapping::Label`] of `label`.
    pub fn label(label: impl Into<String>) -> Self {
        Mapping::Label(label.into())
    }

    /// [`Mapping::Field`] of the JSON pointer `pointer`.
    pub fn field(pointer: impl Into<String>) -> Self {
        Mapping::Field(pointer.into())
    }
}

impl From<Mapping> for raw::Mapping {
    fn from(m: Mapping) -> Self {
        match m {
            Mapping::SameName => raw::Mapping::SameName,
            Mapping::Label(l) => raw::Mapping::Label(l),
            Mapping::Field(f) => raw::Mapping::Field(f),
            Mapping::Guest => raw::Mapping::Guest,
        }
    }
}

/// What a controller reconciles, owns and watches, and asks to be granted: `describe`'s answer.
/// Start with [`Controls::new`]; the controller's `Kind` supplies the primary's `apiVersion` and
/// `kind` (or [`Controls::kind`] for a [`DynamicObject`] controller). The primary's options
/// (`namespace`, `labels`, `resync` …) and the grants (`can`, `http`, `events`) are
/// [`Describe`]'s. Every kind named here is a subscription: the manifest must grant its watch,
/// and [`cache`](crate::cache) reads it.
#[derive(Clone, Debug)]
pub struct Controls {
    base: Describe,
    owns: Vec<(String, String, Watch)>,
    watches: Vec<(String, String, Mapping, Watch)>,
}

impl Controls {
    /// A controller named `name` (logs and metrics use it; the manifest grants it).
    pub fn new(name: &str) -> Self {
        Controls {
            base: Describe::new(name),
            owns: Vec::new(),
            watches: Vec::new(),
        }
    }

    fn with(mut self, f: impl FnOnce(Describe) -> Describe) -> Self {
        self.base = f(self.base);
        self
    }

    /// Reconcile `kind` of `api_version`: only needed for a `DynamicObject` controller.
    pub fn kind(self, api_version: &str, kind: &str) -> Self {
        self.with(|d| d.kind(api_version, kind))
    }

    /// Reconcile the primaries of one namespace only.
    pub fn namespace(self, namespace: &str) -> Self {
        self.with(|d| d.namespace(namespace))
    }

    /// Reconcile only primaries matching a label selector, e.g. `app=web,tier!=db`.
    pub fn labels(self, selector: &str) -> Self {
        self.with(|d| d.labels(selector))
    }

    /// Reconcile only primaries matching a field selector, e.g. `metadata.name=x`.
    pub fn fields_matching(self, selector: &str) -> Self {
        self.with(|d| d.fields_matching(selector))
    }

    /// Reconcile every primary again this often: the chance to repair drift nothing announces.
    pub fn resync(self, every: Duration) -> Self {
        self.with(|d| d.resync(every))
    }

    /// Read the primary's `apiVersion`, `kind` and `metadata` only (decode it as
    /// [`DynamicObject`] or a struct of those fields).
    pub fn metadata_only(self) -> Self {
        self.with(|d| d.metadata_only())
    }

    /// Read only these JSON pointers of the primary (e.g. `/spec`) besides its metadata.
    pub fn project(self, pointers: &[&str]) -> Self {
        self.with(|d| d.project(pointers))
    }

    /// Own kind `K` (every object, every namespace): an event of an object whose controller
    /// reference names a primary reconciles that primary. Set the reference with
    /// [`kube::apply_owned`](crate::kube::apply_owned) (or
    /// [`owner::set_controller`](crate::owner::set_controller)).
    pub fn owns<K: Object>(self) -> Self {
        self.owns_with::<K>(Watch::new())
    }

    /// [`owns`](Controls::owns), narrowed by `options` (namespace, selectors, projection).
    pub fn owns_with<K: Object>(self, options: Watch) -> Self {
        let (api_version, kind) =
            K::TYPE.expect("Controls::owns needs a typed kind; use owns_kind");
        self.owns_kind(api_version, kind, options)
    }

    /// Own `kind` of `api_version` (a custom kind, read as [`DynamicObject`]).
    pub fn owns_kind(mut self, api_version: &str, kind: &str, options: Watch) -> Self {
        self.owns
            .push((api_version.to_string(), kind.to_string(), options));
        self
    }

    /// Watch kind `K`, which the controller does not own: `mapping` names the primaries each
    /// of its events concerns.
    pub fn watches<K: Object>(self, mapping: Mapping) -> Self {
        self.watches_with::<K>(mapping, Watch::new())
    }

    /// [`watches`](Controls::watches), narrowed by `options`.
    pub fn watches_with<K: Object>(self, mapping: Mapping, options: Watch) -> Self {
        let (api_version, kind) =
            K::TYPE.expect("Controls::watches needs a typed kind; use watches_kind");
        self.watches_kind(api_version, kind, mapping, options)
    }

    /// Watch `kind` of `api_version` (a custom kind, read as [`DynamicObject`]).
    pub fn watches_kind(
        mut self,
        api_version: &str,
        kind: &str,
        mapping: Mapping,
        options: Watch,
    ) -> Self {
        self.watches
            .push((api_version.to_string(), kind.to_string(), mapping, options));
        self
    }

    /// Ask for `verbs` on kind `K` in every namespace (`get`, `create`, `apply`, `patch`,
    /// `update`, `delete`), as [`Describe::can`].
    pub fn can<K: Object>(self, verbs: &[&str]) -> Self {
        self.with(|d| d.can::<K>(verbs))
    }

    /// Ask for `verbs` on `kind` of `api_version`, in one namespace or (`None`) all.
    pub fn can_kind(
        self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        verbs: &[&str],
    ) -> Self {
        self.with(|d| d.can_kind(api_version, kind, namespace, verbs))
    }

    /// Ask to call `origin` (e.g. `https://lb.example.com`) over HTTP.
    pub fn http(self, origin: &str) -> Self {
        self.with(|d| d.http(origin))
    }

    /// Ask to record Events.
    pub fn events(self) -> Self {
        self.with(|d| d.events())
    }

    /// The primary's `apiVersion` and `kind` for a controller of `K`.
    fn primary<K: Object>(&self) -> (String, String) {
        self.base.primary::<K>()
    }

    /// `describe`'s answer for a controller of `K`.
    pub fn into_info<K: Object>(self) -> raw::ControllerInfo {
        let info = self.base.into_info::<K>();
        let primary: Subscription = info
            .subscriptions
            .into_iter()
            .next()
            .expect("a Describe yields its own subscription first");
        raw::ControllerInfo {
            name: info.name,
            primary,
            owns: self
                .owns
                .into_iter()
                .map(|(a, k, w)| w.into_subscription(a, k))
                .collect(),
            watches: self
                .watches
                .into_iter()
                .map(|(a, k, m, w)| raw::Watch {
                    subscription: w.into_subscription(a, k),
                    mapping: m.into(),
                })
                .collect(),
            permissions: info.permissions,
            http_origins: info.http_origins,
            events: info.events,
        }
    }
}

thread_local! {
    /// The primary kind, recorded by `describe` so that a reconcile's cache read costs no
    /// `describe()`.
    static PRIMARY: OnceCell<(String, String)> = const { OnceCell::new() };
}

fn primary_kind<C: Controller>() -> (String, String) {
    PRIMARY.with(|p| {
        // Only computed here when the host calls no `describe` on this instance first.
        p.get_or_init(|| C::describe().primary::<C::Kind>()).clone()
    })
}

/// What [`controller!`](crate::controller) calls; not for controllers themselves.
#[doc(hidden)]
pub mod adapter {
    use super::*;
    use crate::bindings::kubewasm::handler0_2_0::types::HandlerError;
    use crate::world::{V0_3, select};

    pub fn validate_settings<C: Controller>() -> std::result::Result<(), String> {
        select(&V0_3);
        C::validate_settings().map_err(|e| e.to_string())
    }

    pub fn describe<C: Controller>() -> raw::ControllerInfo {
        select(&V0_3);
        let c = C::describe();
        PRIMARY.with(|p| {
            let _ = p.set(c.primary::<C::Kind>());
        });
        c.into_info::<C::Kind>()
    }

    pub fn reconcile<C: Controller>(
        key: raw::ObjectKey,
    ) -> std::result::Result<raw::Outcome, HandlerError> {
        select(&V0_3);
        let key = ObjectKey::from(key);
        let (api_version, kind) = primary_kind::<C>();
        let primary =
            crate::cache::get_as::<C::Kind>(&api_version, &kind, key.namespace(), key.name())?;
        Ok(C::reconcile(&key, primary)?.into())
    }

    pub fn keys_for<C: Controller>(obj: RawObject) -> Vec<raw::ObjectKey> {
        select(&V0_3);
        let obj = Lazy::<DynamicObject>::new(obj);
        match C::keys_for(&obj) {
            Ok(keys) => keys.into_iter().map(Into::into).collect(),
            Err(e) => {
                crate::log::write(
                    4,
                    &format!(
                        "keys_for {} {}: {e}; no key reconciled",
                        obj.kind(),
                        obj.key()
                    ),
                );
                Vec::new()
            }
        }
    }

    pub fn on_synced<C: Controller>() -> std::result::Result<(), HandlerError> {
        select(&V0_3);
        Ok(C::on_synced()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::kubewasm::handler0_2_0::types::{HandlerError, ObjectMeta as RawMeta};
    use crate::world::{Imports, fake};
    use crate::{Error, settings};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use serde::{Deserialize, Serialize};
    use std::cell::RefCell;

    thread_local! {
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
        static LOGGED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    fn seen(what: String) {
        SEEN.with(|s| s.borrow_mut().push(what));
    }

    fn take_seen() -> Vec<String> {
        SEEN.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }

    fn raw_obj(api_version: &str, kind: &str, ns: &str, name: &str, json: &str) -> RawObject {
        RawObject {
            meta: RawMeta {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: Some(ns.into()),
                name: name.into(),
                uid: format!("uid-{name}"),
                resource_version: "1".into(),
                generation: Some(1),
                labels: Vec::new(),
            },
            json: json.into(),
        }
    }

    /// The host for these tests: a cache holding one Widget `a/w` (and nothing else), and the
    /// settings `replicas = "three"`.
    static HOST: Imports = Imports {
        log: |_, m| LOGGED.with(|l| l.borrow_mut().push(m.to_string())),
        cache_get: |api_version, kind, ns, name| {
            if (api_version, kind) != ("example.com/v1", "Widget") {
                return Err(format!(
                    "plugin p does not subscribe to {api_version} {kind}"
                ));
            }
            Ok((ns == Some("a") && name == "w").then(|| {
                raw_obj(
                    api_version,
                    kind,
                    "a",
                    "w",
                    r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"namespace":"a","name":"w","uid":"uid-w"},"spec":{"replicas":2}}"#,
                )
            }))
        },
        cache_list: |_, _, _, _| Ok(Vec::new()),
        settings_get: Some(|key| (key == "replicas").then(|| "three".to_string())),
        settings_all: Some(|| vec![("replicas".into(), "three".into())]),
        settings_json: Some(|| r#"{"replicas":"three"}"#.into()),
    };

    /// A custom resource as a `serde` struct of its own.
    #[derive(Debug, Serialize, Deserialize)]
    struct Widget {
        metadata: crate::ObjectMeta,
        spec: WidgetSpec,
    }

    #[derive(Debug, Serialize, Deserialize)]
    struct WidgetSpec {
        replicas: u32,
    }

    impl Object for Widget {
        const TYPE: Option<(&'static str, &'static str)> = Some(("example.com/v1", "Widget"));
        fn meta(&self) -> &crate::ObjectMeta {
            &self.metadata
        }
        fn type_of(&self) -> (&str, &str) {
            ("example.com/v1", "Widget")
        }
    }

    struct Typed;
    impl Controller for Typed {
        type Kind = Widget;
        fn describe() -> Controls {
            Controls::new("widgets")
                .namespace("a")
                .resync(Duration::from_secs(60))
                .owns::<Deployment>()
                .owns_with::<ConfigMap>(Watch::new().labels("app=widgets"))
                .watches::<Secret>(Mapping::field("/spec/secretRef/name"))
                .watches_kind("example.com/v1", "Gadget", Mapping::Guest, Watch::new())
                .watches::<ConfigMap>(Mapping::label("widget"))
                .watches::<Deployment>(Mapping::SameName)
                .can::<Deployment>(&["apply"])
                .events()
        }
        fn reconcile(key: &ObjectKey, primary: Option<Lazy<Widget>>) -> Result<Outcome> {
            match primary {
                Some(w) => {
                    seen(format!("{key} replicas={}", w.get()?.spec.replicas));
                    Ok(Outcome::RequeueAfter(Duration::from_millis(1500)))
                }
                None => {
                    seen(format!("{key} gone"));
                    Ok(Outcome::Done)
                }
            }
        }
        fn keys_for(obj: &Lazy<DynamicObject>) -> Result<Vec<ObjectKey>> {
            let gadget = obj.get()?;
            let owner = gadget
                .rest
                .get("spec")
                .and_then(|s| s["widget"].as_str())
                .ok_or_else(|| Error::fatal("no spec.widget"))?;
            Ok(vec![ObjectKey::new(obj.namespace(), owner)])
        }
        fn validate_settings() -> Result<()> {
            let _: Option<u32> = settings::get("replicas")?;
            Ok(())
        }
    }

    struct Dynamic;
    impl Controller for Dynamic {
        type Kind = DynamicObject;
        fn describe() -> Controls {
            Controls::new("dynamic").kind("example.com/v1", "Widget")
        }
        fn reconcile(key: &ObjectKey, primary: Option<Lazy<DynamicObject>>) -> Result<Outcome> {
            let w = primary.ok_or_else(|| Error::retry(format!("{key} not cached yet")))?;
            seen(format!("{key} {}", w.get()?.rest["spec"]["replicas"]));
            Ok(Outcome::Done)
        }
    }

    #[test]
    fn describe_yields_the_primary_owned_and_watched_subscriptions_with_their_mappings() {
        let info = adapter::describe::<Typed>();
        assert_eq!(info.name, "widgets");
        let p = &info.primary;
        assert_eq!(
            (
                p.api_version.as_str(),
                p.kind.as_str(),
                p.namespace.as_deref(),
                p.resync_period_ms
            ),
            ("example.com/v1", "Widget", Some("a"), 60_000)
        );
        let owns: Vec<_> = info
            .owns
            .iter()
            .map(|s| (s.kind.as_str(), s.label_selector.as_deref()))
            .collect();
        assert_eq!(
            owns,
            [("Deployment", None), ("ConfigMap", Some("app=widgets"))]
        );
        let watches: Vec<_> = info
            .watches
            .iter()
            .map(|w| (w.subscription.kind.as_str(), format!("{:?}", w.mapping)))
            .collect();
        assert_eq!(
            watches,
            [
                (
                    "Secret",
                    format!("{:?}", raw::Mapping::Field("/spec/secretRef/name".into()))
                ),
                ("Gadget", format!("{:?}", raw::Mapping::Guest)),
                (
                    "ConfigMap",
                    format!("{:?}", raw::Mapping::Label("widget".into()))
                ),
                ("Deployment", format!("{:?}", raw::Mapping::SameName)),
            ]
        );
        assert_eq!(info.permissions[0].kind, "Deployment");
        assert!(info.events && info.http_origins.is_empty());
        let dynamic = Dynamic::describe().into_info::<DynamicObject>();
        assert_eq!(
            (
                dynamic.primary.api_version.as_str(),
                dynamic.primary.kind.as_str()
            ),
            ("example.com/v1", "Widget")
        );
        assert!(dynamic.owns.is_empty() && dynamic.watches.is_empty());
    }

    #[test]
    fn mappings_become_the_wit_variants() {
        let wit = |m: Mapping| raw::Mapping::from(m);
        assert!(matches!(wit(Mapping::SameName), raw::Mapping::SameName));
        assert!(matches!(wit(Mapping::Guest), raw::Mapping::Guest));
        assert!(matches!(wit(Mapping::label("app")), raw::Mapping::Label(l) if l == "app"));
        assert!(matches!(
            wit(Mapping::field("/spec/secretRef/name")),
            raw::Mapping::Field(f) if f == "/spec/secretRef/name"
        ));
        assert_eq!(Mapping::label("a"), Mapping::Label("a".to_string()));
        let w = Controls::new("c")
            .watches_with::<Secret>(
                Mapping::SameName,
                Watch::new().namespace("n").metadata_only(),
            )
            .into_info::<ConfigMap>()
            .watches
            .remove(0);
        assert_eq!(
            (
                w.subscription.kind.as_str(),
                w.subscription.namespace.as_deref(),
                w.subscription.metadata_only
            ),
            ("Secret", Some("n"), true)
        );
    }

    #[test]
    fn outcomes_become_milliseconds_of_at_least_one_second() {
        let ms = |o: Outcome| match raw::Outcome::from(o) {
            raw::Outcome::RequeueAfter(ms) => Some(ms),
            raw::Outcome::Done => None,
        };
        assert_eq!(ms(Outcome::Done), None);
        assert_eq!(ms(Outcome::default()), None);
        assert_eq!(
            ms(Outcome::RequeueAfter(Duration::from_millis(2500))),
            Some(2500)
        );
        assert_eq!(
            ms(Outcome::RequeueAfter(Duration::from_millis(10))),
            Some(1000)
        );
        assert_eq!(ms(Outcome::RequeueAfter(Duration::MAX)), Some(u64::MAX));
    }

    #[test]
    fn keys_convert_both_ways_and_read_as_the_sdk_names_objects() {
        let k = ObjectKey::new(Some("a"), "w");
        assert_eq!(k.to_string(), "a/w");
        assert_eq!(ObjectKey::new(None, "n").to_string(), "n");
        let back = ObjectKey::from(raw::ObjectKey::from(k.clone()));
        assert_eq!(back, k);
        let cm: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"namespace": "a", "name": "w"}}),
        )
        .unwrap();
        assert_eq!(ObjectKey::of(&cm), k);
    }

    #[test]
    fn reconcile_reads_the_primary_from_the_cache_typed_or_dynamic() {
        fake(&HOST);
        let key = |ns: &str, name: &str| raw::ObjectKey {
            namespace: Some(ns.into()),
            name: name.into(),
        };
        let out = adapter::reconcile::<Typed>(key("a", "w")).unwrap();
        assert!(matches!(out, raw::Outcome::RequeueAfter(1500)));
        let out = adapter::reconcile::<Typed>(key("a", "gone")).unwrap();
        assert!(matches!(out, raw::Outcome::Done));
        assert!(matches!(
            adapter::reconcile::<Dynamic>(key("a", "w")),
            Ok(raw::Outcome::Done)
        ));
        assert_eq!(take_seen(), ["a/w replicas=2", "a/gone gone", "a/w 2"]);
        // The controller's own error maps as a handler's does.
        let Err(HandlerError::Retry(m)) = adapter::reconcile::<Dynamic>(key("b", "x")) else {
            panic!("not a retry")
        };
        assert_eq!(m, "b/x not cached yet");
    }

    #[test]
    fn keys_for_names_primaries_and_an_error_names_none() {
        fake(&HOST);
        let gadget = |json: &str| raw_obj("example.com/v1", "Gadget", "a", "g", json);
        let keys = adapter::keys_for::<Typed>(gadget(
            r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{"widget":"w"}}"#,
        ));
        assert_eq!(keys.len(), 1);
        assert_eq!(
            (keys[0].namespace.as_deref(), keys[0].name.as_str()),
            (Some("a"), "w")
        );
        let keys = adapter::keys_for::<Typed>(gadget(
            r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"}}"#,
        ));
        assert!(keys.is_empty());
        LOGGED.with(|l| {
            assert_eq!(
                l.borrow().as_slice(),
                ["keys_for Gadget a/g: no spec.widget; no key reconciled"]
            )
        });
        assert!(adapter::keys_for::<Dynamic>(gadget("{}")).is_empty());
    }

    #[test]
    fn validate_settings_answers_the_settings_error_as_the_refusal() {
        fake(&HOST);
        assert_eq!(
            adapter::validate_settings::<Typed>(),
            Err(r#"setting "replicas": expected an integer, got "three""#.to_string())
        );
        assert_eq!(adapter::validate_settings::<Dynamic>(), Ok(()));
        assert!(adapter::on_synced::<Dynamic>().is_ok());
        assert_eq!(
            settings::require::<String>("replicas").as_deref(),
            Ok("three")
        );
        assert_eq!(
            settings::require::<u16>("port").unwrap_err().to_string(),
            r#"setting "port": expected an integer, but it is not set"#
        );
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct S {
            replicas: u32,
        }
        assert_eq!(
            settings::parse::<S>().unwrap_err().to_string(),
            r#"setting "replicas": expected u32, got string "three""#
        );
        assert_eq!(settings::all().unwrap().len(), 1);
    }
}
