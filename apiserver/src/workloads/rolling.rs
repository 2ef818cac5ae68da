//! What the Deployment controller decides, as pure functions of the Deployment and its
//! ReplicaSets (kube-controller-manager's `pkg/controller/deployment`: `rolling.go`,
//! `recreate.go`, `sync.go`, `util/deployment_util.go`), so the arithmetic is tested without
//! a server: `maxSurge`/`maxUnavailable` fenceposts, one rolling step, revision numbers,
//! history pruning, the status counts.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A `maxSurge` / `maxUnavailable` value that is neither an integer nor a percentage.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid value {0:?}: must be an integer or a percentage")]
pub struct BadIntOrPercent(pub String);

/// One ReplicaSet as the decisions see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rs {
    /// Its name.
    pub name: String,
    /// `deployment.kubernetes.io/revision` (0 when absent or not a number).
    pub revision: i64,
    /// `spec.replicas`.
    pub spec_replicas: i32,
    /// `status.replicas`.
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// `metadata.generation > status.observedGeneration`: its status is not about its spec yet.
    pub stale: bool,
}

/// `intstr.GetScaledValueFromIntOrPercent`: an integer as it is, a percentage of `total`
/// rounded up (`round_up`, maxSurge) or down (maxUnavailable).
pub fn scaled(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, BadIntOrPercent> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let p: i64 = s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| BadIntOrPercent(s.clone()))?;
            let prod = p * i64::from(total);
            let v = if round_up {
                (prod + 99).div_euclid(100)
            } else {
                prod.div_euclid(100)
            };
            Ok(v as i32)
        }
    }
}

/// `ResolveFenceposts`: (maxSurge, maxUnavailable) for `replicas`, defaults 25%/25%; when both
/// come to zero (small percentages), maxUnavailable is 1 so the rollout can move (validation
/// refuses both given as zero).
pub fn fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> Result<(i32, i32), BadIntOrPercent> {
    let quarter = IntOrString::String("25%".into());
    let surge = scaled(max_surge.unwrap_or(&quarter), replicas, true)?.max(0);
    let unavailable = scaled(max_unavailable.unwrap_or(&quarter), replicas, false)?.max(0);
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

/// `reconcileNewReplicaSet` of a rolling update: the new ReplicaSet's next `spec.replicas`,
/// never making the Pods of all sets more than `replicas + max_surge`.
pub fn new_replicas(replicas: i32, max_surge: i32, new: &Rs, olds: &[Rs]) -> i32 {
    if new.spec_replicas >= replicas {
        return replicas;
    }
    let current: i32 = new.spec_replicas + olds.iter().map(|r| r.spec_replicas).sum::<i32>();
    let room = (replicas + max_surge - current).max(0);
    new.spec_replicas + room.min(replicas - new.spec_replicas)
}

/// `reconcileOldReplicaSets`: the old ReplicaSets' next `spec.replicas` (same order as
/// `olds`), scaled down only as far as keeps `replicas - max_unavailable` Pods available:
/// first the old sets' unavailable Pods, then available ones, oldest revision first.
pub fn old_replicas(
    replicas: i32,
    max_unavailable: i32,
    new: Option<&Rs>,
    olds: &[Rs],
) -> Vec<i32> {
    let mut out: Vec<i32> = olds.iter().map(|r| r.spec_replicas).collect();
    let old_total: i32 = out.iter().sum();
    if old_total == 0 {
        return out;
    }
    let all = old_total + new.map_or(0, |n| n.spec_replicas);
    let min_available = replicas - max_unavailable;
    let new_unavailable = new.map_or(0, |n| (n.spec_replicas - n.available).max(0));
    let mut budget = all - min_available - new_unavailable;
    if budget <= 0 {
        return out;
    }
    let mut order: Vec<usize> = (0..olds.len()).collect();
    order.sort_by_key(|&i| (olds[i].revision, olds[i].name.clone()));
    // Unhealthy Pods first: removing them costs no availability.
    for &i in &order {
        if budget == 0 {
            break;
        }
        let unhealthy = (out[i] - olds[i].available).max(0).min(budget);
        out[i] -= unhealthy;
        budget -= unhealthy;
    }
    // Then available ones, as far as availability allows.
    let available: i32 =
        olds.iter().map(|r| r.available).sum::<i32>() + new.map_or(0, |n| n.available);
    let mut budget = (available - min_available).max(0);
    for &i in &order {
        if budget == 0 {
            break;
        }
        let cut = out[i].min(budget);
        out[i] -= cut;
        budget -= cut;
    }
    out
}

/// The revision the new ReplicaSet gets: one more than any old one's
/// (`SetNewReplicaSetAnnotations`); a set keeps a revision already that high.
pub fn next_revision(olds: &[Rs]) -> i64 {
    olds.iter().map(|r| r.revision).max().unwrap_or(0) + 1
}

/// `cleanupDeployment`: the old ReplicaSets beyond `limit` to delete, oldest revision first,
/// skipping any that still has Pods or has not observed its spec.
pub fn prune(olds: &[Rs], limit: i32) -> Vec<String> {
    let excess = olds.len() as i64 - i64::from(limit.max(0));
    if excess <= 0 {
        return Vec::new();
    }
    let mut sorted: Vec<&Rs> = olds.iter().collect();
    sorted.sort_by_key(|r| (r.revision, r.name.clone()));
    sorted
        .into_iter()
        .take(excess as usize)
        .filter(|r| r.replicas == 0 && r.spec_replicas == 0 && !r.stale)
        .map(|r| r.name.clone())
        .collect()
}

/// The counts of a Deployment's status (`calculateStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Pods of all its ReplicaSets (`status.replicas` summed).
    pub replicas: i32,
    /// Pods of the new ReplicaSet.
    pub updated: i32,
    /// Ready Pods.
    pub ready: i32,
    /// Available Pods.
    pub available: i32,
    /// Desired Pods (`spec.replicas` summed) not available, at least 0.
    pub unavailable: i32,
}

