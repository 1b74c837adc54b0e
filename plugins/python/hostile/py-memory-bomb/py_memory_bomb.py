"""Hostile fixture: allocates and touches memory until something stops it
(the Python twin of `hostile-memory-bomb`). The host's memory cap must."""

from trellis_plugin import Data, Request, transformation


@transformation("hostile-py-memory-bomb", "0.0.0")
def run(request: Request) -> Data:
    """Hoards 8 MiB blocks, each written through, without bound."""
    hoard: list[bytearray] = []
    while True:
        hoard.append(bytearray(b"\xa5") * (8 << 20))
