// Unit tests of the JavaScript SDK's 0.3.0 parts, imports stubbed (test/loader.js): settings, shard, the
// handler world's validateSettings, the controller world (declarations, describe, reconcile with
// the primary read from the cache, outcomes, keysFor, failures), the owner helpers a controller
// uses, and that index.js imports nothing of 0.3.0 (a 0.2.0 component builds on it). sdk.test.js
// imports this file, so `npm test` runs it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  handler, controller, subscription, permission, watch, sameName, label, field, guest, done, requeueAfter, ObjectKey,
  kube, owner, KubeObject, Retry, Fatal, Trap, ApiError, SettingError,
} from '../index.js';
import * as settings from '../settings.js';
import * as shard from '../shard.js';
import { state as table } from './stub/settings.js';
import { state as held } from './stub/shard.js';
import * as hostKube from './stub/kube.js';
import * as hostCache from './stub/cache.js';
import { lines } from './stub/log.js';

const wit = (o) => {
  const m = o.metadata;
  const meta = { apiVersion: o.apiVersion, kind: o.kind, namespace: m.namespace, name: m.name, uid: m.uid || '', resourceVersion: m.resourceVersion || '', labels: Object.entries(m.labels || {}) };
  return { meta, json: JSON.stringify(o) };
};
const setting = (fn, message) => assert.throws(fn, (e) => e instanceof SettingError && e instanceof Fatal && e.message === message);

test('settings: typed values', () => {
  table.table = { replicas: '3', ratio: '0.5', debug: 'true', image: 'nginx:1.27', zones: '["a", "b"]', limits: '{"cpu": "1"}', big: '1_000', inf: '-inf' };
  table.json = undefined;
  assert.equal(settings.get('replicas', 'integer'), 3);
  assert.equal(settings.get('big', 'integer'), 1000);
  assert.equal(settings.get('ratio', 'number'), 0.5);
  assert.equal(settings.get('replicas', 'number'), 3);
  assert.equal(settings.get('inf', 'number'), -Infinity);
  assert.equal(settings.get('debug', 'boolean'), true);
  assert.equal(settings.get('image'), 'nginx:1.27');
  assert.equal(settings.get('replicas'), '3');
  assert.deepEqual(settings.get('zones', 'array'), ['a', 'b']);
  assert.deepEqual(settings.get('limits', 'table'), { cpu: '1' });
  assert.equal(settings.require('replicas', 'integer'), 3);
});

test('settings: absent keys', () => {
  table.table = {};
  assert.equal(settings.get('nope', 'integer'), undefined);
  assert.equal(settings.get('nope', 'integer', 2), 2);
  setting(() => settings.require('nope', 'integer'), 'setting "nope": missing, expected an integer');
  assert.throws(() => settings.require('nope', 'int'), TypeError);
});

test('settings: a wrong type names the key and the type', () => {
  table.table = { word: 'three', ratio: '0.5', replicas: '3', image: 'nginx:1.27', zones: '["a", "b"]', huge: '9007199254740993', long: 'x'.repeat(100) };
  for (const [key, type, message] of [
    ['word', 'integer', 'setting "word": expected an integer, got "three"'],
    ['ratio', 'integer', 'setting "ratio": expected an integer, got "0.5"'],
    ['huge', 'integer', 'setting "huge": expected an integer, got "9007199254740993"'],
    ['word', 'number', 'setting "word": expected a number, got "three"'],
    ['replicas', 'boolean', 'setting "replicas": expected a boolean (true or false), got "3"'],
    ['image', 'array', 'setting "image": expected an array, got "nginx:1.27"'],
    ['zones', 'table', 'setting "zones": expected a table, got "[\\"a\\", \\"b\\"]"'],
    ['long', 'integer', `setting "long": expected an integer, got "${'x'.repeat(57)}..."`],
  ]) setting(() => settings.get(key, type), message);
  assert.throws(() => settings.get('word', 'int'), TypeError);
});

test('settings: choices and converters', () => {
  table.table = { mode: 'fast', bad: 'medium' };
  const mode = settings.oneOf('fast', 'safe');
  assert.equal(settings.get('mode', mode), 'fast');
  setting(() => settings.get('bad', mode), 'setting "bad": expected one of "fast", "safe", got "medium"');
  setting(() => settings.require('absent', mode), 'setting "absent": missing, expected one of "fast", "safe"');
  assert.equal(settings.get('mode', (t) => t.toUpperCase()), 'FAST');
});

