#!/usr/bin/env bash
# The main job: replay a request trace through a local Tandem cluster (redis-server, the
# supervisor and one agent per rank) with simulated engines, verifying every byte.
# Installs redis-server with apt when it is missing (as root), builds in release, then runs
# `tandem replay` with the arguments given (none: a small synthetic workload on 2 ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null 2>&1 && [ -z "${REDIS_URL:-}" ]; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  else
    echo "redis-server is missing: apt-get install redis-server, or set REDIS_URL" >&2
    exit 1
  fi
fi
cargo build --locked --release -p tandem-cli --bin tandem
exec ./target/release/tandem replay "$@"
