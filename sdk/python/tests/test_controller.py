"""Unit tests of the 0.3.0 parts of the Python SDK on stub bindings (tests/stub): settings, shard, the
handler world's `validate-settings`, and the controller world (declarations, `describe`,
`reconcile` with the primary read from the cache, outcomes, `keys-for`, failures)."""

import json
import os
import sys
import unittest
from datetime import timedelta

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "stub"), os.path.dirname(here)]

from componentize_py_types import Err  # noqa: E402
from wit_world.imports import cache as wcache  # noqa: E402
from wit_world.imports import controller_types as ct  # noqa: E402
from wit_world.imports import kube as wkube  # noqa: E402
from wit_world.imports import kubewasm_handler_types as types  # noqa: E402
from wit_world.imports import log as wlog  # noqa: E402
from wit_world.imports import settings as wsettings  # noqa: E402
from wit_world.imports import shard as wshard  # noqa: E402

import kubewasm_sdk as sdk  # noqa: E402
from kubewasm_sdk import settings, shard  # noqa: E402


def wit(obj: dict) -> types.Object:
    m = obj.get("metadata", {})
    meta = types.ObjectMeta(obj.get("apiVersion", ""), obj.get("kind", ""), m.get("namespace"), m.get("name", ""),
                            m.get("uid", ""), m.get("resourceVersion", ""), None, list((m.get("labels") or {}).items()))
    return types.Object(meta, json.dumps(obj))


class SettingsTest(unittest.TestCase):
    def setUp(self):
        wsettings.table = {"replicas": "3", "ratio": "0.5", "debug": "true", "image": "nginx:1.27",
                           "zones": '["a", "b"]', "limits": '{"cpu": "1"}', "word": "three", "big": "1_000"}
        wsettings.json_table = None

    def test_typed_values(self):
        self.assertEqual(settings.get("replicas", int), 3)
        self.assertEqual(settings.get("big", int), 1000)
        self.assertEqual(settings.get("ratio", float), 0.5)
        self.assertEqual(settings.get("replicas", float), 3.0)
        self.assertIs(settings.get("debug", bool), True)
        self.assertEqual(settings.get("image"), "nginx:1.27")
        self.assertEqual(settings.get("replicas"), "3")
        self.assertEqual(settings.get("zones", list), ["a", "b"])
        self.assertEqual(settings.get("limits", dict), {"cpu": "1"})
        self.assertEqual(settings.require("replicas", int), 3)

    def test_absent_keys(self):
        self.assertIsNone(settings.get("nope", int))
        self.assertEqual(settings.get("nope", int, 2), 2)
        with self.assertRaises(sdk.SettingError) as e:
            settings.require("nope", int)
        self.assertEqual(str(e.exception), 'setting "nope": missing, expected an integer')
        self.assertEqual((e.exception.key, e.exception.got), ("nope", None))

    def test_wrong_types_name_the_key_and_the_type(self):
        for key, type, message in [
            ("word", int, 'setting "word": expected an integer, got "three"'),
            ("ratio", int, 'setting "ratio": expected an integer, got "0.5"'),
            ("word", float, 'setting "word": expected a number, got "three"'),
            ("replicas", bool, 'setting "replicas": expected a boolean (true or false), got "3"'),
            ("image", list, 'setting "image": expected an array, got "nginx:1.27"'),
            ("zones", dict, 'setting "zones": expected a table, got "[\\"a\\", \\"b\\"]"'),
        ]:
            with self.assertRaises(sdk.SettingError) as e:
                settings.get(key, type)
            self.assertEqual(str(e.exception), message)
            self.assertIsInstance(e.exception, sdk.Fatal)
        wsettings.table = {"long": "x" * 100}
        with self.assertRaises(sdk.SettingError) as e:
            settings.get("long", int)
        self.assertEqual(str(e.exception), 'setting "long": expected an integer, got "' + "x" * 57 + '..."')

    def test_choices_and_converters(self):
        mode = settings.one_of("fast", "safe")
        wsettings.table = {"mode": "fast", "bad": "medium"}
        self.assertEqual(settings.get("mode", mode), "fast")
        with self.assertRaises(sdk.SettingError) as e:
            settings.get("bad", mode)
        self.assertEqual(str(e.exception), 'setting "bad": expected one of "fast", "safe", got "medium"')
        with self.assertRaises(sdk.SettingError) as e:
            settings.require("absent", mode)
        self.assertEqual(str(e.exception), 'setting "absent": missing, expected one of "fast", "safe"')
        self.assertEqual(settings.get("mode", str.upper), "FAST")
        with self.assertRaises(TypeError):
            settings.get("mode", 3)
        with self.assertRaises(TypeError):
            settings.require("absent", "int")
        with self.assertRaises(sdk.SettingError) as e:
            settings.require("absent", str.upper)
        self.assertEqual(str(e.exception), 'setting "absent": missing, expected a valid value')

    def test_all_and_json(self):
        wsettings.table = {"b": "2", "a": "x"}
        self.assertEqual(settings.all(), {"a": "x", "b": "2"})
        self.assertEqual(list(settings.all()), ["a", "b"])
        wsettings.json_table = {"a": "x", "b": 2, "t": {"k": [1, True]}}
        self.assertEqual(settings.json(), {"a": "x", "b": 2, "t": {"k": [1, True]}})
        wsettings.table, wsettings.json_table = {}, None
        self.assertEqual((settings.all(), settings.json()), ({}, {}))


