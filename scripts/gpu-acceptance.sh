#!/usr/bin/env bash
# The GPU hand-off (issue: the CUDA executor runs). On a machine with a GPU,
# runs the acceptance matrix of the CUDA executor in a few minutes and writes
# results/gpu-<gpu name>/: the JSON of every run, summary.md with the
# machine, driver and every ratio, and a log.
#
#   scripts/gpu-acceptance.sh [COLLBENCH_BINARY] [OUT_DIR]
#
# GPU_ACCEPTANCE_SMOKE=1 rehearses the script without a GPU, so a GPU
# session does not spend its lease on a broken step: every command runs on
# the emulated device (--device cuda-emu) with sizes capped at 64 KiB and a
# few iterations, through a wrapper; its figures measure nothing.
#
# A GPU lease is short (minutes, machine start included), so the script
# keeps to a budget: GPU_ACCEPTANCE_BUDGET seconds (default 420) from its
# start. A step that would start after it is skipped, one that runs past it
# is killed (each step is also capped at STEP_LIMIT, default 240 s); the
# summary is always written and names what was skipped. Steps run in the
# order of what a GPU session most needs measured.
# GPU_ACCEPTANCE_ONLY=REGEX runs only the steps whose names match (an
# extended regular expression, e.g. 'perf-n1|procs-'): a rerun after a fix.
# It keeps the results already in OUT_DIR and appends to its log, so the
# summary covers both runs.
#
# Ratios are taken against references measured in the same run: the plain
# device-to-device copy (PyTorch's copy_, timed with CUDA events) for the
# one-rank all-reduce. Needs python3; PyTorch is optional (without it the copy
# reference is skipped and said so).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/collbench}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' /' '__')
smoke=${GPU_ACCEPTANCE_SMOKE:-}
[ -n "$smoke" ] && gpu=smoke
out=${2:-results/gpu-${gpu:-unknown}}
mkdir -p "$out"
log="$out/log.txt"
only=${GPU_ACCEPTANCE_ONLY:-}
budget=${GPU_ACCEPTANCE_BUDGET:-420}
case "$budget" in
  '' | *[!0-9]*) echo "gpu-acceptance: GPU_ACCEPTANCE_BUDGET must be whole seconds, not '$budget'" >&2; exit 2 ;;
esac
if [ -n "$only" ]; then
  # grep exits 2 on a malformed expression: refuse it before anything runs.
  echo | grep -Eq -- "$only" 2> /dev/null
  [ $? -eq 2 ] && { echo "gpu-acceptance: GPU_ACCEPTANCE_ONLY is not an extended regular expression: '$only'" >&2; exit 2; }
  echo "== a rerun of the steps matching '$only' ($(date -u +%FT%TZ))" >> "$log"
else
  : > "$log"
fi
fails=0
skipped=()
# The longest any wait of a step may last (--timeout): a kernel that
# deadlocks fails its step in seconds, with dumps, instead of eating the
# budget until the step limit kills it. Under compute-sanitizer kernels
# run many times slower.
wait="--timeout ${STEP_TIMEOUT:-20s}"
slow_wait="--timeout ${SANITIZER_TIMEOUT:-120s}"
# The emulated device on a few shared cores waits far longer than a GPU.
[ -n "$smoke" ] && wait="--timeout 120s"
mpi=${MPI_BIN:-target/mpi/release/collbench}
if [ -n "$smoke" ]; then
  # A wrapper in place of each binary: the GPU's commands, shrunk to the
  # emulated device. SMOKE_LONG=1 (the signal steps) keeps sizes and
  # iterations, so the sweep is still running when the signal comes.
  mkdir -p "$out/smoke-bin"
  wrap() { # real-binary wrapper-path
    local real
    real=$(realpath "$1") || { echo "smoke: $1 not found" >&2; exit 2; }
    { echo '#!/usr/bin/env bash'; printf 'real=%q\n' "$real"; cat <<'SH'; } > "$2"
# A size list with its largest size at most 64 KiB (the smallest at most
# that too): MIN:MAX[:STEP], or one size.
cap() {
  local IFS=: parts
  read -r -a parts <<< "$1"
  local min=${parts[0]} max=${parts[1]:-${parts[0]}} step=${parts[2]:-}
  big() {
    local v=${1%[Bb]} n
    case "$v" in
      *[MmGgTt]*) return 0 ;;
      *[Kk]*) n=${v%%[Kk]*} ;;
      *) n=$(( ${v%%[!0-9]*} / 1024 )) ;;
    esac
    [ "${n%%.*}" -gt 64 ] 2>/dev/null
  }
  big "$max" && max=64K
  big "$min" && min=8B
  echo "$min:$max${step:+:$step}"
}
args=()
prev=
for a in "$@"; do
  case "$prev" in
    --device) [ "$a" = cuda ] && a=cuda-emu ;;
    --sizes) [ -z "${SMOKE_LONG:-}" ] && a=$(cap "$a") ;;
    --iters) [ -z "${SMOKE_LONG:-}" ] && [ "$a" -gt 3 ] && a=3 ;;
    --warmup) [ -z "${SMOKE_LONG:-}" ] && [ "$a" -gt 1 ] && a=1 ;;
  esac
  args+=("$a")
  prev=$a
