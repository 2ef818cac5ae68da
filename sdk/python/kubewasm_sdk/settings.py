"""The operator's settings: the `[settings]` table of the plugin's manifest (kubewasm:handler@0.3.0).

    replicas = settings.get("replicas", int, 2)     # typed, with a default when the key is absent
    image = settings.require("image")               # SettingError when absent
    settings.all()                                  # {key: the host's string}
    settings.json()                                 # the whole table, decoded

The host gives every value as a string: a TOML string as its text, an integer, float or boolean
as its TOML spelling (`3`, `0.5`, `true`), an array or table as JSON. `get` and `require` turn
that string into the `type` asked for: `str` (the text as it is), `int`, `float` (an integer
too), `bool` (`true`/`false`), `list` (an array), `dict` (a table), or any callable taking the
string (its `ValueError`/`TypeError` is the refusal; `one_of("fast", "safe")` makes one). A
value that is not of the type raises `SettingError`, a `Fatal` naming the key and what was
wrong:

    setting "replicas": expected an integer, got "three"

Raised in `validate_settings`, that message is the host's reason to refuse the load; raised in
a callback, it is a `fatal` (redelivering cannot change the settings; a reload makes a new
instance). Under kubewasm:handler@0.2.0 or 0.1.0 (no settings import) every call raises `Fatal`."""

import json as _json
import re

from .errors import Fatal, SettingError, _shown

try:
    from wit_world.imports import settings as _host
except ImportError:  # a world before 0.3.0
    _host = None


_INT = re.compile(r"[+-]?\d(_?\d)*\Z")
_FLOAT = re.compile(r"[+-]?(\d(_?\d)*(\.\d(_?\d)*)?([eE][+-]?\d(_?\d)*)?|inf|nan)\Z")


def _int(text: str) -> int:
    if not _INT.match(text):
        raise ValueError
    return int(text)


def _float(text: str) -> float:
    if not _FLOAT.match(text):
        raise ValueError
    return float(text)


def _bool(text: str) -> bool:
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError


def _json_of(kind):
    def parse(text: str):
        value = _json.loads(text)
        if not isinstance(value, kind):
            raise ValueError
        return value
    return parse


# type -> (what the error says is expected, the parser)
_TYPES = {
    str: ("a string", lambda text: text),
    int: ("an integer", _int),
    float: ("a number", _float),
    bool: ("a boolean (true or false)", _bool),
    list: ("an array", _json_of(list)),
    dict: ("a table", _json_of(dict)),
}


def _expected(type) -> str:
    known = _TYPES.get(type)
    if known is not None:
        return known[0]
    if not callable(type):
        raise TypeError(f"settings: type must be str, int, float, bool, list, dict or a callable, not {type!r}")
    return getattr(type, "expected", None) or "a valid value"


def parse(key: str, text: str, type=str):
    """`text` (the host's string for `key`) as `type`, or `SettingError`: the conversion `get`
    and `require` make, for tests and for values read through `all()`. A callable `type` may say
    what it takes in an `expected` attribute (`one of "fast", "safe"`) for the message of an
    absent `require`d key."""
    known = _TYPES.get(type)
    if known is not None:
        expected, parser = known
        try:
            return parser(text)
        except ValueError:  # json.JSONDecodeError is one
            raise SettingError(key, expected, text) from None
    expected = _expected(type)
    try:
        return type(text)
    except (ValueError, TypeError) as e:
        detail = f"{e}, got {_shown(text)}" if str(e) else f"expected {expected}, got {_shown(text)}"
        raise SettingError(key, expected, text, detail=detail) from None


def one_of(*choices: str):
    """A `type` for `get`/`require` taking one of `choices` (strings) and nothing else:
    `settings.get("mode", one_of("fast", "safe"), "safe")`."""
    expected = "one of " + ", ".join(_json.dumps(c) for c in choices)

    def choice(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected {expected}")
        return text

    choice.expected = expected
    return choice


def _need_host():
    if _host is None:
        raise Fatal("settings need kubewasm:handler@0.3.0: build the component against wit/0.3.0")
    return _host


def raw(key: str):
    """The host's string for `key`, or None when the table does not have it."""
    return _need_host().get(key)


def get(key: str, type=str, default=None):
    """The setting `key` as `type` (see the module), or `default` when the table does not have
    it; `SettingError` when the value is not of the type."""
    text = raw(key)
    return default if text is None else parse(key, text, type)


def require(key: str, type=str):
    """The setting `key` as `type`; `SettingError` when absent (`setting "image": missing,
    expected a string`) or not of the type."""
    text = raw(key)
    if text is None:
        raise SettingError(key, _expected(type))
    return parse(key, text, type)


def all() -> dict:  # noqa: A001 - `settings.all()` reads as what it is
    """Every top-level setting as the host's string, by key (sorted)."""
    return dict(_need_host().get_all())


def json() -> dict:
    """The whole table as one decoded JSON object (`{}` without settings): numbers, booleans,
    arrays and tables as themselves, for a handler that takes its settings apart itself."""
    return _json.loads(_need_host().get_json())

