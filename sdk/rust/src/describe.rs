//! [`Describe`]: the one declaration a handler makes, from which the SDK builds `describe`'s
//! answer (subscriptions, permissions, HTTP origins, Events) so they cannot drift apart.

use std::time::Duration;

use crate::bindings::kubewasm::handler0_2_0::types::{Permission, PluginInfo, Subscription};
use crate::object::Object;

/// What a handler watches and asks to be granted. Start with [`Describe::new`]; the handler's
/// `Kind` supplies the first subscription's `apiVersion` and `kind` (or [`Describe::kind`] for a
/// [`DynamicObject`](crate::DynamicObject) handler), and [`Describe::watch`] adds one
/// subscription per further kind.
#[derive(Clone, Debug)]
pub struct Describe {
    name: String,
    kind: Option<(String, String)>,
    own: Watch,
    watches: Vec<(String, String, Watch)>,
    permissions: Vec<Permission>,
    http_origins: Vec<String>,
    events: bool,
}

/// The options of one subscription besides its kind: what [`Describe::watch_with`] takes for a
/// further kind. The same names as [`Describe`]'s own options, which apply to the handler's `Kind`.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    resync: Duration,
    metadata_only: bool,
    fields: Vec<String>,
}

impl Watch {
    /// Every object of the kind, in every namespace, whole, without resync.
    pub fn new() -> Self {
        Watch::default()
    }

    /// One namespace only.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// Only objects matching a label selector, e.g. `app=web,tier!=db`.
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_string());
        self
    }

    /// Only objects matching a field selector, e.g. `metadata.name=x`.
    pub fn fields_matching(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_string());
        self
    }

    /// Replay this kind's cache as updates with `Sync(true)` this often.
    pub fn resync(mut self, every: Duration) -> Self {
        self.resync = every;
        self
    }

    /// Receive `apiVersion`, `kind` and `metadata` only (cache reads of the kind return the same).
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Receive only these JSON pointers (e.g. `/spec/type`) besides the metadata.
    pub fn project(mut self, pointers: &[&str]) -> Self {
        self.fields = pointers.iter().map(|p| p.to_string()).collect();
        self
    }

    pub(crate) fn into_subscription(self, api_version: String, kind: String) -> Subscription {
        Subscription {
            api_version,
            kind,
            namespace: self.namespace,
            label_selector: self.label_selector,
            field_selector: self.field_selector,
            resync_period_ms: self.resync.as_millis().try_into().unwrap_or(u64::MAX),
            metadata_only: self.metadata_only,
            fields: self.fields,
        }
    }

    fn is_projected(&self) -> bool {
        self.metadata_only || !self.fields.is_empty()
    }
}

impl Describe {
    /// A handler named `name` (logs and metrics use it; the manifest grants it).
    pub fn new(name: &str) -> Self {
        Describe {
            name: name.to_string(),
            kind: None,
            own: Watch::new(),
            watches: Vec::new(),
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: false,
        }
    }

    /// Watch `kind` of `api_version`: only needed for a `DynamicObject` handler.
    pub fn kind(mut self, api_version: &str, kind: &str) -> Self {
        self.kind = Some((api_version.to_string(), kind.to_string()));
        self
    }

