//! [`Handler`]: the trait a handler implements for its kind, the [`Watched`] events of the
//! further kinds it watches, and the adapters the [`handler!`] and [`handler_v0_1!`] macros
//! export, which route each event by its kind, wrap objects as [`Lazy`] and map errors.
//!
//! [`handler!`]: crate::handler
//! [`handler_v0_1!`]: crate::handler_v0_1

use std::cell::OnceCell;

use crate::bindings::kubewasm::handler0_2_0::types::{Object as RawObject, ObjectMeta as RawMeta};
use crate::describe::Describe;
use crate::error::Result;
use crate::lazy::Lazy;
use crate::object::{DynamicObject, Named, Object};

/// `on_add`'s flag: true while the informer replays its initial list (or a late join).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Init(pub bool);

/// `on_update`'s flag: true when nothing changed on the server (a resync replay).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sync(pub bool);

/// `on_delete`'s flag: true when the deletion was inferred from a relist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalStateUnknown(pub bool);

/// A handler of one kind of object. Every notification method defaults to doing nothing.
/// Objects arrive as [`Lazy`]: metadata (name, namespace, uid, labels …) is free to read, the
/// typed object is decoded by the first `get()?`. A returned error becomes `retry` or `fatal`
/// by [`Error::is_retryable`](crate::Error::is_retryable).
pub trait Handler {
    /// The kind handled: a `k8s-openapi` type or [`DynamicObject`](crate::DynamicObject).
    type Kind: Object;

    /// What the handler watches and asks to be granted.
    fn describe() -> Describe;

    /// An object appeared.
    fn on_add(obj: &Lazy<Self::Kind>, init: Init) -> Result<()> {
        let _ = (obj, init);
        Ok(())
    }

    /// An object changed (or, `Sync(true)`, was replayed unchanged).
    fn on_update(old: &Lazy<Self::Kind>, new: &Lazy<Self::Kind>, sync: Sync) -> Result<()> {
        let _ = (old, new, sync);
        Ok(())
    }

    /// An object is gone.
    fn on_delete(obj: &Lazy<Self::Kind>, unknown: FinalStateUnknown) -> Result<()> {
        let _ = (obj, unknown);
        Ok(())
    }

    /// Every object has been seen since load or leadership: clean up orphans (not called in a
    /// 0.1.0 component).
    fn on_synced() -> Result<()> {
        Ok(())
    }

    /// Called once at load, before `describe`: an error refuses the operator's
    /// [`settings`](crate::settings) and the plugin is not loaded, with the error's message
    /// (a [`SettingsError`](crate::settings::SettingsError) names the key and what it expected).
    /// Defaults to accepting every table. Not called in a 0.1.0 component.
    fn validate_settings() -> Result<()> {
        Ok(())
    }

    /// An event of a kind [`Describe::watch`] subscribes to besides `Kind`: tell the kind with
    /// [`Watched::is`] or [`Watched::downcast`]. Events of `Kind` itself never come here.
    fn on_watched(event: Watched) -> Result<()> {
        let _ = event;
        Ok(())
    }
}

/// One event of any kind, typed as `K`: what [`Watched::downcast`] gives.
// An event lives for one call, moved rather than copied; boxing the larger variant would cost
// an allocation per event to save stack.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Event<K> {
    /// An object appeared ([`Handler::on_add`]'s arguments).
    Add(Lazy<K>, Init),
    /// An object changed: old, new ([`Handler::on_update`]'s arguments).
    Update(Lazy<K>, Lazy<K>, Sync),
    /// An object is gone ([`Handler::on_delete`]'s arguments).
    Delete(Lazy<K>, FinalStateUnknown),
}

impl<K: Object> Event<K> {
    /// The object as it is now: the added one, the new one, or the last state of the deleted one.
    pub fn object(&self) -> &Lazy<K> {
        match self {
            Event::Add(obj, _) | Event::Update(_, obj, _) | Event::Delete(obj, _) => obj,
        }
    }

    /// `add`, `update` or `delete`, as the WIT exports are named (for logs).
    pub fn change(&self) -> &'static str {
        match self {
            Event::Add(..) => "add",
            Event::Update(..) => "update",
            Event::Delete(..) => "delete",
        }
    }

    fn retype<T: Object>(self) -> Event<T> {
        match self {
            Event::Add(obj, init) => Event::Add(obj.retype(), init),
            Event::Update(old, new, sync) => Event::Update(old.retype(), new.retype(), sync),
            Event::Delete(obj, unknown) => Event::Delete(obj.retype(), unknown),
        }
    }
}

