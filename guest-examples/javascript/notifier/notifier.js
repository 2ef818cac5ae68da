// notifier: tells a webhook about Pods in CrashLoopBackOff (kubewasm:handler@0.2.0).
//
// For every container whose `state.waiting.reason` is `CrashLoopBackOff` it records a Warning
// Event about the Pod (reason `CrashLoopBackOff`, action `Notify`) and POSTs
// `{"pod", "namespace", "container", "restarts"}` to the webhook named by the ConfigMap
// `default/notifier`, key `webhook`. Each (pod, container, restart count) is notified once: a
// status update that repeats what was already reported does nothing, and neither does the replay
// a new leader (or a restarted host) receives, because what was reported is marked on the Pod
// itself (annotation `kubewasm.io/crashloop-notified`, `{"<container>": <restarts>}`), which
// every replica reads.
import { handler, subscription, permission, kube, events, http, log, Retry, ApiError } from '../../../sdk/javascript/index.js';

const CONFIG_NAMESPACE = 'default';
const CONFIG_NAME = 'notifier';
const CONFIG_KEY = 'webhook';
const REASON = 'CrashLoopBackOff';
// The Pod's record of what was reported, so a new leader's replay does not report it again.
const NOTIFIED = 'kubewasm.io/crashloop-notified';
// Most (pod, container, restarts) keys remembered; the oldest are forgotten first. Forgetting one
// can only repeat a notification, never lose one.
const MAX_REMEMBERED = 1024;

// Key -> 'evented' (the Event is recorded, the POST is not done yet) or 'posted' (both done).
// A Map iterates in insertion order, which makes it the eviction queue as well.
const progress = new Map();
// The webhook's URL; undefined until first needed and after any failed POST (read again).
let webhook;

// A quoted, shortened value from an object or the config, for a log line or an error.
function shown(v) {
  const s = String(v);
  return JSON.stringify(s.length > 64 ? `${s.slice(0, 64)}…` : s);
}

// `http[s]://host[:port][/path]`: a host of letters, digits, `-.:[]`, a path of letters, digits
// and `-._~/`. Nothing else reaches a request (no query, no user info).
function loadWebhook() {
  if (webhook) return webhook;
  let cm;
  try {
    cm = kube.get('v1', 'ConfigMap', CONFIG_NAME, CONFIG_NAMESPACE);
  } catch (e) {
    // Even a refusal may be a grant about to be fixed: the Pod is still worth reporting.
    throw e instanceof ApiError ? new Retry(`reading ${e.message}`) : e;
  }
  const url = cm && cm.data ? cm.data[CONFIG_KEY] : undefined;
  if (typeof url !== 'string') {
    throw new Retry(`no webhook configured: ConfigMap ${CONFIG_NAMESPACE}/${CONFIG_NAME} key ${CONFIG_KEY}`);
  }
  if (!/^https?:\/\/[A-Za-z0-9.:[\]-]+(\/[A-Za-z0-9._~/-]*)?$/.test(url.trim())) {
    throw new Retry(`invalid webhook ${shown(url)} in ConfigMap ${CONFIG_NAMESPACE}/${CONFIG_NAME}: expected http[s]://host[:port][/path]`);
  }
  webhook = url.trim();
  return webhook;
}

function remember(key, stage) {
  progress.delete(key);
  progress.set(key, stage);
  while (progress.size > MAX_REMEMBERED) progress.delete(progress.keys().next().value);
}

// The containers of a Pod in CrashLoopBackOff, as [name, restartCount].
function crashLooping(pod) {
  return ((pod.status && pod.status.containerStatuses) || [])
    .filter((s) => s && s.state && s.state.waiting && s.state.waiting.reason === REASON && typeof s.name === 'string')
    .map((s) => [s.name, Number(s.restartCount) || 0]);
}

// The restart counts already reported, per container, as the Pod's annotation records them
// (an unreadable annotation counts as none: at worst one notification repeats).
function notifiedOf(pod) {
  try {
    const v = JSON.parse(pod.annotations[NOTIFIED] || '{}');
    return v && typeof v === 'object' && !Array.isArray(v) ? v : {};
  } catch (_e) {
    return {};
  }
}

// Marks the Pod as reported. The mark comes after the POST, so a crash in between repeats a
// notification rather than losing one. A Pod gone meanwhile needs no mark; a refused mark only
// costs the idempotency across leaders (this instance still remembers), so it is logged, not
// retried.
function markNotified(pod, notified) {
  try {
    kube.mergePatch(pod, { metadata: { annotations: { [NOTIFIED]: JSON.stringify(notified) } } });
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.code !== 404) log.warn(`marking ${pod.key} as notified: ${e.code} ${e.reason}`);
  }
}

function check(pod) {
  const notified = notifiedOf(pod);
  for (const [container, restarts] of crashLooping(pod)) {
    const key = `${pod.uid}/${container}/${restarts}`;
    const stage = progress.get(key);
    if (stage === 'posted') continue;
    if (notified[container] === restarts) {
      // Reported already, by this replica before a restart or by the previous leader.
      remember(key, 'posted');
      continue;
    }
    if (stage === undefined) {
      events.warning(pod, REASON, 'Notify', `container ${container} is in CrashLoopBackOff (${restarts} restarts)`);
      remember(key, 'evented');
    }
    let status;
    try {
      status = http.postJson(loadWebhook(), { pod: pod.name, namespace: pod.namespace, container, restarts }).status;
    } catch (e) {
      // Read the webhook again next time: it may have been corrected.
      webhook = undefined;
      throw e instanceof Retry ? e : new Retry(`POST to the webhook: ${e.message}`);
    }
    if (status < 200 || status > 299) {
      webhook = undefined;
      throw new Retry(`webhook answered HTTP ${status} for ${pod.key} container ${shown(container)}`);
    }
    notified[container] = restarts;
    markNotified(pod, notified);
    remember(key, 'posted');
    log.info(`notified ${pod.key} container=${shown(container)} restarts=${restarts} status=${status}`);
  }
}

export const { describe, onAdd, onUpdate, onDelete, onSynced } = handler({
  name: 'notifier',
  subscriptions: [subscription('v1', 'Pod')],
  permissions: [
    // The webhook's URL, read from the API server (no informer for one object).
    permission('v1', 'ConfigMap', ['get'], CONFIG_NAMESPACE),
    // The mark of what was reported, on the Pod (a merge patch of one annotation).
    permission('v1', 'Pod', ['patch']),
  ],
  // The test's webhook listens on loopback on a port chosen at start; a real deployment names
  // its webhook's origin, e.g. https://hooks.example.com.
  httpOrigins: ['http://127.0.0.1:*'],
  events: true,
  onAdd: (pod) => check(pod),
  onUpdate: (_old, pod) => check(pod),
  onDelete(pod) {
    for (const key of [...progress.keys()]) {
      if (key.startsWith(`${pod.uid}/`)) progress.delete(key);
    }
  },
});
