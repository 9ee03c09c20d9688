#!/usr/bin/env bash
# The main job: replay a request trace through a local Tandem cluster (redis-server, the
# supervisor and one agent per rank) with simulated engines, verifying every byte.
# Installs redis-server with apt when it is missing (as root), builds in release, then runs
# `tandem replay` with the arguments given (none: a small synthetic workload on 2 ranks).
# The Mooncake traces ship in data/traces/ (gzip; `--trace` reads .jsonl and .jsonl.gz), e.g.
#   scripts/replay.sh --trace data/traces/mooncake_conversation_trace.jsonl.gz --ranks 4
# Paths are taken relative to the directory the script is run from.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v redis-server >/dev/null 2>&1 && [ -z "${REDIS_URL:-}" ]; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  else
    echo "redis-server is missing: apt-get install redis-server, or set REDIS_URL" >&2
    exit 1
  fi
fi
cargo build --locked --release --manifest-path "$repo/Cargo.toml" -p tandem-cli --bin tandem
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac  # cargo reads it from here
exec "$target/release/tandem" replay "$@"