/// An event of a watched kind, not decoded: its metadata (through [`Named`]) is free to read,
/// [`downcast`](Watched::downcast) types it, as `std::any::Any` does a value.
// Boxed so that `downcast`'s `Err(self)` is a pointer when a handler tries kind after kind.
#[derive(Debug)]
pub struct Watched(Box<Event<DynamicObject>>);

impl Watched {
    /// Wraps an event of a kind that is not the handler's own.
    fn new(event: Event<DynamicObject>) -> Self {
        Watched(Box::new(event))
    }

    /// Whether the object is of kind `K` (always true for [`DynamicObject`]: compare
    /// [`kind`](Named::kind) yourself).
    pub fn is<K: Object>(&self) -> bool {
        K::TYPE.is_none_or(|(api_version, kind)| {
            self.api_version() == api_version && self.kind() == kind
        })
    }

    /// The event typed as `K`, or the event back when it is of another kind, to try the next.
    pub fn downcast<K: Object>(self) -> std::result::Result<Event<K>, Watched> {
        if self.is::<K>() {
            Ok((*self.0).retype())
        } else {
            Err(self)
        }
    }

    /// The event with the object as a [`DynamicObject`] (for kinds without a Rust type).
    pub fn event(&self) -> &Event<DynamicObject> {
        &self.0
    }

    /// `add`, `update` or `delete`.
    pub fn change(&self) -> &'static str {
        self.0.change()
    }
}

/// The metadata of the object as it is now ([`Event::object`]).
impl Named for Watched {
    fn api_version(&self) -> &str {
        self.0.object().api_version()
    }

    fn kind(&self) -> &str {
        self.0.object().kind()
    }

    fn namespace(&self) -> Option<&str> {
        self.0.object().namespace()
    }

    fn name(&self) -> &str {
        self.0.object().name()
    }

    fn uid(&self) -> &str {
        self.0.object().uid()
    }

    fn resource_version(&self) -> &str {
        self.0.object().resource_version()
    }

    fn generation(&self) -> Option<i64> {
        self.0.object().generation()
    }

    fn label(&self, name: &str) -> Option<&str> {
        self.0.object().label(name)
    }
}

thread_local! {
    /// The handler's own kind when it watches further kinds (`None`: every event is its own),
    /// recorded by `describe` so that routing an event costs one comparison, not a `describe()`.
    static OWN_KIND: OnceCell<Option<(String, String)>> = const { OnceCell::new() };
}

/// Records which events are `H`'s own (from its declaration), once per instance.
fn record<H: Handler>(describe: &Describe) {
    OWN_KIND.with(|k| {
        k.get_or_init(|| {
            describe
                .has_watches()
                .then(|| describe.primary::<H::Kind>())
        });
    });
}

/// Whether an event about `meta` goes to `H`'s own callbacks rather than to `on_watched`.
fn is_own<H: Handler>(meta: &RawMeta) -> bool {
    OWN_KIND.with(|k| {
        // Only reached when the host calls no `describe` on this instance first.
        let own = k.get_or_init(|| {
            let d = H::describe();
            d.has_watches().then(|| d.primary::<H::Kind>())
        });
        own.as_ref()
            .is_none_or(|(a, kind)| meta.kind == *kind && meta.api_version == *a)
    })
}

/// Calls `H`'s callback for an event of its own kind, or `on_watched` for any other.
fn route<H: Handler>(event: Event<DynamicObject>) -> Result<()> {
    if !is_own::<H>(raw_meta(event.object())) {
        return H::on_watched(Watched::new(event));
    }
    match event.retype::<H::Kind>() {
        Event::Add(obj, init) => H::on_add(&obj, init),
        Event::Update(old, new, sync) => H::on_update(&old, &new, sync),
        Event::Delete(obj, unknown) => H::on_delete(&obj, unknown),
    }
}

fn raw_meta<K: Object>(obj: &Lazy<K>) -> &RawMeta {
    &obj.raw().meta
}

fn add(obj: RawObject, init: bool) -> Event<DynamicObject> {
    Event::Add(Lazy::new(obj), Init(init))
}

