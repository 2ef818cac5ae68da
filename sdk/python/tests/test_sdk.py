"""Unit tests of the Python SDK's pure parts, on CPython with stub bindings (tests/stub): run
`python3 -m unittest discover -s sdk/python/tests` (scripts/test.sh does)."""

import json
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "stub"), os.path.dirname(here)]

from componentize_py_types import Err  # noqa: E402
from wit_world.imports import cache as wcache  # noqa: E402
from wit_world.imports import events as wevents  # noqa: E402
from wit_world.imports import kube as wkube  # noqa: E402
from wit_world.imports import kubewasm_handler_types as types  # noqa: E402
from wit_world.imports import log as wlog  # noqa: E402
from wit_world.imports import wasi_http_types as whttp  # noqa: E402

import kubewasm_sdk as sdk  # noqa: E402
from kubewasm_sdk import http  # noqa: E402


def wit(obj: dict) -> types.Object:
    m = obj.get("metadata", {})
    meta = types.ObjectMeta(obj.get("apiVersion", ""), obj.get("kind", ""), m.get("namespace"), m.get("name", ""),
                            m.get("uid", ""), m.get("resourceVersion", ""), None, list((m.get("labels") or {}).items()))
    return types.Object(meta, json.dumps(obj))


CM = {"apiVersion": "v1", "kind": "ConfigMap",
      "metadata": {"namespace": "ns", "name": "cm", "uid": "u1", "labels": {"a": "b"}}, "data": {"k": "v"}}


class ObjectTest(unittest.TestCase):
    def test_metadata_helpers(self):
        o = sdk.Object.of(wit(CM))
        self.assertEqual((o.api_version, o.kind, o.namespace, o.name, o.uid), ("v1", "ConfigMap", "ns", "cm", "u1"))
        self.assertEqual(o.labels, {"a": "b"})
        self.assertEqual(o.annotations, {})
        self.assertEqual(o.key, "ns/cm")
        self.assertEqual(o["data"], {"k": "v"})
        self.assertIsNone(o.created)

    def test_metadata_helpers_do_not_decode(self):
        o = sdk.Object.of(wit(CM))
        got = (o.api_version, o.kind, o.namespace, o.name, o.uid, o.key, o.label("a"), o.label("x", "-"))
        self.assertEqual(got, ("v1", "ConfigMap", "ns", "cm", "u1", "ns/cm", "b", "-"))
        self.assertFalse(o.decoded)

    def test_first_dict_use_decodes_once(self):
        reads = []

        class Counting:
            meta = wit(CM).meta

            @property
            def json(self):
                reads.append(1)
                return json.dumps(CM)

        o = sdk.Object.of(Counting())
        self.assertEqual(o["data"], {"k": "v"})
        self.assertTrue(o.decoded)
        self.assertEqual((o.get("kind"), len(o), o.label("a"), o.labels), ("ConfigMap", 4, "b", {"a": "b"}))
        self.assertEqual(len(reads), 1)

    def test_every_dict_view_of_an_undecoded_object_is_whole(self):
        import copy
        import pickle
        views = [
            lambda o: json.loads(json.dumps(o)), lambda o: json.loads(json.dumps(o, indent=1, sort_keys=True)),
            lambda o: json.loads(json.dumps([o]))[0], dict, lambda o: {**o}, lambda o: dict(o.items()),
            lambda o: {k: o[k] for k in o}, copy.copy, copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o)),
            lambda o: o | {}, lambda o: {} | o, lambda o: sdk.Object(o), lambda o: o.copy(),
        ]
        for i, view in enumerate(views):
            self.assertEqual(view(sdk.Object.of(wit(CM))), CM, i)
        self.assertEqual(sdk.Object.of(wit(CM)), CM)
        self.assertEqual(CM, sdk.Object.of(wit(CM)))
        self.assertEqual(sdk.Object.of(wit(CM)), sdk.Object.of(wit(CM)))
        self.assertIn("data", sdk.Object.of(wit(CM)))
        self.assertTrue(sdk.Object.of(wit(CM)))
        self.assertEqual(repr(sdk.Object.of(wit(CM))), repr(CM))

    def test_writes_to_an_undecoded_object_keep_the_rest(self):
        o = sdk.Object.of(wit(CM))
        o["data"] = {"n": "m"}
        self.assertEqual(o["metadata"]["uid"], "u1")
        o = sdk.Object.of(wit(CM))
        o.labels["c"] = "d"
        self.assertEqual((o.labels, o.label("c"), o["data"]), ({"a": "b", "c": "d"}, "d", {"k": "v"}))

    def test_cluster_scoped_key_and_ref(self):
        r = sdk.Object.ref("v1", "Namespace", "team-a")
        self.assertIsNone(r.namespace)
        self.assertEqual(sdk.key(r), "team-a")
        self.assertEqual(r, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})

    def test_labels_are_writable(self):
        r = sdk.Object.ref("v1", "ConfigMap", "x", "ns")
        r.labels["k"] = "v"
        r.annotations["n"] = "m"
        self.assertEqual(r["metadata"], {"name": "x", "namespace": "ns", "labels": {"k": "v"}, "annotations": {"n": "m"}})


