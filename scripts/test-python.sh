#!/usr/bin/env bash
# The Python package's tests (scripts/test.sh runs this last): a fresh virtual environment
# from the registry with pinned maturin, pytest and numpy (crates/tandem-py/requirements-test.txt),
# the tandem-kv wheel built with maturin and installed into it, then the pytest suite, which
# imports the installed wheel (never the source tree) and drives real local clusters
# (`tandem up`: redis-server, supervisor, agents) with Python engine processes.
# Needs python3 with venv (scripts/test.sh installs python3-venv as root), redis-server, and
# the tandem binary (--bin PATH, default target/debug/tandem). Prints how long each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/debug/tandem
if [ "${1:-}" = "--bin" ]; then bin="$2"; shift 2; fi
python="${PYTHON:-python3}"
venv=target/py-venv
wheels=target/py-wheels
t0=$(date +%s)
rm -rf "$venv" "$wheels"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r crates/tandem-py/requirements-test.txt
t1=$(date +%s)
"$venv/bin/maturin" build -q --locked --profile dev -m crates/tandem-py/Cargo.toml -o "$wheels"
"$venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheels"/tandem_kv-*.whl
t2=$(date +%s)
TANDEM_BIN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" \
  "$venv/bin/pytest" -q -p no:cacheprovider crates/tandem-py/tests "$@"
t3=$(date +%s)
echo "python: venv $((t1 - t0)) s, wheel $((t2 - t1)) s, tests $((t3 - t2)) s, total $((t3 - t0)) s"
