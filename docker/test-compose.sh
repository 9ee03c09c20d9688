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
#   5 up          compose up -d (with the `monitoring` profile: Prometheus and Alertmanager
#                 too); every /readyz (supervisor and 4 agents) answers 200, all in the
#                 supervisor's epoch; no container has been restarted (a crash loop fails)
#   5b targets    (monitoring) Prometheus' HTTP API: all 5 Tandem scrape targets up, the
#                 rules loaded, Alertmanager ready
#   6 fault       docker kill of one agent container, which is started again (Docker applies
#                 no restart policy after `docker kill`; the script plays the orchestrator);
#                 with --fault crash the container's process is SIGKILLed from the host
#                 instead and the restart policy brings it back
#   6b alert      (monitoring, --fault kill) the agent stays down until Prometheus reports
#                 TandemAgentDown for it pending, then firing, and Alertmanager holds it;
#                 then it is started again
#   7 recovered   the supervisor's /status reports a higher `epoch` and state "healthy", and
#                 every /readyz is 200 in that epoch
#   7b resolved   (monitoring) TandemAgentDown is gone from Prometheus' alerts and every
#                 target is up again
#   8 replay      only with --replay: the replay demo service (`tandem replay` inside one
#                 container, on its own local group: 200 requests of the Mooncake conversation
#                 trace when $TANDEM_TRACE_DIR has it, else the synthetic workload), which must
#                 exit 0 with nothing lost, duplicated or mismatched
#   teardown      compose down -v, always (trap), unless --keep
#
# Usage: docker/test-compose.sh [--release | --bin PATH] [--early-only] [--fault kill|crash]
#                               [--kill-rank R] [--ready-timeout S] [--recover-timeout S]
#                               [--replay] [--no-monitoring] [--alert-timeout S] [--keep]
# Exit codes: 0 pass, or skipped (a line starting "SKIP:" says why) when there is no usable
# Docker engine or compose here; 1 a stage failed (the message names it); 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

PROFILE=debug
BIN=""
EARLY_ONLY=0
REPLAY=0
FAULT=kill
KILL_RANK=2
READY_TIMEOUT=120
RECOVER_TIMEOUT=90
KEEP=0
MONITORING=1
ALERT_TIMEOUT=120
IMAGE="${TANDEM_IMAGE:-tandem:local}"
MON_IMAGE="${TANDEM_MONITORING_IMAGE:-tandem-monitoring:local}"
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
        --replay) REPLAY=1 ;;
        --no-monitoring) MONITORING=0 ;;
        --alert-timeout) ALERT_TIMEOUT="${2:?}"; shift ;;
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

# --- docker and compose: without them the test is skipped, not failed --------------------------
skip() { echo "SKIP: docker/test-compose.sh: $* (nothing was run)" >&2; exit 0; }
command -v docker >/dev/null 2>&1 || skip "the docker command is not installed"
if ! docker_info=$(timeout 30 docker info --format '{{.ServerVersion}}' 2>&1); then
    skip "no Docker engine answers ($(printf '%s' "$docker_info" | tr '\n' ' ' | sed 's/^ *//' | cut -c1-200))"
fi
if docker compose version >/dev/null 2>&1; then
    COMPOSE_BIN=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE_BIN=(docker-compose)
else
    skip "neither 'docker compose' nor 'docker-compose' is installed"