class Handler(sdk.Handler):
    name = "t"
    subscriptions = [sdk.subscription("v1", "ConfigMap", resync_ms=1000)]
    permissions = [sdk.permission("v1", "ConfigMap", ["apply"])]
    events = True
    raises = None

    def on_add(self, obj, initial):
        self.seen = (obj.key, initial)
        if self.raises is not None:
            raise self.raises


class WorldTest(unittest.TestCase):
    def setUp(self):
        self.h = Handler()
        self.w = sdk.world(self.h)()

    def outcome_of(self, exc):
        self.h.raises = exc
        try:
            self.w.on_add(wit(CM), True)
        except Err as e:
            return e.value
        return None

    def test_describe(self):
        info = self.w.describe()
        self.assertEqual(info.name, "t")
        self.assertEqual(info.subscriptions[0].resync_period_ms, 1000)
        self.assertEqual(info.permissions[0].verbs, ["apply"])
        self.assertTrue(info.events)

    def test_ok_gets_objects(self):
        self.assertIsNone(self.outcome_of(None))
        self.assertEqual(self.h.seen, ("ns/cm", True))

    def test_exceptions_become_handler_errors(self):
        self.assertEqual(self.outcome_of(sdk.Retry("later")), types.HandlerError_Retry("later"))
        self.assertEqual(self.outcome_of(sdk.Fatal("never")), types.HandlerError_Fatal("never"))
        self.assertEqual(self.outcome_of(KeyError("x")), types.HandlerError_Retry("KeyError: 'x'"))
        self.assertIn(("error", "on-add: KeyError: 'x'"), wlog.lines)

    def test_api_errors_by_code(self):
        for code, retry in [(409, True), (429, True), (500, True), (503, True), (400, False), (403, False), (422, False)]:
            got = self.outcome_of(sdk.ApiError("apply", code, "R", "m"))
            self.assertIsInstance(got, types.HandlerError_Retry if retry else types.HandlerError_Fatal, code)
            self.assertEqual(got.value, f"apply: {code} R: m")

    def test_base_exceptions_still_trap(self):
        self.h.raises = SystemExit(1)
        with self.assertRaises(SystemExit):
            self.w.on_add(wit(CM), False)


class Widgets(sdk.Handler):
    """A Namespace handler that also watches Deployments and ConfigMaps (a ConfigMap subscribed
    the old way too stays its own)."""
    name = "w"
    subscriptions = [sdk.subscription("v1", "Namespace"), sdk.subscription("v1", "ConfigMap")]
    watches = [sdk.subscription("apps/v1", "Deployment", namespace="a"), sdk.subscription("v1", "ConfigMap")]

    def __init__(self):
        self.seen = []

    def on_add(self, obj, initial):
        self.seen.append(("add", obj.kind, obj.name, initial))

    def on_update(self, old, new, is_sync):
        self.seen.append(("update", new.kind, new.name, is_sync))

    def on_delete(self, obj, unknown):
        self.seen.append(("delete", obj.kind, obj.name, unknown))

    def on_watched(self, event):
        self.seen.append(("watched", event.change, event.kind, event.obj.name, event.old and event.old.name,
                          event.initial, event.is_sync, event.unknown, event.is_kind("apps/v1", "Deployment"),
                          event.obj.decoded))
        if event.obj.name == "bad":
            raise sdk.Fatal("bad deployment")


def obj_of(api_version, kind, name):
    return wit({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})