test('settings: all and json', () => {
  table.table = { b: '2', a: 'x' };
  assert.deepEqual(Object.keys(settings.all()), ['a', 'b']);
  assert.deepEqual(settings.all(), { a: 'x', b: '2' });
  table.json = { a: 'x', b: 2, t: { k: [1, true] } };
  assert.deepEqual(settings.json(), { a: 'x', b: 2, t: { k: [1, true] } });
  table.table = {};
  table.json = undefined;
  assert.deepEqual([settings.all(), settings.json()], [{}, {}]);
});

const refusal = (exports) => {
  try {
    exports.validateSettings();
  } catch (e) {
    return e;
  }
  return undefined;
};

test('validateSettings: ok by default; what it throws is the refusal', () => {
  assert.equal(refusal(handler({})), undefined);
  let raises;
  const strict = handler({
    validateSettings() {
      if (raises !== undefined) throw raises;
      settings.require('replicas', 'integer');
    },
  });
  table.table = { replicas: 'three' };
  assert.equal(refusal(strict), 'setting "replicas": expected an integer, got "three"');
  table.table = {};
  assert.equal(refusal(strict), 'setting "replicas": missing, expected an integer');
  table.table = { replicas: '2' };
  assert.equal(refusal(strict), undefined);
  raises = new Fatal('no');
  assert.equal(refusal(strict), 'no');
  raises = new TypeError('x is undefined');
  assert.equal(refusal(strict), 'TypeError: x is undefined');
  assert.deepEqual(lines.at(-1), ['error', 'validate-settings: TypeError: x is undefined']);
  raises = new Trap('asked');
  assert.ok(refusal(strict) instanceof Trap);
});

const SITE = { apiVersion: 'example.com/v1', kind: 'Site', metadata: { namespace: 'ns', name: 'web', uid: 's1' }, spec: { replicas: 2 } };

function sites() {
  const c = {
    seen: [], answer: undefined, keys: [],
    name: 'sites',
    primary: subscription('example.com/v1', 'Site', { resyncMs: 60000 }),
    owns: [subscription('apps/v1', 'Deployment'), subscription('v1', 'ConfigMap')],
    watches: [watch('v1', 'Secret', field('/spec/secretRef/name'), { namespace: 'ns' }), watch('v1', 'Namespace', sameName()),
      watch('v1', 'Node', label('example.com/site')), watch('v1', 'Service', guest())],
    permissions: [permission('apps/v1', 'Deployment', ['apply'])],
    httpOrigins: ['https://x.example'],
    events: true,
    reconcile(key, site) {
      c.seen.push([key, String(key), site === undefined ? undefined : [site.key, site.decoded]]);
      if (c.answer instanceof Error) throw c.answer;
      return c.answer;
    },
    keysFor() {
      if (c.keys instanceof Error) throw c.keys;
      return c.keys;
    },
  };
  return [c, controller(c)];
}

const reconciled = (exports, namespace = 'ns', name = 'web') => {
  try {
    return exports.reconcile({ namespace, name });
  } catch (e) {
    return e;
  }
};

test('controller: describe reports the declaration', () => {
  hostCache.state.objects = [wit(SITE)];
  hostCache.state.error = undefined;
  const [, w] = sites();
  assert.deepEqual(Object.keys(w).sort(), ['describe', 'keysFor', 'onSynced', 'reconcile', 'validateSettings']);
  const info = w.describe();
  assert.deepEqual([info.name, info.primary.kind, info.primary.resyncPeriodMs], ['sites', 'Site', 60000n]);
  assert.deepEqual(info.owns.map((s) => s.kind), ['Deployment', 'ConfigMap']);
  assert.deepEqual(info.watches.map((x) => [x.subscription.kind, x.subscription.namespace, x.mapping]), [
    ['Secret', 'ns', { tag: 'field', val: '/spec/secretRef/name' }],
    ['Namespace', undefined, { tag: 'same-name' }],
    ['Node', undefined, { tag: 'label', val: 'example.com/site' }],
    ['Service', undefined, { tag: 'guest' }],
  ]);
  assert.deepEqual([info.permissions[0].verbs, info.httpOrigins, info.events], [['apply'], ['https://x.example'], true]);
});

