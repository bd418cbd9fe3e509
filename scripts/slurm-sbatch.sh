#!/usr/bin/env bash
# Slurm batch job: one task per GPU, the CUDA executor in every task.
# Submit with: sbatch scripts/slurm-sbatch.sh
#SBATCH --job-name=collbench
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=00:30:00
#SBATCH --output=collbench-%j.out
#
# Build once beforehand on a login node: cargo build --release --features mpi --target-dir target/mpi
# Each task takes the GPU of its rank on the node (all of the node's GPUs
# stay visible to every task, so CUDA IPC between them works: do not bind
# one GPU per task with --gpu-bind). Ranks of one node write each other's
# GPU memory through CUDA IPC; ranks on other nodes go through pinned host
# buffers and a relay over MPI point-to-point messages.
# For the host engine instead: DEVICE=host sbatch scripts/slurm-sbatch.sh
set -euo pipefail
dumps="collbench-dumps/slurm-${SLURM_JOB_ID:-local}"
status=0
srun --mpi=pmix ./target/mpi/release/collbench all --device "${DEVICE:-cuda}" --algo all --sizes 8B:1G \
  --json "collbench-${SLURM_JOB_ID:-local}.json" --timeout 10m --dump-dir "$dumps" || status=$?
# After a hang (exit 3), every rank has dumped: name the culprit.
if [ "$status" = 3 ]; then
  ./target/mpi/release/collbench analyze "$dumps"
fi
exit "$status"
