#!/usr/bin/env bash
# How well the cost model predicts sizes it never saw (issue 16): one
# 2-rank all-reduce sweep of every algorithm, 8B:256M by sqrt(2); the model
# is fitted (`collbench tune --from`) on half its sizes (every other one:
# 8B, 16B, ... 256M) and predicts (`collbench model`) the other half
# (11B, 22B, ... 181M), which the same sweep measured. The bar: within 25%
# from 1 MiB up. Repeated RUNS times (each its own sweep): these machines
# are shared and noisy.
#
#   scripts/bench_model.sh [COLLBENCH_BINARY] [OUT.md] [RUNS] [RANKS]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/collbench}
out=${2:-/dev/stdout}
runs=${3:-3}
n=${4:-2}
grid=8B:256M:x1.41421356
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$SECONDS
{
  echo "# The cost model on sizes it did not see (host engine)"
  echo
  echo "\`scripts/bench_model.sh $bin\` on $(nproc) cores ($(date -u +%F)): per run, one sweep"
  echo "\`all-reduce --ranks $n --algo all --sizes $grid --placement out --iters 30\`; \`collbench tune --from\`"
  echo "fits every algorithm on every other size of it (8B, 16B, ... 256M), \`collbench model --ranks $n --sizes $grid\`"
  echo "predicts the others (11B, 22B, ... 181M). Error = predicted / measured p50 - 1."
  echo
} > "$tmp/report.md"
for r in $(seq "$runs"); do
  "$bin" all-reduce --ranks "$n" --device host --algo all --sizes "$grid" --placement out \
    --iters 30 --warmup 5 -q --json "$tmp/sweep.json" 2>/dev/null
  python3 - "$tmp/sweep.json" "$tmp/half.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
sizes = sorted({r["bytes"] for r in d["rows"]})
keep = set(sizes[0::2])
d["rows"] = [r for r in d["rows"] if r["bytes"] in keep]
json.dump(d, open(sys.argv[2], "w"))
PY
  "$bin" tune --from "$tmp/half.json" --output "$tmp/tune.json" > "$tmp/tune$r.txt"
  "$bin" model --tuning "$tmp/tune.json" --ranks "$n" --sizes "$grid" --json "$tmp/model.json" > /dev/null
  python3 - "$tmp/sweep.json" "$tmp/model.json" "$r" >> "$tmp/report.md" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
pred = json.load(open(sys.argv[2]))["rows"]
run = sys.argv[3]
algos = sorted({p["algo"] for p in pred})
sizes = sorted({r["bytes"] for r in rows})
unseen = sizes[1::2]
def near(b, pool):
    return min(pool, key=lambda x: abs(x - b) / b)
pred_sizes = sorted({p["bytes"] for p in pred})
print(f"## Run {run}\n")
print("| size | " + " | ".join(f"{a} measured (us) | {a} predicted | {a} error" for a in algos) + " |")
print("|---:|" + "---:|---:|---:|" * len(algos))
worst = 0.0
for b in unseen:
    pb = near(b, pred_sizes)
    cells = []
    for a in algos:
        m = next((r["stats"]["p50_us"] for r in rows if r["bytes"] == b and r["algo"] == a), None)
        # The model's size is the sweep's before rounding to whole elements.
        p = next((p["predicted_us"] * b / pb if b > 4096 else p["predicted_us"]
                  for p in pred if p["bytes"] == pb and p["algo"] == a), None)
        if m is None or p is None:
            cells += ["-", "-", "-"]
            continue
        err = p / m - 1
        if b >= 1 << 20:
            worst = max(worst, abs(err))
        cells += [f"{m:.1f}", f"{p:.1f}", f"{err:+.0%}"]
    size = f"{b / 2**20:.1f} MiB" if b >= 1 << 20 else (f"{b / 1024:.1f} KiB" if b >= 1024 else f"{b} B")
    print(f"| {size} | " + " | ".join(cells) + " |")
print(f"\nLargest error from 1 MiB up: {worst:.0%} (the bar: 25%).\n")
PY
done
{ echo "Fitted table of the last run:"; echo '```'; cat "$tmp/tune$runs.txt"; echo '```'; echo; echo "Took $((SECONDS - t0)) s."; } >> "$tmp/report.md"
cat "$tmp/report.md" > "$out"
