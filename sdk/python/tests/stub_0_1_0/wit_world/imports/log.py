"""Collects log lines in `lines` as (level, message)."""
from enum import Enum

lines = []


class Level(Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


def log(level, message):
    lines.append((level.name.lower(), message))
