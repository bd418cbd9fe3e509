#!/usr/bin/env bash
# The full test suite, as CI runs it (README: "Run the tests").
# Installs what it needs (Open MPI and libclang for the `mpi` feature, NVRTC
# from PyPI for the kernels), then: format, lints, unit and integration tests
# of the default build and of the MPI build (under mpirun -np 1..4), every
# kernel variant through NVRTC, and end-to-end sweeps.
set -euo pipefail
cd "$(dirname "$0")/.."
# Nothing here reads stdin: make it empty, whatever the runner left open.
exec </dev/null

export CARGO_TERM_COLOR=never
# Fixtures live in ../shared beside the checkout; in CI their absence, or
# that of MPI, NVRTC or a C++ compiler (installed below), is a failure
# rather than a skip.
if [ "${CI:-}" = "true" ]; then
  export COLLBENCH_REQUIRE_FIXTURES=1 COLLBENCH_REQUIRE_MPI=1 COLLBENCH_REQUIRE_CXX=1
  # g++ brings ASan's runtime (libasan): the kernels' memory check needs it.
  export COLLBENCH_REQUIRE_ASAN=1
  # The progress-bar test runs collbench on a pty through util-linux's `script`.
  export COLLBENCH_REQUIRE_PTY=1
fi
# Open MPI refuses root without these; CI machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

need=""
command -v mpicc >/dev/null 2>&1 || need="$need libopenmpi-dev openmpi-bin"
# bindgen needs libclang itself (libclang-cpp, which other packages bring, is not it).
[ -n "$(ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* 2>/dev/null)" ] \
  || need="$need libclang-dev"
# The kernel emulation tests compile kernels/ with the host C++ compiler.
command -v c++ >/dev/null 2>&1 || need="$need g++"
command -v script >/dev/null 2>&1 || need="$need bsdutils"
if [ -n "$need" ]; then
  echo "ci: installing$need"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq $need >/dev/null
fi

# NVRTC for `info --compile-kernels` and the kernel tests: the PyPI wheel
# (no root pip install; PEP 668 does not block `pip download`), unpacked and
# cached under target/ so warm runs skip the ~220 MB download.
nvrtc_dir="$PWD/target/ci-nvrtc"
nvrtc_lib="$nvrtc_dir/unpacked/nvidia/cuda_nvrtc/lib"
if ! ls "$nvrtc_lib"/libnvrtc.so.* >/dev/null 2>&1; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "ci: installing python3-pip (to download NVRTC from PyPI)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null
  fi
  echo "ci: downloading NVRTC (nvidia-cuda-nvrtc-cu12) into $nvrtc_dir"
  rm -rf "$nvrtc_dir"
  mkdir -p "$nvrtc_dir/wheel"
  python3 -m pip download -q --no-deps -d "$nvrtc_dir/wheel" nvidia-cuda-nvrtc-cu12
  python3 -m zipfile -e "$nvrtc_dir"/wheel/nvidia_cuda_nvrtc_cu12-*.whl "$nvrtc_dir/unpacked"
  rm -rf "$nvrtc_dir/wheel"
fi
export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "${CI:-}" = "true" ]; then
  export COLLBENCH_REQUIRE_NVRTC=1
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "ci: no cargo on PATH; installing Debian's Rust toolchain"
  apt-get update -qq && apt-get install -y -qq cargo rustc rustfmt rust-clippy
fi
rustup component add clippy rustfmt >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (default build, and with --features mpi)"
cargo clippy --all-targets --release -- -D warnings
cargo clippy --all-targets --release --features mpi --target-dir target/mpi -- -D warnings

echo "== cargo test (default build)"
cargo test --release --all-targets

echo "== cargo test (--features mpi: runs under mpirun -np 1..4)"
cargo test --release --features mpi --target-dir target/mpi --test mpi_cli --test mpi_engine

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== kernels: every variant compiles with NVRTC (sm_90, sm_80)"
for arch in sm_90 sm_80; do
  # A fresh cache, so every variant is really compiled; exit 1 on any failure.
  if ! COLLBENCH_CACHE_DIR="$out/kernel-cache-$arch" ./target/release/collbench info \
    --compile-kernels --arch "$arch" --json > "$out/kernels-$arch.json"; then
    cat "$out/kernels-$arch.json"
    echo "ci: kernels failed to compile for $arch" >&2
    exit 1
  fi
  python3 - "$out/kernels-$arch.json" <<'PY'
import json, sys
k = json.load(open(sys.argv[1]))["kernels"]
assert k["compiled"] == 72 and k["failed"] == [], k
print(f'ci: {k["compiled"]} variants compiled for {k["arch"]} with NVRTC {k["nvrtc"]} in {k["seconds"]} s')
PY
done

echo "== end-to-end: every collective and algorithm on the host engine"
for n in 2 3 5 8; do
  ./target/release/collbench all --device host --ranks "$n" --algo all --sizes 8B:256K:x4 \
    --iters 2 --warmup 1 --json "$out/all$n.json" --csv "$out/all$n.csv" -q
done
./target/release/collbench all-reduce --device host --ranks 3 --dtype all --op all --sizes 8B:64K:x8 -q
./target/release/collbench broadcast --device host --ranks 4 --root all --sizes 8B:64K:x8 -q

echo "== end-to-end: the CUDA executor on the emulated device, NCCL's stand-in beside it"
./target/release/collbench all --device cuda-emu --ranks 3 --algo all --engine builtin,nccl \
  --sizes 8B:64K:x8 --iters 2 --warmup 1 --json "$out/emu3.json" -q
