#!/usr/bin/env bash
# Session 19, call 5: greedy.cu's row counters per stream (two engines' streams side by side): the sampling and
# engine GPU tests.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call5.log
run timeout 150 python3 -m pytest -q tests/gpu/test_sampling_gpu.py tests/gpu/test_llm_cuda.py
echo "call5: exit status $status" | tee -a "$LOG"
