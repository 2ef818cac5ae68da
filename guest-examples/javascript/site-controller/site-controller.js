// site-controller: a Site (custom resource example.com/v1 Site) becomes a Deployment, a Service
// and a ConfigMap it owns, and its status says how many replicas are available
// (kubewasm:handler@0.3.0, world `controller`).
//
// Level-triggered: `reconcile` reads what the cache holds now and writes only what differs, so
// the same code creates, repairs (an owned object edited or deleted behind its back is an event of
// its Site's key), reflects the Deployment's status and does nothing when all is as wanted. The
// same controller exists in Python (guest-examples/python/site-controller/src/site_controller.py),
// with the same manifest and scenarios.
import { controller, subscription, permission, done, kube, log, Fatal, KubeObject } from '../../../sdk/javascript/index.js';
import * as settings from '../../../sdk/javascript/settings.js';

const SITE = 'example.com/v1';
const DEFAULT_IMAGE = 'nginx:1.27';
const DEFAULT_DOMAIN = 'sites.example.com';
// A DNS-1123 subdomain: what a host name under the operator's domain must be.
const DNS = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** The `domain` setting's type: what it throws is the refusal, naming the key. */
function dnsName(text) {
  if (text.length > 200 || !DNS.test(text)) {
    throw new Error("expected a DNS name such as sites.example.com (lowercase letters, digits, '-' and '.')");
  }
  return text;
}

const domain = () => settings.get('domain', dnsName, DEFAULT_DOMAIN);

/** `spec.replicas` (default 1), `spec.image` (default nginx:1.27) and `spec.message` (default
 * empty). The CRD's schema checks them on a real cluster; a value of another type is `Fatal`:
 * retrying cannot fix it, the next edit of the Site brings the key back. */
function parseSpec(site) {
  const spec = site.spec || {};
  const replicas = spec.replicas === undefined ? 1 : spec.replicas;
  if (!Number.isInteger(replicas) || replicas < 0) {
    throw new Fatal(`Site ${site.key}: spec.replicas must be a non-negative integer`);
  }
  const image = spec.image || DEFAULT_IMAGE;
  const message = spec.message === undefined ? '' : spec.message;
  if (typeof image !== 'string' || typeof message !== 'string') {
    throw new Fatal(`Site ${site.key}: spec.image and spec.message must be strings`);
  }
  return { replicas, image, message };
}

/** Applies `obj` as owned by `site`, unless the cache already holds it as wanted; whether it
 * wrote. */
function ensure(site, obj) {
  const got = kube.applyOwnedIfChanged(site, obj);
  if (got === undefined) return false;
  log.info(`applied ${obj.kind} ${obj.key} (${got.created ? 'created' : 'updated'})`);
  return true;
}

/** Patches the Site's status (the status subresource) when what it says has changed; whether it
 * wrote. */
function reflect(site, replicas, available) {
  const ready = available >= replicas;
  const want = {
    type: 'Ready',
    status: ready ? 'True' : 'False',
    reason: ready ? 'ReplicasAvailable' : 'ReplicasUnavailable',
    message: `${available}/${replicas} replicas available`,
  };
  const status = site.status || {};
  const conditions = status.conditions || [];
  const was = conditions.find((c) => c.type === 'Ready') || {};
  const generation = site.metadata.generation;
  if (status.availableReplicas === available && status.observedGeneration === generation
    && Object.entries(want).every(([k, v]) => was[k] === v)) return false;
  // The transition time moves only when the condition's status does.
  const since = was.status === want.status ? was.lastTransitionTime : undefined;
  want.lastTransitionTime = since || new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  // A merge patch replaces the whole list: keep the conditions others set.
  const others = conditions.filter((c) => c.type !== 'Ready');
  kube.patchStatus(site, { observedGeneration: generation, availableReplicas: available, conditions: [...others, want] });
  log.info(`status of Site ${site.key}: ${want.message}, Ready=${want.status}`);
  return true;
}

export const { validateSettings, describe, reconcile, keysFor, onSynced } = controller({
  name: 'site-controller',
  primary: subscription(SITE, 'Site'),
  owns: [subscription('apps/v1', 'Deployment'), subscription('v1', 'Service'), subscription('v1', 'ConfigMap')],
  permissions: [
    permission('apps/v1', 'Deployment', ['apply']),
    permission('v1', 'Service', ['apply']),
    permission('v1', 'ConfigMap', ['apply']),
    // The status subresource only (the grant covers the Site and its status alike).
    permission(SITE, 'Site', ['patch']),
  ],
  validateSettings() {
    domain(); // `domain = "Not a domain"` refuses the load, naming the key
  },
  reconcile(key, site) {
    if (site === undefined) {
      // Deleted: the garbage collector deletes what it owned (their owner references).
      log.info(`Site ${key} is gone: nothing to do`);
      return done();
    }
    const { replicas, image, message } = parseSpec(site);
    const labels = { 'app.kubernetes.io/name': 'site', 'app.kubernetes.io/instance': site.name };

    const content = KubeObject.ref('v1', 'ConfigMap', `${site.name}-content`, site.namespace);
    Object.assign(content.labels, labels);
    content.data = { message, host: `${site.name}.${domain()}` };
    let wrote = ensure(site, content);

    const deploy = KubeObject.ref('apps/v1', 'Deployment', site.name, site.namespace);
    Object.assign(deploy.labels, labels);
    deploy.spec = {
      replicas,
      selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: {
        containers: [{ name: 'web', image, ports: [{ name: 'http', containerPort: 80 }],
          volumeMounts: [{ name: 'content', mountPath: '/usr/share/nginx/html' }] }],
        volumes: [{ name: 'content', configMap: { name: content.name } }] } },
    };
    wrote = ensure(site, deploy) || wrote;

    const service = KubeObject.ref('v1', 'Service', site.name, site.namespace);
    Object.assign(service.labels, labels);
    service.spec = { selector: labels, ports: [{ name: 'http', port: 80, targetPort: 'http' }] };
    wrote = ensure(site, service) || wrote;

    // The owned Deployment's events reconcile its Site, so its status arrives here.
    const have = kube.cachedGet('apps/v1', 'Deployment', site.name, site.namespace);
    const available = (have && have.status && have.status.availableReplicas) || 0;
    wrote = reflect(site, replicas, available) || wrote;
    if (!wrote) log.debug(`Site ${key}: up to date`);
    return done();
  },
});
