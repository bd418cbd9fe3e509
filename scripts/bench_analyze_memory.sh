#!/usr/bin/env bash
# What `collbench analyze` takes in memory and time on hostile and on large
# flight-recorder dumps, each figure beside the input's size (and, with a
# second binary, beside that binary's on the same input in the same run).
#
#   scripts/bench_analyze_memory.sh [COLLBENCH] [BASELINE_COLLBENCH] [--gate]
#
# Inputs, made here with python3: two pickle bombs (a 4 KiB string, and a
# small int, each repeated 8^8 times through nested lists of memo
# references), and two ranks of a PyTorch dump of 30000 entries with 48
# stack frames each, as JSON (182 MB a rank) and as pickle (frames shared
# by reference, as PyTorch writes them). With --gate, exits 1 when a bomb
# takes more than 256 MB or 5 s, or a large dump more memory than 2x its
# files' size (JSON) or 32x (pickle, whose memo shares what the tree
# copies); results/analyze-memory.md has the figures. A run is stopped
# after 120 s (an old binary on a bomb).
set -euo pipefail
bin=${1:-target/release/collbench}
base=""
gate=0
for a in "${@:2}"; do
  case $a in
    --gate) gate=1 ;;
    *) base=$a ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work" <<'PY'
import json, os, pickle, struct, sys
work = sys.argv[1]

def bomb(leaf):
    # {"entries": L8}, L(k+1) = [L(k)] * 8 by memo reference, L0 = leaf.
    p = bytearray(b'\x80\x04}\x94\x8c\x07entries\x94') + leaf + b'\x940'
    for level in range(8):
        p += b']\x94(' + (b'h' + bytes([level + 2])) * 8 + b'e'
        if level < 7:
            p += b'0'
    return bytes(p + b's.')

os.makedirs(f'{work}/bomb-str'); os.makedirs(f'{work}/bomb-int')
open(f'{work}/bomb-str/nccl_trace_rank_0', 'wb').write(
    bomb(b'X' + struct.pack('<I', 4096) + b'x' * 4096))
open(f'{work}/bomb-int/nccl_trace_rank_0', 'wb').write(bomb(b'K\x01'))

frames = [{"name": f"forward_{i}",
           "filename": f"/usr/lib/python3.11/site-packages/torch/nn/modules/module_{i}.py",
           "line": 100 + i} for i in range(64)]
def entry(seq):
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ["0", "default_pg"],
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "is_p2p": False,
            "profiling_name": "nccl:all_reduce", "time_created_ns": 1795290437666131445 + seq,
            "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
            "output_dtypes": ["Float"], "state": "completed",
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": True, "timeout_ms": 600000, "frames": frames[seq % 8:seq % 8 + 48]}
dump = {"version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {}, "entries": [entry(s) for s in range(1, 30001)]}
for form in ("json", "pickle"):
    os.makedirs(f'{work}/large-{form}')
    for rank in range(2):
        path = f'{work}/large-{form}/nccl_trace_rank_{rank}'
        if form == "json":
            json.dump(dump, open(path, 'w'))
        else:
            pickle.dump(dump, open(path, 'wb'), protocol=4)
PY

# Runs `analyze DIR` with BIN; prints "rss_kib seconds exit".
measure() {
  python3 - "$1" "$2" <<'PY'
import os, sys, time
binary, folder = sys.argv[1], sys.argv[2]
start = time.monotonic()
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execv(binary, [binary, "analyze", folder])
while True:
    done, status, usage = os.wait4(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() - start > 120:
        os.kill(pid, 9)
    time.sleep(0.02)
print(usage.ru_maxrss, f"{time.monotonic() - start:.2f}", os.waitstatus_to_exitcode(status))
PY
}

printf '| input | files | collbench RSS | x files | time s | exit |%s\n' "${base:+ baseline RSS | baseline s | RSS ratio |}"
printf '|---|---|---|---|---|---|%s\n' "${base:+---|---|---|}"
fail=0
for case in bomb-str bomb-int large-json large-pickle; do
  dir=$work/$case
  size=$(du -cb "$dir"/* | tail -1 | cut -f1)
  read -r rss secs code < <(measure "$bin" "$dir")
  mb=$(awk -v k="$rss" 'BEGIN{printf "%.0f", k/1024}')
  ratio=$(awk -v k="$rss" -v s="$size" 'BEGIN{printf "%.1f", k*1024/s}')
  line="| $case | $size B | $mb MB | $ratio | $secs | $code |"
  if [ -n "$base" ]; then
    read -r brss bsecs _ < <(measure "$base" "$dir")
    bmb=$(awk -v k="$brss" 'BEGIN{printf "%.0f", k/1024}')
    line="$line $bmb MB | $bsecs | $(awk -v a="$rss" -v b="$brss" 'BEGIN{printf "%.3f", a/b}') |"
  fi
  echo "$line"
  if [ "$gate" = 1 ]; then
    case $case in
      bomb-*) awk -v m="$mb" -v s="$secs" -v c="$code" 'BEGIN{exit !(m > 256 || s > 5 || c != 2)}' && { echo "GATE: $case took $mb MB, $secs s, exit $code (want <= 256 MB, <= 5 s, exit 2)"; fail=1; } ;;
      large-json) awk -v r="$ratio" -v c="$code" 'BEGIN{exit !(r > 2 || c != 0)}' && { echo "GATE: $case took ${ratio}x its files, exit $code (want <= 2x, exit 0)"; fail=1; } ;;
      large-pickle) awk -v r="$ratio" -v c="$code" 'BEGIN{exit !(r > 32 || c != 0)}' && { echo "GATE: $case took ${ratio}x its files, exit $code (want <= 32x, exit 0)"; fail=1; } ;;
    esac
  fi
done
exit $fail
