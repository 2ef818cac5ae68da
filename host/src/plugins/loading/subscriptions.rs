//! What a plugin's `describe()` asks to watch, checked before anything reaches the API server:
//! every field valid (the rules live with [`InformerKey`]), at most [`MAX_SUBSCRIPTIONS`], and
//! identical subscriptions merged into one; `metadata-only` and `fields` parsed into a
//! [`Projection`] (the rules live there), one per resource: a handler gets one shape of a kind,
//! whether from a notification or a `cache` read, so all its subscriptions to one
//! `apiVersion`/`kind` must ask for the same projection.

use std::time::Duration;

use crate::informer::InformerKey;
use crate::plugins::capabilities::projection::Projection;
use crate::runtime::{KeyMapping, PluginInfo, Role, Subscription};

/// Most subscriptions one plugin may declare. Each is an informer (a watch on the API server)
/// or a listener on one; a handler needs a few.
pub(crate) const MAX_SUBSCRIPTIONS: usize = 32;

/// Why a plugin's subscriptions were refused; the message names the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SubscriptionError {
    /// `describe()` returned nothing to subscribe to.
    #[error("returned no subscriptions; the plugin would never be called")]
    None,
    /// More than [`MAX_SUBSCRIPTIONS`].
    #[error("returned {0} subscriptions, more than the {MAX_SUBSCRIPTIONS} a plugin may declare")]
    TooMany(usize),
    /// A controller's declarations do not fit together.
    #[error("controller: {0}")]
    Controller(String),
    /// A field is not valid.
    #[error("subscription {index} ({api_version} {kind}): {reason}")]
    Invalid {
        /// Position in the `describe()` result.
        index: usize,
        /// As declared (quoted when shown).
        api_version: String,
        /// As declared.
        kind: String,
        /// Names the field and the value.
        reason: String,
    },
}

/// What one validated subscription needs from the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SubscriptionPlan {
    /// The informer it listens to (shared with every equal subscription of any plugin).
    pub key: InformerKey,
    /// Its resync period, if any.
    pub resync: Option<Duration>,
    /// What of each object crosses into the guest; `None` for the whole object.
    pub projection: Option<Projection>,
}

/// Validates `subs` and merges identical ones (same resource, namespace and selectors; the
/// shortest non-zero resync period wins). Returns the plan of each remaining subscription, in
/// `subs` order; `subs` is left holding the merged list.
pub(crate) fn validate_subscriptions(
    subs: &mut Vec<Subscription>,
) -> Result<Vec<SubscriptionPlan>, SubscriptionError> {
    if subs.is_empty() {
        return Err(SubscriptionError::None);
    }
    if subs.len() > MAX_SUBSCRIPTIONS {
        return Err(SubscriptionError::TooMany(subs.len()));
    }
    let mut plans: Vec<SubscriptionPlan> = Vec::with_capacity(subs.len());
    let mut merged: Vec<Subscription> = Vec::with_capacity(subs.len());
    for (index, sub) in subs.drain(..).enumerate() {
        let invalid = |reason: String| SubscriptionError::Invalid {
            index,
            api_version: format!("{:?}", truncate(&sub.api_version)),
            kind: format!("{:?}", truncate(&sub.kind)),
            reason,
        };
        let projection = Projection::parse(sub.metadata_only, &sub.fields)
            .map_err(|e| invalid(e.to_string()))?;
        let key = super::describe::informer_key(&sub);
        key.validate().map_err(|e| invalid(e.to_string()))?;
        if plans.iter().any(|p| {
            p.key.api_version == key.api_version
                && p.key.kind == key.kind
                && p.projection != projection
        }) {
            return Err(invalid(
                "metadata-only/fields differ from those of an earlier subscription to the same \
                 kind; a handler gets one shape of a kind, so every subscription to it must ask \
                 for the same projection"
                    .into(),
            ));
        }
        let resync =
            (sub.resync_period_ms > 0).then(|| Duration::from_millis(sub.resync_period_ms));
        match plans.iter().position(|p| p.key == key) {
            Some(i) => {
                let shorter = match (plans[i].resync, resync) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                plans[i].resync = shorter;
                merged[i].resync_period_ms = shorter.map_or(0, |d| d.as_millis() as u64);
            }
            None => {
                plans.push(SubscriptionPlan {
                    key,
                    resync,
                    projection,
                });
                merged.push(sub);
            }
        }
    }
    *subs = merged;
    Ok(plans)
}

/// Longest JSON pointer a `field` mapping may name (as a projection's `fields`).
const MAX_POINTER_BYTES: usize = 256;