test('controller: reconcile gets the key and the primary from the cache', () => {
  hostCache.state.objects = [wit(SITE)];
  hostCache.state.error = undefined;
  const [c, w] = sites();
  assert.deepEqual(reconciled(w), { tag: 'done' });
  const [key, text, primary] = c.seen.at(-1);
  assert.ok(key instanceof ObjectKey);
  assert.deepEqual([key.namespace, key.name, text, `${key}`, primary], ['ns', 'web', 'ns/web', 'ns/web', ['ns/web', false]]);
  assert.deepEqual(reconciled(w, 'ns', 'gone'), { tag: 'done' });
  assert.deepEqual(c.seen.at(-1).slice(1), ['ns/gone', undefined]);
  w.reconcile({ namespace: undefined, name: 'cluster' });
  assert.deepEqual([c.seen.at(-1)[0].namespace, c.seen.at(-1)[1]], [undefined, 'cluster']);
});

test('controller: outcomes', () => {
  hostCache.state.objects = [wit(SITE)];
  const [c, w] = sites();
  for (const [answer, want] of [[undefined, { tag: 'done' }], [null, { tag: 'done' }], [done(), { tag: 'done' }],
    [requeueAfter(30), { tag: 'requeue-after', val: 30000n }], [requeueAfter(1.5), { tag: 'requeue-after', val: 1500n }]]) {
    c.answer = answer;
    assert.deepEqual(reconciled(w), want);
  }
  for (const bad of [0, -1, Infinity, NaN]) assert.throws(() => requeueAfter(bad), RangeError);
  for (const bad of ['30', true, undefined, 30n]) assert.throws(() => requeueAfter(bad), TypeError);
  c.answer = 'done';
  const got = reconciled(w);
  assert.equal(got.tag, 'retry');
  assert.match(got.val, /return done\(\), requeueAfter\(seconds\) or nothing/);
});

test('controller: failures are a handler\'s', () => {
  hostCache.state.objects = [wit(SITE)];
  const [c, w] = sites();
  for (const [raised, want] of [[new Retry('later'), { tag: 'retry', val: 'later' }], [new Fatal('never'), { tag: 'fatal', val: 'never' }],
    [new ApiError('apply', 409, 'Conflict', 'm'), { tag: 'retry', val: 'apply: 409 Conflict: m' }],
    [new ApiError('apply', 422, 'Invalid', 'm'), { tag: 'fatal', val: 'apply: 422 Invalid: m' }],
    [new TypeError('x is undefined'), { tag: 'retry', val: 'TypeError: x is undefined' }]]) {
    c.answer = raised;
    assert.deepEqual(reconciled(w), want);
  }
  assert.deepEqual(lines.at(-1), ['error', 'reconcile: TypeError: x is undefined']);
  c.answer = new Trap('asked');
  assert.throws(() => w.reconcile({ namespace: 'ns', name: 'web' }), Trap);
  // A primary the cache cannot give yet: retried, the reconcile not called.
  hostCache.state.error = 'the cache of example.com/v1/Site is not available: its informer is starting';
  const before = c.seen.length;
  assert.equal(reconciled(w).tag, 'retry');
  assert.equal(c.seen.length, before);
  hostCache.state.error = undefined;
});

test('controller: keysFor', () => {
  const [c, w] = sites();
  const svc = wit({ apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'ns', name: 'svc' } });
  assert.deepEqual(w.keysFor(svc), []);
  c.keys = [new ObjectKey('ns', 'a'), ['ns', 'b'], 'ns/c', 'd', new KubeObject(SITE), SITE];
  assert.deepEqual(w.keysFor(svc), [{ namespace: 'ns', name: 'a' }, { namespace: 'ns', name: 'b' }, { namespace: 'ns', name: 'c' },
    { namespace: undefined, name: 'd' }, { namespace: 'ns', name: 'web' }, { namespace: 'ns', name: 'web' }]);
  c.keys = new Fatal('no');
  assert.deepEqual(w.keysFor(svc), []);
  assert.deepEqual(lines.at(-1), ['error', 'keys-for Service ns/svc: Error: no']);
  c.keys = [3];
  assert.deepEqual(w.keysFor(svc), []);
  assert.match(lines.at(-1)[1], /not an object key: 3/);
});

