#!/usr/bin/env bash
# Session 18, call 2: call 1's `bench_gpu.py p1b` died of an illegal memory access while building the 65-128 bin's
# uniform twin; repro_p1b.py runs the twins' sequence with CUDA_LAUNCH_BLOCKING=1 (fresh engine, then after P1) so the
# error names its kernel. Then the LEANBAL experiment call 1 did not reach (P1 with LEAN_PLAN, then also threshold 0).
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
run env CUDA_LAUNCH_BLOCKING=1 timeout 200 python3 benchmarks/issue16/h200-s18/repro_p1b.py
run timeout 200 python3 benchmarks/bench_gpu.py leanbal
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call2: exit status $status" | tee -a "$LOG"
