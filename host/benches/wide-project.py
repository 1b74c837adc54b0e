#!/usr/bin/env python3
"""Writes a project with many view types, for timing `trellis validate`.

    python3 host/benches/wide-project.py DIR [TYPES]        # default 100000

DIR gets `trellis.toml` and `plugins/concat.wasm` (copied from the built
plugins when they are there, so that validate checks every type's use of
it). The types come in packages of 100: per package, an external daily type
with a parameter and a default path, and 99 transformations of it or of the
type before, half of them with a custom path whose second component is a
parameter (`wide/${region}/p17/T42/...`), so that the overlap check meets
wildcards shared by many types, as a real project's custom layouts have
them. No two paths overlap: the project is valid.
"""

import os
import shutil
import sys

PER_PACKAGE = 100


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = sys.argv[1]
    types = int(sys.argv[2]) if len(sys.argv) == 3 else 100_000
    os.makedirs(os.path.join(out, "plugins"), exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "..", "target", "plugins", "wasm32-wasip2", "release", "concat.wasm")
    if os.path.exists(built):
        shutil.copy(built, os.path.join(out, "plugins", "concat.wasm"))
    lines = ['[project]', 'name = "wide"', '', '[plugins]', 'concat = "plugins/concat.wasm"', '']
    for index in range(types):
        package, position = divmod(index, PER_PACKAGE)
        name = f"wide.p{package}/T{position}"
        lines.append("[[view]]")
        lines.append(f'name = "{name}"')
        lines.append('time = { frequency = "1d", initial = "2015-01-01" }')
        if position == 0:
            lines.append('parameters = [{ name = "shop" }]')
        else:
            lines.append('parameters = [{ name = "shop" }, { name = "region" }]')
            lines.append('transformation = { plugin = "concat" }')
            if position % 2 == 0:
                lines.append(f'path = "wide/${{region}}/p{package}/T{position}/${{shop}}/${{YEAR}}/${{MONTH}}/${{DAY}}"')
            lines.append("")
            lines.append("[[view.dependency]]")
            lines.append(f'view = "wide.p{package}/T{position - 1}"')
        lines.append("")
    with open(os.path.join(out, "trellis.toml"), "w") as file:
        file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
