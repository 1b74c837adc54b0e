#!/usr/bin/env bash
#! The API under load: `GET /views?overview=true` and one page of
#! `GET /views`, 64 concurrent clients for 30 s each (wrk, from Debian's
#! packages), with the bench lattice instantiated and a run transforming
#! throughout. Usage: host/benches/api-load.sh [SHOPS] [DIR]
#! (135 shops x 365 days = 99,821 views; DIR defaults to /dev/shm/trellis-api-load).
#! With UI=1, the web UI's fragments instead: the overview, a page of 100
#! views, and a view's page with its graph (a Monthly view: 30 days
#! upstream, capped at 20 drawn, and MonthlyTotal downstream).
set -euo pipefail
shops=${1:-135}
dir=${2:-/dev/shm/trellis-api-load}
trellis=${TRELLIS:-target/release/trellis}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 2; }

rm -rf "$dir"
# Writes the project and materializes it once (cold, unchanged, one input).
"$trellis" bench --shops "$shops" --days 365 --dir "$dir" >&2
pattern='bench.mart/MonthlyTotal/rym(201501-201512)'

"$trellis" serve -p "$dir" --bind 127.0.0.1:0 > "$dir/serve.out" 2> "$dir/serve.log" &
server=$!
trap 'kill $server 2>/dev/null; kill $churn 2>/dev/null; wait' EXIT
until grep -q listening "$dir/serve.out" 2>/dev/null; do sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$dir/serve.out")
echo "instantiated: $(curl -s "$url/views/$pattern?overview=true")"
echo "all views: $(curl -s "$url/views?overview=true")"

# Keep a run transforming: invalidate everything, rematerialize, repeat.
(
  while true; do
    curl -s -XPOST "$url/invalidate/$pattern?dependencies=true" > /dev/null
    run=$(curl -s -XPOST "$url/materialize/$pattern" | sed 's/.*"run":"\([^"]*\)".*/\1/')
    until curl -s "$url/runs/$run" | grep -q '"status":"finished"'; do sleep 0.5; done
  done
) &
churn=$!
# Until transformations are running.
until curl -s "$url/metrics" | grep -q '^trellis_transformations_running [1-9]'; do sleep 0.2; done

transformed() { curl -s "$url/metrics" | sed -n 's/^trellis_transformations_total{outcome="succeeded"} //p'; }
targets=("views?overview=true" "views?limit=100&cursor=50000")
if [ "${UI:-}" = 1 ]; then
  monthly=$(curl -s "$url/views?filter=%5Ebench.mart/Monthly/&limit=1" | sed 's/.*"view":"\([^"]*\)".*/\1/')
  targets=("ui/overview" "ui/views?cursor=50000" "ui/view/$monthly")
  for asset in "" ui/app.js ui/style.css ui/overview; do
    echo "page weight: /$asset $(curl -s "$url/$asset" | wc -c) bytes"
  done
fi
# TARGETS="listeners transformations" measures those paths instead.
[ -n "${TARGETS:-}" ] && read -ra targets <<< "$TARGETS"
seconds=${SECONDS_EACH:-30}
for target in "${targets[@]}"; do
  before=$(transformed)
  echo "== GET /$target"
  wrk -t2 -c64 -d"${seconds}s" --latency "$url/$target"
  after=$(transformed)
  echo "transformations during the load: $((after - before)) ($(( (after - before) / seconds ))/s)"
  echo "health: $(curl -s "$url/health")"
done