fi
log "docker engine $docker_info, $("${COMPOSE_BIN[@]}" version --short 2>/dev/null || echo "${COMPOSE_BIN[*]}")"
PROJECT="tandem-test-$$"
PROFILES=()
[ "$MONITORING" = 1 ] && PROFILES=(--profile monitoring)
compose() { "${COMPOSE_BIN[@]}" -p "$PROJECT" -f "$REPO/docker/docker-compose.yml" "${PROFILES[@]}" "$@"; }
compose_t() { # seconds, compose arguments: compose under a deadline
    local s="$1"; shift
    timeout "$s" "${COMPOSE_BIN[@]}" -p "$PROJECT" -f "$REPO/docker/docker-compose.yml" "${PROFILES[@]}" "$@"
}
export TANDEM_IMAGE="$IMAGE"
export TANDEM_MONITORING_IMAGE="$MON_IMAGE"
export TANDEM_PROMETHEUS_PUBLISH="127.0.0.1:"
export TANDEM_ALERTMANAGER_PUBLISH="127.0.0.1:"
# A fresh secret for this run, a free host port for the status page: runs do not collide.
export TANDEM__GROUP__SECRET="${TANDEM__GROUP__SECRET:-$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')}"
export TANDEM_STATUS_PUBLISH="127.0.0.1:"
# A small disk tier keeps the test's preallocation small (64 blocks x 256 KiB per rank).
export TANDEM_DISK_BLOCKS="${TANDEM_DISK_BLOCKS:-64}"
UP=0
TMPD=$(mktemp -d /tmp/tandem-test-compose.XXXXXX)
# The replay demo's traces: the Mooncake conversation trace when it is there, else the
# synthetic workload (and an empty directory, so that Docker creates nothing on the host).
export TANDEM_TRACE_DIR="${TANDEM_TRACE_DIR:-$REPO/data/traces}"
if [ -z "${TANDEM_REPLAY_ARGS:-}" ]; then
    if [ -f "$TANDEM_TRACE_DIR/mooncake_conversation_trace.jsonl.gz" ]; then
        TANDEM_REPLAY_ARGS="--pp 2 --tp 2 --trace /traces/mooncake_conversation_trace.jsonl.gz --limit 200"
    else
        mkdir -p "$TMPD/traces" && TANDEM_TRACE_DIR="$TMPD/traces"
        TANDEM_REPLAY_ARGS="--pp 2 --tp 2 --limit 200"
    fi
fi
export TANDEM_REPLAY_ARGS

