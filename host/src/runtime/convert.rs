//! Conversions between the runtime's own types and each world version's generated ones.
//!
//! `object`, `object-meta` and `handler-error` have the same shape in 0.1.0 and 0.2.0 but are
//! distinct Rust types per version, so one macro body states each conversion once and is
//! instantiated for both versions.

use super::guest_log::cap_guest_text;
use super::types::{GuestObject, HandlerOutcome, ObjectView, Permission, PluginInfo, Subscription};

/// What an owned copy of `v` ([`v2::owned_object`]) takes on the host: its strings, each label's
/// pair of strings, and the structs' own bytes. Charged before the copy is made.
pub(crate) fn owned_bytes(v: &ObjectView<'_>) -> u64 {
    /// The result struct, its meta and the label `Vec`'s own bytes, rounded up.
    const FIXED: usize = 256;
    /// One label's two `String`s.
    const PER_LABEL: usize = 48;
    let strings = [
        v.api_version,
        v.kind,
        v.namespace.unwrap_or_default(),
        v.name,
        v.uid,
        v.resource_version,
        v.json,
    ]
    .iter()
    .map(|s| s.len())
    .sum::<usize>();
    let labels = v
        .labels
        .iter()
        .map(|(k, val)| k.len() + val.len() + PER_LABEL)
        .sum::<usize>();
    (FIXED + strings + labels) as u64
}

macro_rules! shared_conversions {
    ($wit:path) => {
        use super::*;
        use $wit as wit;

        /// Borrows the object's strings; wasmtime copies them straight into guest memory.
        pub(crate) fn object_param<'a>(
            obj: &'a dyn GuestObject,
            labels: &'a [(&'a str, &'a str)],
        ) -> wit::ObjectParam<'a> {
            let v = obj.view();
            wit::ObjectParam {
                meta: wit::ObjectMetaParam {
                    api_version: v.api_version,
                    kind: v.kind,
                    namespace: v.namespace,
                    name: v.name,
                    uid: v.uid,
                    resource_version: v.resource_version,
                    generation: v.generation,
                    labels,
                },
                json: v.json,
            }
        }

        /// Owned copy for an import result; wasmtime lowers it into guest memory right after.
        pub(crate) fn owned_object(obj: &dyn GuestObject) -> wit::ObjectResult {
            let v = obj.view();
            wit::ObjectResult {
                meta: wit::ObjectMetaResult {
                    api_version: v.api_version.to_owned(),
                    kind: v.kind.to_owned(),
                    namespace: v.namespace.map(str::to_owned),
                    name: v.name.to_owned(),
                    uid: v.uid.to_owned(),
                    resource_version: v.resource_version.to_owned(),
                    generation: v.generation,
                    labels: v.labels.to_vec(),
                },
                json: v.json.to_owned(),
            }
        }

        /// A handler's result as the plugins layer sees it; guest text is capped.
        pub(crate) fn outcome(result: Result<(), wit::HandlerError>) -> HandlerOutcome {
            match result {
                Ok(()) => HandlerOutcome::Ok,
                Err(wit::HandlerError::Retry(msg)) => HandlerOutcome::Retry(cap_guest_text(msg)),
                Err(wit::HandlerError::Fatal(msg)) => HandlerOutcome::Fatal(cap_guest_text(msg)),
            }
        }
    };
}

/// `kubewasm:handler@0.1.0`.
pub(crate) mod v1 {
    shared_conversions!(crate::runtime::bindings::v1::kubewasm::handler::types);

    /// A 0.1.0 `describe()` result: subscriptions only, nothing asked for beyond them.
    pub(crate) fn plugin_info(info: wit::PluginInfo) -> PluginInfo {
        PluginInfo {
            name: info.name,
            subscriptions: info
                .subscriptions
                .into_iter()
                .map(|s| Subscription {
                    api_version: s.api_version,
                    kind: s.kind,
                    namespace: s.namespace,
                    label_selector: s.label_selector,
                    field_selector: s.field_selector,
                    resync_period_ms: s.resync_period_ms,
                    metadata_only: false,
                    fields: Vec::new(),
                })
                .collect(),
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: false,
            controller: None,
        }
    }
}

/// `kubewasm:handler@0.2.0`.
pub(crate) mod v2 {
    shared_conversions!(crate::runtime::bindings::v2::kubewasm::handler::types);

    /// A 0.2.0 `describe()` result, with what the handler asks to be granted.
    pub(crate) fn plugin_info(info: wit::PluginInfo) -> PluginInfo {
        PluginInfo {
            name: info.name,
            subscriptions: info.subscriptions.into_iter().map(subscription).collect(),
            permissions: info.permissions.into_iter().map(permission).collect(),
            http_origins: info.http_origins,
            events: info.events,
            controller: None,
        }
    }

    /// One subscription (0.3.0 declares them in the same type).
    pub(crate) fn subscription(s: wit::Subscription) -> Subscription {
        Subscription {
            api_version: s.api_version,
            kind: s.kind,
            namespace: s.namespace,
            label_selector: s.label_selector,
            field_selector: s.field_selector,
            resync_period_ms: s.resync_period_ms,
            metadata_only: s.metadata_only,
            fields: s.fields,
        }
    }

