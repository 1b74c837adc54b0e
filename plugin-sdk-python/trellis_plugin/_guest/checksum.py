"""Guest glue for the checksum world: the `VersionChecksum` export class."""

from __future__ import annotations

from wit_world.exports import version_checksum as wit

from ..checksum import ChecksumInput, NamedResource
from ..config import Config
from ..errors import Failure
from . import Err, bind, crash, host_info

__all__ = ["VersionChecksum"]

_plugin = None


def bind_plugin(module: str) -> None:
    """Binds the checksum function `module` declared (at build time)."""
    global _plugin
    _plugin = bind(module, "checksum")


class VersionChecksum:
    """The `version-checksum` interface, over the bound plugin."""

    def describe(self):  # -> types.PluginInfo
        return host_info(_plugin.info)

    def checksum(self, input: wit.ChecksumInput) -> str:
        resources = [NamedResource(r.name, bytes(r.content)) for r in input.resources]
        try:
            result = _plugin.target(ChecksumInput(input.transformation, Config(input.config), resources))
            if not isinstance(result, str):
                raise TypeError(f"a checksum function returns a str, not {type(result).__name__}")
        except Failure as failure:
            raise Err(failure.message) from None
        except BaseException as error:
            crash(error)
            raise
        return result
