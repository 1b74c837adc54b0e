"""Logging into the host's log, where the host tags each message with the
plugin and the view being materialized::

    from trellis_plugin import log
    log.info("read %d rows from %s", rows, file)

Arguments are formatted like `logging`'s (``%`` style), only when the
message is sent. Inside the sandbox messages go to the host; natively
(tests, benchmarks) they go to the Python logger ``trellis.plugin``.
An error log does not fail the call: raise `Fatal` or `Retryable` for that.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

__all__ = ["Level", "log", "trace", "debug", "info", "warn", "warning", "error"]


class Level(enum.IntEnum):
    """The host's log levels."""

    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


_logger = logging.getLogger("trellis.plugin")
_PY_LEVELS = {Level.TRACE: 5, Level.DEBUG: logging.DEBUG, Level.INFO: logging.INFO,
              Level.WARN: logging.WARNING, Level.ERROR: logging.ERROR}


def _native(level: Level, message: str) -> None:
    _logger.log(_PY_LEVELS[level], "%s", message)


_sink: Callable[[Level, str], None] = _native


def set_sink(sink: Callable[[Level, str], None]) -> None:
    """Where messages go. The guest glue points this at the host; tests may
    point it at a list."""
    global _sink
    _sink = sink


def log(level: Level, message: object, *args: object) -> None:
    """Sends one message at `level`; ``message % args`` if there are args."""
    text = str(message) % args if args else str(message)
    _sink(level, text)


def trace(message: object, *args: object) -> None:
    """Logs at trace level."""
    log(Level.TRACE, message, *args)


def debug(message: object, *args: object) -> None:
    """Logs at debug level."""
    log(Level.DEBUG, message, *args)


def info(message: object, *args: object) -> None:
    """Logs at info level."""
    log(Level.INFO, message, *args)


def warn(message: object, *args: object) -> None:
    """Logs at warn level."""
    log(Level.WARN, message, *args)


warning = warn


def error(message: object, *args: object) -> None:
    """Logs at error level."""
    log(Level.ERROR, message, *args)
