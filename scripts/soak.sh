#!/usr/bin/env bash
# Interrupts N sweeps (default 200) at random moments with SIGINT and
# SIGTERM on a node kept busy by two CPU hogs, and prints the tally: every
# run must exit 130 with a parseable JSON holding every finished row and
# meta.partial.reason = "signal" (no crash: no exit 139 or 134).
# CI runs the same test with 20 runs (tests/signals.rs).
#   scripts/soak.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-200}"
case "$n" in
  ''|*[!0-9]*) echo "usage: scripts/soak.sh [N]   (N: number of interrupted runs)" >&2; exit 2 ;;
esac
export COLLBENCH_SOAK_RUNS="$n"
set +e
cargo test --test signals interrupted_runs_on_a_busy_node -- --nocapture 2>&1 \
  | grep -E '^(seed|tally|run [0-9]+:|test result)'
rc=${PIPESTATUS[0]}
exit "$rc"
