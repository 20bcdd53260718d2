#!/usr/bin/env bash
# Session 18, call 2: call 1's `bench_gpu.py p1b` died of an illegal memory access while building the 65-128 bin's
# uniform twin; repro_p1b.py runs the twins' sequence with CUDA_LAUNCH_BLOCKING=1 (fresh engine, then after P1) so the
# error names its kernel. FlashInfer over pages of 16 tokens (pages_of, new): the GPU tests of pages (the backend
# against the reference at page size 16, the engine's tokens at 16 against 1), then the PAGED experiment (P2 at 64,
# 128, 256 and P1 with page_size 16; then the tensor-core kernel for even steps too). Before it NOSPLIT: call 1's
# profile had the batch-128 graph's decode kernel in FlashInfer's partition-KV form (+ a merge), 9 % slower than the
# eager kernel; decode graphs padded past those sizes, P2 at 64-128 and P1.
set -uo pipefail
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call2.log
run env CUDA_LAUNCH_BLOCKING=1 timeout 150 python3 benchmarks/issue16/h200-s18/repro_p1b.py
run timeout 150 python3 -m pytest -q tests/gpu/test_flashinfer.py tests/gpu/test_llm_cuda.py
run timeout 120 python3 benchmarks/bench_gpu.py nosplit
run timeout 200 python3 benchmarks/bench_gpu.py paged
cp benchmarks/results.json benchmarks/RESULTS.md $OUT/
echo "call2: exit status $status" | tee -a "$LOG"
