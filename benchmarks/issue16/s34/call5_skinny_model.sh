#!/usr/bin/env bash
# Session 34, call 5: skinny_gemm.cu in the model for 2-16 rows (EngineConfig.skinny_gemm): test_fused.py, then
# profile_decode.py at batch 8 and 16 with it on and off. Not run in session 34 (no machine could be started).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 100 python3 -m pytest -q tests/gpu/test_fused.py -p no:cacheprovider -k "skinny or model_fused"
r timeout 45 python3 benchmarks/profile_decode.py skinny_on --skinny-gemm --bs 8,16 --json $OUT/profile.jsonl
r timeout 45 python3 benchmarks/profile_decode.py skinny_off --bs 8,16 --json $OUT/profile.jsonl
echo done >>$LOG
