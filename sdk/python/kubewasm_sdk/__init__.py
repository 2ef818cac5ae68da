"""kubewasm SDK for Python handlers and controllers (`kubewasm:handler@0.3.0`, bundled by
componentize-py).

    from kubewasm_sdk import Handler, Watched, world, subscription, kube, events, http, log, owner, settings, shard, Retry, Fatal
    from kubewasm_sdk import Controller, watch, same_name, label, field, guest, done, requeue_after

The same package serves components of `kubewasm:handler@0.2.0` (everything but `settings` and
`shard`) and of `@0.1.0` (handler, objects, log): `events`, `http`, `kube`, `settings` and `shard`
import interfaces 0.1.0 lacks, so they are imported on first use, never by a 0.1.0 component. See
sdk/python/README.md.
"""

import importlib

from . import log, owner
from .controller import (Controller, Mapping, ObjectKey, RequeueAfter, Watch, done, field, guest, label,
                         requeue_after, same_name, watch)
from .errors import ApiError, Fatal, HttpError, Retry, SettingError, Timeout, TooLarge
from .handler import WORLD, WORLD_VERSION, Handler, Watched, outcome, permission, subscription, world
from .objects import Object, key

__version__ = "0.3.0"
__all__ = ["events", "http", "kube", "log", "owner", "settings", "shard", "ApiError", "Fatal", "HttpError",
           "Retry", "SettingError", "Timeout", "TooLarge", "WORLD", "WORLD_VERSION", "Handler", "Watched", "outcome",
           "permission", "subscription", "world", "Object", "key", "Controller", "Mapping", "ObjectKey",
           "RequeueAfter", "Watch", "done", "field", "guest", "label", "requeue_after", "same_name", "watch"]

_ON_FIRST_USE = ("events", "http", "kube", "settings", "shard")


def __getattr__(name: str):
    # PEP 562: `kubewasm_sdk.kube` and `from kubewasm_sdk import kube` import it here.
    if name in _ON_FIRST_USE:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