    /// Watch one namespace only.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.own.namespace = Some(namespace.to_string());
        self
    }

    /// Only objects matching a label selector, e.g. `app=web,tier!=db`.
    pub fn labels(mut self, selector: &str) -> Self {
        self.own.label_selector = Some(selector.to_string());
        self
    }

    /// Only objects matching a field selector, e.g. `metadata.name=x`.
    pub fn fields_matching(mut self, selector: &str) -> Self {
        self.own.field_selector = Some(selector.to_string());
        self
    }

    /// Replay the cache as `on_update(.., Sync(true))` this often: the chance to repair drift.
    pub fn resync(mut self, every: Duration) -> Self {
        self.own.resync = every;
        self
    }

    /// Receive `apiVersion`, `kind` and `metadata` only.
    pub fn metadata_only(mut self) -> Self {
        self.own.metadata_only = true;
        self
    }

    /// Receive only these JSON pointers (e.g. `/spec/type`) besides the metadata.
    pub fn project(mut self, pointers: &[&str]) -> Self {
        self.own.fields = pointers.iter().map(|p| p.to_string()).collect();
        self
    }

    /// Also subscribe to kind `K` (every object, every namespace): its events reach
    /// [`Handler::on_watched`](crate::Handler::on_watched), and `cache` reads of `K` work. The
    /// manifest must grant the watch as it does the handler's own kind.
    pub fn watch<K: Object>(self) -> Self {
        self.watch_with::<K>(Watch::new())
    }

    /// Also subscribe to kind `K`, narrowed by `options` (namespace, selectors, resync, projection).
    pub fn watch_with<K: Object>(self, options: Watch) -> Self {
        let (api_version, kind) =
            K::TYPE.expect("Describe::watch needs a typed kind; use watch_kind");
        self.watch_kind(api_version, kind, options)
    }

    /// Also subscribe to `kind` of `api_version` (a custom kind, read as
    /// [`DynamicObject`](crate::DynamicObject)), narrowed by `options`.
    pub fn watch_kind(mut self, api_version: &str, kind: &str, options: Watch) -> Self {
        self.watches
            .push((api_version.to_string(), kind.to_string(), options));
        self
    }

    /// Ask for `verbs` on kind `K` in every namespace (`get`, `create`, `apply`, `patch`,
    /// `update`, `delete`).
    pub fn can<K: Object>(self, verbs: &[&str]) -> Self {
        let (api_version, kind) = K::TYPE.expect("Describe::can needs a typed kind; use can_kind");
        self.can_kind(api_version, kind, None, verbs)
    }

    /// Ask for `verbs` on `kind` of `api_version`, in one namespace or (`None`) all.
    pub fn can_kind(
        mut self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        verbs: &[&str],
    ) -> Self {
        self.permissions.push(Permission {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        });
        self
    }

    /// Ask to call `origin` (e.g. `https://lb.example.com`) over HTTP.
    pub fn http(mut self, origin: &str) -> Self {
        self.http_origins.push(origin.to_string());
        self
    }

    /// Ask to record Events.
    pub fn events(mut self) -> Self {
        self.events = true;
        self
    }

    /// The `apiVersion` and `kind` of a handler of `K`: what [`Describe::kind`] named, else `K`'s.
    pub(crate) fn primary<K: Object>(&self) -> (String, String) {
        match (&self.kind, K::TYPE) {
            (Some(k), _) => k.clone(),
            (None, Some((a, k))) => (a.to_string(), k.to_string()),
            // The host refuses the empty kind at load with a message naming the plugin.
            (None, None) => (String::new(), String::new()),
        }
    }

    /// Whether any further kind is watched, so events need routing at all.
    pub(crate) fn has_watches(&self) -> bool {
        !self.watches.is_empty()
    }

    /// `describe`'s answer for a handler of `K`: its own subscription first, then one per watch.
    pub fn into_info<K: Object>(self) -> PluginInfo {
        let (api_version, kind) = self.primary::<K>();
        let mut subscriptions = Vec::with_capacity(1 + self.watches.len());
        subscriptions.push(self.own.into_subscription(api_version, kind));
        subscriptions.extend(
            self.watches
                .into_iter()
                .map(|(a, k, w)| w.into_subscription(a, k)),
        );
        PluginInfo {
            name: self.name,
            subscriptions,
            permissions: self.permissions,
            http_origins: self.http_origins,
            events: self.events,
        }
    }
}

