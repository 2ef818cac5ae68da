// ns-quota: a ResourceQuota for every Namespace labelled `team=<name>` (kubewasm:handler@0.2.0).
//
// The quota `team-quota` (labelled `kubewasm.io/team: <name>`) is written with server-side
// apply, a Normal Event `QuotaCreated` about the Namespace records its creation, a resync puts
// back a quota deleted or edited by hand, and the quota goes when the label does.
import { handler, subscription, permission, kube, events, log, KubeObject } from '../../../sdk/javascript/index.js';

const TEAM = 'team';
const OWNER = 'kubewasm.io/team';
const QUOTA = 'team-quota';
const HARD = { pods: '50', 'requests.cpu': '8', 'requests.memory': '16Gi' };

function reconcile(ns, isSync) {
  if (ns.kind !== 'Namespace') return;
  const have = kube.cachedGet('v1', 'ResourceQuota', QUOTA, ns.name);
  const team = ns.labels[TEAM];
  if (team === undefined) {
    if (have && kube.del(have)) log.info(`deleted ResourceQuota ${have.key} (label ${TEAM} removed)`);
    return;
  }
  if (have && have.labels[OWNER] === team && JSON.stringify((have.spec || {}).hard) === JSON.stringify(HARD)) return;
  const quota = KubeObject.ref('v1', 'ResourceQuota', QUOTA, ns.name);
  quota.labels[OWNER] = team;
  quota.spec = { hard: HARD };
  const applied = kube.apply(quota);
  const how = isSync ? 'repaired' : applied.created ? 'created' : 'updated';
  log.info(`applied ResourceQuota ${applied.key} for team ${team} (${how})`);
  if (applied.created) events.normal(ns, 'QuotaCreated', 'Apply', `ResourceQuota ${QUOTA} for team ${team}`);
}

export const { describe, onAdd, onUpdate, onDelete, onSynced } = handler({
  name: 'ns-quota',
  subscriptions: [
    subscription('v1', 'Namespace', { resyncMs: 5 * 60 * 1000 }),
    // Only the quotas this handler wrote: the cache then tells whether one needs a write.
    subscription('v1', 'ResourceQuota', { labels: OWNER }),
  ],
  permissions: [permission('v1', 'ResourceQuota', ['apply', 'delete'])],
  events: true,
  onAdd: (ns) => reconcile(ns, false),
  onUpdate: (_old, ns, isSync) => reconcile(ns, isSync),
});
