"""The SDK's controller world inside a real component: `run.sh` builds this against
`-w controller` (wit/0.3.0). A ConfigMap labelled `kubewasm.io/smoke=primary` in `default` is a
primary; its `data.mode` picks one act: none copies its data into an owned Secret
`<name>-copy` (with the `greeting` setting), `requeue` asks to come back in 2 s, `bug` is a
KeyError the SDK turns into a retry, `shard` logs what the `shard` import answers. A deleted primary logs `gone <key>`. The setting `copies`
must be an integer (validate_settings refuses the load otherwise)."""

import base64

from kubewasm_sdk import Controller, Object, done, kube, log, permission, requeue_after, same_name, settings, shard
from kubewasm_sdk import subscription, watch, world


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Smoke(Controller):
    name = "sdk-controller-smoke"
    primary = subscription("v1", "ConfigMap", namespace="default", labels="kubewasm.io/smoke=primary")
    owns = [subscription("v1", "Secret", namespace="default")]
    watches = [watch("v1", "Service", same_name(), namespace="default")]
    permissions = [permission("v1", "Secret", ["apply"], namespace="default")]

    def validate_settings(self):
        settings.get("copies", int)

    def reconcile(self, key, cm):
        if cm is None:
            log.info(f"gone {key}")
            return done()
        data = cm.get("data") or {}
        mode = data.get("mode")
        if mode == "requeue":
            log.info(f"requeue {key}")
            return requeue_after(2)
        if mode == "shard":
            log.info(f"shard {shard.by()} ranges={shard.ranges()} owns={shard.owns_object(cm)}")
            return done()
        if mode == "bug":
            data["missing"]  # noqa: B018 - a KeyError the SDK must turn into a retry
        secret = Object.ref("v1", "Secret", f"{cm.name}-copy", cm.namespace)
        copied = dict(data, greeting=settings.get("greeting", str, "hello"))
        secret["data"] = {k: b64(v) for k, v in copied.items()}
        got = kube.apply_owned_if_changed(cm, secret)
        log.info(f"reconciled {key}: {'unchanged' if got is None else 'created' if got.created else 'updated'}")
        return done()


WitWorld = world(Smoke())