python3 - "$out/emu3.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert r["meta"]["device"] == "cuda-emu", r["meta"]
assert rows and all(x["wrong"] == 0 and x["nan"] == 0 for x in rows)
assert {x["engine"] for x in rows} == {"builtin", "nccl-standin"}
print(f"ci: {len(rows)} rows on the emulated device, all checked clean")
PY

echo "== end-to-end: premulsum, LL128 and the cost model"
./target/release/collbench all --device host --ranks 3 --op premulsum --scalar 0.5 --dtype float,half \
  --algo all --sizes 8B:64K:x8 --iters 2 --warmup 1 -q
COLLBENCH_EMU_GPUS=1 ./target/release/collbench all-reduce --device cuda-emu --ranks 3 --protocol ll128 --algo all \
  --sizes 1K:256K:x16 --iters 2 --warmup 1 -q
./target/release/collbench tune --device host --ranks 2 --sizes 8B:1M:x4 --output "$out/tuning.json" > /dev/null
./target/release/collbench all-reduce --device host --ranks 2 --algo all --sizes 64K:1M:x4 \
  --tuning "$out/tuning.json" --json "$out/tuned.json" -q
python3 - "$out/tuned.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert rows and all(r.get("auto_pick") and r.get("predicted_us", 0) > 0 for r in rows), rows[:2]
print(f"ci: {len(rows)} rows with the cost model's pick and prediction")
PY
./target/release/collbench model --tuning "$out/tuning.json" --ranks 64 --sizes 1K:1G:x32 > /dev/null

echo "== end-to-end: plots, nccl-tests text, report, compare"
./target/release/collbench all --device host --ranks 3 --algo all --sizes 8B:1M:x8 --iters 2 \
  --json "$out/r.json" --plot "$out/r.png" --format nccl-tests > "$out/r.txt"
grep -q '^# Out of bounds values : 0 OK' "$out/r.txt"
./target/release/collbench report "$out/r.json" "$out/all3.json" --plot "$out/r.svg" -q
./target/release/collbench compare "$out/all3.json" "$out/all3.json" > /dev/null
echo "== analyze: memory on pickle bombs and large dumps (scripts/bench_analyze_memory.sh --gate)"
scripts/bench_analyze_memory.sh target/release/collbench --gate
echo "== end-to-end: mpirun -np 4 with every collective and algorithm"
mpirun --allow-run-as-root --oversubscribe -np 4 ./target/mpi/release/collbench all --device host \
  --algo all --sizes 8B:1M:x8 --iters 2 --json "$out/mpi4.json" -q
echo "== end-to-end: mpirun -np 3, v-collectives in a group, shared memory and the relay"
for relay in 0 1; do
  COLLBENCH_FORCE_RELAY=$relay mpirun --allow-run-as-root --oversubscribe -x COLLBENCH_FORCE_RELAY -np 3 \
    ./target/mpi/release/collbench all --device host --group-mix all-reduce,all-to-all-v,all-gather-v,broadcast \
    --group 6 --split skew:4 --sizes 8B:1M:x16 --iters 2 --json "$out/mpi3-group-$relay.json" -q
done
echo "== end-to-end: the CUDA executor with one rank per process (issue 11's acceptance)"
for relay in 0 1; do
  COLLBENCH_FORCE_RELAY=$relay mpirun --allow-run-as-root --oversubscribe -x COLLBENCH_FORCE_RELAY -np 4 \
    ./target/mpi/release/collbench all --device cuda-emu --algo all --sizes 8B:64K \
    --json "$out/mpi4-emu-$relay.json" -q
done
./target/release/collbench all --procs 4 --device cuda-emu --algo all --sizes 8B:64K \
  --json "$out/procs4-emu.json" -q
python3 - "$out"/mpi4-emu-0.json "$out"/mpi4-emu-1.json "$out"/procs4-emu.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    r = json.load(open(path))
    rows = r["rows"]
    assert r["meta"]["world_size"] == 4 and r["meta"]["device"] == "cuda-emu", r["meta"]
    assert len(rows) > 300 and all(x["wrong"] == 0 and x["nan"] == 0 for x in rows), path
    print(f"ci: {path.rsplit('/', 1)[-1]}: {len(rows)} rows on 4 processes, all checked clean")
PY
echo "== the GPU hand-off (scripts/gpu-acceptance.sh), rehearsed on the emulated device"
# Every step a GPU session runs, shrunk to the emulated device, so the
# script is known to run before a GPU's lease is spent on it. The kernel
# cache filled above makes its compile step a cache check. The budget a
# GPU lease allows is the default; CI gives more (a step skipped fails it).
if ! COLLBENCH_CACHE_DIR="$out/kernel-cache-sm_90" GPU_ACCEPTANCE_SMOKE=1 GPU_ACCEPTANCE_BUDGET=1800 \
  MPI_BIN=target/mpi/release/collbench \
  bash scripts/gpu-acceptance.sh target/release/collbench "$out/gpu-smoke" > "$out/gpu-smoke.txt" 2>&1; then
  cat "$out/gpu-smoke.txt"
  echo "ci: the GPU hand-off script failed its rehearsal" >&2
  exit 1
fi
grep -c '^PASS' "$out/gpu-smoke/log.txt" | sed 's/^/ci: GPU hand-off rehearsal: steps passed: /'
echo "ci: all passed"
