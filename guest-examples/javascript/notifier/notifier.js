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
import { log } from 'kubewasm:handler/log@0.2.0';
import { get, patch } from 'kubewasm:handler/kube@0.2.0';
import { emit } from 'kubewasm:handler/events@0.2.0';
import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingRequest, OutgoingBody } from 'wasi:http/types@0.2.12';

const CONFIG_NAMESPACE = 'default';
const CONFIG_NAME = 'notifier';
const CONFIG_KEY = 'webhook';
const REASON = 'CrashLoopBackOff';
// The Pod's record of what was reported, so a new leader's replay does not report it again.
const NOTIFIED = 'kubewasm.io/crashloop-notified';
// Most (pod, container, restarts) keys remembered; the oldest are forgotten first. Forgetting one
// can only repeat a notification, never lose one.
const MAX_REMEMBERED = 1024;
// Bytes written to the body stream per call (wasi:io allows 4096 per blocking write).
const CHUNK = 4096;

// Key -> 'evented' (the Event is recorded, the POST is not done yet) or 'posted' (both done).
// A Map iterates in insertion order, which makes it the eviction queue as well.
const progress = new Map();
// The webhook, parsed; undefined until first needed and after any failed POST (read again).
let webhook;

class HandlerError {
  constructor(tag, val) {
    this.tag = tag;
    this.val = val;
  }
}
const retry = (msg) => new HandlerError('retry', msg);

// Every export that returns result<_, handler-error> goes through this: a thrown HandlerError is
// the err value; anything else thrown (a bug, an odd object) would trap the instance, so it
// becomes `fatal` (a bug does not heal on redelivery) and is logged.
function guarded(name, fn) {
  return (...args) => {
    try {
      fn(...args);
    } catch (e) {
      if (e instanceof HandlerError) {
        throw { tag: e.tag, val: e.val };
      }
      const msg = `${name}: ${e && e.name ? e.name : 'error'}: ${e && e.message ? e.message : String(e)}`;
      log('error', msg);
      throw { tag: 'fatal', val: msg };
    }
  };
}

// A quoted, shortened value from an object or the config, for a log line or an error.
function shown(v) {
  const s = String(v);
  return JSON.stringify(s.length > 64 ? `${s.slice(0, 64)}…` : s);
}

// Parses `http[s]://host[:port][/path]`: a host of letters, digits, `-.:[]`, a path of letters,
// digits and `-._~/`. Nothing else reaches a request (no query, no user info).
function parseWebhook(url) {
  const m = /^(https?):\/\/([A-Za-z0-9.:[\]-]+)(\/[A-Za-z0-9._~/-]*)?$/.exec(url);
  if (!m) {
    throw retry(`invalid webhook ${shown(url)} in ConfigMap ${CONFIG_NAMESPACE}/${CONFIG_NAME}: expected http[s]://host[:port][/path]`);
  }
  return { https: m[1] === 'https', authority: m[2], path: m[3] || '/' };
}

function loadWebhook() {
  if (webhook) {
    return webhook;
  }
  let cm;
  try {
    cm = get('v1', 'ConfigMap', CONFIG_NAMESPACE, CONFIG_NAME);
  } catch (e) {
    throw retry(`reading ConfigMap ${CONFIG_NAMESPACE}/${CONFIG_NAME}: ${e.code} ${e.reason}: ${e.message}`);
  }
  const url = cm ? (JSON.parse(cm.json).data || {})[CONFIG_KEY] : undefined;
  if (typeof url !== 'string') {
    throw retry(`no webhook configured: ConfigMap ${CONFIG_NAMESPACE}/${CONFIG_NAME} key ${CONFIG_KEY}`);
  }
  webhook = parseWebhook(url.trim());
  return webhook;
}

// The bytes of an ASCII string.
function ascii(text) {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    out[i] = text.charCodeAt(i);
  }
  return out;
}