class WatchesTest(unittest.TestCase):
    def test_describe_lists_subscriptions_then_watches(self):
        info = sdk.world(Widgets())().describe()
        self.assertEqual([(s.kind, s.namespace) for s in info.subscriptions],
                         [("Namespace", None), ("ConfigMap", None), ("Deployment", "a"), ("ConfigMap", None)])

    def test_each_event_reaches_the_callback_of_its_kind(self):
        h = Widgets()
        w = sdk.world(h)()
        ns, dep, cm = obj_of("v1", "Namespace", "n"), obj_of("apps/v1", "Deployment", "d"), obj_of("v1", "ConfigMap", "c")
        w.on_add(ns, True)
        w.on_add(dep, True)
        w.on_update(obj_of("apps/v1", "Deployment", "d0"), dep, True)
        w.on_delete(dep, True)
        w.on_update(ns, ns, False)
        w.on_delete(cm, False)
        self.assertEqual(h.seen, [
            ("add", "Namespace", "n", True),
            ("watched", "add", "Deployment", "d", None, True, False, False, True, False),
            ("watched", "update", "Deployment", "d", "d0", False, True, False, True, False),
            ("watched", "delete", "Deployment", "d", None, False, False, True, True, False),
            ("update", "Namespace", "n", False),
            ("delete", "ConfigMap", "c", False),
        ])
        with self.assertRaises(Err) as e:
            w.on_add(obj_of("apps/v1", "Deployment", "bad"), False)
        self.assertEqual(e.exception.value, types.HandlerError_Fatal("bad deployment"))

    def test_without_watches_every_kind_is_the_handlers_own(self):
        seen = []

        class Old(sdk.Handler):
            subscriptions = [sdk.subscription("v1", "Namespace"), sdk.subscription("v1", "ResourceQuota")]

            def on_add(self, obj, initial):
                seen.append(obj.kind)

            def on_watched(self, event):
                raise AssertionError("no watches")

        w = sdk.world(Old())()
        w.on_add(obj_of("v1", "ResourceQuota", "q"), False)
        w.on_add(obj_of("v1", "Namespace", "n"), False)
        self.assertEqual(seen, ["ResourceQuota", "Namespace"])


DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "ns", "name": "web", "uid": "d1"}}
MINE = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d1", "controller": True,
        "blockOwnerDeletion": True}
PLAIN = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u9"}


def owned(namespace="ns", refs=None) -> dict:
    meta = {"name": "cfg"}
    if namespace:
        meta["namespace"] = namespace
    if refs is not None:
        meta["ownerReferences"] = refs
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


