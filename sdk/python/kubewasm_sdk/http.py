"""Outbound HTTP over `wasi:http`, to the origins the plugin's grants list: blocking
`get`/`post_json`/`request` that answer a `Response`, or raise `HttpError` (`Timeout`,
`TooLarge` for the host's body cap) when no whole response came back."""

import json
import re
from urllib.parse import urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler
from wit_world.imports import wasi_http_types as t
from wit_world.imports.streams import StreamError_Closed

from .errors import HttpError, Timeout, TooLarge

# wasi:io lets one blocking write carry at most 4096 bytes.
_CHUNK = 4096
_TIMEOUTS = {"dns-timeout", "connection-timeout", "connection-read-timeout", "connection-write-timeout", "http-response-timeout"}
_METHODS = {"GET": t.Method_Get, "POST": t.Method_Post, "PUT": t.Method_Put, "DELETE": t.Method_Delete,
            "PATCH": t.Method_Patch, "HEAD": t.Method_Head}


class Response:
    """A whole response: `status`, `headers` (lower-case names), `body` (bytes)."""

    def __init__(self, status: int, headers: dict, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def ok(self) -> bool:
        return 200 <= self.status <= 299

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def raise_for_status(self) -> "Response":
        """Raises `HttpError` unless the status is 2xx; answers the response otherwise."""
        if not self.ok:
            raise HttpError(f"HTTP {self.status}", f"status-{self.status}")
        return self


def _wit_name(code) -> str:
    """The error-code case as the WIT names it, lower-case: `ErrorCode_HttpRequestDenied` (the
    binding's class) is `http-request-denied` (the WIT's `HTTP-request-denied`)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", type(code).__name__.removeprefix("ErrorCode_")).lower()


def _error(what: str, code) -> HttpError:
    """A wasi:http error-code as the SDK's exception (its payload stays out: it may hold data)."""
    name = _wit_name(code)
    cls = Timeout if name in _TIMEOUTS else TooLarge if name == "http-response-body-size" else HttpError
    return cls(f"{what}: {name}", name)


def request(method: str, url: str, body: bytes = b"", headers: dict = None, timeout: float = None) -> Response:
    """Sends one request and reads the whole response. `timeout` (seconds) bounds the
    connection, the first byte and each gap between body bytes; the host's own limits apply too."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError(f"not an http(s) URL: {url[:64]!r}", "http-request-uri-invalid")
    entries = [(k.lower(), str(v).encode()) for k, v in (headers or {}).items()]
    if body:
        entries.append(("content-length", str(len(body)).encode()))
    req = t.OutgoingRequest(t.Fields.from_list(entries))
    m = method.upper()
    req.set_method(_METHODS[m]() if m in _METHODS else t.Method_Other(m))
    req.set_scheme(t.Scheme_Https() if parts.scheme == "https" else t.Scheme_Http())
    req.set_authority(parts.netloc)
    req.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing = req.body()
    if body:
        stream = outgoing.write()
        for i in range(0, len(body), _CHUNK):
            stream.blocking_write_and_flush(body[i : i + _CHUNK])
        stream.__exit__(None, None, None)
    t.OutgoingBody.finish(outgoing, None)
    options = None
    if timeout is not None:
        options = t.RequestOptions()
        ns = int(timeout * 1e9)
        options.set_connect_timeout(ns)
        options.set_first_byte_timeout(ns)
        options.set_between_bytes_timeout(ns)
    what = f"{m} {parts.scheme}://{parts.netloc}"
    try:
        future = outgoing_handler.handle(req, options)
    except Err as e:
        raise _error(what, e.value) from None
    pollable = future.subscribe()
    pollable.block()
    pollable.__exit__(None, None, None)
    got = future.get()
    future.__exit__(None, None, None)
    if isinstance(got.value, Err):
        raise _error(what, got.value.value)
    response = got.value.value
    status = response.status()
    fields = response.headers()
    names = {k: v.decode("latin-1") for k, v in fields.entries()}
    fields.__exit__(None, None, None)
    incoming = response.consume()
    stream = incoming.stream()
    chunks = []
    try:
        while True:
            chunks.append(stream.blocking_read(65536))
    except Err as e:
        if not isinstance(e.value, StreamError_Closed):
            code = t.http_error_code(e.value.value)
            raise (_error(what, code) if code is not None else HttpError(f"{what}: body read failed")) from None
    finally:
        stream.__exit__(None, None, None)
        t.IncomingBody.finish(incoming).__exit__(None, None, None)
        response.__exit__(None, None, None)
    return Response(status, names, b"".join(chunks))


def get(url: str, headers: dict = None, timeout: float = None) -> Response:
    """GET `url`."""
    return request("GET", url, headers=headers, timeout=timeout)


def post_json(url: str, value, headers: dict = None, timeout: float = None) -> Response:
    """POSTs `value` as JSON (`content-type: application/json`)."""
    h = {"content-type": "application/json", **(headers or {})}
    return request("POST", url, json.dumps(value).encode(), h, timeout)
