// Unit tests of the JavaScript SDK's pure parts on node, with the world's imports stubbed
// (test/loader.js): `npm test` here, or scripts/test.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { handler, subscription, permission, Watched, kube, events, http, owner, KubeObject, key, Retry, Fatal, Trap, ApiError, Timeout, TooLarge, HttpError } from '../index.js';
import * as v010 from '../v0.1.0.js';
import * as hostKube from './stub/kube.js';
import * as hostCache from './stub/cache.js';
import { lines } from './stub/log.js';
import { emitted } from './stub/events.js';
// The 0.3.0 parts (settings, validateSettings, the controller world) have a file of their own.
import './controller.test.js';

const CM = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { namespace: 'ns', name: 'cm', uid: 'u1', labels: { a: 'b' }, generation: 3 }, data: { k: 'v' } };
// A WIT object as the host sends it: the metadata it extracted, and the JSON.
const wit = (o) => {
  const m = o.metadata;
  const meta = { apiVersion: o.apiVersion, kind: o.kind, namespace: m.namespace, name: m.name, uid: m.uid || '', resourceVersion: m.resourceVersion || '', labels: Object.entries(m.labels || {}) };
  return { meta, json: JSON.stringify(o) };
};

test('objects read their metadata and serialise only their fields', () => {
  const o = KubeObject.of(wit(CM));
  assert.deepEqual([o.apiVersion, o.kind, o.namespace, o.name, o.uid, o.key], ['v1', 'ConfigMap', 'ns', 'cm', 'u1', 'ns/cm']);
  assert.deepEqual(o.labels, { a: 'b' });
  assert.deepEqual(JSON.parse(JSON.stringify(o)), CM);
  const r = KubeObject.ref('v1', 'Namespace', 'team-a');
  assert.equal(r.namespace, undefined);
  assert.equal(key(r), 'team-a');
  r.labels.team = 'x';
  assert.deepEqual(JSON.parse(JSON.stringify(r)), { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'team-a', labels: { team: 'x' } } });
});

test('objects are decoded on first use, and only then', () => {
  const o = KubeObject.of(wit(CM));
  assert.deepEqual([o.apiVersion, o.kind, o.namespace, o.name, o.uid, o.key, o.label('a'), o.label('x'), key(o)], ['v1', 'ConfigMap', 'ns', 'cm', 'u1', 'ns/cm', 'b', undefined, 'ns/cm']);
  assert.equal(o instanceof KubeObject, true);
  assert.equal(o.decoded, false);
  assert.deepEqual(o.data, { k: 'v' });
  assert.equal(o.decoded, true);
  let reads = 0;
  const counted = KubeObject.of({ meta: wit(CM).meta, get json() { reads += 1; return JSON.stringify(CM); } });
  assert.deepEqual([counted.data, counted.metadata.generation, counted.label('a'), counted.labels], [{ k: 'v' }, 3, 'b', { a: 'b' }]);
  assert.equal(reads, 1);
  // Every whole view of an undecoded object is the whole object.
  const views = [(x) => JSON.parse(JSON.stringify(x)), (x) => ({ ...x }), (x) => Object.fromEntries(Object.entries(x)),
    (x) => structuredClone({ ...x }), (x) => JSON.parse(JSON.stringify(new KubeObject(x)))];
  for (const view of views) assert.deepEqual(view(KubeObject.of(wit(CM))), CM);
  assert.equal('data' in KubeObject.of(wit(CM)), true);
  const written = KubeObject.of(wit(CM));
  written.labels.c = 'd';
  assert.deepEqual([written.labels, written.label('c'), written.data], [{ a: 'b', c: 'd' }, 'd', { k: 'v' }]);
});

test('handlers get objects undecoded', () => {
  let seen;
  handler({ onUpdate(old, obj) { seen = [old.decoded, obj.decoded, obj.key, obj.label('a')]; } }).onUpdate(wit(CM), wit(CM), false);
  assert.deepEqual(seen, [false, false, 'ns/cm', 'b']);
});