done
exec "$real" "${args[@]}"
SH
    chmod +x "$2"
  }
  # One emulated GPU, as on the GPU machine: virtual ranks share it.
  export COLLBENCH_EMU_GPUS=1
  wrap "$bin" "$out/smoke-bin/collbench"
  bin=$out/smoke-bin/collbench
  if [ -x "$mpi" ]; then
    wrap "$mpi" "$out/smoke-bin/collbench-mpi"
    mpi=$out/smoke-bin/collbench-mpi
  fi
fi
say() { echo "$*" | tee -a "$log"; }
shopt -s extglob
# Whether GPU_ACCEPTANCE_ONLY (when set) asks for step NAME.
wanted() {
  [ -z "$only" ] || grep -Eq -- "$only" <<< "$1"
}
# Whether step NAME runs: it is wanted (or FOLLOW=1: it checks what the
# step before it made, and runs whenever that one did) and the budget is
# not spent. A step the budget leaves out is said and counted.
due() {
  if [ -z "${FOLLOW:-}" ] && ! wanted "$1"; then
    return 1
  fi
  if [ "$SECONDS" -ge "$budget" ]; then
    say "SKIP $1: the budget of $budget s is spent (GPU_ACCEPTANCE_BUDGET)"
    skipped+=("$1")
    return 1
  fi
}
# Waits for background PID to end, at most SECONDS (then kills it);
# sets rc to its exit status.
end_within() {
  local pid=$1 tenths=$(($2 * 10))
  while kill -0 "$pid" 2> /dev/null && [ "$tenths" -gt 0 ]; do
    sleep 0.1
    tenths=$((tenths - 1))
  done
  kill -0 "$pid" 2> /dev/null && kill -KILL "$pid" 2> /dev/null
  wait "$pid"
  rc=$?
}
# Seconds a step may run: STEP_LIMIT, or what is left of the budget.
limit() {
  local left=$((budget - SECONDS)) cap=${STEP_LIMIT:-240}
  [ "$left" -lt "$cap" ] && cap=$left
  [ "$cap" -lt 1 ] && cap=1
  echo "$cap"
}
run() { # name expected-exit (or exits, as 0|1) command...
  local name=$1 want=$2; shift 2
  ran=0
  due "$name" || return 0
  ran=1
  local t0=$SECONDS cap
  cap=$(limit)
  # No step of this script should take minutes: a stuck one is killed.
  timeout -s KILL "$cap" "$@" > "$out/$name.out" 2> "$out/$name.err"
  local rc=$?
  if [[ "$rc" == @($want) ]]; then
    say "PASS $name (exit $rc, $((SECONDS - t0)) s)"
  elif [ "$rc" = 137 ] && [ "$cap" -lt "${STEP_LIMIT:-240}" ]; then
    say "FAIL $name: cut after $cap s, where the budget ran out (GPU_ACCEPTANCE_BUDGET); rerun it with GPU_ACCEPTANCE_ONLY"
    fails=$((fails + 1))
  else
    say "FAIL $name: exit $rc, wanted $want ($((SECONDS - t0)) s); stderr:"
    tail -5 "$out/$name.err" | tee -a "$log"
    fails=$((fails + 1))
  fi
}

"$bin" info --json > "$out/info.json" 2>> "$log" || true
nvidia-smi >> "$log" 2>&1 || true

say "== every kernel variant compiled up front (NVRTC on every core, into the kernel cache)"
# On a fresh machine the variants take a minute or two to compile; compiled
# here, the steps below are timed on running them.
if [ -n "$smoke" ] && ! python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["nvrtc"]["version"]' "$out/info.json" 2>/dev/null; then
  say "SKIP compile-kernels: no NVRTC here (a rehearsal; a GPU machine has it)"
else
  # Always, a rerun of some steps too (a cache check when the cache is
  # warm): a variant compiled inside a step would keep its rank from its
  # peers past the steps' 20 s waits.
  FOLLOW=1 STEP_LIMIT=${COMPILE_LIMIT:-480} run compile-kernels 0 "$bin" info --compile-kernels
fi
say "== LL128 first (never yet run on a GPU; auto picks it for mid sizes below): lines ending mid-line, whole and many, every element size, checked 3 times"
for n in 3 8; do
  run "ll128-n$n" 0 "$bin" all --device cuda $wait --ranks "$n" --algo all --protocol ll128 \
    --dtype int8,half,double --sizes 120B:1080B:+240 --slot-size 4K --iters 3 --warmup 1 \
    --check-iters 3 --json "$out/ll128-n$n.json" -q