class OwnerTest(unittest.TestCase):
    def test_the_controller_reference_names_the_owner(self):
        self.assertEqual(sdk.owner.controller_ref(DEPLOY), MINE)
        delivered = sdk.Object.of(wit(DEPLOY))
        self.assertEqual(sdk.owner.controller_ref(delivered), MINE)
        self.assertFalse(delivered.decoded)

    def test_an_owner_without_a_uid_or_a_name_is_fatal(self):
        with self.assertRaises(sdk.Fatal) as e:
            sdk.owner.controller_ref(sdk.Object.ref("apps/v1", "Deployment", "web", "ns"))
        self.assertIn("Deployment ns/web", str(e.exception))
        self.assertIn("read the owner from the cache or the API server first", str(e.exception))
        with self.assertRaises(sdk.Fatal) as e:
            sdk.owner.controller_ref({"apiVersion": "v1", "kind": "X", "metadata": {"uid": "u"}})
        self.assertTrue(str(e.exception).endswith("it has no name"))
        obj = owned()
        with self.assertRaises(sdk.Fatal):
            sdk.owner.set_controller(obj, sdk.Object.ref("apps/v1", "Deployment", "web", "ns"))
        self.assertNotIn("ownerReferences", obj["metadata"])

    def test_cross_namespace_and_namespaced_owners_of_cluster_scoped_objects_are_refused(self):
        obj = owned("other")
        with self.assertRaises(sdk.Fatal) as e:
            sdk.owner.set_controller(obj, DEPLOY)
        self.assertEqual(str(e.exception), "cannot set Deployment ns/web as the controller of ConfigMap other/cfg: "
                                           "cross-namespace owner references are not allowed")
        cluster = owned(None)
        with self.assertRaises(sdk.Fatal) as e:
            sdk.owner.set_controller(cluster, DEPLOY)
        self.assertIn("ConfigMap cfg", str(e.exception))
        self.assertIn("cluster-scoped", str(e.exception))
        self.assertNotIn("ownerReferences", cluster["metadata"])
        # A cluster-scoped owner may own objects anywhere.
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "uid": "n1"}}
        for o in (obj, cluster):
            sdk.owner.set_controller(o, ns)
            self.assertTrue(sdk.owner.is_controlled_by(o, ns))

    def test_another_controller_is_refused_the_same_is_replaced_others_are_kept(self):
        other = dict(PLAIN, controller=True)
        obj = owned(refs=[other])
        with self.assertRaises(sdk.Fatal) as e:
            sdk.owner.set_controller(obj, DEPLOY)
        self.assertTrue(str(e.exception).endswith("it is already controlled by Pod/p"), str(e.exception))
        self.assertEqual(obj["metadata"]["ownerReferences"], [other])
        stale = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "old", "uid": "d1"}
        obj = sdk.Object(owned(refs=[PLAIN, stale]))
        sdk.owner.set_controller(obj, DEPLOY)
        sdk.owner.set_controller(obj, DEPLOY)
        self.assertEqual(obj["metadata"]["ownerReferences"], [PLAIN, MINE])
        fresh = owned(refs=[PLAIN])
        sdk.owner.set_controller(fresh, DEPLOY)
        self.assertEqual(fresh["metadata"]["ownerReferences"], [PLAIN, MINE])

    def test_controlled_by_needs_a_controller_reference_with_the_owners_uid(self):
        self.assertTrue(sdk.owner.is_controlled_by(owned(refs=[MINE]), DEPLOY))
        self.assertTrue(sdk.owner.is_controlled_by(sdk.Object.of(wit(owned(refs=[MINE]))), sdk.Object.of(wit(DEPLOY))))
        self.assertFalse(sdk.owner.is_controlled_by(owned(refs=[dict(MINE, controller=False)]), DEPLOY))
        self.assertFalse(sdk.owner.is_controlled_by(owned(refs=[dict(MINE, uid="d2")]), DEPLOY))
        self.assertFalse(sdk.owner.is_controlled_by(owned(), DEPLOY))
        self.assertFalse(sdk.owner.is_controlled_by(owned(refs=[dict(MINE, uid="")]), {"metadata": {}}))


class UpToDateTest(unittest.TestCase):
    def test_only_the_fields_the_handler_sets_count(self):
        have = {"metadata": {"name": "cfg", "uid": "c1", "labels": {"a": "1", "other": "x"}},
                "data": {"k": "v"}, "status": {"phase": "Done"}}
        self.assertTrue(sdk.owner.is_up_to_date(have, {"metadata": {"name": "cfg", "labels": {"a": "1"}},
                                                       "data": {"k": "v"}}))
        self.assertFalse(sdk.owner.is_up_to_date(have, {"data": {"k": "changed"}}))
        self.assertFalse(sdk.owner.is_up_to_date(have, {"data": {"k": "v", "new": "y"}}))
        self.assertTrue(sdk.owner.is_up_to_date(have, {"data": {"k": "v"}, "binaryData": {}, "extra": None}))
        self.assertFalse(sdk.owner.is_up_to_date(None, {"data": {}}))

    def test_lists_match_by_element_owner_references_by_uid(self):
        have = {"metadata": {"ownerReferences": [PLAIN, MINE]},
                "spec": {"replicas": 3, "ports": [{"port": 80, "protocol": "TCP"}], "on": True}}
        self.assertTrue(sdk.owner.is_up_to_date(have, {"metadata": {"ownerReferences": [MINE]},
                                                       "spec": {"replicas": 3.0, "ports": [{"port": 80}]}}))
        self.assertFalse(sdk.owner.is_up_to_date(have, {"metadata": {"ownerReferences": [dict(MINE, uid="d2")]}}))
        self.assertFalse(sdk.owner.is_up_to_date(have, {"spec": {"ports": [{"port": 80}, {"port": 443}]}}))
        self.assertFalse(sdk.owner.is_up_to_date(have, {"spec": {"on": 1}}))
        undecoded = sdk.Object.of(wit(dict(CM, metadata=dict(CM["metadata"], ownerReferences=[MINE]))))
        self.assertTrue(sdk.owner.is_up_to_date(undecoded, {"metadata": {"ownerReferences": [MINE]}, "data": {"k": "v"}}))


