#!/usr/bin/env bash
# Session 33, call 5: one replay's kernel spans with and without programmatic dependent launch (chapter 7's
# figure), then P4 and the fused-vs-plain tokens at this commit.
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for i in 1 2; do
  r timeout 60 python3 benchmarks/profile_decode.py pdl --bs 1 --timeline $OUT/pdl_timeline.jsonl
  r timeout 60 python3 benchmarks/profile_decode.py nopdl --bs 1 --no-pdl --timeline $OUT/pdl_timeline.jsonl
done
r timeout 240 python3 benchmarks/bench_gpu.py p4 tokens
cp benchmarks/results.json $OUT/results.json
echo done >>$LOG