done
say "== every collective x algorithm, checked, on 1, 2, 3 and 8 virtual ranks"
for n in 1 2 3 8; do
  run "all-n$n" 0 "$bin" all --device cuda $wait --ranks "$n" --algo all --sizes 8B:4M:x8 \
    --iters 5 --warmup 2 --json "$out/all-n$n.json" -q
done
say "== every dtype and op on 3 ranks"
run dtype-op-n3 0 "$bin" all-reduce --device cuda $wait --ranks 3 --dtype all --op all \
  --algo all --sizes 8B:256K:x32 --iters 2 --warmup 1 --json "$out/dtype-op-n3.json" -q
say "== the copy reference: PyTorch's device-to-device copy, timed with CUDA events"
if ! due copy-reference; then
  :
elif python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  timeout -s KILL "$(limit)" python3 - "$out/copy.json" <<'PY'
import json, sys, torch
res = {}
for size in [1 << 20, 16 << 20, 256 << 20, 1 << 30]:
    a = torch.empty(size, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(5):
        b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(20):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    us = s.elapsed_time(e) * 1e3 / 20
    res[str(size)] = {"time_us": us, "gbps": size / us / 1e3}
json.dump(res, open(sys.argv[1], "w"), indent=1)
PY
else
  say "SKIP copy reference: PyTorch with CUDA not available"
fi

say "== performance"
run perf-n1 0 "$bin" all-reduce --device cuda $wait --ranks 1 --placement out --sizes 1M:1G:x4 \
  --iters 20 --warmup 5 --json "$out/perf-n1.json" -q
# The same through the collective kernel (a lone rank's copy runs as the
# driver's device copy by default, as NCCL's does).
run perf-n1-kernel 0 env COLLBENCH_CUDA_COPIES=kernel "$bin" all-reduce --device cuda $wait --ranks 1 \
  --placement out --sizes 1M:1G:x4 --iters 20 --warmup 5 --json "$out/perf-n1-kernel.json" -q
run perf-n8 0 "$bin" all-reduce --device cuda $wait --ranks 8 --placement out --sizes 8B:1G:x8 \
  --iters 20 --warmup 5 --json "$out/perf-n8.json" -q
run perf-n8-graph 0 "$bin" all-reduce --device cuda $wait --ranks 8 --placement out --graph \
  --sizes 8B:8B --iters 200 --warmup 20 --json "$out/perf-n8-graph.json" -q
# Blocks of a fixed width (512 threads, the widest default): what the narrow
# launch of small line-protocol operations saves.
run perf-n8-graph-512 0 env COLLBENCH_CUDA_THREADS=512 "$bin" all-reduce --device cuda $wait --ranks 8 \
  --placement out --graph --sizes 8B:8B --iters 200 --warmup 20 --json "$out/perf-n8-graph-512.json" -q
for t in 32 64 128 256; do
  run "perf-n8-graph-$t" 0 env COLLBENCH_CUDA_THREADS=$t "$bin" all-reduce --device cuda $wait --ranks 8 \
    --placement out --graph --sizes 8B:8B --iters 200 --warmup 20 --json "$out/perf-n8-graph-$t.json" -q
done
# Every algorithm at 8 B (the target is the default's; the others say what a
# better pick would give).
run perf-n8-graph-algos 0 "$bin" all-reduce --device cuda $wait --ranks 8 --placement out --graph --algo all \
  --sizes 8B:8B --iters 200 --warmup 20 --json "$out/perf-n8-graph-algos.json" -q
say "== rank processes (issue: GPUs across processes): --procs, and mpirun where present"
# One GPU here: the processes share it (--allow-shared-gpu) and time-slice,
# so the sweep is short; connections between them are CUDA IPC memory.
for n in 2 4; do
  run "procs-$n" 0 "$bin" all --device cuda $wait --procs "$n" --allow-shared-gpu --algo all \
    --sizes 8B:64K:x64 --iters 2 --warmup 1 --json "$out/procs-$n.json" -q
done
run procs-hang 3 "$bin" all-reduce --device cuda --procs 2 --allow-shared-gpu --sizes 1K \
  --inject hang:rank=1,seq=3 --timeout 5s --dump-dir "$out/procs-hang-dumps" -q
if [ "$ran" = 1 ]; then
  "$bin" analyze "$out/procs-hang-dumps" --json > "$out/procs-hang-analyze.json" 2>> "$log" || true
  if python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); assert v["culprits"] == [1], v["culprits"]' \
    "$out/procs-hang-analyze.json" 2>> "$log"; then
    say "PASS procs-hang analyze names rank 1"
  else
    say "FAIL procs-hang: analyze did not name rank 1"; fails=$((fails + 1))
  fi
