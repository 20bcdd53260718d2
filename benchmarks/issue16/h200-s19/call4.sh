#!/usr/bin/env bash
# Session 19, call 4: `pytest tests/gpu` at the session's code (greedy.cu in every plain-greedy step); P2 read again.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call4.log
run timeout 200 python3 -m pytest -q tests/gpu
run timeout 150 python3 benchmarks/bench_gpu.py p2
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call4: exit status $status" | tee -a "$LOG"
