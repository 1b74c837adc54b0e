"""Reading a call's inputs (their data files) and writing below its output
directory, the only place a call may write.

Inside the sandbox a call sees only its granted directories: creating a
directory must not walk up to ``/`` (``os.makedirs`` does, and fails), so
`make_dirs` creates directories from the output directory down.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import Fatal

__all__ = ["InputFile", "is_data_file", "list_data_files", "checked_relative", "make_dirs"]


@dataclass(frozen=True, order=True)
class InputFile:
    """A data file of one input, as seen by the plugin."""

    input: str
    """The name of the input it belongs to."""
    relative: str
    """Its path relative to the input's directory, with ``/`` separators."""
    path: Path
    """Its full path, to open."""

    def __str__(self) -> str:
        # `orders:2015/05/01/part-0.csv`: short, and names the input, so
        # error messages say where a bad row is.
        return f"{self.input}:{self.relative}"


def is_data_file(name: str) -> bool:
    """Whether a file (or directory) name holds data. Done flags
    (``_SUCCESS``), other ``_`` files and hidden files are bookkeeping."""
    return not (name.startswith("_") or name.startswith("."))


def list_data_files(input_name: str, root: str | os.PathLike[str]) -> list[InputFile]:
    """Every data file under `root`, recursively (following links to
    directories), sorted by relative path so that results do not depend on
    directory order. A listing error is `Fatal`."""
    root_path = Path(root)
    found: list[str] = []
    try:
        _collect(root_path, "", found)
    except OSError as error:
        raise Fatal(f"cannot list input `{input_name}`: {error}") from error
    found.sort()
    return [InputFile(input_name, relative, root_path / relative) for relative in found]


def _collect(directory: Path, prefix: str, found: list[str]) -> None:
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                # Skipping it would silently lose data.
                raise OSError(f"{entry.path!r} has a name that is not UTF-8") from None
            if not is_data_file(name):
                continue
            relative = prefix + name
            if entry.is_dir():  # follows links: a linked directory is walked
                _collect(Path(entry.path), relative + "/", found)
            else:
                found.append(relative)


def checked_relative(name: str) -> PurePosixPath:
    """`name` as a plain relative path (no ``..``, not absolute, not empty),
    or `Fatal`: the output directory is all a call may write."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or name.startswith("./") or name == "." or ".." in path.parts:
        raise Fatal(f"output file `{name}` must be a relative path inside the output directory")
    return path


def make_dirs(base: str | os.PathLike[str], relative: PurePosixPath) -> Path:
    """Creates `relative` below the existing directory `base`, one level at a
    time from `base` down (never above it), and returns its path."""
    current = Path(base)
    for part in relative.parts:
        current = current / part
        try:
            os.mkdir(current)
        except FileExistsError:
            if not current.is_dir():
                raise
    return current
