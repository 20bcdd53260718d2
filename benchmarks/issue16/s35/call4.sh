#!/usr/bin/env bash
# Not run in session 35 (no machine). Needs benchmarks/issue16/s35/skinny_default_and_swap.patch applied first.
# Session 35, call 4 (the least device time left): the whole GPU test suite with skinny_gemm on by default and its
# launch built once a shape (_SkinnyPlan), then batch 2/8/16 with it on and off once.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 150 python3 -m pytest -q tests/gpu -p no:cacheprovider -rfs
r timeout 45 python3 benchmarks/profile_decode.py skinny_on --bs 2,8,16 --json $OUT/profile.jsonl
r timeout 45 python3 benchmarks/profile_decode.py skinny_off --no-skinny-gemm --bs 2,8,16 --json $OUT/profile.jsonl
echo done >>$LOG
