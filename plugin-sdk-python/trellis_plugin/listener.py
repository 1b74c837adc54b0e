"""The listener world: a scheduling listener sees every scheduling event.

Declare one with the `listener` decorator on a class whose constructor
takes the listener's `Config` and whose ``on_event`` takes an `Event`::

    @listener("count-listener", "1.0.0")
    class Count:
        def __init__(self, config: Config) -> None:
            self.seen = 0

        def on_event(self, event: Event) -> None:
            self.seen += 1

Unlike a transformation, a listener instance lives across events: the
host constructs it once per fresh instance, then calls ``on_event`` for
each event. Raising `Fatal` drops the event and restarts the listener;
`Retryable` restarts it and replays the latest event of every view.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, Union

from ._registry import declaration
from .config import Config, ConfigKey

__all__ = ["ViewState", "Transition", "Gap", "Event", "Listener", "listener"]


class ViewState(enum.Enum):
    """A view's scheduling state; the value is its name as trellis prints it."""

    RECEIVE = "receive"
    INVALIDATED = "invalidated"
    NO_DATA = "no-data"
    WAITING = "waiting"
    TRANSFORMING = "transforming"
    MATERIALIZED = "materialized"
    RETRYING = "retrying"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Transition:
    """A view changed state."""

    sequence: int
    """Position in the host's event log; strictly increasing."""
    view: str
    previous: ViewState
    current: ViewState
    actions: Sequence[str] = ()
    """What the scheduler decided to do, e.g. ``transform``, ``notify-dependents``."""
    time: int = 0
    """When (ms since the epoch)."""
    run_id: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Gap:
    """Events dropped by log retention before this listener saw them."""

    first_sequence: int
    last_sequence: int


Event = Union[Transition, Gap]
"""What ``on_event`` receives: a `Transition` or a `Gap`."""


class Listener(Protocol):
    """What the `listener` decorator expects of a class."""

    def __init__(self, config: Config) -> None: ...

    def on_event(self, event: Event) -> None: ...


L = TypeVar("L", bound=type)


def listener(
    name: str,
    version: str,
    *,
    description: str = "",
    config: Iterable[ConfigKey] = (),
) -> Callable[[L], L]:
    """Declares the decorated class as the module's scheduling listener.
    The class is returned unchanged, so tests can construct it directly."""
    register_listener = declaration("listener", name, version, description, config)

    def declare(cls: L) -> L:
        if not callable(getattr(cls, "on_event", None)):
            raise TypeError(f"listener class {cls.__name__} has no on_event(self, event) method")
        return register_listener(cls)

    return declare