/// [`Counts`] of `new` and `olds`.
pub fn counts(new: Option<&Rs>, olds: &[Rs]) -> Counts {
    let all: Vec<&Rs> = new.into_iter().chain(olds).collect();
    let spec: i32 = all.iter().map(|r| r.spec_replicas).sum();
    let available = all.iter().map(|r| r.available).sum();
    Counts {
        replicas: all.iter().map(|r| r.replicas).sum(),
        updated: new.map_or(0, |n| n.replicas),
        ready: all.iter().map(|r| r.ready).sum(),
        available,
        unavailable: (spec - available).max(0),
    }
}

/// `DeploymentComplete`: every Pod updated and available, none old left.
pub fn complete(replicas: i32, c: &Counts) -> bool {
    c.updated == replicas && c.replicas == replicas && c.available == replicas
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    fn rs(name: &str, revision: i64, spec: i32, available: i32) -> Rs {
        Rs {
            name: name.into(),
            revision,
            spec_replicas: spec,
            replicas: spec,
            ready: available,
            available,
            stale: false,
        }
    }

    #[test]
    fn surge_rounds_up_unavailable_rounds_down_and_both_zero_moves() {
        assert_eq!(fenceposts(None, None, 10), Ok((3, 2)));
        assert_eq!(fenceposts(None, None, 4), Ok((1, 1)));
        assert_eq!(fenceposts(None, None, 1), Ok((1, 0)));
        assert_eq!(
            fenceposts(Some(&IntOrString::Int(2)), Some(&pct("50%")), 5),
            Ok((2, 2))
        );
        assert_eq!(
            fenceposts(Some(&IntOrString::Int(0)), Some(&IntOrString::Int(0)), 3),
            Ok((0, 1))
        );
        assert_eq!(
            fenceposts(Some(&pct("0%")), Some(&pct("10%")), 5),
            Ok((0, 1))
        );
        assert_eq!(
            fenceposts(Some(&pct("many")), None, 5),
            Err(BadIntOrPercent("many".into()))
        );
        assert_eq!(scaled(&pct("33%"), 10, true), Ok(4));
        assert_eq!(scaled(&pct("33%"), 10, false), Ok(3));
    }

    /// Roll `replicas` Pods with the given fenceposts, Pods becoming available one step
    /// after their set is scaled up; check every intermediate state.
    fn roll(replicas: i32, surge: i32, unavailable: i32) -> usize {
        let mut old = rs("old", 1, replicas, replicas);
        let mut new = rs("new", 2, 0, 0);
        for step in 0..10_000 {
            let total = old.spec_replicas + new.spec_replicas;
            let available = old.available + new.available;
            assert!(total <= replicas + surge, "step {step}: {total} Pods");
            assert!(
                available >= replicas - unavailable,
                "step {step}: {available} available"
            );
            if new.available == replicas && old.spec_replicas == 0 {
                return step;
            }
            // One sync: scale up the new set, else down the old ones (as the controller does).
            let up = new_replicas(replicas, surge, &new, std::slice::from_ref(&old));
            if up != new.spec_replicas {
                new.spec_replicas = up;
                new.replicas = up;
            } else {
                let down = old_replicas(
                    replicas,
                    unavailable,
                    Some(&new),
                    std::slice::from_ref(&old),
                );
                old.spec_replicas = down[0];
                old.replicas = down[0];
                old.available = old.available.min(down[0]);
            }
            // The Pods started last step are ready now.
            new.available = new.spec_replicas.min(new.available + replicas);
        }
        panic!(
            "the rollout of {replicas} ({surge}, {unavailable}) never finished: {old:?} {new:?}"
        );
    }

    #[test]
    fn rolling_steps_keep_availability_and_the_surge_bound() {
        for replicas in [1, 2, 3, 5, 10, 1000] {
            for (s, u) in [
                ("25%", "25%"),
                ("0", "1"),
                ("1", "0"),
                ("100%", "0"),
                ("0", "100%"),
            ] {
                let parse = |v: &str| match v.parse() {
                    Ok(i) => IntOrString::Int(i),
                    Err(_) => pct(v),
                };
                let (surge, unavailable) =
                    fenceposts(Some(&parse(s)), Some(&parse(u)), replicas).unwrap();
                roll(replicas, surge, unavailable);
            }
        }
    }

    #[test]
    fn unavailable_old_pods_go_first() {
        // 3 replicas, maxUnavailable 1, the new Pod not available yet: of the old set's 2
        // unready Pods one may go (4 Pods, 2 must stay available, 1 new one unavailable).
        let old = rs("old", 1, 3, 1);
        let new = rs("new", 2, 1, 0);
        assert_eq!(
            old_replicas(3, 1, Some(&new), std::slice::from_ref(&old)),
            vec![2]
        );
        // Once the new Pod is available, both unready old Pods go.
        let new = rs("new", 2, 1, 1);
        assert_eq!(old_replicas(3, 1, Some(&new), &[old]), vec![1]);
        // All available, new not yet: only down to min availability.
        let old = rs("old", 1, 3, 3);
        let new = rs("new", 2, 1, 0);
        assert_eq!(old_replicas(3, 1, Some(&new), &[old]), vec![2]);
    }

    #[test]
    fn revisions_count_up_and_an_undone_set_gets_the_next() {
        assert_eq!(next_revision(&[]), 1);
        let olds = [rs("a", 1, 0, 0), rs("b", 2, 3, 3)];
        assert_eq!(next_revision(&olds), 3);
        // Undo to revision 1: "a" is the new set, the old ones are "b" only.
        assert_eq!(next_revision(&olds[1..]), 3);
    }

    #[test]
    fn history_keeps_the_newest_empty_sets() {
        let olds: Vec<Rs> = (1..=5).map(|i| rs(&format!("r{i}"), i, 0, 0)).collect();
        assert_eq!(prune(&olds, 2), vec!["r1", "r2", "r3"]);
        assert_eq!(prune(&olds, 10), Vec::<String>::new());
        assert_eq!(prune(&olds, 0).len(), 5);
        let mut busy = olds.clone();
        busy[0].spec_replicas = 1;
        busy[1].stale = true;
        assert_eq!(prune(&busy, 2), vec!["r3"]);
    }

    #[test]
    fn counts_follow_the_sets() {
        let new = rs("new", 2, 2, 1);
        let old = rs("old", 1, 2, 2);
        let c = counts(Some(&new), std::slice::from_ref(&old));
        assert_eq!(
            c,
            Counts {
                replicas: 4,
                updated: 2,
                ready: 3,
                available: 3,
                unavailable: 1
            }
        );
        assert!(!complete(3, &c));
        let done = counts(Some(&rs("new", 2, 3, 3)), &[rs("old", 1, 0, 0)]);
        assert!(complete(3, &done));
    }
}
