"""The transformation world: a transformation type writes one view's data.

Declare one with the `transformation` decorator on a function that takes a
`Request` and returns `Data` (with counters) or `NoData`::

    @transformation("line-count", "1.0.0", config=[optional("file", "output file")])
    def run(request: Request) -> Data | type[NoData]:
        ...

Each call gets a fresh instance: keep no state between views.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar, Union

from ._registry import declaration
from .config import Config, ConfigKey
from .errors import Fatal
from .files import InputFile, checked_relative, list_data_files, make_dirs

__all__ = ["Input", "Request", "Data", "NoData", "Outcome", "transformation", "normalize_outcome"]

_U64 = 1 << 64


@dataclass(frozen=True)
class Input:
    """One materialized dependency of the view."""

    name: str
    """Its name in the view type (its role, e.g. ``orders``)."""
    path: str
    """Where its data is visible to the plugin, read-only."""
    view: str = ""
    """The dependency view's URL path, e.g. ``shop.raw/Orders/SHOP10/2015/05/01``."""
    timestamp: int | None = None
    """When it was last materialized (ms since the epoch), if it ever was."""
    changed: bool = True
    """Whether it was rematerialized since this view last ran."""

    def files(self) -> list[InputFile]:
        """Every data file under this input, recursively, sorted by path;
        ``_`` and ``.`` files are skipped."""
        return list_data_files(self.name, self.path)


@dataclass(frozen=True)
class Request:
    """What one call is asked to do: materialize `view` into `output`."""

    view: str
    """The view's URL path."""
    output: str
    """An empty directory, read-write, that becomes the view's data when the
    call succeeds. Nothing else is writable."""
    inputs: Sequence[Input] = ()
    config: Config = field(default_factory=Config)
    parameters: Mapping[str, str] = field(default_factory=dict)
    """The view's parameters in declaration order."""
    nominal_time: int | None = None
    """The time instance the view stands for (ms since the epoch), if its type has a time dimension."""
    actual_time: int = 0
    """When this materialization started (ms): the time to compute with,
    rather than `time.time()`, so that a rerun computes the same."""

    def input(self, name: str) -> Input | None:
        """The input with this name, if there is one."""
        return next((i for i in self.inputs if i.name == name), None)

    def input_files(self) -> list[InputFile]:
        """Every data file of every input: inputs in request order, files sorted."""
        return [file for i in self.inputs for file in i.files()]

    def output_path(self, name: str) -> Path:
        """The path of `name` inside the output directory; `name` must be a
        plain relative path (`Fatal` otherwise)."""
        return Path(self.output) / checked_relative(name)

    def output_dir(self, name: str) -> Path:
        """Creates directory `name` (and its parents) inside the output directory."""
        return make_dirs(self.output, checked_relative(name))

    def create_output_file(self, name: str, mode: str = "w", **open_args: Any) -> IO[Any]:
        """Creates (or truncates) `name` in the output directory, with its
        parent directories, and opens it. Text mode defaults to UTF-8 and no
        newline translation (``newline=""``): what you write is what lands."""
        relative = checked_relative(name)
        if len(relative.parts) > 1:
            make_dirs(self.output, relative.parent)
        if "b" not in mode:
            open_args.setdefault("encoding", "utf-8")
            open_args.setdefault("newline", "")
        try:
            return open(Path(self.output) / relative, mode, **open_args)
        except OSError as error:
            raise Fatal(f"output {name}: {error}") from error


@dataclass(frozen=True)
class Data:
    """Data was written to the output directory. The counters are free-form
    and end up in the run's report: ``Data(rows_in=3)`` reports ``rows-in``
    (underscores become dashes); ``Data({"rows_in": 3})`` keeps names as given.
    """

    counters: tuple[tuple[str, int], ...] = ()

    def __init__(self, counters: Mapping[str, int] | Iterable[tuple[str, int]] = (), /, **named: int) -> None:
        pairs = list(counters.items()) if isinstance(counters, Mapping) else list(counters)
        pairs += [(name.replace("_", "-"), value) for name, value in named.items()]
        for name, value in pairs:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64:
                raise ValueError(f"counter `{name}` must be an integer in 0..2**64, not {value!r}")
        object.__setattr__(self, "counters", tuple((str(n), int(v)) for n, v in pairs))

    def __getitem__(self, name: str) -> int:
        return dict(self.counters)[name]


class NoData:
    """There was nothing to produce: the view is marked no-data. Return the
    class itself (``return NoData``) or an instance; both mean the same."""

    def __eq__(self, other: object) -> bool:
        return other is NoData or isinstance(other, NoData)

    def __hash__(self) -> int:
        return hash(NoData)

    def __repr__(self) -> str:
        return "NoData"


Outcome = Union[Data, NoData, type[NoData], Mapping[str, int]]
"""What a transformation returns: `Data`, `NoData` or a mapping of counters."""


def normalize_outcome(result: object) -> Data | NoData:
    """`Data` or `NoData()` for what a transformation returned; anything
    else is a `TypeError` (a bug in the plugin, reported as a crash)."""
    if result is NoData or isinstance(result, NoData):
        return NoData()
    if isinstance(result, Data):
        return result
    if isinstance(result, Mapping):
        return Data(result)
    raise TypeError(
        f"a transformation returns Data(...), NoData or a dict of counters, not {type(result).__name__}"
    )


F = TypeVar("F", bound=Callable[[Request], Any])


def transformation(
    name: str,
    version: str,
    *,
    description: str = "",
    config: Iterable[ConfigKey] = (),
) -> Callable[[F], F]:
    """Declares the decorated function as the module's transformation type.

    The function takes a `Request` and returns `Data`, `NoData` or a dict
    of counters; it raises `Retryable` or `Fatal` to fail. It is returned
    unchanged, so tests can call it directly.
    """
    return declaration("transformation", name, version, description, config)

