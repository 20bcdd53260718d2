#!/usr/bin/env bash
# Session 38's call (never ran: twelve tries found no machine and spent the device time; for the next session): the one
# open lead first, CUTLASS's swapped-operand Hopper GEMM against cuBLAS (lt_probe.py --cutlass, 4 row counts; carry
# .gpu/kernels with cutlass_swap_ab.so from CUTLASS=1 ONLY_CUBIN=1 bash scripts/build_fi_extra_kernels.sh), then
# skinny_gemm.cu's 4,1 against 1,1 in the model's graph step, the fused-path GPU tests, and on an H200 the targets.
# About 8 minutes. Results into results.json: s38/rows.py (cutlass.json) and profile_rows.py (profile.jsonl).
source benchmarks/issue16/call_env.sh
r timeout 120 python3 benchmarks/lt_probe.py --cutlass --pm 32,64,128,256 --json $OUT/cutlass.json
for v in "ga4,1 --skinny-ga 4,1" "ga1,1"; do
  r timeout 60 python3 benchmarks/profile_decode.py $v --bs 2,8,16 --json $OUT/profile.jsonl
done
r timeout 100 python3 -m pytest -q tests/gpu/test_fused.py -p no:cacheprovider -rfs
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  r timeout 120 python3 benchmarks/bench_gpu.py p1 p2
  cp benchmarks/results.json $OUT/results.json
fi
echo call2 done >>$LOG
