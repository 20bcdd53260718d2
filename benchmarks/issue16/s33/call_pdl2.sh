#!/usr/bin/env bash
# Session 33, call 2: programmatic dependent launch for our GEMVs as landed (EngineConfig.pdl), against --no-pdl on
# one machine; the GPU tests; the targets at this commit (on an H200 also p1b and the free bounds).
export MINISGL_CUBIN_DIR=$PWD/.gpu/kernels
source scripts/gpu_env.sh
LOG=$OUT/call.log
r() { echo "=== $* ($(date -u +%T))" >>$LOG; "$@" >>$LOG 2>&1; echo "=== rc=$?" >>$LOG; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
r nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r timeout 200 python3 -m pytest -q -x tests/gpu -p no:cacheprovider
for i in 1 2; do
  r timeout 60 python3 benchmarks/profile_decode.py pdl --bs 1,8
  r timeout 60 python3 benchmarks/profile_decode.py nopdl --bs 1,8 --no-pdl
done
if [[ $GPU == *H200* ]]; then r timeout 300 python3 benchmarks/bench_gpu.py p1 p1b p2 free
else r timeout 150 python3 benchmarks/bench_gpu.py p1 p2; fi
cp benchmarks/results.json $OUT/results.json
echo done >>$LOG
