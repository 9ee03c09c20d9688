#!/usr/bin/env bash
# The full fault and bad-input suite of docs/RELIABILITY.md: the same tests CI runs
# (tests/faults.rs, tests/redis_faults.rs, tests/bad_input.rs, tests/access.rs, tests/churn.rs,
# tests/window_stall.rs, tests/layout_restart.rs, tests/actor_panic.rs, tests/burst.rs, tests/disk_faults.rs,
# the fuzzers of tandem-proto and tandem-client), with more rounds, more requests and more fuzz cases, each test run on its own
# and repeated, with its pass/fail, its wall time and every FIGURE line it printed collected in
# one directory.
#
# Usage: scripts/fault-suite.sh [--quick] [--only REGEX] [--out DIR]
#   --quick        CI sizes (one round per test, one repetition): a smoke run of the script.
#   --only REGEX   run only the tests whose name matches (grep -E).
#   --out DIR      where results go (default target/fault-suite/<UTC time>).
# Sizes (environment, defaults for the full suite):
#   REPEAT=3                       runs of each process-level test
#   TANDEM_FAULT_ROUNDS=5          faults injected per run of a fault test
#   TANDEM_FAULT_REQUESTS=2000     requests per replay
#   TANDEM_BAD_INPUT_ROUNDS=500    random garbage connections per port
#   TANDEM_FUZZ_CASES=50000        cases per fuzz property
#   TANDEM_FAULT_FREEZE_MS=30000   how long the frozen disk tier stays frozen (5000 with --quick)
#   TANDEM_FAULT_SEED              fixes the random fault moments (printed by each test)
# Needs: redis-server, iproute2 (ip netns), mount (tmpfs); root for the partition and the full
# disk tests, which skip with a message otherwise. Exit status: 0 when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.."

quick=0
only=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$quick" = 1 ]; then
  : "${REPEAT:=1}" "${TANDEM_FAULT_ROUNDS:=1}" "${TANDEM_FAULT_REQUESTS:=600}" "${TANDEM_BAD_INPUT_ROUNDS:=12}" "${TANDEM_FUZZ_CASES:=2000}" "${TANDEM_FAULT_FREEZE_MS:=5000}"
else
  : "${REPEAT:=3}" "${TANDEM_FAULT_ROUNDS:=5}" "${TANDEM_FAULT_REQUESTS:=2000}" "${TANDEM_BAD_INPUT_ROUNDS:=500}" "${TANDEM_FUZZ_CASES:=50000}" "${TANDEM_FAULT_FREEZE_MS:=30000}"
fi
export TANDEM_FAULT_ROUNDS TANDEM_FAULT_REQUESTS TANDEM_BAD_INPUT_ROUNDS TANDEM_FUZZ_CASES TANDEM_FAULT_FREEZE_MS
[ -n "${TANDEM_FAULT_SEED:-}" ] && export TANDEM_FAULT_SEED

out="${out:-target/fault-suite/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
figures="$out/figures.txt"
results="$out/results.tsv"
: > "$figures"
printf 'test\trun\tresult\tseconds\tlog\n' > "$results"

for tool in redis-server ip mount; do
  command -v "$tool" >/dev/null 2>&1 || echo "warning: $tool is missing; the tests that need it fail or skip" >&2
done

echo "fault suite: REPEAT=$REPEAT TANDEM_FAULT_FREEZE_MS=$TANDEM_FAULT_FREEZE_MS TANDEM_FAULT_ROUNDS=$TANDEM_FAULT_ROUNDS TANDEM_FAULT_REQUESTS=$TANDEM_FAULT_REQUESTS TANDEM_BAD_INPUT_ROUNDS=$TANDEM_BAD_INPUT_ROUNDS TANDEM_FUZZ_CASES=$TANDEM_FUZZ_CASES -> $out"
cargo build --locked -p tandem-cli --bin tandem || exit 1
cargo test --locked -p tandem-tests --no-run -q 2>/dev/null || cargo test --locked -p tandem-tests --no-run || exit 1
cargo test --locked -p tandem-proto -p tandem-client --no-run -q 2>/dev/null || true

failed=0

# run NAME REPEATS CARGO_ARGS... : run one test REPEATS times, record each run.
run() {
  local name="$1" repeats="$2"
  shift 2
  if [ -n "$only" ] && ! grep -Eq -- "$only" <<<"$name"; then
    return
  fi
  local i
  for i in $(seq 1 "$repeats"); do
    local log="$out/${name//[^A-Za-z0-9_]/_}.$i.log"
    local start end secs result
    start=$(date +%s.%N)
    if cargo test --locked "$@" -- --exact --nocapture --test-threads=1 >"$log" 2>&1; then
      result=pass
    else
      result=FAIL
      failed=$((failed + 1))
    fi
    grep -q '^SKIPPED' "$log" && result=skipped
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    printf '%s\t%d\t%s\t%s\t%s\n' "$name" "$i" "$result" "$secs" "$log" >> "$results"
    grep -h '^FIGURE ' "$log" | sed "s|^|$name run=$i |" >> "$figures"
    grep -h -E '^(FIGURE|SKIPPED|largest single allocation|[0-9]+-byte truncated)' "$log" | sed 's/^/    /' | cut -c1-400
    printf '%-72s run %d: %s (%ss)\n' "$name" "$i" "$result" "$secs"
  done
}

