"""Kubernetes objects as plain dicts (what `json.loads` gives), with attribute helpers for
the metadata handlers read on every call, so a handler never walks `metadata` by hand."""

import json


class Object(dict):
    """One Kubernetes object: the dict of its JSON, plus `name`, `namespace`, `labels`… read
    from `metadata`. `created` is set on what `kube.apply` returns (None elsewhere)."""

    created = None

    @classmethod
    def of(cls, wit_object) -> "Object":
        """The SDK's object for a WIT `object` (its JSON parsed once)."""
        return cls(json.loads(wit_object.json))

    @classmethod
    def ref(cls, api_version: str, kind: str, name: str, namespace: str = None) -> "Object":
        """An object naming only where it is: a target for `kube.get`, `delete`, patches."""
        meta = {"name": name}
        if namespace is not None:
            meta["namespace"] = namespace
        return cls(apiVersion=api_version, kind=kind, metadata=meta)

    @property
    def metadata(self) -> dict:
        """`metadata`, created empty when missing so helpers can write into it."""
        return self.setdefault("metadata", {})

    @property
    def api_version(self) -> str:
        return self.get("apiVersion", "")

    @property
    def kind(self) -> str:
        return self.get("kind", "")

    @property
    def name(self) -> str:
        return self.metadata.get("name", "")

    @property
    def namespace(self):
        """The namespace, or None for a cluster-scoped object."""
        return self.metadata.get("namespace") or None

    @property
    def uid(self):
        return self.metadata.get("uid")

    @property
    def resource_version(self):
        return self.metadata.get("resourceVersion")

    @property
    def labels(self) -> dict:
        """`metadata.labels`, writable (created empty when missing)."""
        if self.metadata.get("labels") is None:
            self.metadata["labels"] = {}
        return self.metadata["labels"]

    @property
    def annotations(self) -> dict:
        """`metadata.annotations`, writable (created empty when missing)."""
        if self.metadata.get("annotations") is None:
            self.metadata["annotations"] = {}
        return self.metadata["annotations"]

    @property
    def key(self) -> str:
        """`namespace/name`, or `name` for a cluster-scoped object: the informer's key."""
        return key(self)


def key(obj) -> str:
    """The informer key of an object (an `Object` or any dict with `metadata`)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else meta.get("name", "")
