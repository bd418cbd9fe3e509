#!/usr/bin/env bash
# The slow-link finder's hit and false-positive rates (issue 15): the same
# sweep N times with a slowed link and N times without, on the host engine.
#
#   scripts/bench_links.sh [COLLBENCH_BINARY] [RUNS] [SIZE] [OUT.md]
#
# A hit is a run whose findings are exactly `slow link 2 -> 3`; a false
# positive is any finding in a run without injection.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/collbench}
runs=${2:-20}
size=${3:-64M}
out=${4:-/dev/stdout}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
findings() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(";".join(f["detail"].split(":")[0] for f in d["links"]["findings"]))' "$1"
}
hits=0 fps=0 t0=$SECONDS
misses=()
for k in $(seq "$runs"); do
  "$bin" all-reduce --device host --ranks 8 --sizes "$size:$size" --placement out --iters 10 --warmup 2 \
    --links --inject slow-link:from=2,to=3,factor=4 -q --json "$tmp/s.json" 2>/dev/null || true
  got=$(findings "$tmp/s.json")
  if [ "$got" = "slow link 2 -> 3" ]; then hits=$((hits + 1)); else misses+=("${got:-nothing}"); fi
  "$bin" all-reduce --device host --ranks 8 --sizes "$size:$size" --placement out --iters 10 --warmup 2 \
    --links -q --json "$tmp/h.json" 2>/dev/null || true
  got=$(findings "$tmp/h.json")
  if [ -n "$got" ]; then fps=$((fps + 1)); misses+=("healthy run: $got"); fi
done
{
  echo "# Slow-link finder on $(nproc) cores ($(date -u +%Y-%m-%d))"
  echo
  echo "all-reduce, 8 host ranks, $size, out-of-place, 10 iterations, ring; $runs runs each."
  echo
  echo "| runs | slowed 2 -> 3 (x4): named exactly | not slowed: any finding |"
  echo "|---|---|---|"
  echo "| $runs | $hits of $runs | $fps of $runs |"
  echo
  for m in "${misses[@]}"; do echo "- not as expected: $m"; done
  echo "($((SECONDS - t0)) s.)"
} > "$out"
