"""Guest glue for the listener world: the `Events` export class. It holds
the one listener instance between calls (a component instance is
single-threaded)."""

from __future__ import annotations

from wit_world.exports import events as wit

from ..config import Config
from ..errors import Failure
from ..listener import Event, Gap, Transition, ViewState
from . import Err, bind, crash, host_info

__all__ = ["Events"]

_plugin = None
_instance = None


def bind_plugin(module: str) -> None:
    """Binds the listener class `module` declared (at build time)."""
    global _plugin
    _plugin = bind(module, "listener")


def _event(event: wit.Event) -> Event:
    if isinstance(event, wit.Event_Gap):
        return Gap(event.value.first_sequence, event.value.last_sequence)
    t = event.value
    return Transition(
        sequence=t.sequence,
        view=t.view,
        previous=ViewState[t.previous.name],
        current=ViewState[t.current.name],
        actions=tuple(t.actions),
        time=t.time,
        run_id=t.run_id,
        error=t.error,
    )


def _error(failure: Failure) -> Err:
    variant = wit.ListenerError_Retryable if failure.retryable else wit.ListenerError_Fatal
    return Err(variant(failure.message))


class Events:
    """The `events` interface, over the bound plugin."""

    def describe(self):  # -> types.PluginInfo
        return host_info(_plugin.info)

    def start(self, config: list[tuple[str, str]]) -> None:
        global _instance
        try:
            _instance = _plugin.target(Config(config))
        except Failure as failure:
            raise _error(failure) from None
        except BaseException as error:
            crash(error)
            raise

    def on_event(self, event: wit.Event) -> None:
        if _instance is None:
            raise Err(wit.ListenerError_Fatal("on-event called before start"))
        try:
            _instance.on_event(_event(event))
        except Failure as failure:
            raise _error(failure) from None
        except BaseException as error:
            crash(error)
            raise
