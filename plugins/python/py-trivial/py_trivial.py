"""`py-trivial`: a transformation that does nothing and reports data, the
Python twin of `plugins/trivial`. It measures the cost of a call itself;
with `gate`, it holds a transformation open until a file of that name
exists in some input's directory."""

import os

from trellis_plugin import Data, Request, optional, transformation


@transformation(
    "py-trivial",
    "0.0.0",
    description="does nothing, reports data",
    config=[
        optional("label", "ignored; lets a test change a view type's configuration"),
        optional("gate", "a file name: wait until a file of that name exists in some input's directory"),
    ],
)
def run(request: Request) -> Data:
    """Returns data with no counters, after the gate file appears if one is configured."""
    gate = request.config.get("gate")
    if gate is not None:
        # No sleep in the sandbox without threads or a clock worth the name:
        # poll, as the Rust twin does (its sleep is a host-side wait).
        while not any(os.path.exists(os.path.join(i.path, gate)) for i in request.inputs):
            pass
    return Data()
