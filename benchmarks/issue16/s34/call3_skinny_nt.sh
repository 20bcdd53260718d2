#!/usr/bin/env bash
# Session 34, call 3: lt_probe.py --skinny again, with warps that own NT = 1, 2 or 4 groups of 8 features (call 1 had
# NT = 1 only and grew with the rows: is it the shared-memory rereads of x?); rerun with J = 32, unsplit at K = 1024.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 400 python3 benchmarks/lt_probe.py --skinny --json $OUT/skinny.json
echo done >>$LOG
