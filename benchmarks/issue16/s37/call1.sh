#!/usr/bin/env bash
# Session 37, call 1: session 36's call 4 as written (skinny_gemm.cu's G/A variants: the GPU test over every
# variant, lt_probe.py at 2-64 rows, profile_decode.py --skinny-ga at 2/8/16 requests against 1,1 and cuBLAS); then,
# only if the card is an H200, issue 16's targets at this commit (bench_gpu.py p1 p2).
bash benchmarks/issue16/s36/call4.sh
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 240 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
echo call1 done >>$LOG