teardown() {
    local rc=$?
    if [ "$UP" = 1 ]; then
        if [ $rc -ne 0 ]; then
            log "container states and last log lines, for the failure above:"
            compose ps >&2 || true
            compose logs --no-color --tail 40 >&2 || true
        fi
        if [ "$KEEP" = 1 ]; then
            log "--keep: project $PROJECT left running; stop it with:"
            log "  TANDEM__GROUP__SECRET=$TANDEM__GROUP__SECRET ${COMPOSE_BIN[*]} -p $PROJECT -f docker/docker-compose.yml --profile replay --profile monitoring down -v"
        else
            local t down=ok; t=$(date +%s)
            if ! timeout 120 "${COMPOSE_BIN[@]}" -p "$PROJECT" -f "$REPO/docker/docker-compose.yml" \
                    --profile replay --profile monitoring down -v --remove-orphans -t 10 >"$TMPD/down.log" 2>&1; then
                cat "$TMPD/down.log" >&2
                log "FAILED in teardown: compose down; remove project $PROJECT by hand"
                down="FAILED: compose down"
                [ $rc -ne 0 ] || rc=1
            fi
            SUMMARY+=("$(printf '%-10s %4ss  %s' teardown "$(( $(date +%s) - t ))" "$down")")
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
if [ "$MONITORING" = 1 ]; then
    # Prometheus and Alertmanager from Debian's packages on the same base image (a no-op
    # rebuild when the Dockerfile and tandem-probe are unchanged: Docker's layer cache).
    timeout 600 docker build -q -t "$MON_IMAGE" -f "$REPO/docker/monitoring.Dockerfile" "$REPO/docker" >/dev/null 2>"$TMPD/build-mon.log" \
        || { cat "$TMPD/build-mon.log" >&2; fail "docker build of $MON_IMAGE"; }
    log "monitoring image: $(timeout 60 docker run --rm "$MON_IMAGE" prometheus --version 2>&1 | head -n 1), $(timeout 60 docker run --rm "$MON_IMAGE" prometheus-alertmanager --version 2>&1 | head -n 1)"
fi
log "in the image: $version (user $(docker run --rm --entrypoint id "$IMAGE" -u))"
[ "$(docker run --rm --entrypoint id "$IMAGE" -u)" != 0 ] || fail "the image runs as root"

# --- 4. configuration ------------------------------------------------------------------------
stage config
UP=1  # `compose run` creates the project's network and volumes: remove them at the end
compose_t 60 config -q || fail "compose config rejected docker/docker-compose.yml"
compose_t 60 --profile replay config -q || fail "compose --profile replay config rejected docker/docker-compose.yml"
compose_t 60 --profile monitoring config -q || fail "compose --profile monitoring config rejected docker/docker-compose.yml"
for svc in supervisor agent-0 agent-1; do
    out=$(compose_t 60 run --rm --no-deps -T --entrypoint tandem "$svc" \
            check-config /etc/tandem/tandem.toml 2>&1) \
        || { printf '%s\n' "$out" >&2; fail "tandem check-config in the $svc container"; }
    log "$svc: $(printf '%s\n' "$out" | grep -E '^(world_size|shard_bytes|host_tier_bytes)' | tr '\n' ' ')"
done

if [ "$EARLY_ONLY" = 1 ]; then
    stage_end
    log "--early-only: stages 5-8 not run"
    exit 0
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
READY_EPOCH=""
# Returns 0 once the supervisor's /status says "healthy" in an epoch >= $1 and every /readyz
# (supervisor and agents) answers 200 naming that same epoch; sets READY_EPOCH. $2: seconds.
wait_all_ready() {
    local min_epoch="$1" deadline=$(( $(date +%s) + $2 )) svc body status sup_epoch state e
    local -a pending
    declare -A last=()
    while :; do
        pending=()
        status=$(probe supervisor /status -b 2>/dev/null || true)
        sup_epoch=$(printf '%s' "$status" | json_field epoch)
        state=$(printf '%s' "$status" | json_field state)
        case "$sup_epoch" in ''|*[!0-9]*) sup_epoch="" ;; esac
        if [ -z "$sup_epoch" ] || [ "$state" != healthy ] || [ "$sup_epoch" -lt "$min_epoch" ]; then
            pending+=("supervisor/status")
            last[supervisor/status]="epoch ${sup_epoch:-?}, state ${state:-?} (want healthy, epoch >= $min_epoch)"
        fi
        for svc in "${SERVICES[@]}"; do
            if body=$(probe "$svc" /readyz -b 2>"$TMPD/reason"); then
                e=$(printf '%s' "$body" | json_field epoch)
                if [ -z "$e" ] || [ "$e" != "$sup_epoch" ]; then
                    pending+=("$svc"); last[$svc]="ready in epoch ${e:-?}, the supervisor is in ${sup_epoch:-?}"
                fi
            else
                pending+=("$svc"); last[$svc]="$(tr '\n' ' ' <"$TMPD/reason" | cut -c1-300)"
            fi
        done
        if [ ${#pending[@]} -eq 0 ]; then READY_EPOCH="$sup_epoch"; return 0; fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "not ready after $2 s:"
            for svc in "${pending[@]}"; do log "  $svc: ${last[$svc]:-?}"; done
            return 1
        fi
        sleep 1
    done
}
supervisor_field() { # field of the supervisor's /status
    local body
    body=$(probe supervisor /status -b 2>/dev/null) || return 1
    printf '%s' "$body" | json_field "$1"
}
restarted_containers() { # "service: N restarts" for every container that Docker restarted
    local cid
    for cid in $(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"); do
        docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}: {{.RestartCount}} restarts' "$cid"
    done | grep -v ': 0 restarts$' || true
}

# Prometheus' HTTP API, through tandem-probe inside the prometheus container (no published
# port or curl needed).
urlencode() {
    local s="$1" out="" c i
    for ((i = 0; i < ${#s}; i++)); do
        c="${s:i:1}"
        case "$c" in [a-zA-Z0-9.~_-]) out+="$c" ;; *) out+=$(printf '%%%02X' "'$c") ;; esac
    done
    printf '%s' "$out"
}
prom_get() { # path -> body
    local cid; cid=$(cid_of prometheus)
    [ -n "$cid" ] || { echo "no prometheus container" >&2; return 3; }
    docker exec "$cid" tandem-probe -b -t 3 127.0.0.1:9090 "$1"
}
prom_value() { # PromQL whose result is one sample -> its value, nothing for an empty result
    prom_get "/api/v1/query?query=$(urlencode "$1")" 2>/dev/null \
        | sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}
TARGET_COUNT=$(( RANKS + 1 ))
# Returns 0 once every Tandem target (supervisor and agents) is up in Prometheus; $1: seconds.
wait_targets_up() {
    local deadline=$(( $(date +%s) + $1 )) up
    while :; do
        up=$(prom_value 'count(up{job=~"tandem-.*"} == 1)')
        [ "${up:-0}" = "$TARGET_COUNT" ] && return 0
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "Prometheus: ${up:-0} of $TARGET_COUNT Tandem targets up; targets:"
            prom_get /api/v1/targets 2>&1 | tr ',' '\n' | grep -E '"(scrapeUrl|health|lastError)"' | sed 's/^/    /' >&2 || true
            return 1
        fi
        sleep 1
    done
}
alert_state() { # alertname instance -> firing, pending or nothing
    local q="ALERTS{alertname=\"$1\",instance=\"$2\"}"
    case "$(prom_get "/api/v1/query?query=$(urlencode "$q")" 2>/dev/null)" in
        *'"alertstate":"firing"'*) echo firing ;;
        *'"alertstate":"pending"'*) echo pending ;;
    esac
}
active_tandem_alerts() { # "name{rank or instance}=state ..." of every Tandem alert now
    prom_get /api/v1/alerts 2>/dev/null | tr '{' '\n' | sed -n 's/.*"alertname":"\(Tandem[A-Za-z]*\)".*"instance":"\([^"]*\)".*/\1@\2/p; s/.*"alertname":"\(Tandem[A-Za-z]*\)".*"reason":"\([^"]*\)".*/\1(\2)/p' \
        | sort | uniq -c | awk '{printf "%s%s", sep, $2; sep=" "}'
}

# --- 5. up -----------------------------------------------------------------------------------
stage up
compose_t 300 up -d --no-build >/dev/null 2>"$TMPD/up.log" \
    || { cat "$TMPD/up.log" >&2; fail "compose up -d"; }
wait_all_ready 1 "$READY_TIMEOUT" || fail "the cluster did not become ready within ${READY_TIMEOUT}s"
EPOCH0="$READY_EPOCH"
restarted=$(restarted_containers)
[ -z "$restarted" ] || fail "containers were restarted while coming up (a crash loop): $(echo $restarted)"
log "all ${#SERVICES[@]} /readyz answer 200 in epoch $EPOCH0; status page: http://$(compose port supervisor "$SUPERVISOR_PORT" 2>/dev/null)/"

# --- 5b. targets (monitoring) ----------------------------------------------------------------
if [ "$MONITORING" = 1 ]; then
    stage targets
    wait_targets_up 60 || fail "Prometheus does not see every Tandem target up within 60 s"
    rules=$(prom_get /api/v1/rules 2>/dev/null | grep -o '"name":"Tandem[A-Za-z]*"' | sort -u | wc -l)
    want_rules=$(grep -c -- '- alert: Tandem' deploy/prometheus/rules/tandem-alerts.yml)
    [ "$rules" -ge "$want_rules" ] || fail "Prometheus loaded $rules Tandem alert rules, want $want_rules (deploy/prometheus/rules)"
    docker exec "$(cid_of alertmanager)" tandem-probe -t 3 127.0.0.1:9093 /-/ready >/dev/null \
        || fail "Alertmanager is not ready"
    log "Prometheus: $TARGET_COUNT of $TARGET_COUNT Tandem targets up, $rules alert rules loaded; Alertmanager ready; Prometheus at http://$(compose port prometheus 9090 2>/dev/null)/"
fi

# --- 6. fault --------------------------------------------------------------------------------
stage fault
if [ "$MONITORING" = 1 ] && [ "$FAULT" = kill ]; then
    # The agent stays down for the alert's 30 s, which costs up to 3 group restarts (the kill,
    # the supervisor's start-up grace running out, the late join): the fault needs the whole
    # restart budget (3 in 60 s by default), so a restart while coming up must leave the
    # window first.
    in_window=$(supervisor_field restarts_in_window || echo 0)
    if [ "${in_window:-0}" != 0 ]; then
        log "the group restarted $in_window time(s) while coming up (restart_history: $(probe supervisor /status -b 2>/dev/null | grep -o '"cause":"[^"]*"' | tr '\n' ' ')); waiting for the restart window to clear"
        deadline=$(( $(date +%s) + 75 ))
        until [ "$(supervisor_field restarts_in_window || echo 1)" = 0 ]; do
            [ "$(date +%s)" -lt "$deadline" ] || fail "the restart window did not clear within 75 s"
            sleep 1
        done
    fi
fi
victim="agent-$KILL_RANK"
vcid=$(cid_of "$victim")
[ -n "$vcid" ] || fail "no container for $victim"
if [ "$FAULT" = kill ]; then
    docker kill "$vcid" >/dev/null || fail "docker kill $victim"
    T_KILL=$(date +%s)
    log "docker kill $victim: $(docker inspect -f '{{.State.Status}} exit={{.State.ExitCode}}' "$vcid")"
    if [ "$MONITORING" = 1 ]; then
        # --- 6b. alert: the agent stays down until the alert fires -----------------------------
        stage alert
        instance="$victim:$(port_of "$victim")"
        pending_at="" firing_at="" seen_other=""
        deadline=$(( T_KILL + ALERT_TIMEOUT ))
        while :; do
            st=$(alert_state TandemAgentDown "$instance")
            now=$(date +%s)
            [ -n "$st" ] && [ -z "$pending_at" ] && pending_at=$now && log "TandemAgentDown{instance=\"$instance\"} $st after $(( now - T_KILL )) s"
            if [ "$st" = firing ]; then firing_at=$now; break; fi
            other=$(active_tandem_alerts)
            [ -z "$other" ] || [ "$other" = "$seen_other" ] || { seen_other="$other"; log "  active now: $other"; }
            [ "$now" -lt "$deadline" ] || fail "TandemAgentDown for $instance did not fire within ${ALERT_TIMEOUT}s of the kill (state: ${st:-none})"
            sleep 1
        done
        log "TandemAgentDown{instance=\"$instance\"} firing after $(( firing_at - T_KILL )) s (pending after $(( pending_at - T_KILL )) s; the rule's for: is 30 s)"
        am=""
        for _ in $(seq 1 30); do
            am=$(docker exec "$(cid_of alertmanager)" tandem-probe -b -t 3 127.0.0.1:9093 "/api/v2/alerts?filter=$(urlencode 'alertname="TandemAgentDown"')" 2>/dev/null || true)
            case "$am" in *"$instance"*) break ;; esac
            sleep 1
        done
        case "$am" in *"$instance"*) log "Alertmanager holds TandemAgentDown for $instance" ;;
            *) fail "Alertmanager did not receive TandemAgentDown for $instance" ;; esac
        log "restarts so far: $(supervisor_field restarts_total || echo ?) (the agent was down $(( $(date +%s) - T_KILL )) s)"
    fi
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
wait_all_ready $(( EPOCH0 + 1 )) "$RECOVER_TIMEOUT" \
    || fail "the group did not come back ready in an epoch above $EPOCH0 within ${RECOVER_TIMEOUT}s"
