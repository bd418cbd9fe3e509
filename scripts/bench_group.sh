#!/usr/bin/env bash
# What issuing operations as one group saves (issue 16): per size, the same
# all-reduce timed alone and as a group of G (`--group G`, one merged
# program per rank), in one run each, interleaved, repeated RUNS times.
# Reported: the group's time per operation over the single operation's
# time (below 1: the group saves per-operation overhead), median and range
# over the runs. These machines are shared and noisy: read the medians.
#
#   scripts/bench_group.sh [COLLBENCH_BINARY] [OUT.md] [RUNS] [RANKS] [G]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/collbench}
out=${2:-/dev/stdout}
runs=${3:-5}
n=${4:-4}
g=${5:-8}
sizes=8B:1M:x8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$runs"); do
  for mode in single group; do
    extra=()
    [ "$mode" = group ] && extra=(--group "$g")
    "$bin" all-reduce --device host --ranks "$n" --sizes "$sizes" --placement out \
      --iters 200 --warmup 20 "${extra[@]}" -q --json "$tmp/$mode-$r.json" 2>/dev/null
  done
done
python3 - "$tmp" "$runs" "$g" "$n" "$bin" "$(nproc)" > "$tmp/report.md" <<'PY'
import json, statistics, sys, os
tmp, runs, g, n, binary, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
ratios = {}
for r in range(1, runs + 1):
    single = {x["bytes"]: x["stats"]["p50_us"] for x in json.load(open(f"{tmp}/single-{r}.json"))["rows"]}
    for x in json.load(open(f"{tmp}/group-{r}.json"))["rows"]:
        if x["collective"] != "group":
            continue
        each = x["bytes"] // g
        if each in single and single[each] > 0:
            ratios.setdefault(each, []).append(x["stats"]["p50_us"] / g / single[each])
print("# Grouped operations against single ones (host engine)\n")
print(f"`scripts/bench_group.sh {binary}` on {cores} cores: `all-reduce --ranks {n} --sizes 8B:1M:x8 --placement out --iters 200`,")
print(f"alone and with `--group {g}`, {runs} runs each, interleaved. Ratio = the group's p50 / {g} over the single")
print("operation's p50, in the same run pair (below 1: grouping saves per-operation overhead).\n")
print("| bytes per operation | median ratio | min | max |")
print("|---|---|---|---|")
for b in sorted(ratios):
    v = ratios[b]
    print(f"| {b} | {statistics.median(v):.2f} | {min(v):.2f} | {max(v):.2f} |")
PY
cat "$tmp/report.md" > "$out"
