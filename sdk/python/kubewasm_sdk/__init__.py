"""kubewasm SDK for Python handlers (world `kubewasm:handler@0.2.0`, bundled by componentize-py).

    from kubewasm_sdk import Handler, world, subscription, kube, events, http, log, Retry, Fatal

See sdk/python/README.md.
"""

from . import events, http, kube, log
from .errors import ApiError, Fatal, HttpError, Retry, Timeout, TooLarge
from .handler import Handler, outcome, permission, subscription, world
from .objects import Object, key

__version__ = "0.2.0"
__all__ = ["events", "http", "kube", "log", "ApiError", "Fatal", "HttpError", "Retry", "Timeout",
           "TooLarge", "Handler", "outcome", "permission", "subscription", "world", "Object", "key"]
