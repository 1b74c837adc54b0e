"""Guest glue for the transformation world: the `Transform` export class."""

from __future__ import annotations

from wit_world.exports import transform as wit

from ..config import Config
from ..errors import Failure
from ..transformation import Data, Input, Request, normalize_outcome
from . import Err, bind, crash, host_info

__all__ = ["Transform"]

_plugin = None


def bind_plugin(module: str) -> None:
    """Binds the transformation `module` declared (at build time)."""
    global _plugin
    _plugin = bind(module, "transformation")


def _request(r: wit.Request) -> Request:
    return Request(
        view=r.view,
        output=r.output,
        inputs=[Input(i.name, i.path, i.view, i.timestamp, i.changed) for i in r.inputs],
        config=Config(r.config),
        parameters=dict(r.parameters),
        nominal_time=r.nominal_time,
        actual_time=r.actual_time,
    )


class Transform:
    """The `transform` interface, over the bound plugin."""

    def describe(self):  # -> types.PluginInfo
        return host_info(_plugin.info)

    def run(self, request: wit.Request) -> wit.Outcome:
        try:
            outcome = normalize_outcome(_plugin.target(_request(request)))
        except Failure as failure:
            variant = wit.Failure_Retryable if failure.retryable else wit.Failure_Fatal
            raise Err(variant(failure.message)) from None
        except BaseException as error:
            crash(error)
            raise
        if isinstance(outcome, Data):
            return wit.Outcome_Data(list(outcome.counters))
        return wit.Outcome_NoData()
