"""The SDK's 0.1.0 surface (what the reference configmap-loggers build on), against stub
bindings of kubewasm:handler@0.1.0 (tests/stub_0_1_0): the package imports without any 0.2.0
interface, `describe()` reports only what 0.1.0 can say, and asking for more fails loudly."""

import json
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
OURS = ("wit_world", "kubewasm_sdk")


def _ours(name: str) -> bool:
    return name.split(".")[0] in OURS


class World010Test(unittest.TestCase):
    """Imports the SDK afresh over the 0.1.0 stubs, and puts the 0.2.0 modules back after."""

    @classmethod
    def setUpClass(cls):
        cls.saved = {k: v for k, v in sys.modules.items() if _ours(k)}
        for k in cls.saved:
            del sys.modules[k]
        cls.path = sys.path[:]
        sys.path[:0] = [os.path.join(here, "stub_0_1_0"), os.path.dirname(here)]
        sys.path.remove(os.path.join(here, "stub")) if os.path.join(here, "stub") in sys.path else None
        # Last, for componentize_py_types alone (wit_world is found in stub_0_1_0 first), so the
        # file also runs by itself.
        sys.path.append(os.path.join(here, "stub"))
        import kubewasm_sdk
        from wit_world.imports import log, types
        cls.sdk, cls.types, cls.log = kubewasm_sdk, types, log

    @classmethod
    def tearDownClass(cls):
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(cls.saved)
        sys.path[:] = cls.path

    def wit(self, labels: dict):
        t = self.types
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "cm", "labels": labels}}
        return t.Object(t.ObjectMeta("v1", "ConfigMap", "ns", "cm", "u1", "7", None, list(labels.items())), json.dumps(obj))

    def test_no_0_2_0_interface_is_imported(self):
        self.assertEqual(self.sdk.WORLD_VERSION, "0.1.0")
        loaded = {k for k in sys.modules if _ours(k)}
        self.assertFalse({"kubewasm_sdk.kube", "kubewasm_sdk.http", "kubewasm_sdk.events"} & loaded, loaded)
        with self.assertRaises(ImportError):
            self.sdk.kube

    def test_describe_says_only_what_0_1_0_can(self):
        class Logger(self.sdk.Handler):
            name = "logger"
            subscriptions = [self.sdk.subscription("v1", "ConfigMap", labels="a=b")]

        info = self.sdk.world(Logger())().describe()
        self.assertEqual(info, self.types.PluginInfo("logger", [self.types.Subscription("v1", "ConfigMap", None, "a=b", None, 0)]))

    def test_asking_for_more_fails_at_build_time(self):
        with self.assertRaises(ValueError):
            self.sdk.subscription("v1", "ConfigMap", metadata_only=True)
        with self.assertRaises(ValueError):
            self.sdk.permission("v1", "ConfigMap", ["get"])

        class Eventful(self.sdk.Handler):
            events = True

        with self.assertRaises(ValueError):
            self.sdk.world(Eventful())().describe()

    def test_calls_reach_the_handler_undecoded(self):
        seen = []

        class Logger(self.sdk.Handler):
            def on_update(self, old, new, is_sync):
                seen.append((old.decoded, new.decoded, new.key, new.resource_version, new.label("mode"), is_sync))
                if new.label("mode") == "retry":
                    raise self_sdk.Retry("asked")

        self_sdk = self.sdk
        w = self.sdk.world(Logger())()
        w.on_update(self.wit({}), self.wit({"mode": "noop"}), True)
        self.assertEqual(seen, [(False, False, "ns/cm", "7", "noop", True)])
        from componentize_py_types import Err
        with self.assertRaises(Err) as e:
            w.on_update(self.wit({}), self.wit({"mode": "retry"}), False)
        self.assertEqual(e.exception.value, self.types.HandlerError_Retry("asked"))


if __name__ == "__main__":
    unittest.main()
