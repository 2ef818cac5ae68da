"""The 0.1.0 records: no permissions, origins, Events or projections."""
from dataclasses import dataclass


@dataclass
class ObjectMeta:
    api_version: str
    kind: str
    namespace: object
    name: str
    uid: str
    resource_version: str
    generation: object
    labels: list


@dataclass
class Object:
    meta: ObjectMeta
    json: str


@dataclass
class Subscription:
    api_version: str
    kind: str
    namespace: object
    label_selector: object
    field_selector: object
    resync_period_ms: int


@dataclass
class PluginInfo:
    name: str
    subscriptions: list


@dataclass
class HandlerError_Retry:
    value: str


@dataclass
class HandlerError_Fatal:
    value: str
