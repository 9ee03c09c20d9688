#!/usr/bin/env bash
# The status pages in a real browser: starts a local cluster (`tandem up --ranks 2`), drives
# a replay through it, kills one agent so that the group restarts once, then loads each page
# in headless Chromium and checks the DOM it built for the key figures:
#   supervisor `/`:  READY badge, state and epoch cards, the rank grid (one row per rank,
#                    each with a link to its page), group tier totals in MiB, the charts
#                    with drawn lines and figures in units (/s, B/s), the restart history
#                    with the cause;
#   `/ranks/R` (through the supervisor) and rank 0's own `/`: the READY badge, tiers in
#                    MiB with fill, bytes stored in MiB (not the raw counter).
#
# Usage: scripts/test-pages.sh [--bin PATH] [--screenshots DIR]
#   --screenshots DIR  also write status-supervisor.png and status-agent.png there (the
#                      pictures in docs/img/ are made this way)
# Exit 0 pass, or skipped (a line starting "SKIP:" says why) when Chromium or redis-server
# is not installed; 1 a check failed (the message names the page and the figure).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/debug/tandem
SHOTS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN="${2:?--bin needs a path}"; shift ;;
        --screenshots) SHOTS="${2:?--screenshots needs a directory}"; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "test-pages: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "SKIP: scripts/test-pages.sh: no chromium (apt-get install chromium); the pages were not loaded" >&2; exit 0; }
command -v redis-server >/dev/null 2>&1 || { echo "SKIP: scripts/test-pages.sh: no redis-server; the pages were not loaded" >&2; exit 0; }
[ -x "$BIN" ] || { echo "test-pages: no executable at $BIN (cargo build -p tandem-cli --bin tandem)" >&2; exit 1; }
BIN=$(realpath "$BIN")

