#!/usr/bin/env bash
# Session 34, call 1: lt_probe.py --skinny (benchmarks/kernels/skinny_gemm.cu against torch's products); on an H200
# also P4 and the fused-vs-plain tokens at this commit (they ran out of memory on the 80 GB H100 in session 33).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 300 python3 benchmarks/lt_probe.py --skinny --json $OUT/skinny.json
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 240 python3 benchmarks/bench_gpu.py p4 tokens
  cp benchmarks/results.json $OUT/results.json
fi
echo done >>$LOG