fi
rm -rf "$out/procs-hang-dumps"
if command -v mpirun > /dev/null && [ -x "$mpi" ]; then
  run mpirun-2 0 mpirun --allow-run-as-root --oversubscribe -np 2 "$mpi" all --device cuda $wait --allow-shared-gpu --algo all \
    --sizes 8B:64K:x64 --iters 2 --warmup 1 --json "$out/mpirun-2.json" -q
  run mpirun-2-relay 0 env COLLBENCH_FORCE_RELAY=1 mpirun --allow-run-as-root --oversubscribe \
    -x COLLBENCH_FORCE_RELAY -np 2 "$mpi" all --device cuda $wait --allow-shared-gpu --algo all \
    --sizes 8B:64K:x64 --iters 2 --warmup 1 --json "$out/mpirun-2-relay.json" -q
  run mpirun-2-host 0 mpirun --allow-run-as-root --oversubscribe -np 2 "$mpi" all --device host --engine builtin,mpi \
    --sizes 8B:1M:x8 --iters 2 --json "$out/mpirun-2-host.json" -q
else
  say "SKIP mpirun: no mpirun, or no MPI build at $mpi (set MPI_BIN)"
fi

say "== NCCL side by side (one rank: NCCL refuses two ranks on one GPU)"
run nccl-all-n1 0 "$bin" all --device cuda $wait --ranks 1 --engine builtin,nccl --sizes 8B:4M:x8 \
  --iters 5 --warmup 2 --json "$out/nccl-all-n1.json" -q
# Three runs: up to a few MiB both engines' times are a few microseconds
# of launch, where one run's ratio moves by 10%; the summary takes the
# median of the three. Every power of two, so that 1 MiB (the target's
# first size) is one.
for n in nccl-n1 nccl-n1-2 nccl-n1-3; do
  run "$n" 0 "$bin" all-reduce --device cuda $wait --ranks 1 --engine builtin,nccl --placement out \
    --sizes 8B:1G --iters 100 --warmup 20 --json "$out/$n.json" -q
done
run nccl-v-n1 0 "$bin" all-to-all-v --device cuda $wait --ranks 1 --engine builtin,nccl --sizes 8B:4M:x8 \
  --iters 5 --warmup 2 --json "$out/nccl-v-n1.json" -q
run nccl-group-n1 0 "$bin" all --device cuda $wait --ranks 1 --engine builtin,nccl --group-mix \
  all-reduce,all-gather,reduce-scatter-v --group 8 --sizes 8B:4M:x8 --iters 5 --warmup 2 \
  --json "$out/nccl-group-n1.json" -q
if command -v compute-sanitizer > /dev/null; then
  say "== compute-sanitizer"
  for tool in memcheck racecheck synccheck; do
    for c in all-reduce all-to-all; do
      run "sanitizer-$tool-$c" 0 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" "$c" \
        --device cuda $slow_wait --ranks 3 --sizes 8B:64K:x64 --iters 1 --warmup 0 --placement out -q
    done
    run "sanitizer-$tool-ll128" 0 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" all-reduce \
      --device cuda $slow_wait --ranks 3 --protocol ll128 --sizes 1000B:64K:x64 --iters 1 --warmup 0 --placement out -q
  done
else
  say "SKIP compute-sanitizer: not on PATH"
fi

say "== timing methods and graphs"
run timing-wall 0 "$bin" all-reduce --device cuda $wait --ranks 4 --timing wall --sizes 8B:1M:x8 \
  --json "$out/timing-wall.json" -q
run graph 0 "$bin" all-reduce --device cuda $wait --ranks 4 --graph --sizes 8B:1M:x8 \
  --json "$out/graph.json" -q

say "== protocols: simple, ll, ll128 and auto on 8 ranks (LL128's crossovers)"
for proto in simple ll ll128 auto; do
  run "proto-$proto" 0 "$bin" all-reduce --device cuda $wait --ranks 8 --placement out --protocol "$proto" \
    --sizes 8B:64M:x4 --iters 20 --warmup 5 --json "$out/proto-$proto.json" -q
done
say "== the low-latency flags past 2^32 messages (every connection starts at message 4294967290)"
run ll-wrap-n8 0 env COLLBENCH_CUDA_SEQ_START=4294967290 "$bin" all-reduce --device cuda $wait --ranks 8 \
  --algo all --protocol ll --sizes 8B:64K:x4 --json "$out/ll-wrap-n8.json" -q
say "== uneven collectives and groups (one launch per rank per group)"
for c in all-to-all-v all-gather-v reduce-scatter-v; do
  run "$c-n8" 0 "$bin" "$c" --device cuda $wait --ranks 8 --split skew:3 --sizes 8B:64M:x8 \
    --iters 5 --warmup 2 --json "$out/$c-n8.json" -q
done
run group-n8 0 "$bin" all --device cuda $wait --ranks 8 --group-mix all-reduce,all-gather,reduce-scatter-v \
  --group 8 --split hot:0 --sizes 8B:64M:x8 --iters 5 --warmup 2 --json "$out/group-n8.json" -q
run group-single-n8 0 "$bin" all-reduce --device cuda $wait --ranks 8 --placement out --sizes 8B:64M:x8 \
  --iters 40 --warmup 5 --json "$out/group-single-n8.json" -q
