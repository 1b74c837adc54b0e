"""`py-jsonl-listener`: appends every scheduling event as one JSON line to a
file in the listener's own state directory. The Python twin of the Rust
`jsonl-listener`: same configuration and the same lines (keys sorted, no
spaces), so a project can swap one for the other.

Configuration: `file`, the file's guest path, default
`/state/events.jsonl` (`/state` is the directory trellis grants a listener).
A failed write is retryable: trellis restarts the listener and replays the
latest event of every view.
"""

from __future__ import annotations

import json

from trellis_plugin import Config, Event, Fatal, Gap, Retryable, listener, optional

DEFAULT_FILE = "/state/events.jsonl"


def event_line(event: Event) -> bytes:
    """The JSON line for `event`, newline included, as `jsonl-listener` writes it."""
    if isinstance(event, Gap):
        value: dict = {"gap": {"first_sequence": event.first_sequence, "last_sequence": event.last_sequence}}
    else:
        value = {
            "sequence": event.sequence,
            "view": event.view,
            "previous": event.previous.value,
            "current": event.current.value,
            "actions": list(event.actions),
            "time": event.time,
            "run_id": event.run_id,
            "error": event.error,
        }
    return (json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


@listener(
    "py-jsonl-listener",
    "1.0.0",
    description="appends every scheduling event as a JSON line to a file",
    config=[optional("file", "guest path of the file (default /state/events.jsonl)")],
)
class JsonlListener:
    """Holds the file open, unbuffered, for appending."""

    def __init__(self, config: Config) -> None:
        self.path = config.get("file", DEFAULT_FILE)
        try:
            self.file = open(self.path, "ab+", buffering=0)
        except OSError as error:
            raise Fatal(f"cannot open {self.path}: {error}") from error
        try:
            self._terminate_last_line()
        except OSError as error:
            raise Fatal(f"cannot repair {self.path}: {error}") from error

    def _terminate_last_line(self) -> None:
        # If an earlier instance died mid-line, end that line, so that the
        # next event starts a line of its own.
        length = self.file.seek(0, 2)
        if length == 0:
            return
        self.file.seek(length - 1)
        if self.file.read(1) != b"\n":
            self._write(b"\n")

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.file.write(view):]

    def on_event(self, event: Event) -> None:
        """Appends the event's line with one write, so that a failure cannot
        leave half a line for the next event to continue."""
        try:
            self._write(event_line(event))
        except OSError as error:
            raise Retryable(f"cannot append to {self.path}: {error}") from error
