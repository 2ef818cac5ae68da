"""Records the bindings' types need: the SDK only constructs and reads them."""
from dataclasses import dataclass, field


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
    metadata_only: bool
    fields: list


@dataclass
class Permission:
    api_version: str
    kind: str
    namespace: object
    verbs: list


@dataclass
class PluginInfo:
    name: str
    subscriptions: list
    permissions: list
    http_origins: list
    events: bool


@dataclass
class HandlerError_Retry:
    value: str


@dataclass
class HandlerError_Fatal:
    value: str


@dataclass
class ApiError:
    code: int
    reason: str
    message: str
