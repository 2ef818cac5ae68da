// Unit tests of the JavaScript SDK's pure parts on node, with the world's imports stubbed
// (test/loader.js): `npm test` here, or scripts/test.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { handler, subscription, permission, kube, events, http, KubeObject, key, Retry, Fatal, ApiError, Timeout, TooLarge, HttpError } from '../index.js';
import * as hostKube from './stub/kube.js';
import * as hostCache from './stub/cache.js';
import { lines } from './stub/log.js';
import { emitted } from './stub/events.js';

const CM = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { namespace: 'ns', name: 'cm', uid: 'u1', labels: { a: 'b' }, generation: 3 }, data: { k: 'v' } };
const wit = (o) => ({ meta: { name: o.metadata.name, namespace: o.metadata.namespace }, json: JSON.stringify(o) });

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

test('cache reads; their errors retry', () => {
  hostCache.state.objects = [wit(CM)];
  assert.deepEqual(kube.cachedList('v1', 'ConfigMap').map((o) => o.key), ['ns/cm']);
  assert.equal(kube.cachedGet('v1', 'ConfigMap', 'cm', 'ns').uid, 'u1');
  hostCache.state.error = 'not subscribed';
  assert.throws(() => kube.cachedGet('v1', 'Secret', 's', 'ns'), Retry);
  hostCache.state.error = undefined;
});

test('events carry the object-meta', () => {
  events.warning(CM, 'Broken', 'it broke');
  const e = emitted.at(-1);
  assert.deepEqual([e.regarding.kind, e.regarding.namespace, e.regarding.uid, e.regarding.generation, e.regarding.labels], ['ConfigMap', 'ns', 'u1', 3n, [['a', 'b']]]);
  assert.deepEqual([e.type, e.reason, e.action, e.note], ['warning', 'Broken', 'Broken', 'it broke']);
});

test('http: error codes, URLs, bodies', () => {
  assert.ok(http.httpError('GET x', { tag: 'connection-timeout' }) instanceof Timeout);
  assert.ok(http.httpError('GET x', { tag: 'HTTP-response-timeout' }) instanceof Timeout);
  const big = http.httpError('GET x', { tag: 'HTTP-response-body-size', val: 20000n });
  assert.ok(big instanceof TooLarge);
  assert.equal(big.message, 'GET x: HTTP-response-body-size');
  const denied = http.httpError('GET x', { tag: 'HTTP-request-denied' });
  assert.deepEqual([denied.constructor, denied.code], [HttpError, 'HTTP-request-denied']);
  assert.deepEqual(http.parseUrl('https://h.example:8443/a/b?c=1#f'), { https: true, authority: 'h.example:8443', path: '/a/b?c=1' });
  assert.deepEqual(http.parseUrl('http://127.0.0.1:9000'), { https: false, authority: '127.0.0.1:9000', path: '/' });
  assert.throws(() => http.parseUrl('ftp://x'), HttpError);
  assert.equal(http.text(http.utf8('héllo ✓')), 'héllo ✓');
  const r = new http.Response(200, {}, http.utf8('{"a":1}'));
  assert.deepEqual([r.ok, r.json()], [true, { a: 1 }]);
  assert.equal(new http.Response(503, {}, new Uint8Array()).ok, false);
});
