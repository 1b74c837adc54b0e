"""The checksum world: a version-checksum function decides what of a
transformation's logic counts as a change.

Declare one with the `checksum` decorator on a function that takes a
`ChecksumInput` and returns the checksum as a string::

    @checksum("sql-checksum", "1.0.0")
    def sql(input: ChecksumInput) -> str:
        return hashlib.sha256(input.resource("query.sql")).hexdigest()

It must be deterministic. In the sandbox the clock is fixed (`time.time()`
is 0.0) and randomness is seeded, so accidental non-determinism shows up
in tests. Raise `Fatal` (or `Retryable`) to say there is no checksum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ._registry import declaration
from .config import Config, ConfigKey

__all__ = ["NamedResource", "ChecksumInput", "checksum"]


@dataclass(frozen=True)
class NamedResource:
    """A named piece of transformation logic, e.g. the text of a query file."""

    name: str
    content: bytes


@dataclass(frozen=True)
class ChecksumInput:
    """What a checksum is computed from."""

    transformation: str
    """The transformation type the view uses (the plugin's name)."""
    config: Config = field(default_factory=Config)
    resources: Sequence[NamedResource] = ()

    def resource(self, name: str) -> bytes | None:
        """The content of the resource called `name`, if there is one."""
        return next((r.content for r in self.resources if r.name == name), None)


F = TypeVar("F", bound=Callable[[ChecksumInput], str])


def checksum(
    name: str,
    version: str,
    *,
    description: str = "",
    config: Iterable[ConfigKey] = (),
) -> Callable[[F], F]:
    """Declares the decorated function as the module's version-checksum
    function. It is returned unchanged, so tests can call it directly."""
    return declaration("checksum", name, version, description, config)
