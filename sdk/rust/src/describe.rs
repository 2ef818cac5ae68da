//! [`Describe`]: the one declaration a handler makes, from which the SDK builds `describe`'s
//! answer (subscription, permissions, HTTP origins, Events) so they cannot drift apart.

use std::time::Duration;

use crate::bindings::kubewasm::handler::types::{Permission, PluginInfo, Subscription};
use crate::object::Object;

/// What a handler watches and asks to be granted. Start with [`Describe::new`]; the handler's
/// `Kind` supplies the subscription's `apiVersion` and `kind` (or [`Describe::kind`] for a
/// [`DynamicObject`](crate::DynamicObject) handler).
#[derive(Clone, Debug)]
pub struct Describe {
    name: String,
    kind: Option<(String, String)>,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    resync: Duration,
    metadata_only: bool,
    fields: Vec<String>,
    permissions: Vec<Permission>,
    http_origins: Vec<String>,
    events: bool,
}

impl Describe {
    /// A handler named `name` (logs and metrics use it; the manifest grants it).
    pub fn new(name: &str) -> Self {
        Describe {
            name: name.to_string(),
            kind: None,
            namespace: None,
            label_selector: None,
            field_selector: None,
            resync: Duration::ZERO,
            metadata_only: false,
            fields: Vec::new(),
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

    /// Replay the cache as `on_update(.., Sync(true))` this often: the chance to repair drift.
    pub fn resync(mut self, every: Duration) -> Self {
        self.resync = every;
        self
    }

    /// Receive `apiVersion`, `kind` and `metadata` only.
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Receive only these JSON pointers (e.g. `/spec/type`) besides the metadata.
    pub fn project(mut self, pointers: &[&str]) -> Self {
        self.fields = pointers.iter().map(|p| p.to_string()).collect();
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

    /// `describe`'s answer for a handler of `K`.
    pub fn into_info<K: Object>(self) -> PluginInfo {
        let (api_version, kind) = match (self.kind, K::TYPE) {
            (Some(k), _) => k,
            (None, Some((a, k))) => (a.to_string(), k.to_string()),
            // The host refuses the empty kind at load with a message naming the plugin.
            (None, None) => (String::new(), String::new()),
        };
        PluginInfo {
            name: self.name,
            subscriptions: vec![Subscription {
                api_version,
                kind,
                namespace: self.namespace,
                label_selector: self.label_selector,
                field_selector: self.field_selector,
                resync_period_ms: self.resync.as_millis().try_into().unwrap_or(u64::MAX),
                metadata_only: self.metadata_only,
                fields: self.fields,
            }],
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
            !self.metadata_only
                && self.fields.is_empty()
                && self.permissions.is_empty()
                && self.http_origins.is_empty()
                && !self.events,
            "{}: a kubewasm:handler@0.1.0 component cannot ask for metadata_only, project, can, http or events; export it with handler! (0.2.0)",
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
