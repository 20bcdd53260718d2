#!/usr/bin/env bash
# Session 38, call 1: session 37's two unrun calls in one (the device time is 30 minutes a session and every start
# costs some of it): skinny_gemm.cu's 4,1 inside the model (s37/call2.sh's steps: test_fused.py; on an H200 the
# targets p1 p2, else the graph step at 2, 8, 16 requests with 4,1 and 1,1), then CUTLASS's swapped-operand Hopper
# GEMM against cuBLAS at 16-256 rows (s37/call3.sh's step: lt_probe.py --cutlass).
source benchmarks/issue16/call_env.sh
r timeout 100 python3 -m pytest -q tests/gpu/test_fused.py -p no:cacheprovider -rfs
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 120 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
for v in "ga4,1 --skinny-ga 4,1" "ga1,1"; do
  r timeout 60 python3 benchmarks/profile_decode.py $v --bs 2,8,16 --json $OUT/profile.jsonl
done
r timeout 150 python3 benchmarks/lt_probe.py --cutlass --json $OUT/cutlass.json
echo call1 done >>$LOG
