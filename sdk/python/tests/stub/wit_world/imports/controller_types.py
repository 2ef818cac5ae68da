"""The controller world's records, as componentize-py generates them for kubewasm:handler@0.3.0."""
from dataclasses import dataclass


@dataclass
class Mapping_SameName:
    pass


@dataclass
class Mapping_Label:
    value: str


@dataclass
class Mapping_Field:
    value: str


@dataclass
class Mapping_Guest:
    pass


@dataclass
class Watch:
    subscription: object
    mapping: object


@dataclass
class ControllerInfo:
    name: str
    primary: object
    owns: list
    watches: list
    permissions: list
    http_origins: list
    events: bool


@dataclass
class ObjectKey:
    namespace: object
    name: str


@dataclass
class Outcome_Done:
    pass


@dataclass
class Outcome_RequeueAfter:
    value: int
