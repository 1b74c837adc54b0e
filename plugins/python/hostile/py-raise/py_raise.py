"""Hostile fixture: raises an uncaught `ValueError` with a known message
from a nested function (the Python twin of `hostile-panic`), so that the
traceback the host reports shows two frames of this file."""

from trellis_plugin import Data, Request, transformation


def materialize(view: str) -> None:
    """Fails, as a bug would."""
    raise ValueError(f"deliberate exception while materializing {view}")


@transformation("hostile-py-raise", "0.0.0")
def run(request: Request) -> Data:
    """Calls `materialize`, which raises."""
    materialize(request.view)
    return Data()
