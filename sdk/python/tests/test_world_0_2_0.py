"""The SDK in a component built against kubewasm:handler@0.2.0 (what the guest examples and
`kubewasm new` projects build against): the stub bindings without the 0.3.0 imports (`settings`,
`shard`, `controller_types`). A handler builds as before (its `validate_settings` is not asked
for), `settings` and `shard` fail loudly when called, and a Controller is refused while the
component is built."""

import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
OURS = ("wit_world", "kubewasm_sdk")
MISSING = ("wit_world.imports.settings", "wit_world.imports.shard", "wit_world.imports.controller_types")


def _ours(name: str) -> bool:
    return name.split(".")[0] in OURS


class World020Test(unittest.TestCase):
    """Imports the SDK afresh with the 0.3.0 imports hidden, and puts the modules back after."""

    @classmethod
    def setUpClass(cls):
        cls.saved = {k: v for k, v in sys.modules.items() if _ours(k)}
        for k in cls.saved:
            del sys.modules[k]
        cls.path = sys.path[:]
        sys.path[:0] = [os.path.join(here, "stub"), os.path.dirname(here)]
        for name in MISSING:
            sys.modules[name] = None  # `import` of it raises ImportError
        import kubewasm_sdk
        cls.sdk = kubewasm_sdk

    @classmethod
    def tearDownClass(cls):
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(cls.saved)
        sys.path[:] = cls.path

    def test_the_version_is_0_2_0(self):
        self.assertEqual(self.sdk.WORLD_VERSION, "0.2.0")

    def test_a_handler_builds_as_before(self):
        class H(self.sdk.Handler):
            name = "h"
            subscriptions = [self.sdk.subscription("v1", "ConfigMap")]
            permissions = [self.sdk.permission("v1", "ConfigMap", ["apply"])]

        w = self.sdk.world(H())()
        self.assertEqual(w.describe().permissions[0].verbs, ["apply"])

    def test_settings_say_what_they_need(self):
        from kubewasm_sdk import settings
        with self.assertRaises(self.sdk.Fatal) as e:
            settings.get("replicas", int)
        self.assertIn("kubewasm:handler@0.3.0", str(e.exception))

    def test_shard_says_what_it_needs_rather_than_owning_everything(self):
        from kubewasm_sdk import shard
        for call in (shard.by, shard.ranges, lambda: shard.owns("u1"),
                     lambda: shard.owns_object({"metadata": {"uid": "u1"}})):
            with self.assertRaises(self.sdk.Fatal) as e:
                call()
            self.assertIn("kubewasm:handler@0.3.0", str(e.exception))

    def test_a_controller_needs_the_controller_world(self):
        class C(self.sdk.Controller):
            primary = self.sdk.subscription("v1", "ConfigMap")

            def reconcile(self, key, primary):
                pass

        with self.assertRaises(ValueError) as e:
            self.sdk.world(C())
        self.assertIn("-w controller", str(e.exception))


if __name__ == "__main__":
    unittest.main()
