"""The SDK inside a real component: what the unit tests' stubs cannot show (wasi:http requests
and their errors, the export guard). Each ConfigMap's `data.mode` picks one act; `run.sh` builds
this and runs `smoke.yaml` through `kubewasm test`."""

from kubewasm_sdk import Handler, HttpError, http, log, subscription, world


class Smoke(Handler):
    name = "sdk-smoke"
    subscriptions = [subscription("v1", "ConfigMap", namespace="default")]
    http_origins = ["http://127.0.0.1:9000"]

    def on_add(self, obj, initial):
        mode, url = obj.get("data", {}).get("mode"), obj.get("data", {}).get("url", "")
        if mode == "get":
            r = http.get(url, timeout=5)
            log.info(f"get {r.status} {r.json()['x']} {r.headers.get('content-type')}")
        elif mode == "post":
            r = http.post_json(url, {"a": 1, "name": obj.name})
            log.info(f"post {r.status} ok={r.ok}")
        elif mode == "denied":
            try:
                http.get(url)
            except HttpError as e:
                log.info(f"denied {type(e).__name__} {e.code}")
        elif mode == "bug":
            obj["data"]["missing"]  # noqa: B018 - a KeyError the SDK must turn into a retry


WitWorld = world(Smoke())