class KubeTest(unittest.TestCase):
    def setUp(self):
        wkube.calls.clear()
        wkube.answer = None

    def test_apply_tells_created_from_updated(self):
        for code, created in [(201, True), (200, False)]:
            wkube.answer = wkube.WriteOutcome(wit(CM), code)
            got = sdk.kube.apply(CM)
            self.assertIs(got.created, created)
            self.assertEqual(got.name, "cm")
        name, body, opts = wkube.calls[-1]
        self.assertEqual((name, json.loads(body), opts.force), ("apply_outcome", CM, True))

    def test_apply_owned_sends_the_reference_and_never_a_refused_object(self):
        wkube.answer = wkube.WriteOutcome(wit(CM), 201)
        obj = owned(refs=[PLAIN])
        self.assertTrue(sdk.kube.apply_owned(DEPLOY, obj, force=False).created)
        name, body, opts = wkube.calls[-1]
        self.assertEqual((name, json.loads(body)["metadata"]["ownerReferences"], opts.force),
                         ("apply_outcome", [PLAIN, MINE], False))
        wkube.calls.clear()
        with self.assertRaises(sdk.Fatal):
            sdk.kube.apply_owned(DEPLOY, owned("other"))
        self.assertEqual(wkube.calls, [])

    def test_api_error_names_the_call(self):
        wkube.answer = Err(types.ApiError(422, "Invalid", "too big"))
        with self.assertRaises(sdk.ApiError) as e:
            sdk.kube.apply(CM)
        self.assertEqual(str(e.exception), "apply ConfigMap ns/cm: 422 Invalid: too big")
        self.assertFalse(e.exception.retryable)

    def test_delete_with_uid_precondition(self):
        self.assertTrue(sdk.kube.delete(sdk.Object(CM)))
        self.assertEqual(wkube.calls[-1], ("delete", "v1", "ConfigMap", "ns", "cm", "u1"))
        for code in (404, 409):
            wkube.answer = Err(types.ApiError(code, "R", "m"))
            self.assertFalse(sdk.kube.delete(CM))
        wkube.answer = Err(types.ApiError(500, "R", "m"))
        with self.assertRaises(sdk.ApiError):
            sdk.kube.delete(CM)

    def test_patch_status_and_merge(self):
        wkube.answer = wit(CM)
        sdk.kube.patch_status(CM, {"phase": "Ready"})
        _, av, kind, ns, name, ptype, body, sub, _ = wkube.calls[-1]
        self.assertEqual((av, kind, ns, name, ptype, json.loads(body), sub),
                         ("v1", "ConfigMap", "ns", "cm", wkube.PatchType.MERGE, {"status": {"phase": "Ready"}}, "status"))
        sdk.kube.merge_patch(CM, {"data": {"k": None}})
        self.assertEqual(json.loads(wkube.calls[-1][6]), {"data": {"k": None}})
        self.assertIsNone(wkube.calls[-1][7])

    def test_get_absent(self):
        self.assertIsNone(sdk.kube.get("v1", "ConfigMap", "cm", "ns"))

    def test_cache_errors_retry_only_while_the_cache_is_not_available(self):
        wcache.objects, wcache.answer = [wit(CM)], None
        self.assertEqual([o.key for o in sdk.kube.cached_list("v1", "ConfigMap")], ["ns/cm"])
        self.assertEqual(sdk.kube.cached("v1", "ConfigMap", "cm", "ns").uid, "u1")
        # An unsubscribed kind can never be read: a Retry would back off forever.
        wcache.answer = Err("plugin p does not subscribe to v1 Secret; only subscribed resources "
                            "can be read from the cache")
        with self.assertRaises(sdk.Fatal):
            sdk.kube.cached("v1", "Secret", "s", "ns")
        with self.assertRaises(sdk.Fatal):
            sdk.kube.cached_list("v1", "Secret")
        wcache.answer = Err("the cache of v1/ConfigMap is not available: its informer is stopping "
                            "or not started yet")
        with self.assertRaises(sdk.Retry):
            sdk.kube.cached("v1", "ConfigMap", "cm", "ns")
        wcache.answer = None

    def test_an_unsubscribed_kind_is_fatal_and_says_what_to_declare(self):
        host = ('plugin p does not subscribe to v1 Secret; only subscribed resources can be read from the '
                'cache: subscribe to it in describe() and grant it in the plugin\'s manifest: [grants] '
                'watch = [{ api-version = "v1", kind = "Secret" }]')
        wcache.answer = Err(host)
        try:
            with self.assertRaises(sdk.Fatal) as e:
                sdk.kube.cached_list("v1", "Secret")
            self.assertEqual(str(e.exception), f'cache.list Secret: {host}; in Python, add '
                                               'subscription("v1", "Secret") to the handler\'s watches '
                                               '(a controller\'s owns)')
            wcache.answer = Err("invalid label selector")
            with self.assertRaises(sdk.Fatal) as e:
                sdk.kube.cached("v1", "Secret", "s", "ns")
            self.assertEqual(str(e.exception), "cache.get Secret: invalid label selector")
        finally:
            wcache.answer = None

    def test_apply_owned_if_changed_writes_only_what_differs(self):
        want = dict(owned(), data={"k": "v"})
        have = sdk.Object.of(wit(dict(owned(refs=[PLAIN, MINE]), data={"k": "v"}, status={"x": 1})))
        self.assertIsNone(sdk.kube.apply_owned_if_changed(DEPLOY, want, have))
        self.assertEqual(wkube.calls, [])
        self.assertEqual(want["metadata"]["ownerReferences"], [MINE])
        wkube.answer = wkube.WriteOutcome(wit(CM), 200)
        for have in (None, sdk.Object.of(wit(dict(owned(refs=[PLAIN]), data={"k": "v"})))):
            self.assertIsNotNone(sdk.kube.apply_owned_if_changed(DEPLOY, dict(owned(), data={"k": "v"}), have))
        self.assertEqual(len(wkube.calls), 2)