fn update(old: RawObject, new: RawObject, sync: bool) -> Event<DynamicObject> {
    Event::Update(Lazy::new(old), Lazy::new(new), Sync(sync))
}

fn delete(obj: RawObject, unknown: bool) -> Event<DynamicObject> {
    Event::Delete(Lazy::new(obj), FinalStateUnknown(unknown))
}

/// What [`handler!`](crate::handler) calls; not for handlers themselves. Nothing is decoded
/// here and a success allocates nothing.
#[doc(hidden)]
pub mod adapter {
    use super::*;
    use crate::bindings::kubewasm::handler0_2_0::types::{
        HandlerError, Object as RawObject, PluginInfo,
    };
    use crate::world::{V0_3, select};

    type Raw = std::result::Result<(), HandlerError>;

    pub fn validate_settings<H: Handler>() -> std::result::Result<(), String> {
        select(&V0_3);
        H::validate_settings().map_err(|e| e.to_string())
    }

    pub fn describe<H: Handler>() -> PluginInfo {
        select(&V0_3);
        let d = H::describe();
        record::<H>(&d);
        d.into_info::<H::Kind>()
    }

    pub fn on_add<H: Handler>(obj: RawObject, init: bool) -> Raw {
        select(&V0_3);
        Ok(route::<H>(add(obj, init))?)
    }

    pub fn on_update<H: Handler>(old: RawObject, new: RawObject, sync: bool) -> Raw {
        select(&V0_3);
        Ok(route::<H>(update(old, new, sync))?)
    }

    pub fn on_delete<H: Handler>(obj: RawObject, unknown: bool) -> Raw {
        select(&V0_3);
        Ok(route::<H>(delete(obj, unknown))?)
    }

    pub fn on_synced<H: Handler>() -> Raw {
        select(&V0_3);
        Ok(H::on_synced()?)
    }
}

/// What [`handler_v0_1!`](crate::handler_v0_1) calls: the same handler exported as a
/// `kubewasm:handler@0.1.0` component (no `on_synced`, no writes, Events or HTTP).
#[doc(hidden)]
pub mod adapter_v0_1 {
    use super::*;
    use crate::bindings_v0_1::kubewasm::handler::types::{
        HandlerError, Object as RawObject, PluginInfo,
    };
    use crate::world::{V0_1, from_v0_1, select};

    type Raw = std::result::Result<(), HandlerError>;

    fn raw(r: Result<()>) -> Raw {
        r.map_err(|e| {
            if e.is_retryable() {
                HandlerError::Retry(e.to_string())
            } else {
                HandlerError::Fatal(e.to_string())
            }
        })
    }

    pub fn describe<H: Handler>() -> PluginInfo {
        select(&V0_1);
        let d = H::describe();
        record::<H>(&d);
        d.into_info_v0_1::<H::Kind>()
    }

    pub fn on_add<H: Handler>(obj: RawObject, init: bool) -> Raw {
        select(&V0_1);
        raw(route::<H>(add(from_v0_1(obj), init)))
    }

    pub fn on_update<H: Handler>(old: RawObject, new: RawObject, sync: bool) -> Raw {
        select(&V0_1);
        raw(route::<H>(update(from_v0_1(old), from_v0_1(new), sync)))
    }

