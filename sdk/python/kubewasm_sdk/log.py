"""Logging through the host's log pipeline (tagged with the plugin's name, rate limited).
Log what happened and to which object, never object content."""

from wit_world.imports import log as _log


def trace(message: str) -> None:
    _log.log(_log.Level.TRACE, message)


def debug(message: str) -> None:
    _log.log(_log.Level.DEBUG, message)


def info(message: str) -> None:
    _log.log(_log.Level.INFO, message)


def warn(message: str) -> None:
    _log.log(_log.Level.WARN, message)


def error(message: str) -> None:
    _log.log(_log.Level.ERROR, message)
