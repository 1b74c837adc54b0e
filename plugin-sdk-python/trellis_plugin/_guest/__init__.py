"""The glue between the SDK's types and componentize-py's generated
bindings (``wit_world``). Imported only inside the guest, by the generated
``trellis_main`` module; plugin code never imports it.

Everything is imported at module level: module-level code runs when the
component is built, and a call cannot import anything.

One module per world (``transformation``, ``checksum``, ``listener``), each
defining the export class componentize-py expects; this module holds what
they share: the host's log, and how a crash reaches the host.
"""

from __future__ import annotations

import sys
import traceback

from componentize_py_types import Err
from wit_world.imports import host, types

from .. import _registry
from .. import log as _log
from ..config import PluginInfo

__all__ = ["Err", "bind", "crash", "host_info"]

_HOST_LEVELS = {
    _log.Level.TRACE: types.LogLevel.TRACE,
    _log.Level.DEBUG: types.LogLevel.DEBUG,
    _log.Level.INFO: types.LogLevel.INFO,
    _log.Level.WARN: types.LogLevel.WARN,
    _log.Level.ERROR: types.LogLevel.ERROR,
}


def _to_host(level: _log.Level, message: str) -> None:
    host.log(_HOST_LEVELS[level], message)


_log.set_sink(_to_host)


def bind(module: str, kind: str) -> _registry.Registered:
    """The plugin `module` declared, checked to be one `kind`. Called at build
    time: a mismatch fails the build with one line on stderr."""
    try:
        return _registry.find(module, kind)
    except _registry.BuildError as error:
        print(f"trellis: {error}", file=sys.stderr, flush=True)
        raise SystemExit(f"trellis: {error}") from None


def host_info(info: PluginInfo) -> types.PluginInfo:
    """`info` as the bindings' `PluginInfo`."""
    keys = [types.ConfigKey(k.name, k.required, k.description) for k in info.config]
    return types.PluginInfo(info.name, info.version, info.description, keys)


def crash(error: BaseException) -> None:
    """Reports an exception the plugin did not turn into a failure: its
    traceback goes to the host log at error level and to `report-panic`,
    so that the call's outcome is a panic with the traceback. The caller
    re-raises, which traps."""
    try:
        text = "".join(traceback.format_exception(error)).rstrip()
    except BaseException:  # e.g. MemoryError while formatting
        text = f"{type(error).__name__}: {error}"
    try:
        host.log(types.LogLevel.ERROR, text)
    except BaseException:
        pass
    try:
        host.report_panic(text)
    except BaseException:
        pass
