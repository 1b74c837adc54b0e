"""Hostile fixture: a transformation that never returns (the Python twin of
`hostile-spin`). The host's deadline must stop it."""

from trellis_plugin import Data, Request, transformation


@transformation("hostile-py-spin", "0.0.0")
def run(request: Request) -> Data:
    """Loops forever."""
    n = 0
    while True:
        n += 1