    /// One permission (0.3.0 declares them in the same type).
    pub(crate) fn permission(p: wit::Permission) -> Permission {
        Permission {
            api_version: p.api_version,
            kind: p.kind,
            namespace: p.namespace,
            verbs: p.verbs,
        }
    }

    /// An API error as the guest receives it.
    pub(crate) fn api_error(e: crate::runtime::ApiError) -> wit::ApiError {
        wit::ApiError {
            code: e.code,
            reason: e.reason,
            message: e.message,
        }
    }
}

/// `kubewasm:handler@0.3.0`, world `controller`. Its objects, subscriptions and errors are
/// 0.2.0's types (see `bindings.rs`), converted by [`v2`].
pub(crate) mod v3c {
    use std::time::Duration;

    use super::v2;
    use crate::runtime::bindings::v2::kubewasm::handler::types::HandlerError;
    use crate::runtime::bindings::v3c::kubewasm::handler0_3_0::controller_types as wit;
    use crate::runtime::guest_log::cap_guest_text;
    use crate::runtime::types::{
        HandlerOutcome, KeyMapping, MAX_REQUEUE_AFTER, MIN_REQUEUE_AFTER, ObjectKey, PluginInfo,
        Role,
    };

    /// A controller's `describe()`: its primary, owned and watched kinds become subscriptions
    /// in that order, each with its role.
    pub(crate) fn plugin_info(info: wit::ControllerInfo) -> PluginInfo {
        let mut subscriptions = Vec::with_capacity(1 + info.owns.len() + info.watches.len());
        let mut roles = Vec::with_capacity(subscriptions.capacity());
        subscriptions.push(v2::subscription(info.primary));
        roles.push(Role::Primary);
        for s in info.owns {
            subscriptions.push(v2::subscription(s));
            roles.push(Role::Owned);
        }
        for w in info.watches {
            subscriptions.push(v2::subscription(w.subscription));
            roles.push(Role::Watched(match w.mapping {
                wit::Mapping::SameName => KeyMapping::SameName,
                wit::Mapping::Label(l) => KeyMapping::Label(l),
                wit::Mapping::Field(f) => KeyMapping::Field(f),
                wit::Mapping::Guest => KeyMapping::Guest,
            }));
        }
        PluginInfo {
            name: info.name,
            subscriptions,
            permissions: info.permissions.into_iter().map(v2::permission).collect(),
            http_origins: info.http_origins,
            events: info.events,
            controller: Some(roles),
        }
    }

    /// The key a reconcile is for, borrowed into the call.
    pub(crate) fn key_param(key: &ObjectKey) -> wit::ObjectKeyParam<'_> {
        wit::ObjectKeyParam {
            namespace: key.namespace.as_deref(),
            name: &key.name,
        }
    }

    /// Keys a `keys-for` call returned.
    pub(crate) fn keys(keys: Vec<wit::ObjectKeyResult>) -> Vec<ObjectKey> {
        keys.into_iter()
            .map(|k| ObjectKey {
                namespace: k.namespace,
                name: k.name,
            })
            .collect()
    }

    /// A reconcile's result as the plugins layer sees it; a requeue is from
    /// [`MIN_REQUEUE_AFTER`] to [`MAX_REQUEUE_AFTER`] away, whatever number the guest sent.
    pub(crate) fn outcome(result: Result<wit::Outcome, HandlerError>) -> HandlerOutcome {
        match result {
            Ok(wit::Outcome::Done) => HandlerOutcome::Ok,
            Ok(wit::Outcome::RequeueAfter(ms)) => {
                let after = Duration::from_millis(ms).clamp(MIN_REQUEUE_AFTER, MAX_REQUEUE_AFTER);
                HandlerOutcome::RequeueAfter(after)
            }
            Err(HandlerError::Retry(msg)) => HandlerOutcome::Retry(cap_guest_text(msg)),
            Err(HandlerError::Fatal(msg)) => HandlerOutcome::Fatal(cap_guest_text(msg)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::v3c;
    use crate::runtime::bindings::v3c::kubewasm::handler0_3_0::controller_types::Outcome;
    use crate::runtime::{HandlerOutcome, MAX_REQUEUE_AFTER, MIN_REQUEUE_AFTER};

    /// A hostile number cannot overflow the queue's timer, nor make a key spin.
    #[test]
    fn a_requeue_is_kept_between_a_second_and_a_week() {
        for (ms, after) in [
            (0, MIN_REQUEUE_AFTER),
            (1, MIN_REQUEUE_AFTER),
            (30_000, Duration::from_secs(30)),
            (u64::MAX, MAX_REQUEUE_AFTER),
        ] {
            assert_eq!(
                v3c::outcome(Ok(Outcome::RequeueAfter(ms))),
                HandlerOutcome::RequeueAfter(after)
            );
        }
    }
}
