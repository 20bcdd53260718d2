#!/usr/bin/env bash
# Session 20, call 1: the GPU tests after the review's mends (the plan fence's event made once per wrapper), then
# issue 16's decode steps (P2) and P1 at the same commit, one process.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call1.log
run nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run timeout 200 python3 -m pytest -q tests/gpu
run timeout 300 python3 benchmarks/bench_gpu.py p2 p1
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call1: exit status $status" | tee -a "$LOG"
