#!/usr/bin/env bash
# The slow-link finder's hit and false-positive rates (issue 15): the same
# sweeps N times with a slowed link or rank and N times without, on the
# host engine.
#
#   scripts/bench_links.sh [COLLBENCH_BINARY] [RUNS] [SIZE] [OUT.md]
#
# Also the cost of measuring: the ring with and without --links, interleaved.
#
# The cases: an all-reduce ring of 8 ranks with the link 2 -> 3 slowed (a
# hit: the findings are exactly `slow link 2 -> 3`), and an all-to-all of 6
# ranks with rank 5 slowed (a hit: exactly `slow rank 5`) or the link 1 -> 4
# (exactly `slow link 1 -> 4`), each at two factors. A false positive is any
# finding in a run without injection. Where the ranks outnumber the cores a
# finding needs 2x below the median (1.5x otherwise), and a slowdown comes
# out diluted: the smaller factors show by how much.
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
rows=() misses=()
t0=$SECONDS
# case NAME WANTED INJECTION SWEEP...
case_() {
  local name=$1 want=$2 inject=$3 hits=0 fps=0 got
  shift 3
  for _ in $(seq "$runs"); do
    "$bin" "$@" --sizes "$size:$size" --placement out --iters 10 --warmup 2 --links \
      --inject "$inject" -q --json "$tmp/s.json" 2>/dev/null || true
    got=$(findings "$tmp/s.json")
    if [ "$got" = "$want" ]; then hits=$((hits + 1)); else misses+=("$name, slowed: ${got:-nothing}"); fi
    "$bin" "$@" --sizes "$size:$size" --placement out --iters 10 --warmup 2 --links \
      -q --json "$tmp/h.json" 2>/dev/null || true
    got=$(findings "$tmp/h.json")
    if [ -n "$got" ]; then fps=$((fps + 1)); misses+=("$name, healthy: $got"); fi
  done
  rows+=("| $name | $inject | $hits of $runs named exactly \`$want\` | $fps of $runs |")
}
for f in 4 8; do
  case_ "all-reduce ring, 8 ranks" "slow link 2 -> 3" slow-link:from=2,to=3,factor=$f \
    all-reduce --device host --ranks 8 --algo ring
done
for f in 3 6; do
  case_ "all-to-all, 6 ranks" "slow rank 5" slow:rank=5,factor=$f \
    all-to-all --device host --ranks 6
done
for f in 4 8; do
  case_ "all-to-all, 6 ranks" "slow link 1 -> 4" slow-link:from=1,to=4,factor=$f \
    all-to-all --device host --ranks 6
done
# What measuring costs: the same ring all-reduce with and without --links,
# interleaved, each run's p50 iteration time; the median over runs of each.
p50() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"][0]["stats"]["p50_us"])' "$1"
}
on=() off=()
for _ in $(seq "$runs"); do
  for mode in off on; do
    flag=()
    [ "$mode" = on ] && flag=(--links)
    "$bin" all-reduce --device host --ranks 8 --algo ring --sizes "$size:$size" --placement out \
      --iters 10 --warmup 2 "${flag[@]}" -q --json "$tmp/c.json" 2>/dev/null || true
    if [ "$mode" = on ]; then on+=("$(p50 "$tmp/c.json")"); else off+=("$(p50 "$tmp/c.json")"); fi
  done
done
cost=$(python3 -c 'import statistics,sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print(f"{statistics.median(a):.0f} us without, {statistics.median(b):.0f} us with --links ({statistics.median(b)/statistics.median(a):.3f}x)")' "${off[*]}" "${on[*]}")
{
  echo "# Slow-link finder on $(nproc) cores ($(date -u +%Y-%m-%d))"
  echo
  echo "Host engine, $size, out-of-place, 10 iterations; $runs runs each, slowed and not."
  echo
  notes=$(python3 -c 'import json,sys; print("; ".join(n for n in json.load(open(sys.argv[1]))["meta"].get("notes", []) if n.startswith("links:")))' "$tmp/h.json")
  [ -n "$notes" ] && { echo "The verdict's note: $notes."; echo; }
  echo "| case | injection | slowed: hits | not slowed: any finding |"
  echo "|---|---|---|---|"
  for r in "${rows[@]}"; do echo "$r"; done
  echo
  for m in "${misses[@]+"${misses[@]}"}"; do echo "- not as expected: $m"; done
  echo
  echo "Cost of measuring (all-reduce ring, 8 ranks, $size, p50 of each run's iterations, median over $runs interleaved runs each): $cost."
  echo "($((SECONDS - t0)) s.)"
} > "$out"
