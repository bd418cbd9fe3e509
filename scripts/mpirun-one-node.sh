#!/usr/bin/env bash
# One node, one rank per process, through mpirun (Open MPI shown; MPICH's
# mpiexec takes the same -np). Builds the MPI flavour first. On a GPU node
# each rank takes the GPU of its rank on the node (--gpu-map to choose
# others) and ranks reach each other's GPU memory through CUDA IPC; without
# a GPU they run the host engine.
#
#   bash scripts/mpirun-one-node.sh 8 all --device cuda --algo all --sizes 8B:1G --json r.json
#   bash scripts/mpirun-one-node.sh 4 all-reduce --device host --engine builtin,mpi --sizes 8B:64M
#
# Without MPI, `collbench ... --procs NP` starts the same ranks on this node.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:?usage: mpirun-one-node.sh NP COLLECTIVE [options...]}
shift
cargo build --release --features mpi --target-dir target/mpi -q
dumps="collbench-dumps/mpirun-$$"
status=0
mpirun --oversubscribe -np "$np" ./target/mpi/release/collbench "$@" --dump-dir "$dumps" || status=$?
# After a hang (exit 3), every rank has dumped: name the culprit.
if [ "$status" = 3 ]; then
  ./target/mpi/release/collbench analyze "$dumps"
fi
exit "$status"
