#!/usr/bin/env bash
# Session 34, call 2: the fused-vs-plain greedy tokens (now one small engine at a time, so it fits an 80 GB card),
# P4, P1 and P2 at this commit, on whichever card comes.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 500 python3 benchmarks/bench_gpu.py tokens p4 p1 p2
cp benchmarks/results.json $OUT/results.json
echo done >>$LOG