test('controller: defaults', () => {
  const w = controller({ primary: subscription('v1', 'ConfigMap'), reconcile: () => done() });
  assert.equal(w.validateSettings(), undefined);
  assert.equal(w.onSynced(), undefined);
  assert.deepEqual(w.keysFor(wit(SITE)), []);
  const info = w.describe();
  assert.deepEqual([info.name, info.owns, info.watches, info.permissions, info.httpOrigins, info.events], ['controller', [], [], [], [], false]);
  assert.throws(() => controller({ primary: subscription('v1', 'ConfigMap'), reconcile() {}, onSynced() { throw new Retry('list failed'); } }).onSynced(),
    (e) => e.tag === 'retry' && e.val === 'list failed');
});

test('controller: declarations are refused while the component is built', () => {
  const primary = subscription('v1', 'ConfigMap');
  const reconcile = () => done();
  for (const [c, words] of [
    [{ primary }, /reconcile\(key, primary\) is required/],
    [{ reconcile }, /primary: subscription\(apiVersion, kind, \.\.\.\) is required/],
    [{ primary, reconcile, watches: [subscription('v1', 'Secret')] }, /watches takes watch\(apiVersion, kind, mapping\)/],
    [{ primary, reconcile, owns: [watch('v1', 'Secret', sameName())] }, /owns takes subscription/],
    [{ primary, reconcile, watches: [watch('v1', 'Secret', guest())] }, /needs keysFor/],
  ]) assert.throws(() => controller(c), words);
  assert.throws(() => field('spec/name'), TypeError);
  assert.throws(() => label(''), TypeError);
  assert.throws(() => watch('v1', 'Secret', 'same-name'), TypeError);
});

test('handler: declarations behind a getter wait for describe and the first event (they may read the settings)', () => {
  table.table = {};
  const seen = [];
  const h = handler({
    get subscriptions() { return [subscription('v1', 'ConfigMap', { namespace: settings.require('namespace') })]; },
    get watches() { return [subscription('v1', 'Secret', { namespace: settings.require('namespace') })]; },
    get httpOrigins() { return [settings.require('url')]; },
    onWatched(event) { seen.push(event.kind); },
  });
  table.table = { namespace: 'team-a', url: 'https://x.example' };
  const info = h.describe();
  assert.deepEqual([info.subscriptions.map((s) => s.namespace), info.httpOrigins], [['team-a', 'team-a'], ['https://x.example']]);
  h.onAdd(wit({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 's', namespace: 'team-a' } }), false);
  assert.deepEqual(seen, ['Secret']);
});

test('controller: declarations behind a getter wait for describe (they may read the settings)', () => {
  table.table = {};
  const w = controller({ get primary() { return subscription('v1', 'ConfigMap', { namespace: settings.get('namespace') }); }, reconcile: () => done() });
  table.table = { namespace: 'team-a' };
  assert.equal(w.describe().primary.namespace, 'team-a');
});

test('owner: controllerOf, applyOwnedIfChanged from the cache, cachedOwned', () => {
  const mine = { apiVersion: 'example.com/v1', kind: 'Site', name: 'web', uid: 's1', controller: true };
  const other = { apiVersion: 'v1', kind: 'Pod', name: 'p', uid: 'u9' };
  assert.deepEqual(owner.controllerOf({ metadata: { ownerReferences: [other, mine] } }), mine);
  assert.equal(owner.controllerOf({ metadata: { ownerReferences: [other] } }), undefined);
  assert.equal(owner.controllerOf({}), undefined);

  const ref = owner.controllerRef(SITE);
  const cachedCm = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { namespace: 'ns', name: 'web', uid: 'c1', ownerReferences: [ref] }, data: { k: 'v' } };
  const theirs = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { namespace: 'ns', name: 'b' } };
  hostCache.state.objects = [wit(cachedCm), wit(theirs)];
  hostCache.state.error = undefined;
  hostKube.state.error = undefined;
  hostKube.state.answer = { object: wit(cachedCm), code: 200 };
  const before = hostKube.calls.length;
  const want = KubeObject.ref('v1', 'ConfigMap', 'web', 'ns');
  want.data = { k: 'v' };
  assert.equal(kube.applyOwnedIfChanged(SITE, want), undefined);
  assert.equal(hostKube.calls.length, before);
  want.data = { k: 'changed' };
  assert.notEqual(kube.applyOwnedIfChanged(SITE, want), undefined);
  assert.deepEqual(JSON.parse(hostKube.calls.at(-1)[1]).metadata.ownerReferences, [ref]);
  // An explicit `have` (undefined: absent) is taken as it is, the cache not read.
  hostCache.state.error = 'plugin p does not subscribe to v1 ConfigMap';
  assert.notEqual(kube.applyOwnedIfChanged(SITE, KubeObject.ref('v1', 'ConfigMap', 'web', 'ns'), undefined), undefined);
  hostCache.state.error = undefined;
  assert.deepEqual(kube.cachedOwned(SITE, 'v1', 'ConfigMap').map((o) => o.name), ['web']);
});