// A JSON text as ASCII bytes (non-ASCII characters escaped as \uXXXX, which JSON allows).
function jsonBytes(value) {
  return ascii(JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
}

// POSTs `payload` as JSON; answers the response status. Every resource is dropped before its
// parent, as wasi:http requires.
function post(hook, payload) {
  const body = jsonBytes(payload);
  const headers = Fields.fromList([
    ['content-type', ascii('application/json')],
    ['content-length', ascii(String(body.length))],
  ]);
  const req = new OutgoingRequest(headers);
  req.setMethod({ tag: 'post' });
  req.setScheme({ tag: hook.https ? 'HTTPS' : 'HTTP' });
  req.setAuthority(hook.authority);
  req.setPathWithQuery(hook.path);
  const outgoing = req.body();
  const stream = outgoing.write();
  for (let i = 0; i < body.length; i += CHUNK) {
    stream.blockingWriteAndFlush(body.subarray(i, i + CHUNK));
  }
  stream[Symbol.dispose]();
  OutgoingBody.finish(outgoing, undefined);
  const future = handle(req, undefined);
  const pollable = future.subscribe();
  pollable.block();
  pollable[Symbol.dispose]();
  const got = future.get();
  future[Symbol.dispose]();
  if (!got || got.tag !== 'ok') {
    throw new Error('the response future gave no result');
  }
  if (got.val.tag !== 'ok') {
    throw retry(`POST to the webhook failed: ${JSON.stringify(got.val.val)}`);
  }
  const response = got.val.val;
  const status = response.status();
  response[Symbol.dispose]();
  return status;
}

function remember(key, stage) {
  progress.delete(key);
  progress.set(key, stage);
  while (progress.size > MAX_REMEMBERED) {
    progress.delete(progress.keys().next().value);
  }
}

// The containers of a Pod in CrashLoopBackOff, as [name, restartCount].
function crashLooping(pod) {
  const statuses = (pod.status && pod.status.containerStatuses) || [];
  const out = [];
  for (const s of statuses) {
    const waiting = s && s.state && s.state.waiting;
    if (waiting && waiting.reason === REASON && typeof s.name === 'string') {
      out.push([s.name, Number(s.restartCount) || 0]);
    }
  }
  return out;
}

// The restart counts already reported, per container, as the Pod's annotation records them
// (an unreadable annotation counts as none: at worst one notification repeats).
function notifiedOf(pod) {
  const annotations = (pod.metadata && pod.metadata.annotations) || {};
  try {
    const v = JSON.parse(annotations[NOTIFIED] || '{}');
    return v && typeof v === 'object' && !Array.isArray(v) ? v : {};
  } catch (_e) {
    return {};
  }
}

// Marks the Pod as reported. The mark comes after the POST, so a crash in between repeats a
// notification rather than losing one. A Pod gone meanwhile needs no mark; a refused mark only
// costs the idempotency across leaders (this instance still remembers), so it is logged, not
// retried.
function markNotified(meta, notified) {
  const body = JSON.stringify({ metadata: { annotations: { [NOTIFIED]: JSON.stringify(notified) } } });
  try {
    patch('v1', 'Pod', meta.namespace, meta.name, 'merge', body, undefined, { dryRun: false, force: false });
  } catch (e) {
    if (e && e.code !== 404) {
      log('warn', `marking ${meta.namespace}/${meta.name} as notified: ${e.code} ${e.reason}`);
    }
  }
}

function check(obj) {
  const pod = JSON.parse(obj.json);
  const { namespace, name, uid } = obj.meta;
  const notified = notifiedOf(pod);
  for (const [container, restarts] of crashLooping(pod)) {
    const key = `${uid}/${container}/${restarts}`;
    const stage = progress.get(key);
    if (stage === 'posted') {
      continue;
    }
    if (notified[container] === restarts) {
      // Reported already, by this replica before a restart or by the previous leader.
      remember(key, 'posted');
      continue;
    }
    if (stage === undefined) {
      emit(obj.meta, 'warning', REASON, 'Notify',
        `container ${container} is in CrashLoopBackOff (${restarts} restarts)`);
      remember(key, 'evented');
    }
    const hook = loadWebhook();
    let status;
    try {
      status = post(hook, { pod: name, namespace, container, restarts });
    } catch (e) {
      // Read the webhook again next time: it may have been corrected. A wasi:http error (the
      // host's `HTTP-request-denied`, a refused connection) is thrown as its error-code value.
      webhook = undefined;
      throw e instanceof HandlerError ? e : retry(`POST to the webhook: ${e && e.message ? e.message : JSON.stringify(e)}`);
    }
    if (status < 200 || status > 299) {
      webhook = undefined;
      throw retry(`webhook answered HTTP ${status} for ${namespace}/${name} container ${shown(container)}`);
    }
    notified[container] = restarts;
    markNotified(obj.meta, notified);
    remember(key, 'posted');
    log('info', `notified ${namespace}/${name} container=${shown(container)} restarts=${restarts} status=${status}`);
  }
}

export function describe() {
  return {
    name: 'notifier',
    subscriptions: [{
      apiVersion: 'v1', kind: 'Pod', namespace: undefined, labelSelector: undefined,
      fieldSelector: undefined, resyncPeriodMs: 0, metadataOnly: false, fields: [],
    }],
    permissions: [
      // The webhook's URL, read from the API server (no informer for one object).
      { apiVersion: 'v1', kind: 'ConfigMap', namespace: CONFIG_NAMESPACE, verbs: ['get'] },
      // The mark of what was reported, on the Pod (a merge patch of one annotation).
      { apiVersion: 'v1', kind: 'Pod', namespace: undefined, verbs: ['patch'] },
    ],
    // The test's webhook listens on loopback on a port chosen at start; a real deployment
    // names its webhook's origin, e.g. https://hooks.example.com.
    httpOrigins: ['http://127.0.0.1:*'],
    events: true,
  };
}

export const onAdd = guarded('on-add', (obj, _isInInitialList) => check(obj));
export const onUpdate = guarded('on-update', (_old, obj, _isSync) => check(obj));
export const onDelete = guarded('on-delete', (obj, _finalStateUnknown) => {
  const prefix = `${obj.meta.uid}/`;
  for (const key of [...progress.keys()]) {
    if (key.startsWith(prefix)) {
      progress.delete(key);
    }
  }
});
export const onSynced = guarded('on-synced', () => {});