T0=$(date +%s)
log() { printf '[test-pages %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
WORK=$(mktemp -d /tmp/tandem-test-pages.XXXXXX)
UP_PID=""
cleanup() {
    local rc=$?
    if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
        kill -INT "$UP_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$UP_PID" 2>/dev/null || true
    fi
    if [ $rc -ne 0 ]; then
        log "FAILED; tandem up said:"; sed 's/^/    /' "$WORK/up.out" "$WORK/up.err" >&2 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
fail() { log "FAILED: $*"; exit 1; }

get() { # URL -> body on stdout (bash /dev/tcp, no curl needed)
    local hostport="${1#http://}"; hostport="${hostport%%/*}"
    local path="/${1#http://*/}"
    [ "$path" != "/$1" ] || path=/
    docker/tandem-probe -b -t 3 "$hostport" "$path"
}
json() { # expression on the JSON document in $1 (python3, else jq)
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
    else
        fail "python3 is needed to read /status"
    fi
}

# --- the cluster -----------------------------------------------------------------------------
(cd "$WORK" && exec "$BIN" up --ranks 2 >"$WORK/up.out" 2>"$WORK/up.err") &
UP_PID=$!
for _ in $(seq 1 600); do
    grep -q "Ctrl-C stops everything" "$WORK/up.out" 2>/dev/null && break
    kill -0 "$UP_PID" 2>/dev/null || fail "tandem up exited"
    sleep 0.1
done
SUP=$(sed -n 's|.*supervisor status: http://\([^/]*\)/status.*|\1|p' "$WORK/up.out")
AGENT0=$(sed -n 's|.*rank 0: http://\([^/]*\)/status.*|\1|p' "$WORK/up.out")
AGENT1=$(sed -n 's|.*rank 1: http://\([^/]*\)/status.*|\1|p' "$WORK/up.out")
DIR=$(sed -n 's|.*files and logs: \(.*\)$|\1|p' "$WORK/up.out")
[ -n "$SUP" ] && [ -n "$AGENT0" ] && [ -n "$AGENT1" ] && [ -n "$DIR" ] || fail "tandem up did not print its addresses"
log "cluster up: supervisor $SUP, rank 1 at $AGENT1 ($(( $(date +%s) - T0 )) s)"

# Traffic for the figures, then one agent killed: the supervisor restarts the group and the
# page's restart history names the cause.
"$BIN" replay --cluster-config "$DIR/tandem.toml" --limit 120 >"$WORK/replay.out" 2>"$WORK/replay.err" \
    || { cat "$WORK/replay.err" >&2; fail "tandem replay against the cluster"; }
log "replay: $(grep -m1 -i 'requests' "$WORK/replay.out" | tr -s ' ' | cut -c1-100)"
get "http://$SUP/status" >"$WORK/s.json" || fail "supervisor /status"
epoch0=$(json "$WORK/s.json" 'd["epoch"]')
get "http://$AGENT1/status" >"$WORK/a1.json" || fail "rank 1 /status"
pid1=$(json "$WORK/a1.json" 'd["agent"]["pid"]')
kill -KILL "$pid1"
log "SIGKILL to rank 1 (pid $pid1) in epoch $epoch0"
for _ in $(seq 1 300); do
    if get "http://$SUP/status" >"$WORK/s.json" 2>/dev/null \
        && [ "$(json "$WORK/s.json" 'd["ready"] and d["epoch"] > '"$epoch0"' and all("agent" in r and r["agent"].get("agent", {}).get("ready") for r in d["ranks"]) and len(d["series"]) >= 3')" = True ]; then
        break
    fi
    sleep 0.2
done
[ "$(json "$WORK/s.json" 'd["epoch"] > '"$epoch0")" = True ] || fail "the group did not restart after the kill"
# More traffic in the new epoch, then two more readings so the charts show it.
"$BIN" replay --cluster-config "$DIR/tandem.toml" --limit 60 >"$WORK/replay2.out" 2>"$WORK/replay2.err" \
    || { cat "$WORK/replay2.err" >&2; fail "tandem replay after the restart"; }
sleep 4.5
log "group restarted into epoch $(json "$WORK/s.json" 'd["epoch"]'); loading the pages"

# --- the pages in Chromium ---------------------------------------------------------------------
dom() { # URL name -> the DOM Chromium built, in $WORK/name.html
    timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$WORK/chromium" --dump-dom "$1" >"$WORK/$2.html" 2>"$WORK/$2.err" \
        || { tail -5 "$WORK/$2.err" >&2; fail "chromium could not load $1"; }
    [ -s "$WORK/$2.html" ] || fail "chromium returned an empty DOM for $1"
}
CHECKS=0
has() { # page regex what
    grep -Eq -- "$2" "$WORK/$1.html" || fail "$1 page: $3 (no match for /$2/)"
    CHECKS=$((CHECKS + 1))
}
hasnt() {
    ! grep -Eq -- "$2" "$WORK/$1.html" || fail "$1 page: $3 (unexpected /$2/)"
    CHECKS=$((CHECKS + 1))
}
count() { # page regex min what
    local n; n=$(grep -Eo -- "$2" "$WORK/$1.html" | wc -l)
    [ "$n" -ge "$3" ] || fail "$1 page: $4 ($n matches of /$2/, want >= $3)"
    CHECKS=$((CHECKS + 1))
}

dom "http://$SUP/" supervisor
has supervisor 'id="readiness">READY<' "the READY badge"
has supervisor 'id="state">healthy<' "the state card"
has supervisor "id=\"epoch\">[0-9]+<" "the epoch card"
has supervisor 'id="ranks-ready">2 / 2<' "both ranks ready"
count supervisor '<tr data-rank="[0-9]+"' 2 "one grid row per rank"
has supervisor '<a href="ranks/0">rank 0</a>' "the link to rank 0's page"
has supervisor '<a href="ranks/1">rank 1</a>' "the link to rank 1's page"
has supervisor 'id="group-tiers"' "the group tier totals"
has supervisor '[0-9.]+ (KiB|MiB|GiB) / [0-9.]+ (KiB|MiB|GiB)' "tier bytes in binary units"
count supervisor 'data-chart="[a-z-]+"><figcaption>[^<]+</figcaption><svg' 4 "charts drawn as SVG"
has supervisor 'data-chart="steps">.*<path d="M' "the steps chart has a line"
has supervisor 'steps: <b>[0-9.]+k?/s</b>' "a steps-per-second figure"
has supervisor 'stored: <b>[0-9.]+ [kMG]?B/s</b>' "a bytes-per-second figure"
has supervisor 'p99: <b>[0-9.]+ ms</b>' "a frame latency figure in ms"
has supervisor 'id="restart-history"><tbody><tr>' "the restart history table (Chromium adds the tbody)"
has supervisor "rank 1 [^<]*</td>" "the restart's cause names rank 1"
for r in 0 1; do
    dom "http://$SUP/ranks/$r" "rank$r"
    has "rank$r" 'id="readiness">READY<' "rank $r's READY badge"
    has "rank$r" "Tandem agent: rank $r \\((leader|follower)\\)" "rank $r's title"
    has "rank$r" '<table id="tiers">' "rank $r's tiers"
    has "rank$r" '[0-9.]+ (KiB|MiB) / [0-9.]+ (MiB|GiB) \([0-9.]+ %\)' "rank $r's tier fill in MiB and %"
done
# The leader's own page (rank 0 was not killed: its counters hold both replays).
dom "http://$AGENT0/" agent0
has agent0 'id="readiness">READY<' "the agent's own page: READY"
has agent0 'stored into tiers</th><td class="num">[0-9.]+ (B|KiB|MiB|GiB)<' "bytes stored in binary units"
raw=$(get "http://$AGENT0/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["store"]["bytes_stored"])')
[ "${raw:-0}" -ge 1024 ] || fail "rank 0 stored only ${raw:-0} bytes: the replay did not reach it"
hasnt agent0 ">$raw<" "the raw byte counter $raw"
log "$CHECKS checks passed on 5 pages"

if [ -n "$SHOTS" ]; then
    mkdir -p "$SHOTS"
    for page in "supervisor http://$SUP/" "agent http://$SUP/ranks/0"; do
        set -- $page
        timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
            --user-data-dir="$WORK/chromium" --window-size=1280,1500 \
            --screenshot="$SHOTS/status-$1.png" "$2" >/dev/null 2>&1 || fail "screenshot of $2"
    done
    log "screenshots in $SHOTS"
fi
log "PASS ($(( $(date +%s) - T0 )) s)"
