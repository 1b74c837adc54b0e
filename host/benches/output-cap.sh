#!/usr/bin/env bash
#! Issue 12, item 6: hostile-disk-filler (1 MiB blocks into one file until
#! stopped) under `trellis plugins run --output-mib CAP`, on the root
#! filesystem and on tmpfs: how long until it is stopped and what it wrote
#! (apparent size); and the old binary, which has no cap, for 3 s.
#! Usage: OLD=trellis-old NEW=trellis-new PLUGINS=target/plugins/wasm32-wasip2/release host/benches/output-cap.sh
set -euo pipefail
export TRELLIS_CACHE_DIR=/tmp/trellis-output-cap-cache
filler=$PLUGINS/hostile_disk_filler.wasm
for base in /tmp /dev/shm; do
  out=$base/trellis-output-cap
  for cap in 16 256 1024; do
    for round in 1 2 3; do
      rm -rf "$out"
      start=$(date +%s.%N)
      "$NEW" plugins run "$filler" --output-mib "$cap" --output "$out" > /dev/null 2> "$out.err" || true
      end=$(date +%s.%N)
      printf "%-9s cap %5s MiB  round %s  stopped after %5.2f s  wrote %5s MiB  %s\n" "$base" "$cap" "$round" \
        "$(echo "$end - $start" | bc)" "$(du -s --apparent-size --block-size=1M "$out" | cut -f1)" "$(grep -o 'run failed ([a-z-]*)' "$out.err")"
    done
  done
  rm -rf "$out"
  start=$(date +%s.%N)
  "$OLD" plugins run "$filler" --deadline 3 --output "$out" > /dev/null 2> "$out.err" || true
  end=$(date +%s.%N)
  printf "%-9s old binary, --deadline 3: ended after %5.2f s, wrote %s MiB  %s\n" "$base" "$(echo "$end - $start" | bc)" \
    "$(du -s --apparent-size --block-size=1M "$out" | cut -f1)" "$(grep -o 'run failed ([a-z-]*)' "$out.err")"
  rm -rf "$out" "$out.err"
done
