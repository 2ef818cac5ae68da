"""How a handler fails: the exceptions the SDK raises and the ones a handler raises to choose
between the host's `retry` (redeliver with backoff) and `fatal` (log, never redeliver)."""

import json


class Retry(Exception):
    """Raise to have the notification redelivered later: the failure may heal by itself."""


class Fatal(Exception):
    """Raise when redelivering cannot help (bad input, a refused request): logged, not retried."""


class ApiError(Exception):
    """A Kubernetes call the API server (or the host's grants, 403) refused. Uncaught, it
    becomes `retry` when the code may heal (409, 429, 5xx) and `fatal` otherwise."""

    def __init__(self, what: str, code: int, reason: str, message: str):
        super().__init__(f"{what}: {code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed later: conflicts, throttling and server errors."""
        return self.code in (409, 429) or self.code >= 500


class HttpError(Exception):
    """An outbound request that got no response: denied by the grants, refused, reset. `code`
    is the `wasi:http` error-code case as the WIT names it, lower-case, e.g. `http-request-denied`
    (`status-503` from `Response.raise_for_status`)."""

    def __init__(self, message: str, code: str = ""):
        super().__init__(message)
        self.code = code


class Timeout(HttpError):
    """The request ran past its timeout or the host's: the connection, first byte or body."""


class TooLarge(HttpError):
    """The response body was larger than the host's cap for one response."""


class SettingError(Fatal):
    """A setting (`settings.get`/`require`) that is missing or not of the type asked for: a
    `Fatal`, as redelivering cannot change the settings. `key` names it, `expected` says what was
    asked (`an integer`), `got` is the host's string (None: not set)."""

    def __init__(self, key: str, expected: str, got=None, detail: str = None):
        if detail is not None:
            message = f'setting "{key}": {detail}'
        elif got is None:
            message = f'setting "{key}": missing, expected {expected}'
        else:
            message = f'setting "{key}": expected {expected}, got {_shown(got)}'
        super().__init__(message)
        self.key, self.expected, self.got = key, expected, got


def _shown(text: str) -> str:
    if len(text) > 60:
        text = text[:57] + "..."
    return json.dumps(text, ensure_ascii=False)
