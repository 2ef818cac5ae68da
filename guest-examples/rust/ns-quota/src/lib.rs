//! ns-quota: a Namespace labelled `team=X` gets the ResourceQuota `team-quota` (server-side
//! apply, labelled with the team), an Event when the apply created it, the quota put back at
//! every resync if someone edited or deleted it, and the quota removed when the label goes.

use std::collections::BTreeMap;
use std::time::Duration;

use kubewasm_sdk::api::core::v1::{Namespace, ResourceQuota, ResourceQuotaSpec};
use kubewasm_sdk::apimachinery::pkg::api::resource::Quantity;
use kubewasm_sdk::{
    Describe, Handler, Init, Lazy, ObjectMeta, Result, Sync, events, info, kube, label,
};

const QUOTA: &str = "team-quota";
const MANAGED: &str = "app.kubernetes.io/managed-by";

struct NsQuota;

fn quota(ns: &str, team: &str) -> ResourceQuota {
    let hard = [
        ("pods", "20"),
        ("requests.cpu", "4"),
        ("requests.memory", "8Gi"),
    ];
    ResourceQuota {
        metadata: ObjectMeta {
            name: Some(QUOTA.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([
                ("team".into(), team.into()),
                (MANAGED.into(), "ns-quota".into()),
            ])),
            ..Default::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: Some(hard.map(|(k, v)| (k.into(), Quantity(v.into()))).into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn reconcile(ns: &Namespace) -> Result<()> {
    let name = ns.metadata.name.as_deref().unwrap_or_default();
    if ns.metadata.deletion_timestamp.is_some() {
        return Ok(()); // the quota goes with the namespace
    }
    match label(ns, "team") {
        Some(team) => {
            let applied = kube::apply(&quota(name, team))?;
            if applied.created {
                events::normal(
                    ns,
                    "QuotaCreated",
                    "Apply",
                    &format!("quota for team {team}"),
                );
            }
            info!(
                "ensured {name}/{QUOTA} team={team} created={}",
                applied.created
            );
        }
        // Only a quota this controller made is removed, and only that very object.
        None => match kube::get::<ResourceQuota>(Some(name), QUOTA)? {
            Some(q) if label(&q, MANAGED) == Some("ns-quota") => {
                kube::delete::<ResourceQuota>(Some(name), QUOTA, q.metadata.uid.as_deref())?;
                events::normal(ns, "QuotaRemoved", "Delete", "the team label is gone");
                info!("removed {name}/{QUOTA}");
            }
            _ => {}
        },
    }
    Ok(())
}

impl Handler for NsQuota {
    type Kind = Namespace;

    fn describe() -> Describe {
        Describe::new("ns-quota")
            .resync(Duration::from_secs(60))
            .can::<ResourceQuota>(&["get", "apply", "delete"])
            .events()
    }

    fn on_add(ns: &Lazy<Namespace>, _: Init) -> Result<()> {
        reconcile(ns.get()?)
    }

    fn on_update(_: &Lazy<Namespace>, ns: &Lazy<Namespace>, _: Sync) -> Result<()> {
        reconcile(ns.get()?)
    }
}

kubewasm_sdk::handler!(NsQuota);
