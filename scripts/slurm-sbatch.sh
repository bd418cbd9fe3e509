#!/usr/bin/env bash
# Slurm batch job: one task per GPU (or per core for the host engine).
# Submit with: sbatch scripts/slurm-sbatch.sh
#SBATCH --job-name=collbench
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --output=collbench-%j.out
#
# Build once beforehand on a login node: cargo build --release --features mpi --target-dir target/mpi
# Ranks of one node exchange through shared memory; ranks on other nodes
# through a relay over MPI point-to-point messages.
set -euo pipefail
dumps="collbench-dumps/slurm-${SLURM_JOB_ID:-local}"
srun --mpi=pmix ./target/mpi/release/collbench all --algo all --sizes 8B:1G \
  --json "collbench-${SLURM_JOB_ID:-local}.json" --timeout 10m --dump-dir "$dumps" || status=$?
# After a hang (exit 3), every rank has dumped: name the culprit.
if [ "${status:-0}" = 3 ]; then
  ./target/mpi/release/collbench analyze "$dumps"
fi
exit "${status:-0}"