    pub fn on_delete<H: Handler>(obj: RawObject, unknown: bool) -> Raw {
        select(&V0_1);
        raw(route::<H>(delete(from_v0_1(obj), unknown)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Describe;
    use crate::bindings::kubewasm::handler0_2_0::types::HandlerError;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use std::cell::RefCell;

    thread_local! {
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    fn seen(what: String) {
        SEEN.with(|s| s.borrow_mut().push(what));
    }

    fn raw(api_version: &str, kind: &str, name: &str) -> RawObject {
        RawObject {
            meta: RawMeta {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: None,
                name: name.into(),
                uid: format!("uid-{name}"),
                resource_version: "1".into(),
                generation: None,
                labels: Vec::new(),
            },
            json: format!(
                r#"{{"apiVersion":"{api_version}","kind":"{kind}","metadata":{{"name":"{name}"}}}}"#
            ),
        }
    }

    /// A Namespace handler that also watches Deployments and a custom kind.
    struct Ns;
    impl Handler for Ns {
        type Kind = Namespace;
        fn describe() -> Describe {
            Describe::new("ns").watch::<Deployment>().watch_kind(
                "example.com/v1",
                "Widget",
                crate::Watch::new(),
            )
        }
        fn on_add(obj: &Lazy<Namespace>, init: Init) -> Result<()> {
            seen(format!(
                "own add {} {}",
                obj.get()?.metadata.name.as_deref().unwrap(),
                init.0
            ));
            Ok(())
        }
        fn on_update(_: &Lazy<Namespace>, new: &Lazy<Namespace>, _: Sync) -> Result<()> {
            seen(format!("own update {}", new.name()));
            Ok(())
        }
        fn on_watched(event: Watched) -> Result<()> {
            let event = match event.downcast::<ConfigMap>() {
                Ok(_) => unreachable!("no ConfigMap is watched"),
                Err(event) => event,
            };
            let event = match event.downcast::<Deployment>() {
                Ok(Event::Delete(d, unknown)) => {
                    seen(format!(
                        "deployment delete {} {}",
                        d.get()?.metadata.name.as_deref().unwrap(),
                        unknown.0
                    ));
                    return Ok(());
                }
                Ok(e) => {
                    seen(format!("deployment {} {}", e.change(), e.object().name()));
                    return Ok(());
                }
                Err(event) => event,
            };
            assert!(event.is::<crate::DynamicObject>());
            seen(format!(
                "{} {} {}",
                event.change(),
                event.kind(),
                event.name()
            ));
            Err(crate::Error::fatal("widgets fail"))
        }
    }

    /// A handler of one kind, as every handler was before `watch`: every event is its own.
    struct One;
    impl Handler for One {
        type Kind = ConfigMap;
        fn describe() -> Describe {
            Describe::new("one")
        }
        fn on_add(obj: &Lazy<ConfigMap>, _: Init) -> Result<()> {
            seen(format!("own add {} {}", obj.kind(), obj.name()));
            Ok(())
        }
        fn on_watched(_: Watched) -> Result<()> {
            unreachable!("a handler without watches gets no watched events")
        }
    }

    #[test]
    fn each_event_reaches_the_callback_of_its_kind() {
        let info = adapter::describe::<Ns>();
        let kinds: Vec<_> = info.subscriptions.iter().map(|s| s.kind.as_str()).collect();
        assert_eq!(kinds, ["Namespace", "Deployment", "Widget"]);
        adapter::on_add::<Ns>(raw("v1", "Namespace", "a"), true).unwrap();
        adapter::on_update::<Ns>(
            raw("v1", "Namespace", "a"),
            raw("v1", "Namespace", "a"),
            false,
        )
        .unwrap();
        adapter::on_add::<Ns>(raw("apps/v1", "Deployment", "web"), false).unwrap();
        adapter::on_update::<Ns>(
            raw("apps/v1", "Deployment", "web"),
            raw("apps/v1", "Deployment", "web"),
            true,
        )
        .unwrap();
        adapter::on_delete::<Ns>(raw("apps/v1", "Deployment", "web"), true).unwrap();
        let widget = adapter::on_add::<Ns>(raw("example.com/v1", "Widget", "w"), false);
        assert!(
            matches!(&widget, Err(HandlerError::Fatal(m)) if m == "widgets fail"),
            "{widget:?}"
        );
        assert_eq!(
            SEEN.with(|s| s.take()),
            [
                "own add a true",
                "own update a",
                "deployment add web",
                "deployment update web",
                "deployment delete web true",
                "add Widget w",
            ]
        );
    }

    #[test]
    fn a_handler_without_watches_gets_every_event_as_its_own() {
        let info = adapter::describe::<One>();
        assert_eq!(info.subscriptions.len(), 1);
        adapter::on_add::<One>(raw("v1", "ConfigMap", "c"), false).unwrap();
        assert_eq!(SEEN.with(|s| s.take()), ["own add ConfigMap c"]);
    }

    #[test]
    fn routing_works_even_before_describe() {
        adapter::on_add::<Ns>(raw("apps/v1", "Deployment", "web"), false).unwrap();
        adapter::on_add::<Ns>(raw("v1", "Namespace", "b"), false).unwrap();
        assert_eq!(
            SEEN.with(|s| s.take()),
            ["deployment add web", "own add b false"]
        );
    }
}
