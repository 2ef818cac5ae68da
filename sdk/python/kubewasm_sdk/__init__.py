"""kubewasm SDK for Python handlers (world `kubewasm:handler@0.2.0`, bundled by componentize-py).

    from kubewasm_sdk import Handler, Watched, world, subscription, kube, events, http, log, owner, Retry, Fatal

The same package serves components of `kubewasm:handler@0.1.0` (handler, objects, log):
`events`, `http` and `kube` import 0.2.0 interfaces, so they are imported on first use, never
by a 0.1.0 component. See sdk/python/README.md.
"""

import importlib

from . import log, owner
from .errors import ApiError, Fatal, HttpError, Retry, Timeout, TooLarge
from .handler import WORLD_VERSION, Handler, Watched, outcome, permission, subscription, world
from .objects import Object, key

__version__ = "0.2.0"
__all__ = ["events", "http", "kube", "log", "owner", "ApiError", "Fatal", "HttpError", "Retry", "Timeout",
           "TooLarge", "WORLD_VERSION", "Handler", "Watched", "outcome", "permission", "subscription", "world", "Object",
           "key"]

_ON_FIRST_USE = ("events", "http", "kube")


def __getattr__(name: str):
    # PEP 562: `kubewasm_sdk.kube` and `from kubewasm_sdk import kube` import it here.
    if name in _ON_FIRST_USE:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
