"""Write trellis plugins in Python: declare one function or class, and
`trellis plugins build` makes a WebAssembly component of it.

| kind of plugin       | declare with                      | it takes / returns                        |
| -------------------- | --------------------------------- | ----------------------------------------- |
| transformation type  | ``@transformation(name, version)`` | `Request` -> `Data` / `NoData`            |
| version checksum     | ``@checksum(name, version)``       | `ChecksumInput` -> ``str``                |
| scheduling listener  | ``@listener(name, version)`` class | ``__init__(Config)``, ``on_event(Event)`` |

A complete transformation::

    from trellis_plugin import Data, NoData, Request, optional, transformation, or_fatal

    @transformation("line-count", "1.0.0", description="counts the lines of all input files",
                    config=[optional("file", "output file name (default: count)")])
    def run(request: Request) -> Data | type[NoData]:
        lines = 0
        for file in request.input_files():
            with or_fatal(file):
                lines += len(file.path.read_text().splitlines())
        if lines == 0:
            return NoData
        with request.create_output_file(request.config.get("file", "count")) as out:
            out.write(f"{lines}\\n")
        return Data(lines=lines)

Fail with `Fatal` or `Retryable`. Any other exception is a crash: the host
records it as a panic with its traceback (and it is logged at error level).

What the sandbox allows: a call sees its inputs read-only and its output
directory read-write, nothing else (no environment, no network). A
checksum (and `describe`) runs with a fixed clock (`time.time()` is 0.0) and
seeded randomness, so that it is deterministic; a transformation should
still take its time from `Request.actual_time`. Imports must be at module level: module-level code runs when
the component is built, and nothing can be imported during a call. There
are no threads, and no ``bz2``, ``lzma`` or ``ssl``.

Plugin code only uses this package's types, never the generated
``wit_world`` bindings, so the same code runs natively (see
`trellis_plugin.testing`). The glue to the bindings is in
``trellis_plugin._guest``, imported only by the generated build entry point.
"""

from . import log, testing
from .checksum import ChecksumInput, NamedResource, checksum
from .config import Config, ConfigKey, PluginInfo, optional, required
from .errors import Failure, Fatal, Retryable, or_fatal, or_retryable
from .files import InputFile, is_data_file, list_data_files
from .listener import Event, Gap, Listener, Transition, ViewState, listener
from .transformation import Data, Input, NoData, Outcome, Request, transformation

__version__ = "0.1.0"
CONTRACT_VERSION = "1.2.0"
"""The version of the ``trellis:plugin`` contract this SDK builds against."""

__all__ = [
    "CONTRACT_VERSION", "ChecksumInput", "Config", "ConfigKey", "Data", "Event", "Failure", "Fatal",
    "Gap", "Input", "InputFile", "Listener", "NamedResource", "NoData", "Outcome", "PluginInfo",
    "Request", "Retryable", "Transition", "ViewState", "checksum", "is_data_file", "list_data_files",
    "listener", "log", "optional", "or_fatal", "or_retryable", "required", "testing", "transformation",
]
