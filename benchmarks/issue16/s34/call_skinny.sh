#!/usr/bin/env bash
# Session 34, call 1: lt_probe.py --skinny (benchmarks/kernels/skinny_gemm.cu against torch's products).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 300 python3 benchmarks/lt_probe.py --skinny --json $OUT/skinny.json
echo done >>$LOG
