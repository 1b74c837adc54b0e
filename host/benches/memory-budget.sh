#!/usr/bin/env bash
#! Issue 12, item 7: peak RSS of `trellis materialize` running four
#! transformations at once (concurrency 4) of hostile-memory-hog, each
#! touching 450 MiB of its 512 MiB cap and holding it for 2 s: the old
#! binary, the new one with `memory_budget_mib = 1100` (room for two caps),
#! and the new one with the default budget.
#! Usage: OLD=trellis-old NEW=trellis-new PLUGINS=target/plugins/wasm32-wasip2/release host/benches/memory-budget.sh [ROUNDS] [DIR]
set -euo pipefail
rounds=${1:-3}
dir=${2:-/tmp/trellis-memory-budget}
export TRELLIS_CACHE_DIR=$dir/cache
project() { # DIR BUDGET-LINE
  rm -rf "$1"; mkdir -p "$1/plugins"
  cp "$PLUGINS/hostile_memory_hog.wasm" "$1/plugins/"
  for d in 01 02 03 04; do mkdir -p "$1/data/raw/2015/01/$d"; touch "$1/data/raw/2015/01/$d/_SUCCESS"; done
  cat > "$1/trellis.toml" <<TOML
[defaults]
concurrency = 4
$2

[plugins]
hog = "plugins/hostile_memory_hog.wasm"

[[view]]
name = "m.raw/In"
time = { frequency = "1d", initial = "2015-01-01" }
path = "raw/\${YEAR}/\${MONTH}/\${DAY}"

[[view]]
name = "m.mart/Out"
time = { frequency = "1d", initial = "2015-01-01" }
transformation = { plugin = "hog", config = { mib = "450", hold_ms = "2000" } }

[[view.dependency]]
view = "m.raw/In"
TOML
}
peak() { # BINARY PROJECT: peak RSS (wait4), wall time, exit code
  python3 - "$@" <<'PY'
import os, sys, time
binary, project = sys.argv[1], sys.argv[2]
start = time.time()
pid = os.fork()
if pid == 0:
    null = os.open("/dev/null", os.O_WRONLY); os.dup2(null, 1); os.dup2(null, 2)
    os.execv(binary, [binary, "materialize", "-p", project, "-v", "m.mart/Out/rymd(20150101-20150104)"])
_, status, usage = os.wait4(pid, 0)
print(f"{usage.ru_maxrss // 1024} MiB peak RSS, {time.time() - start:.1f} s, exit {os.waitstatus_to_exitcode(status)}")
PY
}
for round in $(seq "$rounds"); do
  project "$dir/old" ""
  echo "round $round old: $(peak "$OLD" "$dir/old")"
  project "$dir/new" "memory_budget_mib = 1100"
  echo "round $round new, budget 1100 MiB: $(peak "$NEW" "$dir/new")"
  project "$dir/default" ""
  echo "round $round new, default budget: $(peak "$NEW" "$dir/default")"
done