run group-x8-n8 0 "$bin" all-reduce --device cuda $wait --ranks 8 --placement out --group 8 --sizes 8B:64M:x8 \
  --iters 5 --warmup 2 --json "$out/group-x8-n8.json" -q
say "== premulsum and the cost model"
# An integer type takes a whole scalar (0.5 would be refused, exit 2).
run premulsum-n3 0 "$bin" all --device cuda $wait --ranks 3 --op premulsum --scalar 0.5 --algo all \
  --dtype float,half,bfloat16 --sizes 8B:4M:x8 --iters 2 --warmup 1 --json "$out/premulsum-n3.json" -q
run premulsum-int-n3 0 "$bin" all --device cuda $wait --ranks 3 --op premulsum --scalar 3 --algo all \
  --dtype int32,uint8 --sizes 8B:4M:x8 --iters 2 --warmup 1 --json "$out/premulsum-int-n3.json" -q
run tune-n8 0 "$bin" tune --device cuda $wait --ranks 8 --sizes 8B:256M:x4 --output "$out/tuning-n8.json"
run auto-n8 0 "$bin" all-reduce --device cuda $wait --ranks 8 --algo all --placement out --sizes 64K:256M:x4 \
  --tuning "$out/tuning-n8.json" --json "$out/auto-n8.json" -q
say "== an injected hang on 4 ranks: exit 3, dumps, analyze names rank 2"
wanted hang && rm -rf "$out/hang-dumps"
run hang 3 "$bin" all-reduce --device cuda --ranks 4 --inject hang:rank=2,seq=5 --timeout 3s \
  --sizes 1K:1K --dump-dir "$out/hang-dumps" -q
if [ "$ran" = 1 ]; then
  FOLLOW=1 run hang-analyze 1 "$bin" analyze "$out/hang-dumps" --json
  if [ "$ran" = 1 ] && ! python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert 2 in d["culprits"], d' "$out/hang-analyze.out" 2>>"$log"; then
    say "FAIL hang-analyze does not name rank 2"; fails=$((fails + 1))
  fi
fi
# Every rank stopped outside collectives (a lone rank's hang): no wait
# times out, the watchdog's stopped-ranks rule fires.
rm -rf "$out/hang-lone-dumps"
run hang-lone 3 "$bin" all-reduce --device cuda --ranks 1 --inject hang:rank=0,seq=3 --timeout 2s \
  --sizes 1K:1K --dump-dir "$out/hang-lone-dumps" -q
if [ "$ran" = 1 ]; then
  FOLLOW=1 run hang-lone-analyze 1 "$bin" analyze "$out/hang-lone-dumps" --json
  if [ "$ran" = 1 ] && ! python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["culprits"] == [0], d' "$out/hang-lone-analyze.out" 2>>"$log"; then
    say "FAIL hang-lone-analyze does not name rank 0"; fails=$((fails + 1))
  fi
fi
rm -rf "$out/hang-lone-dumps"
run nan 1 "$bin" all-reduce --device cuda $wait --ranks 3 --inject nan:rank=1,seq=1 --sizes 1K:1K -q
run corrupt 1 "$bin" all-reduce --device cuda $wait --ranks 3 --inject corrupt:rank=1,seq=1 --sizes 1K:1K -q

say "== the links probe on 8 virtual ranks: healthy, then with link 2 -> 5 slowed 4x"
# A rehearsal's verdicts are CPU threads', so either exit is accepted there.
healthy=0 slowed=1
[ -n "$smoke" ] && healthy="0|1" slowed="0|1"
run links-n8 "$healthy" "$bin" links --device cuda $wait --ranks 8 --sizes 1M:64M:x8 --iters 10 \
  --json "$out/links-n8.json" -q
run links-slow-n8 "$slowed" "$bin" links --device cuda $wait --ranks 8 --sizes 1M:64M:x8 --iters 10 \
  --inject slow-link:from=2,to=5,factor=4 --json "$out/links-slow-n8.json" -q
# The finding is in the JSON (-q prints no table or verdict line); a step
# that wrote none has failed already.
if [ "$ran" = 1 ] && [ -z "$smoke" ] && [ -f "$out/links-slow-n8.json" ] && ! python3 - "$out/links-slow-n8.json" <<'PY'
import json, sys
found = (json.load(open(sys.argv[1])).get("links") or {}).get("findings", [])
sys.exit(not any(f.get("kind") == "slow-link" and (f.get("from"), f.get("to")) == (2, 5) for f in found))
PY
then
  say "FAIL links-slow-n8: link 2 -> 5 not named"; fails=$((fails + 1))
fi

