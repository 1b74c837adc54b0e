"""Failures a plugin raises on purpose: `Retryable` and `Fatal`.

Any other exception that escapes a plugin is a crash: the host reports it
as a panic with its traceback, like a Rust panic.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Failure", "Retryable", "Fatal", "or_fatal", "or_retryable"]


class Failure(Exception):
    """A failure the plugin chose to report. Raise a subclass, not this."""

    retryable: bool = False

    def __init__(self, message: object) -> None:
        super().__init__(str(message))

    @property
    def message(self) -> str:
        """The message the host records."""
        return str(self.args[0])


class Retryable(Failure):
    """Worth trying again later: the host retries the call with backoff
    (a listener is restarted and the latest event of every view replayed)."""

    retryable = True


class Fatal(Failure):
    """Trying again would fail again (bad configuration, malformed input):
    the view fails at once (a listener is restarted and the event dropped)."""

    retryable = False


_EXPECTED: tuple[type[BaseException], ...] = (OSError, ValueError)


@contextmanager
def or_fatal(context: object, *errors: type[BaseException]) -> Iterator[None]:
    """Turns an error inside the block into `Fatal("<context>: <error>")`.

    ``errors`` are the exception types to convert, by default `OSError` and
    `ValueError` (which covers `UnicodeDecodeError`); others still crash::

        with or_fatal(file):
            text = file.path.read_text()
    """
    try:
        yield
    except Failure:
        raise
    except errors or _EXPECTED as error:
        raise Fatal(f"{context}: {error}") from error


@contextmanager
def or_retryable(context: object, *errors: type[BaseException]) -> Iterator[None]:
    """Like `or_fatal`, but the failure is `Retryable`."""
    try:
        yield
    except Failure:
        raise
    except errors or _EXPECTED as error:
        raise Retryable(f"{context}: {error}") from error
