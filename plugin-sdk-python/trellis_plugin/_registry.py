"""The one plugin a module declares, found by the build entry point.

Each declaration decorator (`transformation`, `checksum`, `listener`)
records its plugin here when the user's module is imported; the generated
``trellis_main`` module then asks for the plugin of the kind that
``pyproject.toml`` names, and fails the build with one line if it is not
there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .config import ConfigKey, PluginInfo

Kind = Literal["transformation", "checksum", "listener"]
KINDS: tuple[Kind, ...] = ("transformation", "checksum", "listener")


@dataclass(frozen=True)
class Registered:
    """A declared plugin: its kind, what `describe` returns, and the user's
    function (transformation, checksum) or class (listener)."""

    kind: Kind
    info: PluginInfo
    target: Any
    module: str


_plugins: list[Registered] = []


class BuildError(Exception):
    """The module does not declare exactly one plugin of the expected kind."""


def register(plugin: Registered) -> None:
    """Records a declaration (called by the decorators)."""
    _plugins.append(plugin)


T = TypeVar("T")


def declaration(
    kind: Kind, name: str, version: str, description: str, config: Iterable[ConfigKey]
) -> Callable[[T], T]:
    """The decorator behind `transformation`, `checksum` and `listener`:
    registers its target with what `describe` returns, marks it with
    `__trellis_plugin__` (for `testing`), and returns it unchanged."""
    info = PluginInfo(name, version, description, tuple(config))

    def declare(target: T) -> T:
        register(Registered(kind, info, target, getattr(target, "__module__", "")))
        target.__trellis_plugin__ = info  # type: ignore[attr-defined]
        return target

    return declare


def registered() -> list[Registered]:
    """Every declaration so far, in import order."""
    return list(_plugins)


def find(module: str, kind: str) -> Registered:
    """The one plugin of `kind` that importing `module` declared, or a
    `BuildError` whose message is one line saying what is wrong."""
    if kind not in KINDS:
        raise BuildError(f"unknown plugin kind `{kind}` (expected one of {', '.join(KINDS)})")
    if not _plugins:
        raise BuildError(
            f"module `{module}` declares no plugin: decorate its entry point with "
            f"@trellis_plugin.{kind}(...)"
        )
    if len(_plugins) > 1:
        names = ", ".join(f"{p.kind} `{p.info.name}` ({p.module})" for p in _plugins)
        raise BuildError(f"module `{module}` declares {len(_plugins)} plugins, one is allowed: {names}")
    plugin = _plugins[0]
    if plugin.kind != kind:
        raise BuildError(
            f"module `{module}` declares a {plugin.kind} (`{plugin.info.name}`) but "
            f"pyproject.toml says kind = \"{kind}\""
        )
    return plugin
