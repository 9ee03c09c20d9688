#!/usr/bin/env bash
# Runs the deterministic simulator over a range of seeds in release mode, in parallel chunks,
# and prints each chunk's figures (seeds per second, events and faults per seed) and any
# failing seed with the command that replays it.
#
#   scripts/sim.sh [FIRST_SEED] [SEEDS] [JOBS]
#
# Defaults: seeds 0..1,000,000 in as many chunks as there are CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."

first=${1:-0}
count=${2:-1000000}
jobs=${3:-$(nproc)}

cargo build -q --release -p tandem-sim
bin=target/release/tandem-sim

chunk=$(( (count + jobs - 1) / jobs ))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
began=$(date +%s.%N)
pids=()
for ((j = 0; j < jobs; j++)); do
  start=$(( first + j * chunk ))
  n=$(( chunk < first + count - start ? chunk : first + count - start ))
  (( n > 0 )) || break
  "$bin" --start "$start" --seeds "$n" >"$dir/$j.out" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p" || status=1
done
ended=$(date +%s.%N)
for f in "$dir"/*.out; do
  echo "== chunk $(basename "$f" .out)"
  cat "$f"
done
failed=$(awk '/^seeds failed/ { n += $3 } END { print n + 0 }' "$dir"/*.out)
awk -v n="$count" -v t="$(awk "BEGIN { print $ended - $began }")" -v j="$jobs" -v f="$failed" -v s="$first" \
  'BEGIN { printf "== total: %d seeds from %d, %d failed, in %.1f s on %d jobs: %.0f seeds per second\n", n, s, f, t, j, n / t }'

exit $status