const sharded = (by, owned, ranges = []) => Object.assign(held, { by, owned, ranges, asked: [] });

test('shard: not sharded owns everything and asks nothing per object', () => {
  sharded('none', undefined, [{ start: 0n, end: undefined }]);
  assert.equal(shard.by(), 'none');
  assert.deepEqual(shard.ranges(), [{ start: 0n, end: undefined }]);
  const cm = KubeObject.of(wit({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { namespace: 'a', name: 'c', uid: 'u1' } }));
  assert.equal(shard.ownsObject(cm), true);
  assert.deepEqual(held.asked, []);
  assert.equal(cm.decoded, false);
});

test('shard: by uid asks for the uid, by namespace for the namespace ("" when cluster-scoped)', () => {
  sharded('uid', ['u1'], [{ start: 0n, end: 1n << 63n }]);
  const [r] = shard.ranges();
  assert.ok(shard.contains(r, 0n) && shard.contains(r, (1n << 63n) - 1n) && !shard.contains(r, 1n << 63n));
  assert.ok(shard.contains({ start: 5n, end: undefined }, 2n ** 64n - 1n));
  const cm = KubeObject.of(wit({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { namespace: 'a', name: 'c', uid: 'u1' } }));
  assert.equal(shard.ownsObject(cm), true);
  assert.equal(cm.decoded, false, 'the key is read from the metadata the host extracted');
  assert.equal(shard.ownsObject({ metadata: { namespace: 'a', uid: 'u2' } }), false);
  assert.equal(shard.ownsObject({ uid: 'u1' }), true); // a bare metadata object
  assert.equal(shard.owns('u3'), false);
  assert.deepEqual(held.asked, ['u1', 'u2', 'u1', 'u3']);

  sharded('namespace', ['team-a', '']);
  assert.deepEqual(shard.ranges(), []); // holds none (or fenced)
  assert.equal(shard.ownsObject({ metadata: { namespace: 'team-a', uid: 'u1' } }), true);
  assert.equal(shard.ownsObject(KubeObject.ref('v1', 'ConfigMap', 'c', 'team-b')), false);
  const ns = KubeObject.of(wit({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'team-a', uid: 'u9' } }));
  assert.equal(shard.ownsObject(ns), true);
  assert.deepEqual(held.asked, ['team-a', 'team-b', '']);
  assert.equal(shard.key('uid', { metadata: {} }), '');
  assert.throws(() => shard.key('name', {}), TypeError);
  sharded('none', undefined, [{ start: 0n, end: undefined }]);
});

test('index.js imports nothing of 0.3.0 (0.2.0 components build on it); settings.js and shard.js are the modules that do', () => {
  const seen = new Set();
  const hosts = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = readFileSync(new URL(`../${file}`, import.meta.url), 'utf8');
    for (const [, spec] of src.matchAll(/^(?:import|export)[^'"]*from '([^']+)'/gm)) {
      if (spec.startsWith('./')) visit(spec.slice(2));
      else hosts.add(spec);
    }
  };
  visit('index.js');
  assert.deepEqual([...hosts].filter((s) => s.includes('@0.3.0')), []);
  assert.ok(!seen.has('settings.js') && !seen.has('shard.js'));
  assert.ok(readFileSync(new URL('../settings.js', import.meta.url), 'utf8').includes("from 'kubewasm:handler/settings@0.3.0'"));
  assert.ok(readFileSync(new URL('../shard.js', import.meta.url), 'utf8').includes("from 'kubewasm:handler/shard@0.3.0'"));
});
