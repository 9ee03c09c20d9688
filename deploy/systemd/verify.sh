#!/usr/bin/env bash
# Check the Tandem systemd units offline:
#   1. systemd-analyze verify on the supervisor, one agent instance (rank 0) and the target;
#      any warning fails the check, not only errors;
#   2. systemd-sysusers and systemd-tmpfiles --create into a scratch root (the user and the
#      directories come out as declared);
#   3. systemd-analyze security --offline: the overall exposure of each service (printed).
#
# `verify` insists that ExecStart's binary exists and is executable, and /usr/local/bin/tandem
# usually does not on a build machine. So the units are copied into a scratch directory with
# ExecStart pointing at $TANDEM_BIN (a built `tandem`, linked, never run) or, without it, at a
# two-line stub script; the files in this directory are never changed. Needs no running systemd
# and no root.
#
# Usage: deploy/systemd/verify.sh            (TANDEM_BIN=target/release/tandem to use a build)
# Exit: 0 checked and clean, or skipped because systemd-analyze is absent (says SKIP);
#       1 a check failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "verify.sh: SKIP: systemd-analyze not found (Debian: apt-get install systemd); units not checked"
    exit 0
fi
echo "verify.sh: $(systemd-analyze --version | head -n1)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/bin" "$scratch/units" "$scratch/root/etc" "$scratch/root/dev/shm" "$scratch/root/var/tmp"

if [[ -n "${TANDEM_BIN:-}" ]]; then
    if [[ ! -x "$TANDEM_BIN" ]]; then
        echo "verify.sh: TANDEM_BIN=$TANDEM_BIN is not an executable file" >&2
        exit 1
    fi
    ln -s "$(cd "$(dirname "$TANDEM_BIN")" && pwd)/$(basename "$TANDEM_BIN")" "$scratch/bin/tandem"
    echo "verify.sh: ExecStart points at $TANDEM_BIN"
else
    printf '#!/bin/sh\nexit 0\n' >"$scratch/bin/tandem"
    chmod 0755 "$scratch/bin/tandem"
    echo "verify.sh: ExecStart points at a stub (set TANDEM_BIN to use a built tandem)"
fi

for unit in "$here"/*.service "$here"/*.target; do
    sed "s#/usr/local/bin/tandem#$scratch/bin/tandem#g" "$unit" >"$scratch/units/$(basename "$unit")"
done

status=0
checked=("$scratch/units/tandem-supervisor.service" "$scratch/units/tandem-agent@0.service" "$scratch/units/tandem.target")
echo "verify.sh: systemd-analyze verify tandem-supervisor.service tandem-agent@0.service tandem.target"
if ! out=$(systemd-analyze verify --man=no "${checked[@]}" 2>&1); then
    status=1
fi
if [[ -n "$out" ]]; then
    printf '%s\n' "$out" | sed "s#$scratch/units/##g; s#$scratch/bin/##g"
    status=1
fi
[[ $status -eq 0 ]] && echo "verify.sh: verify: clean (no errors, no warnings)"

echo "verify.sh: systemd-sysusers and systemd-tmpfiles --create into a scratch root"
if systemd-sysusers --root="$scratch/root" "$here/tandem.sysusers.conf" >/dev/null 2>&1 &&
    systemd-tmpfiles --root="$scratch/root" --create "$here/tandem.tmpfiles.conf" &&
    grep -q '^tandem:' "$scratch/root/etc/passwd" &&
    [[ -d "$scratch/root/dev/shm/tandem" && -d "$scratch/root/var/tmp/tandem" ]]; then
    echo "verify.sh: sysusers/tmpfiles: user tandem, /dev/shm/tandem and /var/tmp/tandem created"
else
    echo "verify.sh: sysusers/tmpfiles: FAILED"
    status=1
fi

for unit in tandem-supervisor.service tandem-agent@0.service; do
    if exposure=$(systemd-analyze security --offline=yes --no-pager "$scratch/units/$unit" 2>&1 | grep 'Overall exposure'); then
        echo "verify.sh: security: ${exposure#→ }"
    else
        echo "verify.sh: security --offline not available for $unit (older systemd); skipped"
    fi
done

if [[ $status -eq 0 ]]; then
    echo "verify.sh: OK"
else
    echo "verify.sh: FAILED"
fi
exit $status
