#!/usr/bin/env bash
# Host all-reduce (f32 sum, 2 ranks, the algorithm `auto` picks) against Open MPI's MPI_Allreduce, timed
# the same way (mean per iteration, max over ranks) on the same machine in
# the same run, interleaved over several rounds; the best round of each is
# kept. Writes results/host-allreduce-vs-openmpi.{json,md}.
#
#   apt-get install -y libopenmpi-dev openmpi-bin
#   bash scripts/bench_host_vs_mpi.sh [ROUNDS]        (EXTRA="--slot-size 1M" adds collbench flags)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
src=../shared/bench/mpi_allreduce.c
[ -f "$src" ] || { echo "bench: $src not found (the shared/ folder beside the checkout)" >&2; exit 2; }
command -v mpicc >/dev/null || { echo "bench: mpicc not found: apt-get install -y libopenmpi-dev openmpi-bin" >&2; exit 2; }
cargo build --release -q
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_allreduce" "$src"
for r in $(seq 1 "$rounds"); do
  mpirun --allow-run-as-root --oversubscribe -np 2 "$work/mpi_allreduce" 8 67108864 20 > "$work/mpi$r.txt"
  ./target/release/collbench all-reduce --device host --ranks 2 --sizes 8B:512K --iters 200 --warmup 50 \
    --placement out --algo auto --no-check -q --json "$work/small$r.json" ${EXTRA:-} 2>/dev/null
  ./target/release/collbench all-reduce --device host --ranks 2 --sizes 1M:64M --iters 20 --warmup 5 \
    --placement out --algo auto --no-check -q --json "$work/large$r.json" ${EXTRA:-} 2>/dev/null
done
mkdir -p results
python3 - "$work" "$rounds" <<'PY'
import json, sys, platform, os, subprocess
work, rounds = sys.argv[1], int(sys.argv[2])
best_mpi, best_cb, algo = {}, {}, {}
for r in range(1, rounds + 1):
    for line in open(f"{work}/mpi{r}.txt"):
        b, t, alg, bus = line.split()
        b, t = int(b), float(t)
        best_mpi[b] = min(best_mpi.get(b, 1e18), t)
    for part in ("small", "large"):
        for row in json.load(open(f"{work}/{part}{r}.json"))["rows"]:
            best_cb[row["bytes"]] = min(best_cb.get(row["bytes"], 1e18), row["time_us"])
            algo[row["bytes"]] = row["algo"]
cpu = next((l.split(":")[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
rows = []
for b in sorted(set(best_mpi) & set(best_cb)):
    tm, tc = best_mpi[b], best_cb[b]
    rows.append({"bytes": b, "algo": algo[b], "openmpi_us": tm, "collbench_us": tc,
                 "openmpi_busbw_gbps": b / tm / 1e3, "collbench_busbw_gbps": b / tc / 1e3,
                 "busbw_ratio": tm / tc, "time_ratio": tc / tm})
def at(b): return next(r for r in rows if r["bytes"] == b)
summary = {"time_ratio_8B": at(8)["time_ratio"], "busbw_ratio_16MiB": at(16 << 20)["busbw_ratio"],
           "busbw_ratio_64MiB": at(64 << 20)["busbw_ratio"]}
targets = {"time_ratio_8B": "<= 1.5", "busbw_ratio_16MiB": ">= 2", "busbw_ratio_64MiB": ">= 2"}
out = {"benchmark": "host all-reduce f32 sum, 2 ranks, vs Open MPI MPI_Allreduce",
       "machine": {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
                   "openmpi": subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0]},
       "method": f"best of {rounds} interleaved rounds; time = mean per iteration, max over ranks (both tools)",
       "summary": summary, "targets": targets, "rows": rows}
json.dump(out, open("results/host-allreduce-vs-openmpi.json", "w"), indent=2)
with open("results/host-allreduce-vs-openmpi.md", "w") as f:
    f.write(f"# Host all-reduce vs Open MPI ({cpu}, {os.cpu_count()} cores)\n\n{out['method']}.\n\n")
    f.write("| bytes | collbench algo | Open MPI us | collbench us | Open MPI busbw GB/s | collbench busbw GB/s | busbw ratio |\n|---:|---|---:|---:|---:|---:|---:|\n")
    for r in rows:
        f.write(f"| {r['bytes']} | {r['algo']} | {r['openmpi_us']:.2f} | {r['collbench_us']:.2f} | {r['openmpi_busbw_gbps']:.3f} | {r['collbench_busbw_gbps']:.3f} | {r['busbw_ratio']:.2f} |\n")
    f.write("\n" + "\n".join(f"- {k}: {v:.2f} (target {targets[k]})" for k, v in summary.items()) + "\n")
print(json.dumps(summary, indent=1))
PY
