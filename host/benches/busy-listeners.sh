#!/usr/bin/env bash
#! Issue 12, item 5: `trellis demo` with two CPU-bound processes beside it,
#! an old and a new binary in turn; for each round and binary: the demo's
#! wall time, the stats listener's restarts, events behind and delivered at
#! the end (from `trellis listeners`), and what the demo said about it.
#! Usage: OLD=trellis-old NEW=trellis-new host/benches/busy-listeners.sh [ROUNDS] [DIR]
#! (the demo writes to DIR/demo-*, default /tmp/trellis-busy-listeners,
#! on the root filesystem, where the stats listener's fsyncs cost what they do).
set -euo pipefail
rounds=${1:-3}
dir=${2:-/tmp/trellis-busy-listeners}
mkdir -p "$dir"
export TRELLIS_CACHE_DIR=$dir/cache
for v in OLD NEW; do "${!v}" demo "$dir/warm-$v" > /dev/null 2>&1; done   # compile cache filled
sh -c 'while :; do :; done' & hog1=$!
sh -c 'while :; do :; done' & hog2=$!
trap 'kill $hog1 $hog2' EXIT
for round in $(seq "$rounds"); do
  for v in OLD NEW; do
    demo=$dir/demo-$v-$round
    rm -rf "$demo"
    start=$(date +%s.%N)
    "${!v}" demo "$demo" > "$demo.out" 2>&1
    end=$(date +%s.%N)
    stats=$("${!v}" listeners --json -p "$demo" | python3 -c 'import json,sys; s=[l for l in json.load(sys.stdin) if l["name"]=="stats"][0]; print("restarts", s["restarts"], "behind", s["behind"], "delivered", s["delivered"])')
    said=$(grep -E "stats listener|listener stats" "$demo.out" | cut -c1-70 | tr '\n' '|')
    printf "round %s %s %5.1f s  %s  said: %s\n" "$round" "$v" "$(echo "$end - $start" | bc)" "$stats" "$said"
  done
done
