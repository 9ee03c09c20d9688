#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh Debian machine, builds the
# `tandem` binary the process-level tests start, then runs the lints and every test of the
# workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# redis-cli joins the Redis Cluster of the cluster tests (`--cluster create`); Debian ships
# it in redis-tools (a dependency of redis-server). Sentinels run as `redis-server --sentinel`.
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# promtool (rule checks and unit tests) and a headless browser (the status pages' test).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# The Python package's tests build a wheel in a fresh virtual environment.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing: ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "missing ${need[*]}: run as root or install them (apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

# Lints first: formatting, then clippy with every warning an error (the workspace lints in
# Cargo.toml add missing_docs and unreachable_pub).
cargo fmt --all --check
cargo clippy --locked --workspace --all-targets -- -D warnings

# A copy with the agent's test-only fault hooks for tests/actor_panic.rs, then the plain
# binary every other test runs (cargo keeps both builds, so switching back is a relink at most).
cargo build --locked -p tandem-cli --bin tandem --features fault-hooks
cp target/debug/tandem target/debug/tandem-fault-hooks
cargo build --locked -p tandem-cli --bin tandem
cargo test --locked --workspace "$@"
# The Prometheus rules (promtool), then the status pages in headless Chromium.
scripts/test-prometheus.sh
scripts/test-pages.sh --bin target/debug/tandem
# The Python package: wheel in a fresh venv, pytest against real local clusters.
scripts/test-python.sh --bin target/debug/tandem