restarts=$(supervisor_field restarts_total || true)
log "all ${#SERVICES[@]} /readyz answer 200 again: epoch $EPOCH0 -> $READY_EPOCH, ${restarts:-?} group restart(s)"
restarted=$(restarted_containers)
[ "$FAULT" = crash ] || [ -z "$restarted" ] || fail "containers were restarted after the fault: $(echo $restarted)"

# --- 7b. resolved (monitoring) ---------------------------------------------------------------
if [ "$MONITORING" = 1 ]; then
    stage resolved
    if [ "$FAULT" = kill ]; then
        deadline=$(( $(date +%s) + 60 ))
        while [ -n "$(alert_state TandemAgentDown "$victim:$(port_of "$victim")")" ]; do
            [ "$(date +%s)" -lt "$deadline" ] || fail "TandemAgentDown for $victim still active 60 s after recovery"
            sleep 1
        done
        log "TandemAgentDown for $victim resolved $(( $(date +%s) - T_KILL )) s after the kill"
    else
        log "--fault crash: the restart policy brings the agent back within seconds, before any alert's for: (30 s); the alert is not checked"
    fi
    wait_targets_up 60 || fail "Prometheus does not see every Tandem target up again"
    still=$(active_tandem_alerts)
    log "Prometheus: every Tandem target up again; Tandem alerts still pending or firing: ${still:-none}"
fi

# --- 8. replay demo (optional) ---------------------------------------------------------------
if [ "$REPLAY" = 1 ]; then
    stage replay
    log "replay demo: tandem replay $TANDEM_REPLAY_ARGS"
    compose_t 600 --profile replay run --rm -T replay >"$TMPD/replay.out" 2>"$TMPD/replay.err" \
        || { cat "$TMPD/replay.err" "$TMPD/replay.out" >&2; fail "the replay demo failed"; }
    sed 's/^/    /' "$TMPD/replay.out" >&2
fi
stage_end
log "PASS"
