"""The `shard` import: a test sets `shard_by`, `held` (the ranges) and `owned` (the shard keys
`owns` answers True for; None: every key, as when not sharded), and reads `asked`."""
from dataclasses import dataclass
from enum import Enum
from typing import List, Optional


class ShardBy(Enum):
    NONE = 0
    UID = 1
    NAMESPACE = 2


@dataclass
class HashRange:
    start: int
    end: Optional[int]


shard_by = ShardBy.NONE
held = [HashRange(0, None)]
owned = None
asked = []


def by() -> ShardBy:
    return shard_by


def ranges() -> List[HashRange]:
    return list(held)


def owns(value: str) -> bool:
    asked.append(value)
    return owned is None or value in owned
