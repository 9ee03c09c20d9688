#!/usr/bin/env bash
# End-to-end test of the docker-compose deployment (docker/docker-compose.yml).
#
# Stages (each timed; a summary is printed at the end, pass or fail):
#   1 binary      cargo build -p tandem-cli --bin tandem (debug: the build CI already makes;
#                 --release for a release build; --bin PATH to use a prebuilt binary)
#   2 base        docker/build-base-images.sh (skips images that exist)
#   3 image       docker build -t tandem:local docker/, then `tandem --version` inside it
#   4 config      `compose config` validation, then `tandem check-config` inside the supervisor,
#                 agent-0 and agent-1 containers with the environment compose gives them
#   5 up          compose up -d; every /readyz (supervisor and 4 agents) answers 200
#   6 fault       docker kill of one agent container, which is started again (Docker applies
#                 no restart policy after `docker kill`; the script plays the orchestrator);
#                 with --fault crash the container's process is SIGKILLed from the host
#                 instead and the restart policy brings it back
#   7 recovered   the supervisor's /status reports a higher `epoch` and every /readyz is 200
#   teardown      compose down -v, always (trap), unless --keep
# Stages 5-7 need `tandem agent` and `tandem supervisor`; when the binary lacks them the
# script stops after stage 4 and exits 77 (skipped), or 0 with --early-only.
#
# Usage: docker/test-compose.sh [--release | --bin PATH] [--early-only] [--fault kill|crash]
#                               [--kill-rank R] [--ready-timeout S] [--recover-timeout S]
#                               [--keep]
# Exit codes: 0 pass, 1 a stage failed (the message names it), 2 bad usage, 77 stages 5-7
# skipped because the binary has no agent/supervisor subcommands yet.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

PROFILE=debug
BIN=""
EARLY_ONLY=0
FAULT=kill
KILL_RANK=2
READY_TIMEOUT=120
RECOVER_TIMEOUT=90
KEEP=0
IMAGE="${TANDEM_IMAGE:-tandem:local}"
RANKS=4
SUPERVISOR_PORT=7490
HTTP_BASE_PORT=7500

while [ $# -gt 0 ]; do
    case "$1" in
        --release) PROFILE=release ;;
        --bin) BIN="${2:?--bin needs a path}"; shift ;;
        --early-only) EARLY_ONLY=1 ;;
        --fault) FAULT="${2:?--fault needs kill or crash}"; shift ;;
        --kill-rank) KILL_RANK="${2:?--kill-rank needs a rank}"; shift ;;
        --ready-timeout) READY_TIMEOUT="${2:?}"; shift ;;
        --recover-timeout) RECOVER_TIMEOUT="${2:?}"; shift ;;
        --keep) KEEP=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "test-compose: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$FAULT" in kill|crash) ;; *) echo "test-compose: --fault takes kill or crash" >&2; exit 2 ;; esac
case "$KILL_RANK" in [0-3]) ;; *) echo "test-compose: --kill-rank takes 0..3" >&2; exit 2 ;; esac