class EventsTest(unittest.TestCase):
    def test_event_regarding_an_object_in_the_wit_order(self):
        sdk.events.warning(CM, "Broken", "Repair", "it broke")
        meta, etype, reason, action, note = wevents.emitted[-1]
        self.assertEqual((meta.kind, meta.namespace, meta.name, meta.uid, meta.labels), ("ConfigMap", "ns", "cm", "u1", [("a", "b")]))
        self.assertEqual((etype, reason, action, note), (wevents.EventType.WARNING, "Broken", "Repair", "it broke"))

    def test_arguments_by_keyword(self):
        sdk.events.normal(CM, note="made it", reason="Created", action="Apply")
        self.assertEqual(wevents.emitted[-1][1:], (wevents.EventType.NORMAL, "Created", "Apply", "made it"))

    def test_the_old_order_without_an_action_is_refused(self):
        # (reason, note) was the whole call before; it must not pass as (reason, action).
        with self.assertRaises(TypeError):
            sdk.events.normal(CM, "Created", "made it")


class HttpTest(unittest.TestCase):
    def test_error_codes_become_exceptions(self):
        self.assertIsInstance(http._error("GET x", whttp.ErrorCode_ConnectionTimeout()), sdk.Timeout)
        self.assertIsInstance(http._error("GET x", whttp.ErrorCode_HttpResponseTimeout()), sdk.Timeout)
        dns = http._error("GET x", whttp.ErrorCode_DnsTimeout())
        self.assertEqual((type(dns), dns.code), (sdk.Timeout, "dns-timeout"))
        uri = http._error("GET x", whttp.ErrorCode_HttpRequestUriInvalid())
        self.assertEqual((type(uri), uri.code), (sdk.HttpError, "http-request-uri-invalid"))
        big = http._error("GET x", whttp.ErrorCode_HttpResponseBodySize(20000))
        self.assertIsInstance(big, sdk.TooLarge)
        self.assertEqual((str(big), big.code), ("GET x: http-response-body-size", "http-response-body-size"))
        denied = http._error("GET x", whttp.ErrorCode_HttpRequestDenied())
        self.assertEqual((type(denied), denied.code), (sdk.HttpError, "http-request-denied"))

    def test_response(self):
        r = http.Response(200, {}, b'{"a": 1}')
        self.assertEqual((r.ok, r.json(), r.text), (True, {"a": 1}, '{"a": 1}'))
        with self.assertRaises(sdk.HttpError) as got:
            http.Response(503, {}, b"").raise_for_status()
        self.assertEqual(got.exception.code, "status-503")

    def test_not_a_url(self):
        with self.assertRaises(sdk.HttpError) as got:
            http.get("ftp://x")
        self.assertEqual(got.exception.code, "http-request-uri-invalid")


if __name__ == "__main__":
    unittest.main()
