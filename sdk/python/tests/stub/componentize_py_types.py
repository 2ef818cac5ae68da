"""Stand-in for componentize-py's runtime types, so the SDK's pure parts run on CPython."""
from dataclasses import dataclass


@dataclass
class Ok:
    value: object


class Err(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value
