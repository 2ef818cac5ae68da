"""Records every call in `calls`; a test sets `answer` (a value, or an exception to raise)."""
from dataclasses import dataclass
from enum import Enum

calls = []
answer = None


class PatchType(Enum):
    MERGE = 0
    JSON = 1
    STRATEGIC = 2


@dataclass
class WriteOptions:
    dry_run: bool
    force: bool


@dataclass
class WriteOutcome:
    object: object
    code: int


def _call(name, *args):
    calls.append((name,) + args)
    if isinstance(answer, Exception):
        raise answer
    return answer


def get(*args):
    return _call("get", *args)


def create(*args):
    return _call("create", *args)


def apply(*args):
    return _call("apply", *args)


def apply_outcome(*args):
    return _call("apply_outcome", *args)


def patch(*args):
    return _call("patch", *args)


def replace(*args):
    return _call("replace", *args)


def delete(*args):
    return _call("delete", *args)