test('the 0.1.0 surface: four exports, describe as 0.1.0 says it, no 0.2.0 import', () => {
  const h = v010.handler({ name: 'logger', subscriptions: [v010.subscription('v1', 'ConfigMap')], onAdd(obj) { if (obj.label('a') === 'b') throw new v010.Retry('asked'); } });
  assert.deepEqual(Object.keys(h).sort(), ['describe', 'onAdd', 'onDelete', 'onUpdate']);
  assert.deepEqual(h.describe(), { name: 'logger', subscriptions: [{ apiVersion: 'v1', kind: 'ConfigMap', namespace: undefined, labelSelector: undefined, fieldSelector: undefined, resyncPeriodMs: 0 }] });
  assert.throws(() => h.onAdd(wit(CM), true), (e) => e.tag === 'retry' && e.val === 'asked');
  for (const more of [{ events: true }, { permissions: [] }, { httpOrigins: [] }, { onSynced() {} }]) {
    assert.throws(() => v010.handler(more), /0\.2\.0/);
  }
  // What v0.1.0.js loads, transitively, imports nothing of 0.2.0 or wasi:http.
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = readFileSync(new URL(`../${file}`, import.meta.url), 'utf8');
    for (const [, spec] of src.matchAll(/^(?:import|export)[^'"]*from '([^']+)'/gm)) {
      assert.doesNotMatch(spec, /@0\.2\.0|^wasi:/, `${file} imports ${spec}`);
      if (spec.startsWith('./')) visit(spec.slice(2));
    }
  };
  visit('v0.1.0.js');
  assert.deepEqual([...seen].sort(), ['errors.js', 'handler-core.js', 'objects.js', 'v0.1.0.js']);
});

test('only Trap escapes the handler layer', () => {
  assert.throws(() => handler({ onAdd() { throw new Trap('asked'); } }).onAdd(wit(CM), true), Trap);
  assert.throws(() => v010.handler({ onDelete() { throw new Trap('asked'); } }).onDelete(wit(CM), false), Trap);
});

function run(h, thrown) {
  const exports = handler({ ...h, onAdd() { if (thrown !== undefined) throw thrown; } });
  try {
    exports.onAdd(wit(CM), true);
  } catch (e) {
    return e;
  }
  return undefined;
}

test('describe reports the declaration', () => {
  const { describe } = handler({ name: 't', subscriptions: [subscription('v1', 'Pod', { resyncMs: 1000 })], permissions: [permission('v1', 'Pod', ['patch'])], events: true });
  const info = describe();
  assert.equal(info.name, 't');
  assert.equal(info.subscriptions[0].resyncPeriodMs, 1000n);
  assert.deepEqual(info.permissions[0].verbs, ['patch']);
  assert.deepEqual(info.httpOrigins, []);
  assert.equal(info.events, true);
});

test('handlers get objects, and every throw becomes a handler-error', () => {
  let seen;
  handler({ onAdd(obj, initial) { seen = [obj.key, initial]; } }).onAdd(wit(CM), true);
  assert.deepEqual(seen, ['ns/cm', true]);
  assert.equal(run({}, undefined), undefined);
  assert.deepEqual(run({}, new Retry('later')), { tag: 'retry', val: 'later' });
  assert.deepEqual(run({}, new Fatal('never')), { tag: 'fatal', val: 'never' });
  assert.deepEqual(run({}, new TypeError('x is undefined')), { tag: 'retry', val: 'TypeError: x is undefined' });
  assert.deepEqual(lines.at(-1), ['error', 'on-add: TypeError: x is undefined']);
  assert.deepEqual(run({}, 'a string'), { tag: 'retry', val: 'Error: a string' });
  for (const [code, tag] of [[409, 'retry'], [429, 'retry'], [503, 'retry'], [400, 'fatal'], [403, 'fatal'], [422, 'fatal']]) {
    assert.deepEqual(run({}, new ApiError('apply', code, 'R', 'm')), { tag, val: `apply: ${code} R: m` });
  }
});

test('apply tells created from updated', () => {
  hostKube.state.error = undefined;
  for (const [code, created] of [[201, true], [200, false]]) {
    hostKube.state.answer = { object: wit(CM), code };
    const got = kube.apply(CM);
    assert.equal(got.created, created);
    assert.equal(JSON.stringify(got).includes('created'), false);
  }
  const [name, body, opts] = hostKube.calls.at(-1);
  assert.deepEqual([name, JSON.parse(body), opts], ['applyOutcome', CM, { dryRun: false, force: true }]);
});

const DEPLOY = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { namespace: 'ns', name: 'web', uid: 'd1' } };
const MINE = { apiVersion: 'apps/v1', kind: 'Deployment', name: 'web', uid: 'd1', controller: true, blockOwnerDeletion: true };
const PLAIN = { apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u9' };
const owned = (namespace = 'ns', ownerReferences) => ({
  apiVersion: 'v1', kind: 'ConfigMap',
  metadata: { name: 'cfg', ...(namespace ? { namespace } : {}), ...(ownerReferences ? { ownerReferences } : {}) },
});
const fatal = (fn, check) => assert.throws(fn, (e) => e instanceof Fatal && check(e.message));

test('owner: the controller reference names the owner; an owner without a uid or name is fatal', () => {
  assert.deepEqual(owner.controllerRef(DEPLOY), MINE);
  const delivered = KubeObject.of(wit(DEPLOY));
  assert.deepEqual(owner.controllerRef(delivered), MINE);
  assert.equal(delivered.decoded, false);
  fatal(() => owner.controllerRef(KubeObject.ref('apps/v1', 'Deployment', 'web', 'ns')),
    (m) => m.includes('Deployment ns/web') && m.includes('read the owner from the cache or the API server first'));
  fatal(() => owner.controllerRef({ apiVersion: 'v1', kind: 'X', metadata: { uid: 'u' } }), (m) => m.endsWith('it has no name'));
  const obj = owned();
  assert.throws(() => owner.setController(obj, KubeObject.ref('apps/v1', 'Deployment', 'web', 'ns')), Fatal);
  assert.equal(obj.metadata.ownerReferences, undefined);
});

test('owner: cross-namespace and namespaced owners of cluster-scoped objects are refused', () => {
  const obj = owned('other');
  fatal(() => owner.setController(obj, DEPLOY), (m) => m === 'cannot set Deployment ns/web as the controller of '
    + 'ConfigMap other/cfg: cross-namespace owner references are not allowed');
  const cluster = owned(null);
  fatal(() => owner.setController(cluster, DEPLOY), (m) => m.includes('ConfigMap cfg') && m.includes('cluster-scoped'));
  assert.equal(cluster.metadata.ownerReferences, undefined);
  // A cluster-scoped owner may own objects anywhere.
  const ns = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ns', uid: 'n1' } };
  for (const o of [obj, cluster]) {
    owner.setController(o, ns);
    assert.equal(owner.isControlledBy(o, ns), true);
  }
});

test('owner: another controller is refused, the same is replaced, others are kept', () => {
  const other = { ...PLAIN, controller: true };
  const obj = owned('ns', [other]);
  fatal(() => owner.setController(obj, DEPLOY), (m) => m.endsWith('it is already controlled by Pod/p'));
  assert.deepEqual(obj.metadata.ownerReferences, [other]);
  const stale = { apiVersion: 'apps/v1', kind: 'Deployment', name: 'old', uid: 'd1' };
  const again = new KubeObject(owned('ns', [PLAIN, stale]));
  owner.setController(again, DEPLOY);
  owner.setController(again, DEPLOY);
  assert.deepEqual(again.metadata.ownerReferences, [PLAIN, MINE]);
  const fresh = owned('ns', [PLAIN]);
  owner.setController(fresh, DEPLOY);
  assert.deepEqual(fresh.metadata.ownerReferences, [PLAIN, MINE]);
});

test('owner: controlled by needs a controller reference with the owner\'s uid', () => {
  assert.equal(owner.isControlledBy(owned('ns', [MINE]), DEPLOY), true);
  assert.equal(owner.isControlledBy(KubeObject.of(wit(owned('ns', [MINE]))), KubeObject.of(wit(DEPLOY))), true);
  assert.equal(owner.isControlledBy(owned('ns', [{ ...MINE, controller: false }]), DEPLOY), false);
  assert.equal(owner.isControlledBy(owned('ns', [{ ...MINE, uid: 'd2' }]), DEPLOY), false);
  assert.equal(owner.isControlledBy(owned(), DEPLOY), false);
  assert.equal(owner.isControlledBy(owned('ns', [{ ...MINE, uid: '' }]), { metadata: {} }), false);
});

test('applyOwned sends the reference, and never a refused object', () => {
  hostKube.state.error = undefined;
  hostKube.state.answer = { object: wit(CM), code: 201 };
  assert.equal(kube.applyOwned(DEPLOY, owned('ns', [PLAIN]), { force: false }).created, true);
  const [name, body, opts] = hostKube.calls.at(-1);
  assert.deepEqual([name, JSON.parse(body).metadata.ownerReferences, opts],
    ['applyOutcome', [PLAIN, MINE], { dryRun: false, force: false }]);
  const before = hostKube.calls.length;
  assert.throws(() => kube.applyOwned(DEPLOY, owned('other')), Fatal);
  assert.equal(hostKube.calls.length, before);
});

test('api errors name the call; delete has a uid precondition', () => {
  hostKube.state.error = { code: 422, reason: 'Invalid', message: 'too big' };
  assert.throws(() => kube.apply(CM), (e) => e instanceof ApiError && e.message === 'apply ConfigMap ns/cm: 422 Invalid: too big' && !e.retryable);
  hostKube.state.error = undefined;
  assert.equal(kube.del(CM), true);
  assert.deepEqual(hostKube.calls.at(-1), ['delete', 'v1', 'ConfigMap', 'ns', 'cm', 'u1']);
  for (const code of [404, 409]) {
    hostKube.state.error = { code, reason: 'R', message: 'm' };
    assert.equal(kube.del(CM), false);
  }
  hostKube.state.error = { code: 500, reason: 'R', message: 'm' };
  assert.throws(() => kube.del(CM), ApiError);
  hostKube.state.error = undefined;
});

test('patches: status and merge', () => {
  hostKube.state.answer = wit(CM);
  kube.patchStatus(CM, { phase: 'Ready' });
  const [, av, kind, ns, name, type, body, sub] = hostKube.calls.at(-1);
  assert.deepEqual([av, kind, ns, name, type, JSON.parse(body), sub], ['v1', 'ConfigMap', 'ns', 'cm', 'merge', { status: { phase: 'Ready' } }, 'status']);
  kube.mergePatch(CM, { data: { k: null } });
  assert.equal(hostKube.calls.at(-1)[7], undefined);
});

test('cache reads; their errors retry only while the cache is not available', () => {
  hostCache.state.objects = [wit(CM)];
  assert.deepEqual(kube.cachedList('v1', 'ConfigMap').map((o) => o.key), ['ns/cm']);
  assert.equal(kube.cachedGet('v1', 'ConfigMap', 'cm', 'ns').uid, 'u1');
  // An unsubscribed kind can never be read: a Retry would back off forever.
  hostCache.state.error =
    'plugin p does not subscribe to v1 Secret; only subscribed resources can be read from the cache';
  assert.throws(() => kube.cachedGet('v1', 'Secret', 's', 'ns'), Fatal);
  assert.throws(() => kube.cachedList('v1', 'Secret'), Fatal);
  const host = 'plugin p does not subscribe to v1 Secret; only subscribed resources can be read from the cache: '
    + 'subscribe to it in describe() and grant it in the plugin\'s manifest: [grants] watch = [{ api-version = "v1", kind = "Secret" }]';
  hostCache.state.error = host;
  assert.throws(() => kube.cachedList('v1', 'Secret'), (e) => e instanceof Fatal
    && e.message === `cache.list Secret: ${host}; in JavaScript, add subscription('v1', 'Secret') to the handler's watches (a controller's owns)`);
  hostCache.state.error = 'invalid label selector';
  assert.throws(() => kube.cachedGet('v1', 'Secret', 's', 'ns'), (e) => e instanceof Fatal && e.message === 'cache.get Secret: invalid label selector');
  hostCache.state.error =
    'the cache of v1/ConfigMap is not available: its informer is stopping or not started yet';
  assert.throws(() => kube.cachedGet('v1', 'ConfigMap', 'cm', 'ns'), Retry);
  hostCache.state.error = undefined;
});

test('events carry the object-meta and the WIT order', () => {
  events.warning(CM, 'Broken', 'Repair', 'it broke');
  const e = emitted.at(-1);
  assert.deepEqual([e.regarding.kind, e.regarding.namespace, e.regarding.uid, e.regarding.generation, e.regarding.labels], ['ConfigMap', 'ns', 'u1', 3n, [['a', 'b']]]);
  assert.deepEqual([e.type, e.reason, e.action, e.note], ['warning', 'Broken', 'Repair', 'it broke']);
  events.normal(CM, { note: 'made it', reason: 'Created', action: 'Apply' });
  const o = emitted.at(-1);
  assert.deepEqual([o.type, o.reason, o.action, o.note], ['normal', 'Created', 'Apply', 'made it']);
  // (reason, note) was a whole call before; it must not pass as (reason, action).
  const before = emitted.length;
  assert.throws(() => events.normal(CM, 'Created', 'made it'), (err) => err instanceof TypeError && err.message.includes('note must be a string'));
  assert.throws(() => events.warning(CM, { reason: 'Broken', note: 'n' }), TypeError);
  assert.equal(emitted.length, before);
});

test('watches: describe lists them after subscriptions; each event reaches the callback of its kind', () => {
  const seen = [];
  const h = handler({
    name: 'w',
    // A ConfigMap subscribed the old way too stays the handler's own.
    subscriptions: [subscription('v1', 'Namespace'), subscription('v1', 'ConfigMap')],
    watches: [subscription('apps/v1', 'Deployment', { namespace: 'a' }), subscription('v1', 'ConfigMap')],
    onAdd(obj, initial) { seen.push(['add', obj.kind, obj.name, initial]); },
    onUpdate(old, obj, isSync) { seen.push(['update', obj.kind, obj.name, isSync]); },
    onDelete(obj, unknown) { seen.push(['delete', obj.kind, obj.name, unknown]); },
    onWatched(ev) {
      assert.ok(ev instanceof Watched);
      seen.push(['watched', ev.change, ev.kind, ev.obj.name, ev.old && ev.old.name, ev.initial, ev.isSync, ev.unknown,
        ev.isKind('apps/v1', 'Deployment'), ev.obj.decoded]);
      if (ev.obj.name === 'bad') throw new Fatal('bad deployment');
    },
  });
  assert.deepEqual(h.describe().subscriptions.map((s) => [s.kind, s.namespace]),
    [['Namespace', undefined], ['ConfigMap', undefined], ['Deployment', 'a'], ['ConfigMap', undefined]]);
  const of = (apiVersion, kind, name) => wit({ apiVersion, kind, metadata: { name } });
  const ns = of('v1', 'Namespace', 'n');
  const dep = of('apps/v1', 'Deployment', 'd');
  h.onAdd(ns, true);
  h.onAdd(dep, true);
  h.onUpdate(of('apps/v1', 'Deployment', 'd0'), dep, true);
  h.onDelete(dep, true);
  h.onUpdate(ns, ns, false);
  h.onDelete(of('v1', 'ConfigMap', 'c'), false);
  assert.deepEqual(seen, [
    ['add', 'Namespace', 'n', true],
    ['watched', 'add', 'Deployment', 'd', undefined, true, false, false, true, false],
    ['watched', 'update', 'Deployment', 'd', 'd0', false, true, false, true, false],
    ['watched', 'delete', 'Deployment', 'd', undefined, false, false, true, true, false],
    ['update', 'Namespace', 'n', false],
    ['delete', 'ConfigMap', 'c', false],
  ]);
  assert.throws(() => h.onAdd(of('apps/v1', 'Deployment', 'bad'), false), (e) => e.tag === 'fatal' && e.val === 'bad deployment');
  // Without watches, every kind is the handler's own, as before.
  const kinds = [];
  const old = handler({ subscriptions: [subscription('v1', 'Namespace'), subscription('v1', 'ResourceQuota')],
    onAdd(obj) { kinds.push(obj.kind); }, onWatched() { throw new Error('no watches'); } });
  old.onAdd(of('v1', 'ResourceQuota', 'q'), false);
  assert.deepEqual(kinds, ['ResourceQuota']);
  // 0.1.0 routes the same way and describes the watches too.
  const v1 = v010.handler({ name: 'w', subscriptions: [subscription('v1', 'Namespace')], watches: [subscription('apps/v1', 'Deployment')],
    onWatched(ev) { kinds.push(`watched ${ev.kind}`); } });
  assert.equal(v1.describe().subscriptions.length, 2);
  v1.onAdd(dep, false);
  assert.deepEqual(kinds, ['ResourceQuota', 'watched Deployment']);
});

test('owner: isUpToDate compares only the fields the handler sets', () => {
  const have = { metadata: { name: 'cfg', uid: 'c1', labels: { a: '1', other: 'x' }, ownerReferences: [PLAIN, MINE] },
    data: { k: 'v' }, status: { phase: 'Done' }, spec: { ports: [{ port: 80, protocol: 'TCP' }] } };
  assert.equal(owner.isUpToDate(have, { metadata: { name: 'cfg', labels: { a: '1' }, ownerReferences: [MINE] }, data: { k: 'v' } }), true);
  assert.equal(owner.isUpToDate(have, { data: { k: 'changed' } }), false);
  assert.equal(owner.isUpToDate(have, { data: { k: 'v', n: 'y' } }), false);
  assert.equal(owner.isUpToDate(have, { data: { k: 'v' }, binaryData: {}, extra: null }), true);
  assert.equal(owner.isUpToDate(have, { metadata: { ownerReferences: [{ ...MINE, uid: 'd2' }] } }), false);
  assert.equal(owner.isUpToDate(have, { spec: { ports: [{ port: 80 }] } }), true);
  assert.equal(owner.isUpToDate(have, { spec: { ports: [{ port: 80 }, { port: 443 }] } }), false);
  assert.equal(owner.isUpToDate(undefined, { data: {} }), false);
  assert.equal(owner.isUpToDate(KubeObject.of(wit({ ...owned('ns', [MINE]), data: { k: 'v' } })), { metadata: { ownerReferences: [MINE] }, data: { k: 'v' } }), true);
});

test('applyOwnedIfChanged writes only what differs', () => {
  hostKube.state.error = undefined;
  hostKube.state.answer = { object: wit(CM), code: 200 };
  const before = hostKube.calls.length;
  const want = { ...owned(), data: { k: 'v' } };
  const have = KubeObject.of(wit({ ...owned('ns', [PLAIN, MINE]), data: { k: 'v' }, status: { x: 1 } }));
  assert.equal(kube.applyOwnedIfChanged(DEPLOY, want, have), undefined);
  assert.deepEqual(want.metadata.ownerReferences, [MINE]);
  assert.equal(hostKube.calls.length, before);
  for (const stale of [undefined, KubeObject.of(wit({ ...owned('ns', [PLAIN]), data: { k: 'v' } }))]) {
    assert.notEqual(kube.applyOwnedIfChanged(DEPLOY, { ...owned(), data: { k: 'v' } }, stale), undefined);
  }
  assert.equal(hostKube.calls.length, before + 2);
});

test('http: error codes, URLs, bodies', () => {
  assert.ok(http.httpError('GET x', { tag: 'connection-timeout' }) instanceof Timeout);
  assert.ok(http.httpError('GET x', { tag: 'HTTP-response-timeout' }) instanceof Timeout);
  const dns = http.httpError('GET x', { tag: 'DNS-timeout' });
  assert.deepEqual([dns.constructor, dns.code], [Timeout, 'dns-timeout']);
  const big = http.httpError('GET x', { tag: 'HTTP-response-body-size', val: 20000n });
  assert.ok(big instanceof TooLarge);
  assert.deepEqual([big.message, big.code], ['GET x: http-response-body-size', 'http-response-body-size']);
  const denied = http.httpError('GET x', { tag: 'HTTP-request-denied' });
  assert.deepEqual([denied.constructor, denied.code], [HttpError, 'http-request-denied']);
  assert.deepEqual(http.parseUrl('https://h.example:8443/a/b?c=1#f'), { https: true, authority: 'h.example:8443', path: '/a/b?c=1' });
  assert.deepEqual(http.parseUrl('http://127.0.0.1:9000'), { https: false, authority: '127.0.0.1:9000', path: '/' });
  assert.throws(() => http.parseUrl('ftp://x'), (e) => e instanceof HttpError && e.code === 'http-request-uri-invalid');
  assert.equal(http.text(http.utf8('héllo ✓')), 'héllo ✓');
  const r = new http.Response(200, {}, http.utf8('{"a":1}'));
  assert.deepEqual([r.ok, r.json()], [true, { a: 1 }]);
  assert.equal(new http.Response(503, {}, new Uint8Array()).ok, false);
});
