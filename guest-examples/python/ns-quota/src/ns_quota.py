"""ns-quota: a ResourceQuota for every Namespace labelled `team=<name>` (kubewasm:handler@0.2.0).

The quota `team-quota` (labelled `kubewasm.io/team: <name>`) is written with server-side apply,
a Normal Event `QuotaCreated` about the Namespace records its creation, a resync puts back a
quota deleted or edited by hand, and the quota goes when the label does.
"""

from kubewasm_sdk import Handler, Object, events, kube, log, permission, subscription, world

TEAM = "team"
OWNER = "kubewasm.io/team"
QUOTA = "team-quota"
HARD = {"pods": "50", "requests.cpu": "8", "requests.memory": "16Gi"}


class NsQuota(Handler):
    name = "ns-quota"
    subscriptions = [
        subscription("v1", "Namespace", resync_ms=5 * 60 * 1000),
        # Only the quotas this handler wrote: the cache then tells whether one needs a write.
        subscription("v1", "ResourceQuota", labels=OWNER),
    ]
    permissions = [permission("v1", "ResourceQuota", ["apply", "delete"])]
    events = True

    def on_add(self, obj, initial):
        self.reconcile(obj, False)

    def on_update(self, old, new, is_sync):
        self.reconcile(new, is_sync)

    def reconcile(self, ns: Object, is_sync: bool) -> None:
        if ns.kind != "Namespace":
            return
        have = kube.cached("v1", "ResourceQuota", QUOTA, ns.name)
        team = ns.labels.get(TEAM)
        if team is None:
            if have is not None:
                kube.delete(have)
                log.info(f"deleted ResourceQuota {have.key} (label {TEAM} removed)")
            return
        if have is not None and have.labels.get(OWNER) == team and have.get("spec", {}).get("hard") == HARD:
            return
        quota = Object.ref("v1", "ResourceQuota", QUOTA, ns.name)
        quota.labels[OWNER] = team
        quota["spec"] = {"hard": HARD}
        applied = kube.apply(quota)
        how = "repaired" if is_sync else "created" if applied.created else "updated"
        log.info(f"applied ResourceQuota {applied.key} for team {team} ({how})")
        if applied.created:
            events.normal(ns, "QuotaCreated", "Apply", f"ResourceQuota {QUOTA} for team {team}")


WitWorld = world(NsQuota())
