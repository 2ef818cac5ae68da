"""Kubernetes objects as plain dicts (what `json.loads` gives), with attribute helpers for
the metadata handlers read on every call, so a handler never walks `metadata` by hand.

An object the host delivers is decoded lazily: its JSON is parsed the first time the handler
reads it as a dict. The helpers that need only what the host already extracted (`name`,
`namespace`, `uid`, `kind`, `api_version`, `resource_version`, `key`, `label()`) never parse,
so a handler that filters on those pays no JSON parse for the objects it skips."""

import json


class _NotDecoded:
    """The one entry of an object whose JSON is not parsed yet. Keeping the dict non-empty
    makes C code that special-cases empty dicts (the `json` encoder) go through `items()`,
    which decodes; a key that is not a string makes any leak a loud error, never `{}`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not decoded>"


_NOT_DECODED = _NotDecoded()
_UNDECODED_ENTRY = ((_NOT_DECODED, None),)


class Object(dict):
    """One Kubernetes object: the dict of its JSON, plus `name`, `namespace`, `labels`… read
    from `metadata`. `created` is set on what `kube.apply` returns (None elsewhere)."""

    # `_wit`: the WIT object whose JSON this object is, while not decoded (see `of`). A slot,
    # and `__dict__` made only when an attribute is set: one object per notification is cheap.
    __slots__ = ("_wit", "__dict__")
    created = None

    @classmethod
    def of(cls, wit_object) -> "Object":
        """The SDK's object for a WIT `object`, decoded on first use (its JSON parsed once)."""
        obj = cls(_UNDECODED_ENTRY)
        obj._wit = wit_object
        return obj

    @classmethod
    def ref(cls, api_version: str, kind: str, name: str, namespace: str = None) -> "Object":
        """An object naming only where it is: a target for `kube.get`, `delete`, patches."""
        meta = {"name": name}
        if namespace is not None:
            meta["namespace"] = namespace
        return cls(apiVersion=api_version, kind=kind, metadata=meta)

    @property
    def decoded(self) -> bool:
        """Whether the JSON has been parsed (for tests and cost-conscious handlers)."""
        return not dict.__contains__(self, _NOT_DECODED)

    def _decode(self) -> None:
        if dict.__contains__(self, _NOT_DECODED):
            wit, self._wit = self._wit, None
            dict.clear(self)
            dict.update(self, json.loads(wit.json))

    def _meta(self):
        """The host's extracted metadata while the JSON is not parsed, else None."""
        return self._wit.meta if dict.__contains__(self, _NOT_DECODED) else None

    def __eq__(self, other):
        self._decode()
        if isinstance(other, Object):
            other._decode()
        return dict.__eq__(self, other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    @property
    def metadata(self) -> dict:
        """`metadata`, created empty when missing so helpers can write into it."""
        return self.setdefault("metadata", {})

    @property
    def api_version(self) -> str:
        meta = self._meta()
        return meta.api_version if meta is not None else self.get("apiVersion", "")

    @property
    def kind(self) -> str:
        meta = self._meta()
        return meta.kind if meta is not None else self.get("kind", "")

    @property
    def name(self) -> str:
        meta = self._meta()
        return meta.name if meta is not None else self.metadata.get("name", "")

    @property
    def namespace(self):
        """The namespace, or None for a cluster-scoped object."""
        meta = self._meta()
        return (meta.namespace if meta is not None else self.metadata.get("namespace")) or None

    @property
    def uid(self):
        meta = self._meta()
        return (meta.uid or None) if meta is not None else self.metadata.get("uid")

    @property
    def resource_version(self):
        meta = self._meta()
        return (meta.resource_version or None) if meta is not None else self.metadata.get("resourceVersion")

    def label(self, name: str, default=None):
        """One label's value (or `default`), read without decoding the object."""
        if dict.__contains__(self, _NOT_DECODED):
            for k, v in self._wit.meta.labels:
                if k == name:
                    return v
            return default
        return (self.metadata.get("labels") or {}).get(name, default)

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
        ns = self.namespace
        return f"{ns}/{self.name}" if ns else self.name


def _decoding(name: str):
    """`dict.<name>`, decoding the object first."""
    base = getattr(dict, name)

    def method(self, *args, **kwargs):
        if dict.__contains__(self, _NOT_DECODED):
            self._decode()
        return base(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


# Every dict operation sees the decoded object (dict(obj), {**obj}, json.dumps and copy go
# through these too: they call keys()/items() on a dict subclass that overrides iteration).
for _name in ("__getitem__", "__setitem__", "__delitem__", "__contains__", "__iter__", "__reversed__",
              "__len__", "__repr__", "__or__", "__ror__", "__ior__", "get", "setdefault", "pop", "popitem",
              "keys", "items", "values", "update", "copy", "clear"):
    setattr(Object, _name, _decoding(_name))
del _name


def key(obj) -> str:
    """The informer key of an object (an `Object` or any dict with `metadata`)."""
    if isinstance(obj, Object):
        return obj.key
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else meta.get("name", "")
