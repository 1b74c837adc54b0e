"""Running plugins natively, without WebAssembly: for unit tests and for
benchmarking the same code outside the sandbox.

These helpers do what the host and the guest glue do around a call:
build the request, refuse a configuration the declared keys do not allow,
and normalize what the plugin returns::

    from trellis_plugin import testing
    outcome = testing.run_transformation(run, output=tmp, inputs={"orders": "data/"},
                                         config={"aggregates": "count(*)"})
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from .checksum import ChecksumInput, NamedResource
from .config import Config, PluginInfo
from .listener import Event
from .transformation import Data, Input, NoData, Request, normalize_outcome

__all__ = ["make_request", "run_transformation", "run_checksum", "run_listener", "info_of"]

ConfigLike = Mapping[str, str] | Iterable[tuple[str, str]]


def info_of(plugin: Any) -> PluginInfo:
    """What `describe` returns for a decorated function or class."""
    try:
        return plugin.__trellis_plugin__
    except AttributeError:
        raise TypeError(f"{plugin!r} is not declared with @transformation, @checksum or @listener") from None


def make_request(
    output: str | os.PathLike[str],
    inputs: Mapping[str, str | os.PathLike[str]] | Iterable[Input] = (),
    config: ConfigLike = (),
    view: str = "local/Run",
    **fields: Any,
) -> Request:
    """A `Request` with inputs given by name and directory and the config as a dict."""
    if isinstance(inputs, Mapping):
        inputs = [Input(name, os.fspath(path), view=f"local/{name}") for name, path in inputs.items()]
    return Request(view=view, output=os.fspath(output), inputs=list(inputs), config=Config(config), **fields)


def run_transformation(
    plugin: Callable[[Request], Any],
    request: Request | None = None,
    **request_args: Any,
) -> Data | NoData:
    """Calls a transformation as the host would: checks the configuration
    against the declared keys (`Fatal` if refused), creates the output
    directory, and returns `Data` or `NoData()`. Failures propagate."""
    if request is None:
        request = make_request(**request_args)
    info_of(plugin).check(request.config)
    os.makedirs(request.output, exist_ok=True)
    return normalize_outcome(plugin(request))


def run_checksum(
    plugin: Callable[[ChecksumInput], str],
    transformation: str,
    config: ConfigLike = (),
    resources: Mapping[str, bytes | str] = {},
) -> str:
    """Calls a checksum function with resources given as a dict."""
    named = [NamedResource(n, c.encode() if isinstance(c, str) else c) for n, c in resources.items()]
    result = plugin(ChecksumInput(transformation, Config(config), named))
    if not isinstance(result, str):
        raise TypeError(f"a checksum function returns a str, not {type(result).__name__}")
    return result


def run_listener(plugin: type, config: ConfigLike, events: Iterable[Event]) -> Any:
    """Starts a listener with `config` (checked against its declared keys),
    feeds it `events` in order, and returns the instance."""
    values = Config(config)
    info_of(plugin).check(values)
    instance = plugin(values)
    for event in events:
        instance.on_event(event)
    return instance
