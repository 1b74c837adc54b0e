"""Configuration: the keys a plugin declares (`ConfigKey`), what `describe`
returns (`PluginInfo`), and read access to a call's resolved values (`Config`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import overload

from .errors import Fatal

__all__ = ["ConfigKey", "PluginInfo", "Config", "required", "optional"]


@dataclass(frozen=True)
class ConfigKey:
    """A configuration key the plugin reads. The host refuses a configuration
    that misses a required key or names a key that was not declared."""

    name: str
    required: bool = False
    description: str = ""


def required(name: str, description: str = "") -> ConfigKey:
    """A required configuration key: ``required("aggregates", "what to compute")``."""
    return ConfigKey(name, True, description)


def optional(name: str, description: str = "") -> ConfigKey:
    """An optional configuration key: ``optional("file", "output file name")``."""
    return ConfigKey(name, False, description)


@dataclass(frozen=True)
class PluginInfo:
    """Who the plugin is and what it reads: what `describe` tells the host."""

    name: str
    version: str
    description: str = ""
    config: tuple[ConfigKey, ...] = field(default_factory=tuple)

    def check(self, config: Config) -> None:
        """Refuses `config` as the host would: a required key missing or a
        key not declared is `Fatal`."""
        declared = {key.name for key in self.config}
        for key in self.config:
            if key.required and key.name not in config:
                raise Fatal(f"configuration key `{key.name}` is required")
        for name in config:
            if name not in declared:
                raise Fatal(f"configuration key `{name}` is not one of {self.name}'s")


class Config(Mapping[str, str]):
    """The configuration a call received, in declaration order. Values are
    strings; the host has already expanded functions like ``dataIn()``.

    ``config["key"]`` is the value or a `Fatal` failure naming the key (it
    is a required value); ``config.get("key", default)`` does not fail.
    """

    __slots__ = ("_entries", "_values")

    def __init__(self, entries: Iterable[tuple[str, str]] | Mapping[str, str] = ()) -> None:
        pairs = list(entries.items()) if isinstance(entries, Mapping) else [tuple(e) for e in entries]
        self._entries: tuple[tuple[str, str], ...] = tuple((str(k), str(v)) for k, v in pairs)
        self._values: dict[str, str] = {}
        for key, value in self._entries:
            self._values.setdefault(key, value)  # the first wins, as in the Rust SDK

    def __getitem__(self, key: str) -> str:
        try:
            return self._values[key]
        except KeyError:
            raise Fatal(f"configuration key `{key}` is required") from None

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({list(self._entries)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._entries == other._entries
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    @overload
    def get(self, key: str) -> str | None: ...
    @overload
    def get(self, key: str, default: str) -> str: ...
    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of `key`, or `default` if it is not set."""
        return self._values.get(key, default)

    def require(self, key: str) -> str:
        """The value of `key`, or a `Fatal` failure that names it (same as ``config[key]``)."""
        return self[key]

    def list(self, key: str) -> list[str]:
        """A comma-separated list, items trimmed, empty items dropped; a
        missing key is an empty list."""
        value = self._values.get(key)
        if value is None:
            return []
        return [item for item in (part.strip() for part in value.split(",")) if item]

    @property
    def entries(self) -> tuple[tuple[str, str], ...]:
        """Every ``(key, value)`` pair as the host sent it, in order."""
        return self._entries
