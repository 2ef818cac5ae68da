"""The wasi:http types the SDK names (unit tests make no request)."""
from dataclasses import dataclass


@dataclass
class Method_Get:
    pass


@dataclass
class Method_Post:
    pass


@dataclass
class Method_Put:
    pass


@dataclass
class Method_Delete:
    pass


@dataclass
class Method_Patch:
    pass


@dataclass
class Method_Head:
    pass


@dataclass
class Scheme_Http:
    pass


@dataclass
class Scheme_Https:
    pass


@dataclass
class ErrorCode_HttpRequestDenied:
    value: object = None


@dataclass
class ErrorCode_ConnectionTimeout:
    value: object = None


@dataclass
class ErrorCode_HttpResponseTimeout:
    value: object = None


@dataclass
class ErrorCode_HttpResponseBodySize:
    value: object = None


@dataclass
class ErrorCode_ConnectionRefused:
    value: object = None


@dataclass
class ErrorCode_DnsTimeout:
    value: object = None


@dataclass
class ErrorCode_HttpRequestUriInvalid:
    value: object = None


@dataclass
class Method_Other:
    value: str


class Fields:
    pass


class OutgoingRequest:
    pass


class OutgoingBody:
    pass


class IncomingBody:
    pass


class RequestOptions:
    pass


def http_error_code(err):
    return None
