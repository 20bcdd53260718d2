#!/usr/bin/env bash
# Session 37, call 2 (never ran: the device time ran out; for the next session): skinny_gemm.cu's variant 4,1 (x
# copied in 4 groups; call 1 timed it 6-10 % faster than 1,1 at 2-16 rows on an H100) in the model: the fused-path GPU
# tests (test_fused.py: every variant against cuBLAS and float32 through the plans, the model's logits with the GEMM on
# and off), then on an H200 issue 16's targets at this commit (p1 p2), else the graph step at 2, 8, 16 requests with
# 4,1 and with the model's 1,1. If 4,1 wins in the model, set qk_kernel.SKINNY_GA = (4, 1) and run tests/gpu.
source benchmarks/issue16/call_env.sh
r timeout 100 python3 -m pytest -q tests/gpu/test_fused.py -p no:cacheprovider -rfs
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 120 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
else
  for v in "ga4,1 --skinny-ga 4,1" "ga1,1"; do
    r timeout 45 python3 benchmarks/profile_decode.py $v --bs 2,8,16 --json $OUT/profile.jsonl
  done
fi
echo call2 done >>$LOG
