"""Records emitted Events in `emitted`."""
from enum import Enum

emitted = []


class EventType(Enum):
    NORMAL = 0
    WARNING = 1


def emit(regarding, type, reason, action, note):
    emitted.append((regarding, type, reason, action, note))
