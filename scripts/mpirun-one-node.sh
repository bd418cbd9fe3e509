#!/usr/bin/env bash
# One node, one rank per process, through mpirun (Open MPI shown; MPICH's
# mpiexec takes the same -np). Builds the MPI flavour first.
#
#   bash scripts/mpirun-one-node.sh 4 all-reduce --sizes 8B:1G --engine builtin,mpi --json r.json
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:?usage: mpirun-one-node.sh NP COLLECTIVE [options...]}
shift
cargo build --release --features mpi --target-dir target/mpi -q
exec mpirun --oversubscribe -np "$np" ./target/mpi/release/collbench "$@" --dump-dir "collbench-dumps/mpirun-$$"
