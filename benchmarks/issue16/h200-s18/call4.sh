#!/usr/bin/env bash
# Session 18, call 4: p1b's illegal access came back in call 3 without CUDA_LAUNCH_BLOCKING, at the same place. Narrow
# it: repro_p1b.py without the blocking (the twins after one P1, no step timeline); then p1b with PyTorch's caching
# allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1): gone then, a block freed on one stream while another still reads it.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call4.log
run timeout 100 python3 benchmarks/issue16/h200-s18/repro_p1b.py
run env PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 python3 benchmarks/bench_gpu.py p1b
echo "call4: exit status $status" | tee -a "$LOG"
