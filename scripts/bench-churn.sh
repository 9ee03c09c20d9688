#!/usr/bin/env bash
# Goodput under churn: the same `tandem replay` (a Mooncake trace at full rate, verifying every
# byte) without faults and with a SIGKILL of a random agent every 10 s, 3 s and 1.5 s
# (`--chaos kill-agent:S`, the supervisor relaunching the agents, no restart limit), one after
# the other in this run. Prints one row per run: requests and blocks done per second of the
# replay, and the ratio of each to the run without faults measured here, with the kills, the
# group's restarts and epochs, the longest recovery and the outcome counts that must be 0.
#
# Usage: scripts/bench-churn.sh [--requests N] [--ranks R] [--intervals "10 3 1.5"] [--timeout S] [--out DIR]
#   --requests N   requests per run (default 3000)
#   --ranks R      ranks of the group (default 2)
#   --intervals    kill intervals in seconds (default "10 3 1.5"); a run without faults first
#   --timeout S    stop a run after S seconds (SIGTERM; its row says so; default: none)
#   --out DIR      where each run's JSON summary and stderr go (default target/bench-churn/<UTC>)
# TANDEM_BIN names the binary (default: target/debug/tandem, built with cargo build -p tandem-cli).
# Needs redis-server (each run starts its own) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

requests=3000
ranks=2
intervals="10 3 1.5"
out=""
limit=""
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests="$2"; shift ;;
    --ranks) ranks="$2"; shift ;;
    --intervals) intervals="$2"; shift ;;
    --out) out="$2"; shift ;;
    --timeout) limit="$2"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "${TANDEM_BIN:-}" ]; then
  cargo build --locked -p tandem-cli --bin tandem
  TANDEM_BIN="${CARGO_TARGET_DIR:-target}/debug/tandem"
fi
out="${out:-target/bench-churn/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
trace=data/traces/mooncake_conversation_trace.jsonl.gz

run() { # NAME [CHAOS]
  local name="$1" chaos=()
  [ $# -gt 1 ] && chaos=(--chaos "kill-agent:$2")
  echo "run $name: $requests requests, $ranks ranks ${chaos[*]:-}" >&2
  # Chaos restarts the group on purpose: the replay lifts the restart limit itself then.
  local stop=()
  [ -n "$limit" ] && stop=(timeout "$limit")
  if ! "${stop[@]}" "$TANDEM_BIN" replay --json --trace "$trace" --limit "$requests" --ranks "$ranks" \
      "${chaos[@]}" > "$out/$name.json" 2> "$out/$name.stderr"; then
    echo "run $name failed (exit $?); see $out/$name.stderr" >&2
  fi
}

run none
for s in $intervals; do
  run "kill-$s" "$s"
done

python3 - "$out" none $(for s in $intervals; do echo "kill-$s"; done) <<'EOF'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
rows = []
for n in names:
    try:
        s = json.load(open(f"{out}/{n}.json"))
    except Exception as e:
        rows.append((n, None)); continue
    rows.append((n, s))
base = rows[0][1]
def rate(s, key):
    return s[key] / s["wall_seconds"] if s and s["wall_seconds"] else 0.0
b_req = rate(base, "requests") if base else 0.0
blocks = lambda s: (s["blocks_stored"] + s["blocks_loaded"]) / s["wall_seconds"] if s and s["wall_seconds"] else 0.0
b_blk = blocks(base) if base else 0.0
print("| chaos | requests | seconds | requests/s | vs none | blocks moved/s | vs none | kills | restarts | epochs | longest recovery ms | aborted (loads+stores) | lost/dup/verify/mismatch |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for n, s in rows:
    label = "none" if n == "none" else "kill every " + n.split("-", 1)[1] + " s"
    if s is None:
        print(f"| {label} | did not finish (timeout or failure, see {out}/{n}.stderr) |||||||||||")
        continue
    r, k = rate(s, "requests"), blocks(s)
    bad = "/".join(str(s[x]) for x in ("lost_completions", "duplicate_completions", "verify_failures", "mismatches"))
    rec = s.get("recovery_ms_max")
    print(f"| {label} | {s['requests']} | {s['wall_seconds']:.1f} | {r:.1f} | {r / b_req if b_req else 0:.2f} | {k:.0f} | {k / b_blk if b_blk else 0:.2f} | {s.get('agents_killed', 0)} | {s.get('supervisor_restarts')} | {s['epochs']} | {'-' if rec is None else f'{rec:.0f}'} | {s['loads_failed'] + s['stores_failed']} | {bad} |")
print(f"\n(summaries in {out})")
EOF