/// A controller's declarations: each kind once among its primary, owned and watched kinds (an
/// event of a kind must mean one thing), and each mapping well formed. Runs before
/// [`validate_subscriptions`], which then never merges two of them.
pub(crate) fn validate_controller(info: &PluginInfo) -> Result<(), SubscriptionError> {
    let Some(roles) = &info.controller else {
        return Ok(());
    };
    let bad = |m: String| Err(SubscriptionError::Controller(m));
    if roles.len() != info.subscriptions.len() || roles.first() != Some(&Role::Primary) {
        return bad("its primary kind must come first, and each subscription needs a role".into());
    }
    let name = |r: &Role| match r {
        Role::Primary => "the primary kind",
        Role::Owned => "an owned kind",
        Role::Watched(_) => "a watched kind",
    };
    for (i, (sub, role)) in info.subscriptions.iter().zip(roles).enumerate() {
        let kind = format!("{:?} {:?}", truncate(&sub.api_version), truncate(&sub.kind));
        if let Some(j) = info.subscriptions[..i]
            .iter()
            .position(|s| s.api_version == sub.api_version && s.kind == sub.kind)
        {
            return bad(format!(
                "{kind} is declared as {} and again as {}; a controller declares each kind once",
                name(&roles[j]),
                name(role)
            ));
        }
        match role {
            Role::Watched(KeyMapping::Field(p))
                if !p.starts_with('/') || p.len() > MAX_POINTER_BYTES =>
            {
                return bad(format!(
                    "watched kind {kind}: field mapping {:?} is not a JSON pointer of at most \
                     {MAX_POINTER_BYTES} bytes starting with '/'",
                    truncate(p)
                ));
            }
            Role::Watched(KeyMapping::Label(l)) if !is_label_key(l) => {
                return bad(format!(
                    "watched kind {kind}: label mapping {:?} is not a label key",
                    truncate(l)
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `key` is a valid label key (the selector parser's rule: a bare key selects "has it").
fn is_label_key(key: &str) -> bool {
    !key.is_empty()
        && !key.contains([',', '=', '!', ' ', '(', ')'])
        && kubewasm_apimachinery::LabelSelector::parse(key)
            .is_ok_and(|s| s.requirements().len() == 1 && s.requirements()[0].key() == key)
}

/// Guest strings shown in errors are cut, so a 1 MB "kind" does not become a 1 MB log line.
fn truncate(s: &str) -> &str {
    crate::text::truncate(s, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(ns: Option<&str>, labels: Option<&str>, resync: u64) -> Subscription {
        Subscription {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: ns.map(str::to_string),
            label_selector: labels.map(str::to_string),
            field_selector: None,
            resync_period_ms: resync,
            metadata_only: false,
            fields: Vec::new(),
        }
    }

    fn controller(kinds: &[(&str, &str)], roles: Vec<Role>) -> PluginInfo {
        PluginInfo {
            name: "c".into(),
            subscriptions: kinds
                .iter()
                .map(|(av, kind)| Subscription {
                    api_version: (*av).into(),
                    kind: (*kind).into(),
                    ..sub(None, None, 0)
                })
                .collect(),
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: false,
            controller: Some(roles),
        }
    }

    #[test]
    fn a_controller_declares_each_kind_once_with_well_formed_mappings() {
        let ok = controller(
            &[
                ("example.com/v1", "App"),
                ("apps/v1", "Deployment"),
                ("v1", "Secret"),
            ],
            vec![
                Role::Primary,
                Role::Owned,
                Role::Watched(KeyMapping::Label("app.example.com/name".into())),
            ],
        );
        assert_eq!(validate_controller(&ok), Ok(()));
        let twice = controller(
            &[
                ("example.com/v1", "App"),
                ("v1", "Secret"),
                ("v1", "Secret"),
            ],
            vec![
                Role::Primary,
                Role::Owned,
                Role::Watched(KeyMapping::SameName),
            ],
        );
        let err = validate_controller(&twice).unwrap_err().to_string();
        assert!(
            err.contains("declared as an owned kind and again as a watched kind"),
            "{err}"
        );
        for (mapping, says) in [
            (
                KeyMapping::Field("spec/name".into()),
                "is not a JSON pointer",
            ),
            (
                KeyMapping::Field(format!("/{}", "x".repeat(300))),
                "is not a JSON pointer",
            ),
            (KeyMapping::Label("bad label!".into()), "is not a label key"),
            (KeyMapping::Label(String::new()), "is not a label key"),
        ] {
            let bad = controller(
                &[("example.com/v1", "App"), ("v1", "Secret")],
                vec![Role::Primary, Role::Watched(mapping)],
            );
            let err = validate_controller(&bad).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
            assert!(err.len() < 400, "a guest string is cut in the error: {err}");
        }
        let not_first = controller(
            &[("v1", "Secret"), ("example.com/v1", "App")],
            vec![Role::Owned, Role::Primary],
        );
        assert!(validate_controller(&not_first).is_err());
    }

    #[test]
    fn identical_subscriptions_merge_with_the_shortest_resync() {
        let mut subs = vec![
            sub(Some("a"), None, 0),
            sub(Some("b"), None, 0),
            sub(Some("a"), None, 5000),
            sub(Some("a"), None, 2000),
        ];
        let plans = validate_subscriptions(&mut subs).unwrap();
        assert_eq!(plans.len(), 2);
        assert_eq!(subs.len(), 2);
        assert_eq!(plans[0].resync, Some(Duration::from_millis(2000)));
        assert_eq!(subs[0].resync_period_ms, 2000);
        assert_eq!(plans[1].resync, None);
        assert!(plans.iter().all(|p| p.projection.is_none()));
    }

    #[test]
    fn bad_values_name_the_field_and_value() {
        let mut subs = vec![sub(Some("kube-system/secrets?x="), None, 0)];
        let err = validate_subscriptions(&mut subs).unwrap_err().to_string();
        assert!(err.contains("namespace"), "{err}");
        assert!(err.contains("kube-system/secrets?x="), "{err}");
        let mut subs = vec![sub(None, Some("a in ("), 0)];
        let err = validate_subscriptions(&mut subs).unwrap_err().to_string();
        assert!(err.contains("label-selector"), "{err}");
    }

    fn projected(ns: Option<&str>, metadata_only: bool, fields: &[&str]) -> Subscription {
        Subscription {
            metadata_only,
            fields: fields.iter().map(|f| f.to_string()).collect(),
            ..sub(ns, None, 0)
        }
    }

    #[test]
    fn projections_are_parsed_into_the_plan() {
        let mut subs = vec![
            projected(Some("a"), false, &["/data/x", "/data"]),
            projected(Some("b"), false, &["/data"]),
        ];
        let plans = validate_subscriptions(&mut subs).unwrap();
        let want = Projection::parse(false, &["/data".to_string()]).unwrap();
        assert!(want.is_some());
        assert_eq!(plans[0].projection, want);
        assert_eq!(plans[1].projection, want, "normalised: the same projection");
        let mut subs = vec![projected(None, true, &[])];
        let plans = validate_subscriptions(&mut subs).unwrap();
        assert!(plans[0].projection.as_ref().unwrap().is_metadata_only());
    }

    #[test]
    fn bad_projections_are_refused_naming_the_field() {
        let mut subs = vec![projected(None, false, &["/spec/type", "spec"])];
        let err = validate_subscriptions(&mut subs).unwrap_err().to_string();
        assert_eq!(
            err,
            "subscription 0 (\"v1\" \"ConfigMap\"): fields[1] \"spec\" is not a JSON pointer \
             (RFC 6901): it must start with '/'"
        );
        let mut subs = vec![projected(None, true, &["/spec"])];
        let err = validate_subscriptions(&mut subs).unwrap_err().to_string();
        assert!(
            err.contains("metadata-only and fields exclude each other"),
            "{err}"
        );
    }

    #[test]
    fn one_kind_gets_one_projection() {
        // Other namespaces of the same kind with another projection: refused.
        let mut subs = vec![
            projected(Some("a"), false, &["/data"]),
            projected(Some("b"), true, &[]),
        ];
        let err = validate_subscriptions(&mut subs).unwrap_err().to_string();
        assert!(err.starts_with("subscription 1 "), "{err}");
        assert!(err.contains("same projection"), "{err}");
        // The whole object beside a projection of the same kind: refused too.
        let mut subs = vec![sub(Some("a"), None, 0), projected(Some("a"), true, &[])];
        assert!(validate_subscriptions(&mut subs).is_err());
        // Another kind may have its own.
        let mut secret = projected(None, true, &[]);
        secret.kind = "Secret".into();
        let mut subs = vec![projected(None, false, &["/data"]), secret];
        let plans = validate_subscriptions(&mut subs).unwrap();
        assert_ne!(plans[0].projection, plans[1].projection);
    }

    #[test]
    fn none_and_too_many_are_refused() {
        assert_eq!(
            validate_subscriptions(&mut Vec::new()),
            Err(SubscriptionError::None)
        );
        let mut many: Vec<_> = (0..10_000)
            .map(|i| sub(Some(&format!("ns{i}")), None, 0))
            .collect();
        assert_eq!(
            validate_subscriptions(&mut many),
            Err(SubscriptionError::TooMany(10_000))
        );
    }
}