class Strict(sdk.Handler):
    name = "strict"
    subscriptions = [sdk.subscription("v1", "ConfigMap")]
    raises = None

    def validate_settings(self):
        if self.raises is not None:
            raise self.raises
        settings.require("replicas", int)


class ValidateSettingsTest(unittest.TestCase):
    def refusal(self, plugin):
        try:
            sdk.world(plugin)().validate_settings()
        except Err as e:
            return e.value
        return None

    def test_ok_by_default(self):
        self.assertIsNone(self.refusal(sdk.Handler()))

    def test_a_setting_error_is_the_refusal(self):
        wsettings.table = {"replicas": "three"}
        self.assertEqual(self.refusal(Strict()), 'setting "replicas": expected an integer, got "three"')
        wsettings.table = {}
        self.assertEqual(self.refusal(Strict()), 'setting "replicas": missing, expected an integer')
        wsettings.table = {"replicas": "2"}
        self.assertIsNone(self.refusal(Strict()))

    def test_other_failures_are_refusals_too(self):
        h = Strict()
        h.raises = sdk.Fatal("no")
        self.assertEqual(self.refusal(h), "no")
        h.raises = KeyError("k")
        self.assertEqual(self.refusal(h), "KeyError: 'k'")
        self.assertIn(("error", "validate-settings: KeyError: 'k'"), wlog.lines)

    def test_handler_declarations_may_read_the_settings(self):
        class FromSettings(sdk.Handler):
            @property
            def subscriptions(self):
                return [sdk.subscription("v1", "ConfigMap", namespace=settings.require("namespace"))]

            @property
            def watches(self):
                return [sdk.subscription("v1", "Secret", namespace=settings.require("namespace"))]

            @property
            def http_origins(self):
                return [settings.require("url")]

            def on_watched(self, event):
                seen.append(event.kind)

        seen = []
        wsettings.table = {}
        w = sdk.world(FromSettings())()  # nothing read while the component is built
        wsettings.table = {"namespace": "team-a", "url": "https://x.example"}
        info = w.describe()
        self.assertEqual(([s.namespace for s in info.subscriptions], info.http_origins),
                         (["team-a", "team-a"], ["https://x.example"]))
        w.on_add(wit({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team-a"}}), False)
        self.assertEqual(seen, ["Secret"])

    def test_a_controller_validates_the_same_way(self):
        class C(sdk.Controller):
            primary = sdk.subscription("example.com/v1", "Site")

            def validate_settings(self):
                settings.require("image")

            def reconcile(self, key, primary):
                pass

        wsettings.table = {}
        self.assertEqual(self.refusal(C()), 'setting "image": missing, expected a string')


SITE = {"apiVersion": "example.com/v1", "kind": "Site", "metadata": {"namespace": "ns", "name": "web", "uid": "s1"},
        "spec": {"replicas": 2}}


class Sites(sdk.Controller):
    name = "sites"
    primary = sdk.subscription("example.com/v1", "Site", resync_ms=60_000)
    owns = [sdk.subscription("apps/v1", "Deployment"), sdk.subscription("v1", "ConfigMap")]
    watches = [sdk.watch("v1", "Secret", sdk.field("/spec/secretRef/name"), namespace="ns"),
               sdk.watch("v1", "Namespace", sdk.same_name()),
               sdk.watch("v1", "Node", sdk.label("example.com/site")),
               sdk.watch("v1", "Service", mapping=sdk.guest())]
    permissions = [sdk.permission("apps/v1", "Deployment", ["apply"])]
    http_origins = ["https://x.example"]
    events = True

    def __init__(self):
        self.seen, self.answer, self.keys = [], None, []

    def reconcile(self, key, site):
        self.seen.append((key, str(key), None if site is None else (site.key, site.decoded)))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def keys_for(self, obj):
        if isinstance(self.keys, BaseException):
            raise self.keys
        return self.keys


class ControllerTest(unittest.TestCase):
    def setUp(self):
        wcache.objects, wcache.answer = [wit(SITE)], None
        self.c = Sites()
        self.w = sdk.world(self.c)()

    def reconcile(self, namespace="ns", name="web"):
        try:
            return self.w.reconcile(ct.ObjectKey(namespace, name))
        except Err as e:
            return e.value

    def test_describe(self):
        info = self.w.describe()
        self.assertIsInstance(info, ct.ControllerInfo)
        self.assertEqual((info.name, info.primary.kind, info.primary.resync_period_ms), ("sites", "Site", 60_000))
        self.assertEqual([s.kind for s in info.owns], ["Deployment", "ConfigMap"])
        self.assertEqual([(w.subscription.kind, w.subscription.namespace, w.mapping) for w in info.watches], [
            ("Secret", "ns", ct.Mapping_Field("/spec/secretRef/name")),
            ("Namespace", None, ct.Mapping_SameName()),
            ("Node", None, ct.Mapping_Label("example.com/site")),
            ("Service", None, ct.Mapping_Guest()),
        ])
        self.assertEqual((info.permissions[0].verbs, info.http_origins, info.events), (["apply"], ["https://x.example"], True))

    def test_reconcile_gets_the_key_and_the_primary_from_the_cache(self):
        self.assertEqual(self.reconcile(), ct.Outcome_Done())
        key, text, primary = self.c.seen[-1]
        self.assertEqual((key, key.namespace, key.name, text, primary), (sdk.ObjectKey("ns", "web"), "ns", "web", "ns/web",
                                                                           ("ns/web", False)))
        self.assertEqual(self.reconcile(name="gone"), ct.Outcome_Done())
        self.assertEqual(self.c.seen[-1], (sdk.ObjectKey("ns", "gone"), "ns/gone", None))
        self.reconcile(namespace=None, name="cluster")
        self.assertEqual(self.c.seen[-1][1], "cluster")
        self.assertIsNone(self.c.seen[-1][0].namespace)

    def test_outcomes(self):
        for answer, want in [(None, ct.Outcome_Done()), (sdk.done(), ct.Outcome_Done()),
                             (sdk.requeue_after(30), ct.Outcome_RequeueAfter(30_000)),
                             (sdk.requeue_after(1.5), ct.Outcome_RequeueAfter(1_500)),
                             (sdk.requeue_after(timedelta(minutes=2)), ct.Outcome_RequeueAfter(120_000))]:
            self.c.answer = answer
            self.assertEqual(self.reconcile(), want, answer)
        self.assertEqual(repr(sdk.requeue_after(30)), "requeue_after(30)")
        for bad in (0, -1, float("inf"), float("nan")):
            with self.assertRaises(ValueError):
                sdk.requeue_after(bad)
        for bad in ("30", True, None):
            with self.assertRaises(TypeError):
                sdk.requeue_after(bad)

    def test_failures_are_a_handlers(self):
        for raised, want in [(sdk.Retry("later"), types.HandlerError_Retry("later")),
                             (sdk.Fatal("never"), types.HandlerError_Fatal("never")),
                             (sdk.ApiError("apply", 409, "Conflict", "m"), types.HandlerError_Retry("apply: 409 Conflict: m")),
                             (sdk.ApiError("apply", 422, "Invalid", "m"), types.HandlerError_Fatal("apply: 422 Invalid: m")),
                             (KeyError("spec"), types.HandlerError_Retry("KeyError: 'spec'"))]:
            self.c.answer = raised
            self.assertEqual(self.reconcile(), want)
        self.assertIn(("error", "reconcile: KeyError: 'spec'"), wlog.lines)
        self.c.answer = "done"
        got = self.reconcile()
        self.assertIsInstance(got, types.HandlerError_Retry)
        self.assertIn("return done(), requeue_after(seconds) or None", got.value)
        self.c.answer = SystemExit(1)
        with self.assertRaises(SystemExit):
            self.w.reconcile(ct.ObjectKey("ns", "web"))

    def test_a_primary_the_cache_cannot_give(self):
        wcache.answer = Err("the cache of example.com/v1/Site is not available: its informer is starting")
        self.assertIsInstance(self.reconcile(), types.HandlerError_Retry)
        self.assertEqual(self.c.seen, [])
        wcache.answer = None

    def test_keys_for(self):
        svc = wit({"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "ns", "name": "svc"}})
        self.assertEqual(self.w.keys_for(svc), [])
        self.c.keys = [sdk.ObjectKey("ns", "a"), ("ns", "b"), "ns/c", "d", sdk.Object(SITE), SITE]
        self.assertEqual(self.w.keys_for(svc), [ct.ObjectKey("ns", "a"), ct.ObjectKey("ns", "b"), ct.ObjectKey("ns", "c"),
                                                ct.ObjectKey(None, "d"), ct.ObjectKey("ns", "web"), ct.ObjectKey("ns", "web")])
        self.c.keys = sdk.Fatal("no")
        self.assertEqual(self.w.keys_for(svc), [])
        self.assertEqual(wlog.lines[-1], ("error", "keys-for Service ns/svc: Fatal: no"))
        self.c.keys = [3]
        self.assertEqual(self.w.keys_for(svc), [])
        self.assertIn("not an object key: 3", wlog.lines[-1][1])

    def test_defaults(self):
        class Minimal(sdk.Controller):
            primary = sdk.subscription("v1", "ConfigMap")

            def reconcile(self, key, cm):
                return sdk.done()

        w = sdk.world(Minimal())()
        self.assertIsNone(w.validate_settings())
        self.assertIsNone(w.on_synced())
        self.assertEqual(w.keys_for(wit(SITE)), [])
        info = w.describe()
        self.assertEqual((info.name, info.owns, info.watches, info.permissions, info.http_origins, info.events),
                         ("controller", [], [], [], [], False))

    def test_on_synced_failures(self):
        class Orphans(Sites):
            def on_synced(self):
                raise sdk.Retry("list failed")

        with self.assertRaises(Err) as e:
            sdk.world(Orphans())().on_synced()
        self.assertEqual(e.exception.value, types.HandlerError_Retry("list failed"))

    def test_declarations_refused_while_the_component_is_built(self):
        class NoReconcile(sdk.Controller):
            primary = sdk.subscription("v1", "ConfigMap")

        class NoPrimary(sdk.Controller):
            def reconcile(self, key, primary):
                pass

        class PlainWatch(NoPrimary):
            primary = sdk.subscription("v1", "ConfigMap")
            watches = [sdk.subscription("v1", "Secret")]

        class WatchOwned(PlainWatch):
            watches = []
            owns = [sdk.watch("v1", "Secret", sdk.same_name())]

        class GuestWithoutKeysFor(PlainWatch):
            watches = [sdk.watch("v1", "Secret", sdk.guest())]

        for cls, words in [(NoReconcile, "overrides reconcile"), (NoPrimary, "needs primary = subscription"),
                           (PlainWatch, "watches takes watch(api_version, kind, mapping)"),
                           (WatchOwned, "owns takes subscription"), (GuestWithoutKeysFor, "needs keys_for")]:
            with self.assertRaises(ValueError) as e:
                sdk.world(cls())
            self.assertIn(words, str(e.exception), cls)

    def test_declarations_that_read_the_settings_wait_for_describe(self):
        class FromSettings(sdk.Controller):
            @property
            def primary(self):
                return sdk.subscription("v1", "ConfigMap", namespace=settings.get("namespace"))

            def reconcile(self, key, primary):
                pass

        wsettings.table = {}
        w = sdk.world(FromSettings())  # the property is not read while the component is built
        wsettings.table = {"namespace": "team-a"}
        self.assertEqual(w().describe().primary.namespace, "team-a")

    def test_mappings_and_keys(self):
        with self.assertRaises(ValueError):
            sdk.field("spec/name")
        with self.assertRaises(ValueError):
            sdk.label("")
        with self.assertRaises(TypeError):
            sdk.watch("v1", "Secret", "same-name")
        self.assertEqual(repr(sdk.watch("v1", "Secret", sdk.label("a"))), "watch('v1', 'Secret', label('a'))")
        self.assertEqual(sdk.same_name(), sdk.same_name())
        self.assertEqual(sdk.ObjectKey.of("ns/a/b"), sdk.ObjectKey("ns", "a/b"))
        self.assertEqual(str(sdk.ObjectKey(None, "n")), "n")


class OwnedTest(unittest.TestCase):
    def setUp(self):
        wkube.calls.clear()
        wkube.answer = None

    def test_controller_of(self):
        mine = {"apiVersion": "example.com/v1", "kind": "Site", "name": "web", "uid": "s1", "controller": True}
        other = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u9"}
        obj = {"metadata": {"ownerReferences": [other, mine]}}
        self.assertEqual(sdk.owner.controller_of(obj), mine)
        self.assertIsNone(sdk.owner.controller_of({"metadata": {"ownerReferences": [other]}}))
        self.assertIsNone(sdk.owner.controller_of({}))

    def test_apply_owned_if_changed_reads_the_cache_without_have(self):
        ref = sdk.owner.controller_ref(SITE)
        cached_cm = {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"namespace": "ns", "name": "web", "uid": "c1", "ownerReferences": [ref]},
                     "data": {"k": "v"}}
        wcache.objects, wcache.answer = [wit(cached_cm)], None
        want = sdk.Object.ref("v1", "ConfigMap", "web", "ns")
        want["data"] = {"k": "v"}
        self.assertIsNone(sdk.kube.apply_owned_if_changed(SITE, want))
        self.assertEqual(wkube.calls, [])
        wkube.answer = wkube.WriteOutcome(wit(cached_cm), 200)
        want["data"] = {"k": "changed"}
        self.assertIsNotNone(sdk.kube.apply_owned_if_changed(SITE, want))
        self.assertEqual(json.loads(wkube.calls[-1][1])["metadata"]["ownerReferences"], [ref])

    def test_cached_owned(self):
        ref = sdk.owner.controller_ref(SITE)
        mine = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "a", "ownerReferences": [ref]}}
        theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "b"}}
        wcache.objects, wcache.answer = [wit(mine), wit(theirs)], None
        self.assertEqual([o.name for o in sdk.kube.cached_owned(SITE, "v1", "ConfigMap")], ["a"])


