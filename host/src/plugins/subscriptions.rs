//! What a plugin's `describe()` asks to watch, checked before anything reaches the API server:
//! every field valid (the rules live with [`InformerKey`]), at most [`MAX_SUBSCRIPTIONS`], and
//! identical subscriptions merged into one.

use std::time::Duration;

use crate::informer::InformerKey;
use crate::runtime::Subscription;

/// Most subscriptions one plugin may declare. Each is an informer (a watch on the API server)
/// or a listener on one; a handler needs a few.
pub const MAX_SUBSCRIPTIONS: usize = 32;

/// Why a plugin's subscriptions were refused; the message names the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionError {
    /// `describe()` returned nothing to subscribe to.
    #[error("returned no subscriptions; the plugin would never be called")]
    None,
    /// More than [`MAX_SUBSCRIPTIONS`].
    #[error("returned {0} subscriptions, more than the {MAX_SUBSCRIPTIONS} a plugin may declare")]
    TooMany(usize),
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

/// Validates `subs` and merges identical ones (same resource, namespace and selectors; the
/// shortest non-zero resync period wins). Returns the informer key and resync period of each
/// remaining subscription, in `subs` order; `subs` is left holding the merged list.
pub fn validate_subscriptions(
    subs: &mut Vec<Subscription>,
) -> Result<Vec<(InformerKey, Option<Duration>)>, SubscriptionError> {
    if subs.is_empty() {
        return Err(SubscriptionError::None);
    }
    if subs.len() > MAX_SUBSCRIPTIONS {
        return Err(SubscriptionError::TooMany(subs.len()));
    }
    let mut keys: Vec<(InformerKey, Option<Duration>)> = Vec::with_capacity(subs.len());
    let mut merged: Vec<Subscription> = Vec::with_capacity(subs.len());
    for (index, sub) in subs.drain(..).enumerate() {
        let invalid = |reason: String| SubscriptionError::Invalid {
            index,
            api_version: format!("{:?}", truncate(&sub.api_version)),
            kind: format!("{:?}", truncate(&sub.kind)),
            reason,
        };
        // Projections are part of the 0.2.0 contract but not served yet: refusing them is
        // better than handing the handler JSON of a shape it did not ask for.
        if sub.metadata_only || !sub.fields.is_empty() {
            return Err(invalid(
                "metadata-only and fields projections are not supported by this host yet".into(),
            ));
        }
        let key = super::lifecycle::informer_key(&sub);
        key.validate().map_err(|e| invalid(e.to_string()))?;
        let resync =
            (sub.resync_period_ms > 0).then(|| Duration::from_millis(sub.resync_period_ms));
        match keys.iter().position(|(k, _)| *k == key) {
            Some(i) => {
                let shorter = match (keys[i].1, resync) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                keys[i].1 = shorter;
                merged[i].resync_period_ms = shorter.map_or(0, |d| d.as_millis() as u64);
            }
            None => {
                keys.push((key, resync));
                merged.push(sub);
            }
        }
    }
    *subs = merged;
    Ok(keys)
}

/// Guest strings shown in errors are cut, so a 1 MB "kind" does not become a 1 MB log line.
fn truncate(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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

    #[test]
    fn identical_subscriptions_merge_with_the_shortest_resync() {
        let mut subs = vec![
            sub(Some("a"), None, 0),
            sub(Some("b"), None, 0),
            sub(Some("a"), None, 5000),
            sub(Some("a"), None, 2000),
        ];
        let keys = validate_subscriptions(&mut subs).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(subs.len(), 2);
        assert_eq!(keys[0].1, Some(Duration::from_millis(2000)));
        assert_eq!(subs[0].resync_period_ms, 2000);
        assert_eq!(keys[1].1, None);
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

    #[test]
    fn projections_are_refused_until_served() {
        let mut metadata_only = sub(None, None, 0);
        metadata_only.metadata_only = true;
        let err = validate_subscriptions(&mut vec![metadata_only])
            .unwrap_err()
            .to_string();
        assert!(err.contains("metadata-only and fields"), "{err}");
        let mut fields = sub(None, None, 0);
        fields.fields = vec!["/spec/type".into()];
        assert!(validate_subscriptions(&mut vec![fields]).is_err());
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