# Fuzzing (one run each: the case count is the size).
for t in arbitrary_bytes mutated_valid_messages valid_messages_and_their_prefixes streams_in_arbitrary_chunks \
         huge_claims_are_refused_from_the_header inner_lengths_beyond_the_payload_are_malformed_and_bounded amplification_figure; do
  run "fuzz_decode::$t" 1 -p tandem-proto --test fuzz_decode "$t"
done
for t in arbitrary_bytes mutated_requests mutated_replies valid_messages_and_their_prefixes streams_in_small_reads \
         payload_decoder length_limit_boundary truncated_message_at_the_limit_figure; do
  run "fuzz_wire::$t" 1 -p tandem-client --test fuzz_wire "$t"
done

# Bad input and access control against live processes.
for t in engine_socket_garbage_leaves_the_agent_serving idle_connections_claiming_the_largest_message_leave_the_group_serving \
         peer_port_garbage_leaves_the_group_serving malformed_http_leaves_agent_and_supervisor_serving \
         malformed_trace_lines_are_reported_by_line_number bad_configuration_exits_78_naming_the_key_and_the_origin; do
  run "bad_input::$t" "$REPEAT" -p tandem-tests --test bad_input "$t"
done
for t in peers_are_admitted_only_with_the_group_secret every_port_binds_loopback_unless_configured_otherwise \
         redis_credentials_never_appear_in_logs_status_or_metrics; do
  run "access::$t" "$REPEAT" -p tandem-tests --test access "$t"
done

# Faults.
for t in sigstop_past_the_heartbeat_timeout_fences_the_woken_rank sigstop_agents_during_a_replay \
         sigkill_agents_during_a_replay sigkill_the_supervisor_during_a_replay sigkill_redis_during_a_replay \
         engine_connections_cut_during_a_replay an_engine_that_dies_mid_store_moves_the_group_to_a_new_epoch \
         partition_one_rank_then_heal a_disk_tier_on_a_full_file_system redis_unreachable_for_ten_seconds_during_a_replay; do
  run "faults::$t" "$REPEAT" -p tandem-tests --test faults "$t"
done

# Redis misbehaving while the group blocks on it (tests/redis_faults.rs).
for t in client_kill_of_every_client_during_a_replay completion_stream_deleted_during_a_replay \
         redis_stopped_five_seconds_then_shut_down_five_seconds_during_a_replay; do
  run "redis_faults::$t" "$REPEAT" -p tandem-tests --test redis_faults "$t"
done

# Churn and stalls.
for t in per_epoch_redis_keys_stay_bounded_over_many_epochs kills_every_one_and_a_half_seconds_leave_the_group_ready_between_kills; do
  run "churn::$t" "$REPEAT" -p tandem-tests --test churn "$t"
done
run "window_stall::a_follower_that_stops_acknowledging_makes_the_stall_visible_naming_its_rank" "$REPEAT" \
  -p tandem-tests --test window_stall a_follower_that_stops_acknowledging_makes_the_stall_visible_naming_its_rank

# Faults inside a rank: a changed model layout, a panic in an actor (needs the fault-hooks
# copy of the binary that scripts/test.sh builds; skipped without it), a burst of tasks.
run "layout_restart" "$REPEAT" -p tandem-tests --test layout_restart
run "actor_panic" "$REPEAT" -p tandem-tests --test actor_panic
run "burst::five_thousand_stores_in_one_step_all_get_one_outcome" "$REPEAT" \
  -p tandem-tests --test burst five_thousand_stores_in_one_step_all_get_one_outcome

# Disk faults inside a rank (the fault-hooks copy for the write error and the freeze; the
# group SIGKILL needs only the plain binary).
for t in a_disk_write_failing_halfway_through_a_store_fails_it_on_every_rank \
         a_group_sigkilled_right_after_a_disk_store_finished_loads_it_after_the_restart \
         a_frozen_disk_tier_fails_its_tasks_by_the_deadline_and_work_resumes_after_the_thaw \
         a_disk_tier_frozen_during_a_replay_loses_no_outcome; do
  run "disk_faults::$t" "$REPEAT" -p tandem-tests --test disk_faults "$t"
done

echo
echo "results: $results"
echo "figures: $figures"
awk -F'\t' 'NR > 1 { n[$1]++; r[$1, $3]++; s[$1] += $4 } END { for (t in n) printf "  %-80s runs %d  pass %d  fail %d  skipped %d  %.0f s\n", t, n[t], r[t, "pass"], r[t, "FAIL"], r[t, "skipped"], s[t] }' "$results" | sort
if [ "$failed" -gt 0 ]; then
  echo "$failed run(s) failed; their logs are listed in $results"
  exit 1
fi
echo "every run passed"