impl Describe {
    /// `describe`'s answer as a `kubewasm:handler@0.1.0` component. 0.1.0 has no projections,
    /// permissions, HTTP or Events: asking for one is a mistake the component cannot report from
    /// `describe`, so it panics, and the host refuses to load it with this message.
    pub fn into_info_v0_1<K: Object>(
        self,
    ) -> crate::bindings_v0_1::kubewasm::handler::types::PluginInfo {
        use crate::bindings_v0_1::kubewasm::handler::types as v0_1;
        assert!(
            !self.own.is_projected()
                && self.watches.iter().all(|(_, _, w)| !w.is_projected())
                && self.permissions.is_empty()
                && self.http_origins.is_empty()
                && !self.events,
            "{}: a kubewasm:handler@0.1.0 component cannot ask for metadata_only, project, can, http or events; export it with handler! (0.3.0)",
            self.name
        );
        let info = self.into_info::<K>();
        v0_1::PluginInfo {
            name: info.name,
            subscriptions: info
                .subscriptions
                .into_iter()
                .map(|s| v0_1::Subscription {
                    api_version: s.api_version,
                    kind: s.kind,
                    namespace: s.namespace,
                    label_selector: s.label_selector,
                    field_selector: s.field_selector,
                    resync_period_ms: s.resync_period_ms,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DynamicObject;
    use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};

    #[test]
    fn one_declaration_yields_subscription_permissions_origins_and_events() {
        let info = Describe::new("ns-quota")
            .labels("team")
            .resync(Duration::from_secs(30))
            .can::<ResourceQuota>(&["get", "apply", "delete"])
            .http("https://example.com")
            .events()
            .into_info::<Namespace>();
        assert_eq!(info.name, "ns-quota");
        let s = &info.subscriptions[0];
        assert_eq!(
            (s.api_version.as_str(), s.kind.as_str()),
            ("v1", "Namespace")
        );
        assert_eq!(s.label_selector.as_deref(), Some("team"));
        assert_eq!(s.resync_period_ms, 30_000);
        assert_eq!(info.permissions.len(), 1);
        let p = &info.permissions[0];
        assert_eq!(
            (p.kind.as_str(), p.namespace.as_deref()),
            ("ResourceQuota", None)
        );
        assert_eq!(p.verbs, ["get", "apply", "delete"]);
        assert_eq!(info.http_origins, ["https://example.com"]);
        assert!(info.events);
    }

    #[test]
    fn watches_add_one_subscription_each_after_the_handlers_own() {
        use k8s_openapi::api::apps::v1::Deployment;
        let d = Describe::new("owner")
            .kind("example.com/v1", "Widget")
            .namespace("team")
            .watch::<Deployment>()
            .watch_with::<Namespace>(
                Watch::new()
                    .labels("team")
                    .resync(Duration::from_secs(5))
                    .metadata_only(),
            )
            .watch_kind(
                "example.com/v1",
                "Gadget",
                Watch::new().namespace("x").project(&["/spec"]),
            );
        assert!(d.has_watches());
        assert_eq!(
            d.primary::<DynamicObject>(),
            ("example.com/v1".to_string(), "Widget".to_string())
        );
        let info = d.into_info::<DynamicObject>();
        let subs: Vec<_> = info
            .subscriptions
            .iter()
            .map(|s| {
                (
                    s.api_version.as_str(),
                    s.kind.as_str(),
                    s.namespace.as_deref(),
                    s.label_selector.as_deref(),
                    s.resync_period_ms,
                    s.metadata_only,
                    s.fields.clone(),
                )
            })
            .collect();
        assert_eq!(
            subs,
            [
                (
                    "example.com/v1",
                    "Widget",
                    Some("team"),
                    None,
                    0,
                    false,
                    vec![]
                ),
                ("apps/v1", "Deployment", None, None, 0, false, vec![]),
                ("v1", "Namespace", None, Some("team"), 5000, true, vec![]),
                (
                    "example.com/v1",
                    "Gadget",
                    Some("x"),
                    None,
                    0,
                    false,
                    vec!["/spec".to_string()]
                ),
            ]
        );
        let v0_1 = Describe::new("w")
            .watch_with::<Namespace>(Watch::new().labels("a"))
            .into_info_v0_1::<ResourceQuota>();
        assert_eq!(v0_1.subscriptions.len(), 2);
        assert_eq!(v0_1.subscriptions[1].label_selector.as_deref(), Some("a"));
        let projected = std::panic::catch_unwind(|| {
            Describe::new("x")
                .watch_with::<Namespace>(Watch::new().metadata_only())
                .into_info_v0_1::<ResourceQuota>()
        });
        assert!(projected.is_err());
    }

    #[test]
    fn dynamic_handlers_name_their_kind() {
        let info = Describe::new("w")
            .kind("example.com/v1", "Widget")
            .metadata_only()
            .into_info::<DynamicObject>();
        let s = &info.subscriptions[0];
        assert_eq!(
            (s.api_version.as_str(), s.kind.as_str()),
            ("example.com/v1", "Widget")
        );
        assert!(s.metadata_only && !info.events && info.permissions.is_empty());
    }

    #[test]
    fn a_0_1_0_handler_keeps_its_subscription_and_may_not_ask_for_more() {
        let info = Describe::new("logger")
            .labels("app")
            .resync(Duration::from_secs(30))
            .into_info_v0_1::<ResourceQuota>();
        let s = &info.subscriptions[0];
        assert_eq!(
            (s.kind.as_str(), s.label_selector.as_deref()),
            ("ResourceQuota", Some("app"))
        );
        assert_eq!(s.resync_period_ms, 30_000);
        let asks =
            std::panic::catch_unwind(|| Describe::new("x").events().into_info_v0_1::<Namespace>());
        assert!(asks.is_err());
    }
}