class ShardTest(unittest.TestCase):
    def setUp(self):
        wshard.shard_by, wshard.held, wshard.owned, wshard.asked = wshard.ShardBy.NONE, [wshard.HashRange(0, None)], None, []

    def tearDown(self):
        self.setUp()

    def shard_by(self, by, owned, held=()):
        wshard.shard_by, wshard.owned, wshard.held = by, owned, list(held)

    def test_not_sharded_owns_everything_and_asks_nothing_per_object(self):
        self.assertEqual(shard.by(), "none")
        self.assertEqual(shard.ranges(), [(0, None)])
        self.assertTrue(shard.owns_object(sdk.Object.of(wit({"metadata": {"namespace": "a", "uid": "u1"}}))))
        self.assertEqual(wshard.asked, [])
        self.assertIs(sdk.shard, shard)

    def test_by_uid_asks_for_the_uid(self):
        self.shard_by(wshard.ShardBy.UID, {"u1"}, [wshard.HashRange(0, 1 << 63)])
        self.assertEqual(shard.by(), "uid")
        (r,) = shard.ranges()
        self.assertEqual((r.start, r.end), (0, 1 << 63))
        self.assertTrue(0 in r and (1 << 63) - 1 in r and (1 << 63) not in r)
        self.assertTrue(shard.owns_object(sdk.Object.of(wit({"metadata": {"namespace": "a", "uid": "u1"}}))))
        self.assertFalse(shard.owns_object({"metadata": {"namespace": "a", "uid": "u2"}}))
        self.assertTrue(shard.owns_object({"uid": "u1"}))  # a bare metadata dict
        self.assertFalse(shard.owns("u3"))
        self.assertEqual(wshard.asked, ["u1", "u2", "u1", "u3"])

    def test_by_namespace_asks_for_the_namespace_and_cluster_scoped_is_empty(self):
        self.shard_by(wshard.ShardBy.NAMESPACE, {"team-a", ""})
        self.assertEqual(shard.by(), "namespace")
        self.assertEqual(shard.ranges(), [])  # holds none (or fenced)
        self.assertTrue(shard.owns_object(sdk.Object.of(wit({"metadata": {"namespace": "team-a", "uid": "u1"}}))))
        self.assertFalse(shard.owns_object({"metadata": {"namespace": "team-b", "uid": "u1"}}))
        self.assertTrue(shard.owns_object(sdk.Object.of(wit({"kind": "Namespace", "metadata": {"uid": "u9"}}))))
        self.assertEqual(wshard.asked, ["team-a", "team-b", ""])
        self.assertEqual(shard.key("uid", {"metadata": {}}), "")
        with self.assertRaises(ValueError):
            shard.key("name", {})


if __name__ == "__main__":
    unittest.main()