# --- reporting -------------------------------------------------------------------------------
T_START=$(date +%s)
STAGE=""
STAGE_T0=0
SUMMARY=()
log() { printf '[test-compose %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
stage() { stage_end; STAGE="$1"; STAGE_T0=$(date +%s); log "== stage $1"; }
stage_end() {
    if [ -n "$STAGE" ]; then
        SUMMARY+=("$(printf '%-10s %4ss  %s' "$STAGE" "$(( $(date +%s) - STAGE_T0 ))" "${1:-ok}")")
        STAGE=""
    fi
}
fail() { log "FAILED in stage ${STAGE:-?}: $*"; stage_end "FAILED: $*"; exit 1; }
print_summary() {
    local line
    log "summary (seconds per stage, total $(( $(date +%s) - T_START ))s):"
    for line in "${SUMMARY[@]+"${SUMMARY[@]}"}"; do printf '    %s\n' "$line" >&2; done
}

# --- compose ---------------------------------------------------------------------------------
if docker compose version >/dev/null 2>&1; then
    COMPOSE_BIN=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE_BIN=(docker-compose)
else
    echo "test-compose: neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
fi
PROJECT="tandem-test-$$"
compose() { "${COMPOSE_BIN[@]}" -p "$PROJECT" -f "$REPO/docker/docker-compose.yml" "$@"; }
compose_t() { # seconds, compose arguments: compose under a deadline
    local s="$1"; shift
    timeout "$s" "${COMPOSE_BIN[@]}" -p "$PROJECT" -f "$REPO/docker/docker-compose.yml" "$@"
}
export TANDEM_IMAGE="$IMAGE"
# A fresh secret for this run, a free host port for the status page: runs do not collide.
export TANDEM__GROUP__SECRET="${TANDEM__GROUP__SECRET:-$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')}"
export TANDEM_STATUS_PUBLISH="127.0.0.1:"
# A small disk tier keeps the test's preallocation small (64 blocks x 256 KiB per rank).
export TANDEM_DISK_BLOCKS="${TANDEM_DISK_BLOCKS:-64}"
# The replay service is not started here, but compose checks its trace mount path.
export TANDEM_TRACE_DIR="${TANDEM_TRACE_DIR:-$REPO/../shared/data/traces}"
UP=0
TMPD=$(mktemp -d /tmp/tandem-test-compose.XXXXXX)

teardown() {
    local rc=$?
    if [ "$UP" = 1 ]; then
        if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
            log "container states and last log lines, for the failure above:"
            compose ps >&2 || true
            compose logs --no-color --tail 40 >&2 || true
        fi
        if [ "$KEEP" = 1 ]; then
            log "--keep: project $PROJECT left running; stop it with:"
            log "  TANDEM__GROUP__SECRET=$TANDEM__GROUP__SECRET ${COMPOSE_BIN[*]} -p $PROJECT -f docker/docker-compose.yml down -v"
        else
            local t; t=$(date +%s)
            timeout 120 "${COMPOSE_BIN[@]}" -p "$PROJECT" -f "$REPO/docker/docker-compose.yml" \
                down -v --remove-orphans -t 10 >/dev/null 2>&1 \
                || log "warning: compose down failed; remove project $PROJECT by hand"
            SUMMARY+=("$(printf '%-10s %4ss  %s' teardown "$(( $(date +%s) - t ))" ok)")
        fi
    fi
    rm -rf "$TMPD"
    print_summary
    exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

json_field() { # $1: top-level field; JSON on stdin; prints the value or nothing
    if command -v jq >/dev/null 2>&1; then
        jq -r --arg f "$1" '.[$f] // empty' 2>/dev/null
    elif command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys
try: v = json.load(sys.stdin).get(sys.argv[1])
except Exception: v = None
print("" if v is None else v)' "$1"
    else
        sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\\([0-9][0-9]*\\).*/\\1/p" | head -n 1
    fi
}

# --- 1. binary -------------------------------------------------------------------------------
stage binary
if [ -z "$BIN" ]; then
    flags=(--locked -p tandem-cli --bin tandem)
    [ "$PROFILE" = release ] && flags+=(--release)
    timeout 1800 cargo build "${flags[@]}" || fail "cargo build ${flags[*]}"
    BIN="$REPO/target/$PROFILE/tandem"
fi
[ -x "$BIN" ] || fail "no executable at $BIN"
log "binary: $BIN ($(du -h "$BIN" | cut -f1))"

# --- 2. base images --------------------------------------------------------------------------
stage base
timeout 900 "$REPO/docker/build-base-images.sh" || fail "docker/build-base-images.sh"

# --- 3. runtime image ------------------------------------------------------------------------
stage image
cp "$BIN" "$REPO/docker/tandem.tmp.$$" && mv -f "$REPO/docker/tandem.tmp.$$" "$REPO/docker/tandem"
old_image=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
timeout 300 docker build -q -t "$IMAGE" "$REPO/docker" >/dev/null 2>"$TMPD/build.log" \
    || { cat "$TMPD/build.log" >&2; fail "docker build"; }
# A new binary leaves the previous image untagged: remove it unless something uses it.
[ -z "$old_image" ] || [ "$old_image" = "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ] \
    || docker rmi "$old_image" >/dev/null 2>&1 || true
version=$(timeout 60 docker run --rm "$IMAGE" --version) || fail "'tandem --version' in $IMAGE"
log "in the image: $version (user $(docker run --rm --entrypoint id "$IMAGE" -u))"
[ "$(docker run --rm --entrypoint id "$IMAGE" -u)" != 0 ] || fail "the image runs as root"

# --- 4. configuration ------------------------------------------------------------------------
stage config
UP=1  # `compose run` creates the project's network and volumes: remove them at the end
compose_t 60 config -q || fail "compose config rejected docker/docker-compose.yml"
compose_t 60 --profile replay config -q || fail "compose --profile replay config rejected docker/docker-compose.yml"
for svc in supervisor agent-0 agent-1; do
    out=$(compose_t 60 run --rm --no-deps -T --entrypoint tandem "$svc" \
            check-config /etc/tandem/tandem.toml 2>&1) \
        || { printf '%s\n' "$out" >&2; fail "tandem check-config in the $svc container"; }
    log "$svc: $(printf '%s\n' "$out" | grep -E '^(world_size|shard_bytes|host_tier_bytes)' | tr '\n' ' ')"
done

# Stages 5-7 need the long-running subcommands.
missing=()
for sub in agent supervisor; do
    docker run --rm "$IMAGE" "$sub" --help >/dev/null 2>&1 || missing+=("$sub")
done
if [ "$EARLY_ONLY" = 1 ] || [ ${#missing[@]} -gt 0 ]; then
    stage_end
    if [ "$EARLY_ONLY" = 1 ]; then
        log "--early-only: stages 5-7 not run"
        exit 0
    fi
    log "SKIPPED stages 5-7: this tandem binary has no '${missing[*]}' subcommand yet"
    exit 77
fi

# --- helpers for the running cluster ---------------------------------------------------------
cid_of() { # service -> container id (docker's labels: much faster than `compose ps`)
    docker ps -aq --filter "label=com.docker.compose.project=$PROJECT" \
        --filter "label=com.docker.compose.service=$1" | head -n 1
}
port_of() { # service -> HTTP port inside its container
    case "$1" in supervisor) echo "$SUPERVISOR_PORT" ;; agent-*) echo $(( HTTP_BASE_PORT + ${1#agent-} )) ;; esac
}
probe() { # service path [-b]: GET inside the service's container; status/reason on stderr
    local cid; cid=$(cid_of "$1")
    [ -n "$cid" ] || { echo "no container" >&2; return 3; }
    docker exec "$cid" tandem-probe ${3:-} -t 2 "127.0.0.1:$(port_of "$1")" "$2"
}
SERVICES=(supervisor)
for ((r = 0; r < RANKS; r++)); do SERVICES+=("agent-$r"); done
wait_all_ready() { # deadline_seconds; returns 0 when every /readyz is 200
    local deadline=$(( $(date +%s) + $1 )) svc pending reason
    declare -A last=()
    while :; do
        pending=()
        for svc in "${SERVICES[@]}"; do
            if reason=$(probe "$svc" /readyz 2>&1 >/dev/null); then :; else
                pending+=("$svc"); last[$svc]="$(printf '%s' "$reason" | tr '\n' ' ' | cut -c1-300)"
            fi
        done
        [ ${#pending[@]} -eq 0 ] && return 0
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "not ready after $1 s:"
            for svc in "${pending[@]}"; do log "  $svc: ${last[$svc]:-?}"; done
            return 1
        fi
        sleep 1
    done
}
supervisor_epoch() {
    local body
    body=$(probe supervisor /status -b 2>/dev/null) || return 1
    printf '%s' "$body" | json_field epoch
}

# --- 5. up -----------------------------------------------------------------------------------
stage up
compose_t 300 up -d --no-build >/dev/null 2>"$TMPD/up.log" \
    || { cat "$TMPD/up.log" >&2; fail "compose up -d"; }
wait_all_ready "$READY_TIMEOUT" || fail "the cluster did not become ready within ${READY_TIMEOUT}s"
EPOCH0=$(supervisor_epoch) || fail "GET /status from the supervisor"
[ -n "$EPOCH0" ] || fail "the supervisor's /status has no 'epoch' field"
log "all ${#SERVICES[@]} /readyz answer 200; epoch $EPOCH0; status page: http://$(compose port supervisor "$SUPERVISOR_PORT" 2>/dev/null)/"

# --- 6. fault --------------------------------------------------------------------------------
stage fault
victim="agent-$KILL_RANK"
vcid=$(cid_of "$victim")
[ -n "$vcid" ] || fail "no container for $victim"
if [ "$FAULT" = kill ]; then
    docker kill "$vcid" >/dev/null || fail "docker kill $victim"
    log "docker kill $victim: $(docker inspect -f '{{.State.Status}} exit={{.State.ExitCode}}' "$vcid")"
    docker start "$vcid" >/dev/null || fail "docker start $victim"
    log "$victim started again (Docker applies no restart policy after docker kill)"
else
    pid=$(docker inspect -f '{{.State.Pid}}' "$vcid")
    [ "${pid:-0}" -gt 0 ] || fail "no host pid for $victim"
    kill -KILL "$pid" || fail "kill -KILL $pid ($victim) from the host"
    log "SIGKILL to $victim (host pid $pid); waiting for the restart policy"
    deadline=$(( $(date +%s) + 30 ))
    until [ "$(docker inspect -f '{{.RestartCount}}' "$vcid")" -gt 0 ] \
            && [ "$(docker inspect -f '{{.State.Running}}' "$vcid")" = true ]; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "the restart policy did not restart $victim within 30s"
        sleep 0.5
    done
fi

# --- 7. recovered ----------------------------------------------------------------------------
stage recovered
deadline=$(( $(date +%s) + RECOVER_TIMEOUT ))
epoch=""
while :; do
    epoch=$(supervisor_epoch || true)
    if [ -n "$epoch" ] && [ "$epoch" -gt "$EPOCH0" ] 2>/dev/null; then break; fi
    [ "$(date +%s)" -lt "$deadline" ] || fail "the epoch stayed at ${epoch:-?} (was $EPOCH0) for ${RECOVER_TIMEOUT}s after the fault"
    sleep 0.5
done
log "epoch $EPOCH0 -> $epoch after the fault"
left=$(( deadline - $(date +%s) )); [ $left -gt 5 ] || left=5
wait_all_ready "$left" || fail "the group did not become ready again at epoch $epoch"
epoch_after=$(supervisor_epoch || true)
log "all ${#SERVICES[@]} /readyz answer 200 again; epoch ${epoch_after:-?}"
stage_end
log "PASS"
