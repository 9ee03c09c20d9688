#!/usr/bin/env bash
# The Prometheus pieces in deploy/prometheus/: `promtool check config` and `check rules`, the
# rules' unit tests (`promtool test rules`: input series -> expected alerts and recorded
# values), and a check that every alert has a test case in which it fires.
#
# promtool comes with Debian's `prometheus` package (scripts/test.sh installs it). Without it
# this prints a line starting "SKIP:" and exits 0: nothing was checked.
set -euo pipefail
cd "$(dirname "$0")/../deploy/prometheus"

if ! command -v promtool >/dev/null 2>&1; then
    echo "SKIP: scripts/test-prometheus.sh: promtool is not installed (apt-get install prometheus); the rules were not checked" >&2
    exit 0
fi
echo "$(promtool --version 2>&1 | head -n 1)"

promtool check config prometheus.yml
promtool check rules rules/*.yml

work=$(mktemp -d /tmp/tandem-promtool.XXXXXX)
trap 'rm -rf "$work"' EXIT
# promtool compares an alert's annotations in full, and the runbooks are prose: the alert
# tests run on a copy of the rules without the `annotations:` blocks (everything else is
# the file as shipped); tandem-annotations.test.yml renders two alerts' annotations from the
# real file.
mkdir -p "$work/rules" "$work/tests"
awk '/^        annotations:/ { skip = 1; next }
     skip && (/^         / || /^[[:space:]]*$/) { next }
     { skip = 0; print }' rules/tandem-alerts.yml >"$work/rules/tandem-alerts.yml"
if grep -q 'annotations:' "$work/rules/tandem-alerts.yml" \
        || [ "$(grep -c -- '- alert:' "$work/rules/tandem-alerts.yml")" != "$(grep -c -- '- alert:' rules/tandem-alerts.yml)" ]; then
    echo "test-prometheus: stripping the annotations changed more than the annotations" >&2
    exit 1
fi
cp tests/tandem-alerts.test.yml "$work/tests/"
promtool test rules "$work/tests/tandem-alerts.test.yml"
promtool test rules tests/tandem-annotations.test.yml tests/tandem-recording.test.yml

# Every alert needs a case in which it fires (an `alertname:` whose exp_alerts has labels).
missing=()
alerts=$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' rules/tandem-alerts.yml)
for a in $alerts; do
    awk -v a="$a" '$1 == "alertname:" { cur = $2 } $1 == "-" && $2 == "exp_labels:" && cur == a { found = 1 }
                   END { exit !found }' tests/tandem-alerts.test.yml || missing+=("$a")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "test-prometheus: no test case in which these alerts fire: ${missing[*]}" >&2
    exit 1
fi
echo "test-prometheus: $(echo "$alerts" | wc -w) alerts, each with a firing test case; config, rules and unit tests pass"
