"""site-controller: a Site (custom resource example.com/v1 Site) becomes a Deployment, a Service
and a ConfigMap it owns, and its status says how many replicas are available
(kubewasm:handler@0.3.0, world `controller`).

Level-triggered: `reconcile` reads what the cache holds now and writes only what differs, so the
same code creates, repairs (an owned object edited or deleted behind its back is an event of its
Site's key), reflects the Deployment's status and does nothing when all is as wanted. The same
controller exists in JavaScript (guest-examples/javascript/site-controller/site-controller.js),
with the same manifest and scenarios.
"""

import re
import time

from kubewasm_sdk import Controller, Fatal, Object, done, kube, log, permission, settings, subscription, world

SITE = "example.com/v1"
DEFAULT_IMAGE = "nginx:1.27"
DEFAULT_DOMAIN = "sites.example.com"
# A DNS-1123 subdomain: what a host name under the operator's domain must be.
DNS = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def dns_name(text: str) -> str:
    """The `domain` setting's type: its ValueError is the refusal, naming the key."""
    if len(text) > 200 or not DNS.match(text):
        raise ValueError("expected a DNS name such as sites.example.com (lowercase letters, digits, '-' and '.')")
    return text


def domain() -> str:
    return settings.get("domain", dns_name, DEFAULT_DOMAIN)


def parse_spec(site):
    """`spec.replicas` (default 1), `spec.image` (default nginx:1.27) and `spec.message`
    (default empty). The CRD's schema checks them on a real cluster; a value of another type is
    `Fatal`: retrying cannot fix it, the next edit of the Site brings the key back."""
    spec = site.get("spec") or {}
    replicas = spec.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise Fatal(f"Site {site.key}: spec.replicas must be a non-negative integer")
    image, message = spec.get("image") or DEFAULT_IMAGE, spec.get("message", "")
    if not isinstance(image, str) or not isinstance(message, str):
        raise Fatal(f"Site {site.key}: spec.image and spec.message must be strings")
    return replicas, image, message


class Sites(Controller):
    name = "site-controller"
    primary = subscription(SITE, "Site")
    owns = [subscription("apps/v1", "Deployment"), subscription("v1", "Service"), subscription("v1", "ConfigMap")]
    permissions = [
        permission("apps/v1", "Deployment", ["apply"]),
        permission("v1", "Service", ["apply"]),
        permission("v1", "ConfigMap", ["apply"]),
        # The status subresource only (the grant covers the Site and its status alike).
        permission(SITE, "Site", ["patch"]),
    ]

    def validate_settings(self):
        domain()  # `domain = "Not a domain"` refuses the load, naming the key

    def reconcile(self, key, site):
        if site is None:
            # Deleted: the garbage collector deletes what it owned (their owner references).
            log.info(f"Site {key} is gone: nothing to do")
            return done()
        replicas, image, message = parse_spec(site)
        labels = {"app.kubernetes.io/name": "site", "app.kubernetes.io/instance": site.name}

        content = Object.ref("v1", "ConfigMap", f"{site.name}-content", site.namespace)
        content.labels.update(labels)
        content["data"] = {"message": message, "host": f"{site.name}.{domain()}"}
        wrote = self.ensure(site, content)

        deploy = Object.ref("apps/v1", "Deployment", site.name, site.namespace)
        deploy.labels.update(labels)
        deploy["spec"] = {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "containers": [{"name": "web", "image": image, "ports": [{"name": "http", "containerPort": 80}],
                                "volumeMounts": [{"name": "content", "mountPath": "/usr/share/nginx/html"}]}],
                "volumes": [{"name": "content", "configMap": {"name": content.name}}]}},
        }
        wrote |= self.ensure(site, deploy)

        service = Object.ref("v1", "Service", site.name, site.namespace)
        service.labels.update(labels)
        service["spec"] = {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
        wrote |= self.ensure(site, service)

        # The owned Deployment's events reconcile its Site, so its status arrives here.
        have = kube.cached("apps/v1", "Deployment", site.name, site.namespace)
        available = ((have or {}).get("status") or {}).get("availableReplicas", 0)
        wrote |= self.reflect(site, replicas, available)
        if not wrote:
            log.debug(f"Site {key}: up to date")
        return done()

    def ensure(self, site, obj) -> bool:
        """Applies `obj` as owned by `site`, unless the cache already holds it as wanted; whether
        it wrote."""
        got = kube.apply_owned_if_changed(site, obj)
        if got is None:
            return False
        log.info(f"applied {obj['kind']} {obj.key} ({'created' if got.created else 'updated'})")
        return True

    def reflect(self, site, replicas: int, available: int) -> bool:
        """Patches the Site's status (the status subresource) when what it says has changed;
        whether it wrote."""
        ready = available >= replicas
        want = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "ReplicasAvailable" if ready else "ReplicasUnavailable",
            "message": f"{available}/{replicas} replicas available",
        }
        status = site.get("status") or {}
        was = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if (status.get("availableReplicas") == available
                and status.get("observedGeneration") == site.metadata.get("generation")
                and all(was.get(k) == v for k, v in want.items())):
            return False
        # The transition time moves only when the condition's status does.
        since = was.get("lastTransitionTime") if was.get("status") == want["status"] else None
        want["lastTransitionTime"] = since or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # A merge patch replaces the whole list: keep the conditions others set.
        others = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        kube.patch_status(site, {"observedGeneration": site.metadata.get("generation"),
                                 "availableReplicas": available, "conditions": others + [want]})
        log.info(f"status of Site {site.key}: {want['message']}, Ready={want['status']}")
        return True


WitWorld = world(Sites())
