#!/usr/bin/env bash
# Session 18, call 3: is call 1's illegal access in p1b's uniform twin reproducible without CUDA_LAUNCH_BLOCKING (call 2
# ran the twins clean with it, which serializes the streams)? `bench_gpu.py p1 p1b` as call 1 ran it. Then P1 with
# page_size 16, FlashInfer pages on and off, alternated twice (call 2: 0.634 against 0.618 once each).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call3.log
run timeout 150 python3 benchmarks/bench_gpu.py p1 p1b
run timeout 240 python3 benchmarks/bench_gpu.py pagedp1
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call3: exit status $status" | tee -a "$LOG"