say "== nccl-tests lines, by nccl-tests' binary names"
rm -rf "$out/aliases"
"$bin" install-aliases "$out/aliases" > /dev/null
# Each prints nccl-tests' footer.
footer() {
  if [ "$ran" = 1 ] && ! grep -q "# Avg bus bandwidth" "$out/$1.out"; then
    say "FAIL $1: no '# Avg bus bandwidth' line"; fails=$((fails + 1))
  fi
}
run nccl-tests-g1 0 "$out/aliases/all_reduce_perf" -b 8 -e 128M -f 4 -g 1
footer nccl-tests-g1
run nccl-tests-t4 0 "$out/aliases/all_gather_perf" -b 8 -e 16M -f 4 -t 4
footer nccl-tests-t4
rm -rf "$out/aliases"

say "== SIGINT and SIGTERM in a CUDA sweep: exit 130 within a second, finished rows kept"
for sig in INT TERM; do
  due "SIG$sig" || continue
  SMOKE_LONG=1 "$bin" all-reduce --device cuda --ranks 4 --sizes 8B:1G:x2 --iters 200 \
    --json "$out/sig$sig.json" --dump-dir "$out/sig$sig-dumps" -q > /dev/null 2> "$out/sig$sig.err" &
  pid=$!
  sleep 4
  t0=$(date +%s%N)
  kill -"$sig" "$pid"
  # A sweep that ignores the signal is killed after a while (a FAIL).
  end_within "$pid" 10
  ms=$((($(date +%s%N) - t0) / 1000000))
  if [ "$rc" = 130 ] && [ "$ms" -lt 1500 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rows"] and d["meta"]["partial"], d["meta"]' "$out/sig$sig.json" 2>> "$log"; then
    say "PASS SIG$sig (exit 130 after $ms ms)"
  else
    say "FAIL SIG$sig: exit $rc after $ms ms"; tail -3 "$out/sig$sig.err" | tee -a "$log"; fails=$((fails + 1))
  fi
  rm -rf "$out/sig$sig-dumps" "$out/sig$sig.jsonl"
done

say "== a SIGUSR1 snapshot of a long timed loop: read as a run that was moving"
# Only the operation each rank runs is started; those queued behind it on
# the stream are scheduled, and analyze sees no hang.
snap_sizes=256M snap_iters=2000
[ -n "$smoke" ] && snap_sizes=1M snap_iters=1800
rm -rf "$out/snapshot-dumps" "$out/snapshot"
if due snapshot; then
SMOKE_LONG=1 "$bin" all-reduce --device cuda --ranks 4 --sizes "$snap_sizes" --iters "$snap_iters" \
  --warmup 1 --no-check --dump-dir "$out/snapshot-dumps" -q > /dev/null 2> "$out/snapshot.err" &
pid=$!
sleep 6
kill -USR1 "$pid"
for _ in $(seq 50); do
  [ "$(ls "$out/snapshot-dumps"/*-request1.json 2> /dev/null | wc -l)" -ge 4 ] && break
  sleep 0.2
done
kill -INT "$pid" 2> /dev/null
end_within "$pid" 10
mkdir -p "$out/snapshot"
cp "$out/snapshot-dumps"/*-request1.json "$out/snapshot/" 2>> "$log"
FOLLOW=1 run snapshot-analyze 0 "$bin" analyze "$out/snapshot" --json
if python3 -c '
import glob, json, sys
files = glob.glob(sys.argv[1] + "/*-request1.json")
assert len(files) == 4, files
for f in files:
    e = json.load(open(f))["entries"]
    started = [x["seq"] for x in e if x["state"] == "started"]
    assert len(started) <= 1, (f, started)
' "$out/snapshot" 2>> "$log"; then
  say "PASS snapshot-started (at most one operation a rank started)"
else
  say "FAIL snapshot-started: see the log"; fails=$((fails + 1))
fi
fi
rm -rf "$out/snapshot-dumps" "$out/snapshot"

python3 - "$out" "$fails" "${skipped[*]:-}" <<'PY' | tee "$out/summary.md"
import json, os, sys
out, fails, skipped = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
info = load("info.json") or {}
def rows_of(name):
    return (load(name + ".json") or {}).get("rows", [])
print("# CUDA executor acceptance\n")
if os.environ.get("GPU_ACCEPTANCE_SMOKE"):
    print("**A rehearsal on the emulated device (GPU_ACCEPTANCE_SMOKE): no figure here measures a GPU.**\n")
m = info.get("machine") or {}
print(f"- machine: {m.get('host', '?')}, {m.get('cpu', '?')}, {m.get('cores', '?')} cores")
for d in info.get("devices") or []:
    print(f"- GPU {d.get('ordinal')}: {d.get('name')} ({d.get('arch')}, {d.get('multiprocessors')} SMs, "
          f"{d.get('memory_bytes', 0) / 2**30:.0f} GiB, bus {d.get('bus_id')})")
if not info.get("devices"):
    print(f"- GPUs: none ({(info.get('gpu') or {}).get('unusable')})")
print(f"- CUDA driver: {(info.get('gpu') or {}).get('driver')}; NVRTC: {(info.get('nvrtc') or {}).get('version')}")
nccl_meta = next((r["meta"].get("nccl") for r in map(load, ["nccl-n1.json", "nccl-all-n1.json"]) if r), None)
print(f"- NCCL: {nccl_meta}")
print(f"- collbench: {info.get('version')}")
print(f"- failed steps: {fails}")
if skipped:
    print(f"- skipped, the budget spent (GPU_ACCEPTANCE_BUDGET): {', '.join(skipped)}")
if os.environ.get("GPU_ACCEPTANCE_ONLY"):
    print(f"- this run: only the steps matching `{os.environ['GPU_ACCEPTANCE_ONLY']}`; the other figures are earlier runs' in this folder")
print()
print("| check | rows | wrong | nan |\n|---|---|---|---|")
for name in ["all-n1", "all-n2", "all-n3", "all-n8", "ll128-n3", "ll128-n8", "ll-wrap-n8", "dtype-op-n3", "timing-wall", "graph",
             "premulsum-n3", "premulsum-int-n3", "all-to-all-v-n8", "all-gather-v-n8", "reduce-scatter-v-n8",
             "group-n8", "group-x8-n8", "nccl-all-n1", "nccl-v-n1", "nccl-group-n1", "links-n8", "links-slow-n8",
             "procs-2", "procs-4", "mpirun-2", "mpirun-2-relay", "mpirun-2-host"]:
    r = load(name + ".json")
    if not r:
        print(f"| {name} | missing | | |"); continue
    rows = r["rows"]
    print(f"| {name} | {len(rows)} | {sum(max(x['wrong'],0) for x in rows)} | {sum(max(x['nan'],0) for x in rows)} |")
copy = load("copy.json") or {}
p1 = load("perf-n1.json")
p1k = {r["bytes"]: r for r in (load("perf-n1-kernel.json") or {}).get("rows", [])}
if p1:
    print("\n## 1 rank, out-of-place all-reduce against a device-to-device copy\n")
    print("The default runs a lone rank's copy as the driver's device copy; `kernel` is the collective "
          "kernel's copy (COLLBENCH_CUDA_COPIES=kernel).\n")
    print("| bytes | collbench algbw GB/s | copy GB/s | ratio (target >= 0.9 at >= 256 MiB) | kernel GB/s | kernel ratio |\n|---|---|---|---|---|---|")
    for row in p1["rows"]:
        c = copy.get(str(row["bytes"]))
        k = p1k.get(row["bytes"])
        ratio = f"{row['algbw_gbps'] / c['gbps']:.3f}" if c else "n/a"
        kbw = f"{k['algbw_gbps']:.1f}" if k else "n/a"
        kratio = f"{k['algbw_gbps'] / c['gbps']:.3f}" if k and c else "n/a"
        cbw = f"{c['gbps']:.1f}" if c else "n/a"
        print(f"| {row['bytes']} | {row['algbw_gbps']:.1f} | {cbw} | {ratio} | {kbw} | {kratio} |")
p8 = load("perf-n8.json")
if p8:
    print("\n## 8 virtual ranks, out-of-place all-reduce\n")
    print("| bytes | time us | algbw GB/s | busbw GB/s | algo |\n|---|---|---|---|---|")
    for row in p8["rows"]:
        print(f"| {row['bytes']} | {row['time_us']:.2f} | {row['algbw_gbps']:.2f} | {row['busbw_gbps']:.2f} | {row['algo']} |")
    big = [r for r in p8["rows"] if r["bytes"] >= 1 << 30]
    c = copy.get(str(1 << 30))
    if big and c:
        r = big[0]
        # Ring all-reduce on one GPU: each of n ranks reads its input once and
        # its peers' messages, and writes its output and its messages:
        # 2(n-1)/n of the buffer through the connections per rank, plus one
        # read of the input and one write of the output, per rank.
        n = 8
        traffic = n * r["bytes"] * (2 + 4 * (n - 1) / n)
        eff = traffic / (r["time_us"] * 1e3) / (2 * c["gbps"])
        print(f"\n1 GiB: memory traffic {traffic / 2**30:.1f} GiB in {r['time_us']:.0f} us; "
              f"{eff:.2f} of the copy's bandwidth (a copy moves 2 bytes per byte copied; target >= 0.8)")
runs = [r for r in map(load, ["nccl-n1.json", "nccl-n1-2.json", "nccl-n1-3.json"]) if r]
if runs:
    print(f"\n## 1 rank, out-of-place all-reduce against NCCL ({runs[0]['meta'].get('nccl')})\n")
    print(f"Each row is the run whose ratio is the median of {len(runs)} run(s) of the same sweep "
          "(the lower of two); the ratios of every run follow in brackets.\n")
    print("| bytes | builtin algbw GB/s | NCCL algbw GB/s | ratio (target >= 0.95 at >= 1 MiB) | builtin us | NCCL us | time ratio (target <= 1.2 at 8 B) |\n|---|---|---|---|---|---|---|")
    by = {}
    for i, nc in enumerate(runs):
        for row in nc["rows"]:
            # NCCL's rows, or on the emulated device its stand-in's.
            engine = "nccl" if row["engine"].startswith("nccl") else row["engine"]
            by.setdefault(row["bytes"], {}).setdefault(i, {})[engine] = row
    for b in sorted(by):
        pairs = [(e["builtin"], e["nccl"]) for e in by[b].values() if "builtin" in e and "nccl" in e]
        if not pairs:
            continue
        ratio = lambda p: p[0]["algbw_gbps"] / p[1]["algbw_gbps"] if p[1]["algbw_gbps"] > 0 else 0.0
        each = ", ".join(f"{ratio(p):.3f}" for p in pairs)
        x, y = sorted(pairs, key=ratio)[(len(pairs) - 1) // 2]
        print(f"| {b} | {x['algbw_gbps']:.1f} | {y['algbw_gbps']:.1f} | {ratio((x, y)):.3f} ({each}) "
              f"| {x['time_us']:.2f} | {y['time_us']:.2f} | {x['time_us'] / y['time_us']:.2f} |")
protos = {p: load(f"proto-{p}.json") for p in ["simple", "ll", "ll128", "auto"]}
if all(protos.values()):
    print("\n## 8 ranks, all-reduce by protocol (us; LL128's crossovers)\n")
    print("| bytes | simple | ll | ll128 | auto | fastest |\n|---|---|---|---|---|---|")
    by = {p: {r["bytes"]: r["time_us"] for r in d["rows"]} for p, d in protos.items()}
    for b in sorted(by["simple"]):
        t = {p: by[p].get(b) for p in by}
        fixed = {p: v for p, v in t.items() if p != "auto" and v}
        best = min(fixed, key=fixed.get) if fixed else "-"
        cells = " | ".join(f"{t[p]:.2f}" if t[p] else "-" for p in ["simple", "ll", "ll128", "auto"])
        print(f"| {b} | {cells} | {best} |")
a = load("auto-n8.json")
if a:
    print("\n## 8 ranks, the cost model's pick against the fastest algorithm (p50)\n")
    print("| bytes | pick | fastest | pick/best (target <= 1.2) |\n|---|---|---|---|")
    sizes = {}
    for r in a["rows"]:
        sizes.setdefault(r["bytes"], {})[r["algo"]] = r
    for b, algos in sorted(sizes.items()):
        best = min(algos.values(), key=lambda x: x["stats"]["p50_us"])
        pick = next(iter(algos.values())).get("auto_pick")
        if pick in algos:
            print(f"| {b} | {pick} | {best['algo']} | {algos[pick]['stats']['p50_us'] / best['stats']['p50_us']:.2f} |")
single = {r["bytes"]: r for r in rows_of("group-single-n8")}
groups = [r for r in rows_of("group-x8-n8") if r["collective"] == "group"]
if single and groups:
    print("\n## 8 ranks, eight all-reduces as one group against one alone (one launch per rank per group)\n")
    print("| bytes (each) | alone us | group of 8 us | group / (8 x alone) |\n|---|---|---|---|")
    for g in groups:
        # A group's bytes are its operations' together.
        k = len(g.get("members") or []) or 8
        one = single.get(g["bytes"] // k)
        if one:
            print(f"| {one['bytes']} | {one['time_us']:.2f} | {g['time_us']:.2f} | {g['time_us'] / (k * one['time_us']):.2f} |")
g = load("perf-n8-graph.json")
if g:
    r = g["rows"][0]
    print(f"\n8 ranks, 8 B, graph: {r['time_us']:.2f} us mean, {r['stats']['p50_us']:.2f} us p50 (target <= 15 us)")
    widths = [(t, load(f"perf-n8-graph-{t}.json")) for t in [32, 64, 128, 256, 512]]
    cells = [f"{t}: {w['rows'][0]['stats']['p50_us']:.2f}" for t, w in widths if w]
    if cells:
        print(f"\nThe same by fixed threads per block (COLLBENCH_CUDA_THREADS; p50 us): {', '.join(cells)}")
    a = load("perf-n8-graph-algos.json")
    if a:
        cells = [f"{x['algo']}: {x['stats']['p50_us']:.2f}" for x in a["rows"]]
        print(f"\nThe same by algorithm (p50 us): {', '.join(cells)}")
for name in ["links-n8", "links-slow-n8"]:
    l = (load(name + ".json") or {}).get("links")
    if l:
        said = "; ".join(f.get("detail") or json.dumps(f) for f in l.get("findings", [])) or "no finding"
        print(f"\n{name}: the link matrix at {l.get('bytes')} B: {said}")
print("\nLog: log.txt")
PY
# 0: every step passed; 1: a step failed; 3: none failed, some were
# skipped for the budget (rerun them with GPU_ACCEPTANCE_ONLY).
[ "$fails" -gt 0 ] && exit 1
[ "${#skipped[@]}" -gt 0 ] && exit 3
exit 0
